"""Per-sample normalisation layers with torch's semantics, channels-last: LayerNorm, GroupNorm, InstanceNorm.

None of them keeps running statistics, so train and eval mode compute the same thing (torch's default
``InstanceNorm*d(track_running_stats=False)``). Statistics use the biased variance, as torch does.

* :class:`LayerNorm`: normalises over the last ``len(normalized_shape)`` axes of any input (torch's
  ``normalized_shape`` are the trailing dims, so the same axes in torch's layout and in a channels-last one as long as
  they stay last);
* :class:`GroupNorm`: ``(N, *spatial, C)``; statistics per sample and group of ``C // num_groups`` consecutive
  channels, over the spatial axes and the group's channels;
* :class:`InstanceNorm`: ``(N, *spatial, C)``; statistics per sample and channel (GroupNorm with one group per
  channel).
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

from ._precision import in_float32

__all__ = ["LayerNorm", "GroupNorm", "InstanceNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
           "layer_norm", "group_norm"]


@in_float32
def layer_norm(x: mx.array, weight=None, bias=None, *, k: int = 1, eps: float = 1e-5) -> mx.array:
    """torch's ``F.layer_norm`` over the last ``k`` axes of ``x``; ``weight``/``bias`` have those axes' shape.
    16-bit inputs are normalised in float32 and rounded once (torch's CPU kernel)."""
    axes = list(range(x.ndim - k, x.ndim))
    mean = mx.mean(x, axis=axes, keepdims=True)
    var = mx.mean(mx.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) * mx.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


@in_float32
def group_norm(x: mx.array, groups: int, weight=None, bias=None, *, eps: float = 1e-5) -> mx.array:
    """torch's ``F.group_norm`` on channels-last ``(N, *spatial, C)``; ``weight``/``bias`` are ``(C,)``. 16-bit
    inputs are normalised in float32 and rounded once (torch's CPU kernel)."""
    n, c = x.shape[0], x.shape[-1]
    g = x.reshape(n, -1, groups, c // groups)
    mean = mx.mean(g, axis=(1, 3), keepdims=True)
    var = mx.mean(mx.square(g - mean), axis=(1, 3), keepdims=True)
    y = ((g - mean) * mx.rsqrt(var + eps)).reshape(x.shape)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _positive(value, name: str, layer: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"[{layer}] '{name}' must be a positive int but got {value!r}.")
    return value


class LayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm: normalises over the trailing ``normalized_shape`` axes.

    Args:
        normalized_shape (int or tuple of int): the trailing dims.
        eps (float, optional): added to the variance. Default: ``1e-5``.
        elementwise_affine (bool, optional): learnable ``weight``. Default: ``True``.
        bias (bool, optional): learnable ``bias`` (with ``elementwise_affine``). Default: ``True``.

    Shape: ``(*, *normalized_shape)`` -> same; ``weight``/``bias`` have shape ``normalized_shape``.
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True):
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not shape:
            raise ValueError("[LayerNorm] 'normalized_shape' must have at least one dim.")
        for s in shape:
            _positive(s, "normalized_shape", "LayerNorm")
        super().__init__(math.prod(shape), eps=eps, affine=elementwise_affine, bias=bias)
        self.normalized_shape = shape
        if "weight" in self:
            self.weight = mx.ones(shape)
        if "bias" in self:
            self.bias = mx.zeros(shape)

    def _extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={'weight' in self}"

    def __call__(self, x: mx.array) -> mx.array:
        k = len(self.normalized_shape)
        if tuple(x.shape[x.ndim - k:]) != self.normalized_shape or x.ndim < k:
            raise ValueError(f"[LayerNorm] expected input with trailing shape {self.normalized_shape} but got "
                             f"shape {tuple(x.shape)}.")
        return layer_norm(x, self.get("weight"), self.get("bias"), k=k, eps=self.eps)


class GroupNorm(nn.GroupNorm):
    """torch.nn.GroupNorm on channels-last ``(N, *spatial, C)`` input (torch's channel grouping).

    Args:
        num_groups (int): groups; must divide ``num_channels``.
        num_channels (int): ``C``.
        eps (float, optional): added to the variance. Default: ``1e-5``.
        affine (bool, optional): learnable per-channel ``weight`` and ``bias``. Default: ``True``.
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        _positive(num_groups, "num_groups", "GroupNorm")
        _positive(num_channels, "num_channels", "GroupNorm")
        if num_channels % num_groups:
            raise ValueError(f"[GroupNorm] num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups}).")
        super().__init__(num_groups, num_channels, eps=eps, affine=affine, pytorch_compatible=True)

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim < 2 or x.shape[-1] != self.dims:
            raise ValueError(f"[GroupNorm] expected (N, *spatial, {self.dims}) input but got shape {tuple(x.shape)}.")
        return group_norm(x, self.num_groups, self.get("weight"), self.get("bias"), eps=self.eps)


class InstanceNorm(nn.InstanceNorm):
    """torch.nn.InstanceNorm{1,2,3}d (``track_running_stats=False``) on channels-last ``(N, *spatial, C)``.

    Args:
        num_features (int): ``C``.
        eps (float, optional): added to the variance. Default: ``1e-5``.
        affine (bool, optional): learnable per-channel ``weight`` and ``bias``. Default: ``False`` (torch's).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = False):
        _positive(num_features, "num_features", "InstanceNorm")
        super().__init__(num_features, eps=eps, affine=affine)

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim < 2 or x.shape[-1] != self.dims:
            raise ValueError(f"[InstanceNorm] expected (N, *spatial, {self.dims}) input but got shape "
                             f"{tuple(x.shape)}.")
        return group_norm(x, self.dims, self.get("weight"), self.get("bias"), eps=self.eps)


# torch's three classes differ only in the rank they accept; channels-last input makes them one layer
InstanceNorm1d = InstanceNorm
InstanceNorm2d = InstanceNorm
InstanceNorm3d = InstanceNorm
