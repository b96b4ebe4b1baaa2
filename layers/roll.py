"""roll: torch's ``roll`` over given axes (elements shifted along each axis, wrapping around).

MLX's ``roll`` is slices and concatenations, single-threaded copies on the CPU; Swin rolls its feature map before and
after every shifted-window block. On the CPU with Porter's native kernels built it is one native pass over Porter's
threads (``csrc/roll_ops.cpp``: whole rows, or two pieces of each row when the last axis rolls). Everything else
(other devices, export, empty arrays, no axes: the flattened roll) is MLX's ``roll``.
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx

from . import _native

# False: MLX's roll everywhere (an A/B switch).
NATIVE_ROLL = True


def roll(x: mx.array, shifts: Sequence[int], axes: Sequence[int]) -> mx.array:
    """``x`` rolled by ``shifts[i]`` along ``axes[i]`` (torch's ``roll(x, shifts, dims)``; an axis may repeat: its
    shifts add up).

    Args:
        x (mx.array): any shape and dtype, at least 1-d.
        shifts (Sequence[int]): one shift per axis, any sign or size.
        axes (Sequence[int]): the axes, negative counting from the end.

    Returns an array of ``x``'s shape. Example::

        shifted = roll(x, (-3, -3), (1, 2))   # Swin's cyclic shift of an (N, H, W, C) map
    """
    shifts, axes = [int(s) for s in shifts], [int(a) for a in axes]
    if len(shifts) != len(axes):
        raise ValueError(f"[roll] 'shifts' and 'axes' must have the same length but got {shifts} and {axes}.")
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise IndexError(f"[roll] axis {a} is out of range for an array of {x.ndim} dims (shape {tuple(x.shape)}).")
    if NATIVE_ROLL and axes and x.ndim > 0 and x.size > 0 and _native.active("roll"):
        return _native.kernels().roll(x, shifts, axes)
    return mx.roll(x, shifts, axis=axes)
