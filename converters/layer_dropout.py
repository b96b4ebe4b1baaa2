"""Torch's random training-mode layers as port layers: the other dropouts (``Dropout1d/2d/3d``, ``AlphaDropout``,
``FeatureAlphaDropout``), ``RReLU``, stochastic depth (torchvision's ``StochasticDepth``, timm's ``DropPath``) and
functional dropout (``F.dropout(x, p, self.training)``). Torch-free.

Stochastic depth: identity in eval; in training, as ``torchvision.ops.stochastic_depth`` and timm's ``drop_path``
compute it, ``x * noise`` with ``noise`` one Bernoulli(``1 - p``) draw per example (``"row"``: along torch's dim 0,
wherever the array holds it) or one for the whole batch (``"batch"``), divided by ``1 - p`` when ``scale`` (timm's
``scale_by_keep``; torchvision always) and ``p < 1``; ``p = 1`` gives ``x * 0`` (NaN where ``x`` is inf or NaN, as
torch). Functional dropout (:func:`dropout`): ATen's ``_dropout_impl`` on the CPU, ``x * (noise / (1 - p))`` with
an element-wise draw, ``x * 0`` at ``p = 1``.

``RReLU(lower, upper)``: eval is a leaky ReLU with slope ``(lower + upper) / 2`` (the runtime's ``leaky_relu``, as
the captured node computes it); training multiplies each element ``<= 0`` by its own ``U(lower, upper)`` draw (torch's
``rrelu_with_noise``), so the gradient there is that draw.

Dropouts:
Identity in eval. In training, as ATen's ``_dropout_impl`` computes them: a Bernoulli(``1 - p``) ``noise`` drawn per
element (``alpha``) or per (example, channel) (``feature``, ``feature_alpha``: torch's dims 0 and 1 of the ATen op's
input; ``Dropout1d/2d/3d`` add the batch dim to unbatched input before it), then ``x * noise / (1 - p)``; the alpha
kinds keep SELU's mean and variance: ``a = 1 / sqrt((alpha^2 p + 1)(1 - p))``, ``x * (a noise) + (noise - 1) alpha a
+ alpha a p`` with ``alpha = 1.7580993408473766``. The arrays may be in any layout: ``axes`` are the array axes of
torch's dims 0 and 1.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

KINDS = ("feature", "alpha", "feature_alpha")
DEPTH_MODES = ("row", "batch")
_ALPHA = 1.7580993408473766


class TorchDropout(nn.Module):
    """Dropout of kind ``kind`` with rate ``p`` (``0 <= p < 1``), in training mode only.

    Args:
        p (float): the drop probability.
        kind (str): ``"feature"`` (``Dropout1d/2d/3d``), ``"alpha"`` (``AlphaDropout``) or ``"feature_alpha"``.
        axes (tuple of int): the array axes of torch's dims 0 (batch) and 1 (channels): where the feature kinds'
            noise varies. Default: ``(0, 1)``.

    Shape: any array of rank >= 2 (feature kinds) -> the same.
    """

    def __init__(self, p: float, kind: str = "feature", axes=(0, 1)):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"[TorchDropout] 'kind' must be one of {KINDS} but got {kind!r}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
            raise ValueError(f"[TorchDropout] 'p' must be in [0, 1) but got {p!r}")
        axes = tuple(axes)
        if len(axes) != 2 or axes[0] == axes[1] or any(isinstance(a, bool) or not isinstance(a, int) or a < 0
                                                       for a in axes):
            raise ValueError(f"[TorchDropout] 'axes' must be two distinct non-negative axes but got {axes!r}")
        object.__setattr__(self, "p", float(p))
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "axes", axes)

    def _extra_repr(self) -> str:
        return f"p={self.p}, kind={self.kind!r}, axes={self.axes}"

    def __call__(self, x: mx.array) -> mx.array:
        if not self.training or self.p == 0.0 or x.size == 0:
            return x
        if self.kind == "alpha":
            shape = x.shape
        else:
            if x.ndim <= max(self.axes):
                raise ValueError(f"[TorchDropout] a {x.ndim}-d input has no axes {self.axes}")
            shape = [1] * x.ndim
            for a in self.axes:
                shape[a] = x.shape[a]
        noise = mx.random.bernoulli(1.0 - self.p, tuple(shape)).astype(x.dtype)
        if self.kind == "feature":
            return x * (noise / (1.0 - self.p))
        a = 1.0 / math.sqrt((_ALPHA * _ALPHA * self.p + 1.0) * (1.0 - self.p))
        b = (noise - 1.0) * (_ALPHA * a) + _ALPHA * a * self.p
        return x * (noise * a) + b


class TorchRReLU(nn.Module):
    """torch.nn.RReLU: random negative slopes in ``[lower, upper]`` in training, their mean in eval. Any layout.

    Args:
        lower (float): the smallest slope. Default: ``1/8``.
        upper (float): the largest slope (``>= lower``). Default: ``1/3``.
    """

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3):
        super().__init__()
        for name, v in (("lower", lower), ("upper", upper)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"[RReLU] '{name}' must be a finite number but got {v!r}")
        if upper < lower:
            raise ValueError(f"[RReLU] 'upper' ({upper}) must not be below 'lower' ({lower})")
        object.__setattr__(self, "lower", float(lower))
        object.__setattr__(self, "upper", float(upper))

    def _extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}"

    def __call__(self, x: mx.array) -> mx.array:
        if not self.training:
            from .ops.elementwise import UNARY

            return UNARY["leaky_relu"](x, negative_slope=(self.lower + self.upper) / 2)
        slope = mx.random.uniform(self.lower, self.upper, x.shape).astype(x.dtype)
        return mx.where(x <= 0, x * slope, x)


def _check_rate(owner: str, name: str, p) -> None:
    """A drop rate in [0, 1] (the kernels take it from a file: 2.0 dropped everything and -1.0 halved every
    element, with no error)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"[{owner}] '{name}' must be a number in [0, 1] but got {p!r}")


