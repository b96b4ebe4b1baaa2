"""Pieces shared by the zoo's mobile and efficient families (MobileNetV3, LR-ASPP, ...), channels-last.

* :class:`ReLU`: ``nn.ReLU`` through Porter's native multi-threaded kernel where it is built (MLX's ``maximum`` is
  single-threaded on CPU), as the converter's ReLU.
* :class:`Hardsigmoid`: ``torch.nn.Hardsigmoid`` (MLX has ``Hardswish`` but no hard sigmoid).
* :func:`resize_bilinear`: ``F.interpolate(x, size=..., mode="bilinear", align_corners=False)``.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from porter.layers.functional import hardsigmoid, interpolate_linear, relu

__all__ = ["Hardsigmoid", "ReLU", "resize_bilinear"]


class ReLU(nn.Module):
    """``max(x, 0)`` (NaN stays NaN; gradient where the output is positive, as torch). Shape: any -> same."""

    def __call__(self, x: mx.array) -> mx.array:
        return relu(x)  # one native pass on CPU for floats (porter.layers.functional.relu)


class Hardsigmoid(nn.Module):
    """``relu6(x + 3) / 6``, torch's ``nn.Hardsigmoid`` (one native pass on the CPU). Shape: any -> same."""

    def __call__(self, x: mx.array) -> mx.array:
        return hardsigmoid(x)


def resize_bilinear(x: mx.array, size) -> mx.array:
    """Bilinear resize of ``(N, H, W, C)`` to ``(N, size[0], size[1], C)`` as torch's ``F.interpolate(x, size=size,
    mode="bilinear", align_corners=False)``: ``porter.layers.functional.interpolate_linear`` (torch's taps and
    arithmetic; one native pass on the CPU, its gradient too).

    Args:
        x (mx.array): ``(N, H, W, C)``.
        size (tuple of 2 ints): output ``(H', W')``, each at least 1.
    """
    if x.ndim != 4:
        raise ValueError(f"[resize_bilinear] expected (N, H, W, C) input but got shape {x.shape}.")
    size = tuple(int(s) for s in size)
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"[resize_bilinear] 'size' must be two positive ints but got {size}.")
    return interpolate_linear(x, size, align_corners=False)
