"""Concatenation along one axis, torch's ``torch.cat``, as one multi-threaded native copy on the CPU.

MLX's CPU ``concatenate`` copies each input into a strided slice of the output on one thread: 3.7 ms for a
DenseNet-121 concat at batch 8 ((8, 56, 56, 64 + 7 x 32) float32, 29 MB) where a plain copy of the result takes
1.2 ms. The native kernel (``layers/csrc/concat_kernels.h``) copies whole rows (``memcpy`` of each input's chunk per
row of the dims before the axis) over the threads. Inputs of mixed dtypes (MLX promotes them), small results, other
devices and export mode keep ``mx.concatenate``, with the same values.
"""

from __future__ import annotations

import math

import mlx.core as mx

from . import _native

# results with fewer elements than this keep mx.concatenate (one graph node either way; nothing to split over threads)
NATIVE_MIN_ELEMENTS = 1 << 14


def concatenate(arrays, axis: int = 0) -> mx.array:
    """Join ``arrays`` along ``axis`` (torch's ``cat``, MLX's ``concatenate``).

    Args:
        arrays (sequence of mx.array): same rank, equal sizes in every dim but ``axis``.
        axis (int, optional): negative counts from the end. Default: ``0``.

    Shape: ``(*lead, sum of the inputs' sizes along axis, *trail)``; any layout (Porter's channels-last feature
    maps join along ``-1``). Differentiable; ``mx.vmap`` maps it.

    Example:
        >>> a, b = mx.zeros((8, 56, 56, 64)), mx.ones((8, 56, 56, 32))
        >>> concatenate([a, b], axis=-1).shape
        (8, 56, 56, 96)
    """
    arrays = list(arrays)
    if not arrays:
        raise ValueError("[concatenate] 'arrays' must hold at least one array but got none.")
    first = arrays[0]
    if not isinstance(axis, int) or not -first.ndim <= axis < max(first.ndim, 1):
        raise ValueError(f"[concatenate] 'axis' must be an int in [-{first.ndim}, {first.ndim}) but got {axis!r}.")
    if _native_pays(arrays):
        return _native.concat(arrays, axis)
    return mx.concatenate(arrays, axis=axis)


def _native_pays(arrays) -> bool:
    first = arrays[0]
    if len(arrays) < 2 or first.ndim == 0 or any(a.dtype != first.dtype or a.ndim != first.ndim for a in arrays):
        return False
    total = sum(math.prod(a.shape) for a in arrays)
    return total >= NATIVE_MIN_ELEMENTS and _native.active("concat")
