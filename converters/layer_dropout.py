"""Torch's random training-mode layers as port layers: the other dropouts (``Dropout1d/2d/3d``, ``AlphaDropout``,
``FeatureAlphaDropout``) and ``RReLU``. Torch-free.

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