def _keep_noise(p: float, shape: tuple, dtype, scale: bool = True) -> mx.array:
    """Bernoulli(``1 - p``) in ``dtype``, divided by ``1 - p`` when ``scale`` and ``p < 1`` (torch's noise)."""
    noise = mx.random.bernoulli(1.0 - p, shape).astype(dtype) if p < 1.0 else mx.zeros(shape, dtype)
    return noise / (1.0 - p) if scale and p < 1.0 else noise


def dropout(x: mx.array, p: float, training: bool) -> mx.array:
    """``F.dropout(x, p, training)`` as ATen computes it on the CPU: identity unless ``training`` and ``p > 0``;
    then each element kept with probability ``1 - p`` and scaled by ``1 / (1 - p)`` (``p = 1``: ``x * 0``)."""
    _check_rate("dropout", "p", p)
    if not training or p == 0.0:
        return x
    return x * _keep_noise(p, x.shape, x.dtype)


def stochastic_depth(x: mx.array, p: float, mode: str = "row", scale: bool = True, axis: int = 0,
                     training: bool = True) -> mx.array:
    """torchvision's ``stochastic_depth`` / timm's ``drop_path`` on an array whose torch dim 0 is array axis
    ``axis``: identity unless ``training`` and ``p > 0``."""
    _check_rate("StochasticDepth", "p", p)
    if mode not in DEPTH_MODES:
        raise ValueError(f"[StochasticDepth] 'mode' must be one of {DEPTH_MODES} but got {mode!r}")
    if not training or p == 0.0:
        return x
    if mode == "row":
        if x.ndim <= axis:
            raise ValueError(f"[StochasticDepth] a {x.ndim}-d input has no batch axis {axis}")
        shape = tuple(x.shape[a] if a == axis else 1 for a in range(x.ndim))
    else:
        shape = (1,) * x.ndim
    return x * _keep_noise(p, shape, x.dtype, scale)


class StochasticDepth(nn.Module):
    """torchvision's ``StochasticDepth`` and timm's ``DropPath``: a residual branch dropped for whole examples
    (``"row"``) or the whole batch (``"batch"``) in training mode; identity in eval. Any layout.

    Args:
        p (float): the drop probability, ``0 <= p <= 1``.
        mode (str): ``"row"`` (one draw per example, along torch's dim 0) or ``"batch"``. Default: ``"row"``.
        scale (bool): divide the kept examples by ``1 - p`` (timm's ``scale_by_keep``; torchvision always).
            Default: ``True``.
        axis (int): the array axis holding torch's dim 0 (the examples). Default: ``0``.

    Shape: any array of rank > ``axis`` -> the same.

    Example:
        >>> drop = StochasticDepth(0.2, "row")
        >>> drop.train(); y = drop(mx.ones((4, 7, 7, 8)))   # each example all 0 or all 1.25
    """

    def __init__(self, p: float, mode: str = "row", scale: bool = True, axis: int = 0):
        super().__init__()
        _check_rate("StochasticDepth", "p", p)
        if mode not in DEPTH_MODES:
            raise ValueError(f"[StochasticDepth] 'mode' must be one of {DEPTH_MODES} but got {mode!r}")
        if isinstance(axis, bool) or not isinstance(axis, int) or axis < 0:
            raise ValueError(f"[StochasticDepth] 'axis' must be a non-negative int but got {axis!r}")
        object.__setattr__(self, "p", float(p))
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "scale", bool(scale))
        object.__setattr__(self, "axis", axis)

    def _extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode!r}, scale={self.scale}, axis={self.axis}"

    def __call__(self, x: mx.array) -> mx.array:
        return stochastic_depth(x, self.p, self.mode, self.scale, self.axis, self.training)
