"""Pieces shared by the zoo's mobile and efficient families (MobileNetV3, LR-ASPP, ...), channels-last.

* :class:`ReLU`: ``nn.ReLU`` through Porter's native multi-threaded kernel where it is built (MLX's ``maximum`` is
  single-threaded on CPU), as the converter's ReLU.
* :class:`Hardsigmoid`: ``torch.nn.Hardsigmoid`` (MLX has ``Hardswish`` but no hard sigmoid).
* :func:`resize_bilinear`: ``F.interpolate(x, size=..., mode="bilinear", align_corners=False)``.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from porter.layers.functional import relu

__all__ = ["Hardsigmoid", "ReLU", "resize_bilinear"]


class ReLU(nn.Module):
    """``max(x, 0)`` (NaN stays NaN; gradient where the output is positive, as torch). Shape: any -> same."""

    def __call__(self, x: mx.array) -> mx.array:
        return relu(x)  # one native pass on CPU for floats (porter.layers.functional.relu)


class Hardsigmoid(nn.Module):
    """``relu6(x + 3) / 6``, torch's ``nn.Hardsigmoid``. Shape: any -> same."""

    def __call__(self, x: mx.array) -> mx.array:
        return mx.clip(x + 3.0, 0.0, 6.0) / 6.0


def _linear_taps(in_size: int, out_size: int):
    """Source indices and weights of torch's ``align_corners=False`` linear resampling along one axis.

    torch computes the coordinate scale as ``in / out`` and the source position ``(dst + 0.5) * scale - 0.5``,
    clamped at 0, in float32 for float32 input; the tables are built the same way so the taps match bit for bit.
    """
    scale = np.float32(in_size / out_size)
    src = np.maximum(scale * (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5),
                     np.float32(0))
    i0 = np.minimum(src.astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    return i0.astype(np.int32), i1.astype(np.int32), (src - i0.astype(np.float32)).astype(np.float32)


def resize_bilinear(x: mx.array, size) -> mx.array:
    """Bilinear resize of ``(N, H, W, C)`` to ``(N, size[0], size[1], C)`` as torch's ``F.interpolate(x, size=size,
    mode="bilinear", align_corners=False)`` (differentiable: gathers and a weighted sum).

    Args:
        x (mx.array): ``(N, H, W, C)``.
        size (tuple of 2 ints): output ``(H', W')``, each at least 1.
    """
    if x.ndim != 4:
        raise ValueError(f"[resize_bilinear] expected (N, H, W, C) input but got shape {x.shape}.")
    size = tuple(int(s) for s in size)
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"[resize_bilinear] 'size' must be two positive ints but got {size}.")
    for axis, out_size in zip((1, 2), size):
        if x.shape[axis] == out_size:
            continue  # torch's scale is then exactly 1: the identity
        i0, i1, lam = _linear_taps(x.shape[axis], out_size)
        shape = [1] * x.ndim
        shape[axis] = out_size
        w1 = mx.array(lam).reshape(shape).astype(x.dtype)
        a = mx.take(x, mx.array(i0), axis=axis)
        b = mx.take(x, mx.array(i1), axis=axis)
        x = a + (b - a) * w1
    return x
