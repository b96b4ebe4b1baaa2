"""LayerNorm and GroupNorm with torch's semantics, channels-last.

:func:`layer_norm` normalises the trailing ``normalized_shape`` dims (torch's ``F.layer_norm``); :func:`group_norm`
normalises ``(N, *spatial, C)`` per sample and per group of ``C / num_groups`` consecutive channels, over the spatial
positions and the group's channels (torch's ``F.group_norm`` on the channels-first tensor). Both are what the
converter's ``layer_norm``/``group_norm``/``instance_norm`` kernels and the zoo's models compute.

On the CPU with Porter's native kernels built, each is one multi-threaded kernel (``csrc/norm_kernels.h``:
statistics then the affine output; LayerNorm row by row, GroupNorm in chunks of positions), and so is its gradient
(input, weight and bias in one pass set); elsewhere (Apple GPUs, CUDA, no build) MLX ops compute the same. float16
and bfloat16 are computed in float32 and rounded once, as torch's CPU kernels do; float64 stays float64.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from . import _blocked_sum, _native

__all__ = ["GroupNorm", "LayerNorm", "InstanceNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
           "group_norm", "layer_norm"]

_HALF = (mx.float16, mx.bfloat16)
# mx.issubdtype(d, mx.floating) and isinstance(eps, numbers.Real) are each a few microseconds per call: on a Swin
# window's LayerNorm that is as much as the kernel, so the checks below compare against these first
_FLOATS = frozenset((mx.float16, mx.bfloat16, mx.float32, mx.float64))


def _check_param(value, name: str, shape: tuple, what: str) -> None:
    if value is None:
        return
    if not isinstance(value, mx.array):
        raise TypeError(f"[{what}] '{name}' must be an mx.array or None but got {type(value).__name__}")
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"[{what}] '{name}' must have shape {tuple(shape)} but got {tuple(value.shape)}")
    if value.dtype not in _FLOATS:
        raise TypeError(f"[{what}] '{name}' must be floating point but got {value.dtype}")


def _check_eps(eps, what: str) -> float:
    if type(eps) is float and 0.0 <= eps < math.inf:  # the usual case, without the ABC check below
        return eps
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0 or math.isinf(eps):
        raise ValueError(f"[{what}] 'eps' must be a finite float >= 0 but got {eps!r}")
    return float(eps)


def _check_input(x, what: str) -> mx.array:
    if not isinstance(x, mx.array):
        raise TypeError(f"[{what}] 'input' must be an mx.array but got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"[{what}] 'input' must be floating point but got {x.dtype}")
    return x


def _native_ok(x: mx.array) -> bool:
    return _native.active("layer/group norm")


def _affine(y: mx.array, weight, bias, dtype) -> mx.array:
    # the parameters' gradients sum over every position: in blocks (MLX's one accumulator errs ~1e-5 over 64^3)
    return _blocked_sum.affine(y, None if weight is None else weight.astype(y.dtype),
                               None if bias is None else bias.astype(y.dtype)).astype(dtype)


def layer_norm(input: mx.array, normalized_shape, weight: Optional[mx.array] = None,
               bias: Optional[mx.array] = None, eps: float = 1e-5) -> mx.array:
    """torch's ``F.layer_norm``: normalise over the trailing ``normalized_shape`` dims, then ``* weight + bias``.

    Args:
        input (mx.array): ``(*, *normalized_shape)``, floating point.
        normalized_shape (int or tuple): the trailing dims to normalise over (channels-last: ``C`` for a
            per-position LayerNorm over channels).
        weight (mx.array, optional): ``normalized_shape``. Default: ``None``.
        bias (mx.array, optional): ``normalized_shape``. Default: ``None``.
        eps (float, optional): added to the (biased) variance. Default: ``1e-5``.

    Returns:
        mx.array: the input's shape and dtype.

    Example:
        >>> x = mx.random.normal((1, 56, 56, 96))
        >>> layer_norm(x, 96, mx.ones((96,)), mx.zeros((96,))).shape
        (1, 56, 56, 96)
    """
    x = _check_input(input, "layer_norm")
    shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    if not shape or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s <= 0 for s in shape):
        raise ValueError(f"[layer_norm] 'normalized_shape' must be positive ints but got {normalized_shape!r}")
    k = len(shape)
    if x.ndim < k or tuple(x.shape[x.ndim - k:]) != shape:
        raise ValueError(
            f"[layer_norm] Given normalized_shape={list(shape)}, expected input with shape [*, "
            f"{', '.join(map(str, shape))}], but got input of size{list(x.shape)}")
    _check_param(weight, "weight", shape, "layer_norm")
    _check_param(bias, "bias", shape, "layer_norm")
    eps = _check_eps(eps, "layer_norm")
    if x.size == 0:
        return mx.zeros(x.shape, x.dtype)
    if _native_ok(x):
        # the native kernel normalises the last axis: fold the normalised dims into one (a view when contiguous).
        # k == 1 (every transformer's LayerNorm) builds no reshape nodes: each graph node costs a fixed ~5-10 us
        # to schedule and evaluate on the CPU stream, more than the kernel itself on a (49, 96) window
        if k == 1:
            return _native.kernels().norm(x, weight, bias, 0, eps)
        width = math.prod(shape)
        w = None if weight is None else weight.reshape(width)
        b = None if bias is None else bias.reshape(width)
        return _native.kernels().norm(x.reshape(*x.shape[:x.ndim - k], width), w, b, 0, eps).reshape(x.shape)
    xs = x.astype(mx.float32) if x.dtype in _HALF else x
    if k == 1 and xs.dtype == mx.float32:
        ws = None if weight is None else weight.astype(mx.float32)
        bs = None if bias is None else bias.astype(mx.float32)
        param = ws if ws is not None else bs
        if param is not None and _blocked_sum.routes(xs.shape, xs.dtype, param):
            # the fused kernel's VJP sums the affine's gradients over the rows in one accumulator
            return _blocked_sum.affine(mx.fast.layer_norm(xs, None, None, eps), ws, bs).astype(x.dtype)
        return mx.fast.layer_norm(xs, ws, bs, eps).astype(x.dtype)
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = mx.mean(xs, axis=axes, keepdims=True)
    var = mx.mean(mx.square(xs - mean), axis=axes, keepdims=True)
    return _affine((xs - mean) * mx.rsqrt(var + eps), weight, bias, x.dtype)


def group_norm(input: mx.array, num_groups: int, weight: Optional[mx.array] = None,
               bias: Optional[mx.array] = None, eps: float = 1e-5) -> mx.array:
    """torch's ``F.group_norm`` on channels-last input: statistics per sample and per group of ``C / num_groups``
    consecutive channels, over the spatial positions and the group's channels; then ``* weight + bias`` per channel.

    Args:
        input (mx.array): ``(N, *spatial, C)`` or ``(N, C)``, floating point.
        num_groups (int): number of groups; must divide ``C``.
        weight (mx.array, optional): ``(C,)``. Default: ``None``.
        bias (mx.array, optional): ``(C,)``. Default: ``None``.
        eps (float, optional): added to the (biased) variance. Default: ``1e-5``.

    Returns:
        mx.array: the input's shape and dtype.

    Example:
        >>> x = mx.random.normal((1, 56, 56, 64))
        >>> group_norm(x, 32).shape
        (1, 56, 56, 64)
    """
    x = _check_input(input, "group_norm")
    if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral) or num_groups <= 0:
        raise ValueError(f"[group_norm] 'num_groups' must be a positive int but got {num_groups!r}")
    num_groups = int(num_groups)
    if x.ndim < 2:
        raise ValueError(f"[group_norm] Expected at least 2 dimensions for input tensor (N, *spatial, C) but "
                         f"received {x.ndim}")
    c = x.shape[-1]
    if c % num_groups:
        raise ValueError(f"[group_norm] Expected number of channels in input to be divisible by num_groups, but got "
                         f"input of shape {list(x.shape)} and num_groups={num_groups}")
    _check_param(weight, "weight", (c,), "group_norm")
    _check_param(bias, "bias", (c,), "group_norm")
    eps = _check_eps(eps, "group_norm")
    if x.size == 0:
        return mx.zeros(x.shape, x.dtype)
    if _native_ok(x):
        return _native.kernels().norm(x, weight, bias, num_groups, eps)
    xs = x.astype(mx.float32) if x.dtype in _HALF else x
    n = x.shape[0]
    g = xs.reshape(n, -1, num_groups, c // num_groups)
    count = g.shape[1] * g.shape[3]  # over the positions in blocks (MLX's one accumulator errs ~1e-5 over 64^3)
    mean = _blocked_sum.blocked_sum(g, 1, keepdims=True).sum(axis=3, keepdims=True) / count
    var = _blocked_sum.blocked_sum(mx.square(g - mean), 1, keepdims=True).sum(axis=3, keepdims=True) / count
    return _affine(((g - mean) * mx.rsqrt(var + eps)).reshape(x.shape), weight, bias, x.dtype)


class LayerNorm(nn.LayerNorm):
    """torch's ``nn.LayerNorm`` over the trailing dims of the array (channels-last: ``dims=C`` normalises the
    channels of every position); a drop-in :class:`mlx.nn.LayerNorm` (same arguments and parameter names) that runs
    :func:`layer_norm`.

    Args:
        dims (int or tuple): the trailing dims normalised (torch's ``normalized_shape``, as the array is laid out).
        eps (float, optional): added to the variance. Default: ``1e-5``.
        affine (bool, optional): learnable ``weight`` (torch's ``elementwise_affine``). Default: ``True``.
        bias (bool, optional): learnable ``bias`` too (with ``affine``). Default: ``True``.

    Shape: ``(*, *dims)`` -> same; ``weight`` and ``bias`` have shape ``dims``.

    Example:
        >>> ln = LayerNorm(768, eps=1e-6)
        >>> ln(mx.random.normal((1, 197, 768))).shape
        (1, 197, 768)
    """

    def __init__(self, dims, eps: float = 1e-5, affine: bool = True, bias: bool = True):
        shape = (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)
        if not shape or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d <= 0 for d in shape):
            raise ValueError(f"[LayerNorm] 'dims' must be a positive int or a tuple of them but got {dims!r}")
        if not _check_eps(eps, "LayerNorm") > 0:
            raise ValueError(f"[LayerNorm] 'eps' must be positive but got {eps}.")
        nn.Module.__init__(self)  # mlx.nn.LayerNorm's own __init__ takes an int only; same attributes
        shape = tuple(int(d) for d in shape)
        if affine:
            self.weight = mx.ones(shape)
            if bias:
                self.bias = mx.zeros(shape)
        self.eps = eps
        self.dims = shape[0] if len(shape) == 1 else shape

    def __call__(self, x: mx.array) -> mx.array:
        return layer_norm(x, self.dims, self.weight if "weight" in self else None,
                          self.bias if "bias" in self else None, self.eps)


class GroupNorm(nn.GroupNorm):
    """torch's ``nn.GroupNorm`` on channels-last input (torch's grouping: consecutive channels); a
    :class:`mlx.nn.GroupNorm` with ``pytorch_compatible=True`` (same parameter names) that runs :func:`group_norm`.

    Args:
        num_groups (int): number of groups; must divide ``dims``.
        dims (int): channels ``C`` (torch's ``num_channels``).
        eps (float, optional): added to the variance. Default: ``1e-5``.
        affine (bool, optional): learnable per-channel ``weight`` and ``bias``. Default: ``True``.

    Shape: ``(N, *spatial, C)`` or ``(N, C)`` -> same.

    Example:
        >>> gn = GroupNorm(32, 64)
        >>> gn(mx.random.normal((2, 56, 56, 64))).shape
        (2, 56, 56, 64)
    """

    def __init__(self, num_groups: int, dims: int, eps: float = 1e-5, affine: bool = True):
        for name, value in (("num_groups", num_groups), ("dims", dims)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
                raise ValueError(f"[GroupNorm] '{name}' must be a positive int but got {value!r}")
        if dims % num_groups:
            raise ValueError(f"[GroupNorm] num_channels must be divisible by num_groups (got dims={dims}, "
                             f"num_groups={num_groups})")
        _check_eps(eps, "GroupNorm")
        super().__init__(int(num_groups), int(dims), eps=eps, affine=affine, pytorch_compatible=True)

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim < 2 or x.shape[-1] != self.dims:
            raise ValueError(f"[GroupNorm] expected (N, *spatial, {self.dims}) input but got shape {x.shape}")
        return group_norm(x, self.num_groups, self.weight if "weight" in self else None,
                          self.bias if "bias" in self else None, self.eps)


class InstanceNorm(nn.InstanceNorm):
    """torch's ``nn.InstanceNorm{1,2,3}d`` on channels-last ``(N, *spatial, C)``: statistics per sample and channel,
    i.e. :func:`group_norm` with one group per channel. With ``track_running_stats=False`` (torch's default) train and
    eval alike; with ``True``, eval normalizes by ``running_mean``/``running_var`` and training by the instance's
    statistics while updating the running ones as torch does: ``(1 - m) * running + m * batch mean of the
    instances' mean / unbiased variance`` (``momentum=None`` reaches torch's kernel as 0: no update;
    ``num_batches_tracked`` is never counted).

    Args:
        num_features (int): ``C``.
        eps (float, optional): added to the variance. Default: ``1e-5``.
        affine (bool, optional): learnable per-channel ``weight`` and ``bias``. Default: ``False`` (torch's).
        momentum (float or None, optional): running-statistics factor. Default: ``0.1``.
        track_running_stats (bool, optional): keep ``running_mean``, ``running_var``, ``num_batches_tracked``
            (frozen buffers). Default: ``False``.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = False, momentum: Optional[float] = 0.1,
                 track_running_stats: bool = False):
        if isinstance(num_features, bool) or not isinstance(num_features, numbers.Integral) or num_features <= 0:
            raise ValueError(f"[InstanceNorm] 'num_features' must be a positive int but got {num_features!r}")
        _check_eps(eps, "InstanceNorm")
        if momentum is not None and (isinstance(momentum, bool) or not isinstance(momentum, numbers.Real)
                                     or not 0.0 <= float(momentum) <= 1.0):
            raise ValueError(f"[InstanceNorm] 'momentum' must be in [0, 1] or None but got {momentum!r}")
        super().__init__(int(num_features), eps=eps, affine=affine)
        object.__setattr__(self, "momentum", None if momentum is None else float(momentum))
        object.__setattr__(self, "track_running_stats", bool(track_running_stats))
        if self.track_running_stats:
            self.running_mean = mx.zeros((self.dims,))
            self.running_var = mx.ones((self.dims,))
            self.num_batches_tracked = mx.array(0, dtype=mx.int64)
            self.freeze(keys=list(_RUNNING), recurse=False)

    def unfreeze(self, *args, **kwargs):
        """Running statistics stay frozen (they are buffers in torch)."""
        super().unfreeze(*args, **kwargs)
        if self.track_running_stats:
            self.freeze(keys=list(_RUNNING), recurse=False)

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim < 2 or x.shape[-1] != self.dims:
            raise ValueError(f"[InstanceNorm] expected (N, *spatial, {self.dims}) input but got shape {x.shape}")
        weight, bias = self.get("weight"), self.get("bias")
        if self.track_running_stats and not self.training:
            return _running_affine(x, self.running_mean, self.running_var, weight, bias, self.eps)
        if self.track_running_stats:
            spatial = math.prod(x.shape[1:-1])
            if spatial <= 1:
                raise ValueError(f"Expected more than 1 spatial element when training, got input size {x.shape}")
            if self.momentum:  # torch passes momentum=None as 0.0: the statistics stay
                axes = tuple(range(1, x.ndim - 1))
                xs = mx.stop_gradient(x.astype(mx.float32) if x.dtype in (mx.float16, mx.bfloat16) else x)
                mean = mx.mean(mx.mean(xs, axis=axes), axis=0)
                var = mx.mean(mx.var(xs, axis=axes, ddof=1), axis=0)
                m = self.momentum
                self.running_mean = ((1 - m) * self.running_mean + m * mean).astype(self.running_mean.dtype)
                self.running_var = ((1 - m) * self.running_var + m * var).astype(self.running_var.dtype)
        return group_norm(x, self.dims, weight, bias, self.eps)


_RUNNING = ("running_mean", "running_var", "num_batches_tracked")


def _running_affine(x, mean, var, weight, bias, eps):
    """Normalization by stored statistics as torch's CPU eval batch norm computes it (per-channel ``alpha = weight
    / sqrt(var + eps)``, ``beta = bias - mean * alpha``, one multiply-add), the statistics in float32 at least."""
    up = (lambda a: a.astype(mx.float32) if a.dtype in (mx.float16, mx.bfloat16) else a)
    alpha = mx.rsqrt(up(var) + eps)
    if weight is not None:
        alpha = alpha * up(weight)
    beta = -up(mean) * alpha if bias is None else up(bias) - up(mean) * alpha
    if x.dtype in (mx.float32, mx.float16, mx.bfloat16) and _native.active("instance norm (channel affine)"):
        return _native.channel_affine(x, alpha, beta)
    return (up(x) * alpha + beta).astype(x.dtype)


# torch's three classes differ only in the rank they accept; channels-last input makes them one layer
InstanceNorm1d = InstanceNorm
InstanceNorm2d = InstanceNorm
InstanceNorm3d = InstanceNorm
