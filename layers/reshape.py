"""reshape: MLX's ``reshape`` (a view of the same buffer wherever the new shape can be read with strides), with the
copy that a non-contiguous input needs split over threads.

A reshape of a permuted view (Swin's window partition ``view(B, H/7, 7, W/7, 7, C).permute(0, 1, 3, 2, 4, 5)
.reshape(-1, 49, C)`` and its reverse, attention's heads merged back ``transpose(1, 2).reshape(B, L, C)``) must
copy; MLX's CPU copy runs on its stream's one thread. On the CPU with Porter's native kernels built the reshape is
one native node (``csrc/reshape_ops.cpp``) that makes the same view where MLX would and otherwise copies with
Porter's threads. Everything else (other devices, export, empty or unchanged shapes) is MLX's ``reshape``.
"""

from __future__ import annotations

import math
from typing import Sequence

import mlx.core as mx

from . import _native

# False: MLX's reshape everywhere (an A/B switch).
NATIVE_RESHAPE = True


def _resolved(size: int, shape: Sequence[int]):
    """``shape`` with a single ``-1`` filled in, or None when MLX's reshape should judge it (and raise its error)."""
    shape = [int(n) for n in shape]
    free = [i for i, n in enumerate(shape) if n == -1]
    if len(free) > 1 or any(n < -1 for n in shape):
        return None
    known = math.prod(n for n in shape if n != -1)
    if free:
        if known == 0 or size % known:
            return None
        shape[free[0]] = size // known
    return shape if math.prod(shape) == size else None


def reshape(x: mx.array, shape: Sequence[int]) -> mx.array:
    """``x.reshape(shape)`` (one ``-1`` allowed), the copy of a non-contiguous input on Porter's threads.

    Args:
        x (mx.array): any shape and dtype.
        shape (Sequence[int]): the new shape, same number of elements.

    Returns ``x``'s elements in row-major order as ``shape``. Example::

        windows = reshape(x.reshape(1, 8, 7, 8, 7, 96).transpose(0, 1, 3, 2, 4, 5), (64, 49, 96))
    """
    if NATIVE_RESHAPE and x.size > 0 and _native.active("reshape"):
        target = _resolved(x.size, shape)
        if target is not None and tuple(target) != tuple(x.shape):
            return _native.kernels().reshape(x, target)
    return x.reshape(shape)
