"""Scatter-free placement into disjoint blocks: the layout of a kernel == stride pool without padding.

When output position ``o`` owns the block ``[o * s, (o + 1) * s)`` of a plane (per dim) and its flat plane index
lies inside that block, "write value ``o`` at its index" is a masked broadcast: compare each block position with the
index of its owner and keep the value where they match. Used by max unpooling and by the max pools' backward, where
it replaces a scatter (slow on MLX's CPU backend) by two elementwise passes.
"""

from __future__ import annotations

import math
from functools import lru_cache

import mlx.core as mx
import numpy as np

_BITS = {2: mx.uint16, 4: mx.uint32, 8: mx.uint64}


def supported(dtype) -> bool:
    return dtype.size in _BITS


def split_blocks(a: mx.array, grid: tuple) -> mx.array:
    """``(N, *grid, C)`` as ``(N, g1, 1, g2, 1, ..., C)``, broadcastable against a blocked plane."""
    return a.reshape(a.shape[0], *[v for g in grid for v in (g, 1)], a.shape[-1])


@lru_cache(maxsize=32)
def block_positions(grid: tuple, block: tuple, plane: tuple, dtype=mx.int64) -> mx.array:
    """Flat plane index (row-major over ``plane``) of every block position: ``(1, g1, s1, g2, s2, ..., 1)``, entry
    ``[o, a]`` for plane position ``o * s + a``. ``plane`` may extend past the grid (floor-mode leftovers)."""
    positions = np.zeros([v for pair in zip(grid, block) for v in pair], dtype=np.int64)
    stride = 1
    for d in reversed(range(len(block))):
        shape = [1] * (2 * len(block))
        shape[2 * d], shape[2 * d + 1] = grid[d], block[d]
        coord = np.arange(grid[d])[:, None] * block[d] + np.arange(block[d])[None, :]
        positions = positions + coord.reshape(shape) * stride
        stride *= plane[d]
    return mx.array(positions[None, ..., None]).astype(dtype)


def block_mask(index: mx.array, block: tuple, plane: tuple) -> mx.array:
    """Bool ``(N, g1, s1, ..., C)``: True where a block position is its owner's ``index`` (``(N, *grid, C)``)."""
    grid = tuple(index.shape[1:-1])
    return split_blocks(index, grid) == block_positions(grid, block, plane, index.dtype)


def place(values: mx.array, mask: mx.array, block: tuple, plane: tuple) -> mx.array:
    """``(N, *plane, C)``: each ``values`` entry (``(N, *grid, C)``) where ``mask`` marks it, zero elsewhere
    (and past the grid)."""
    n, c = values.shape[0], values.shape[-1]
    grid = tuple(values.shape[1:-1])
    bits = _BITS[values.dtype.size]
    # a product with the mask's bits instead of mx.where: bit-exact for NaN/inf/-0.0 and branch-free (where on a
    # data-dependent mask ran ~3x slower on MLX CPU)
    out = (mask * split_blocks(values, grid).view(bits)).view(values.dtype)
    out = out.reshape(n, *[g * s for g, s in zip(grid, block)], c)
    extra = [(0, p - g * s) for p, g, s in zip(plane, grid, block)]
    return mx.pad(out, [(0, 0)] + extra + [(0, 0)]) if any(e for _, e in extra) else out


def covers(grid: tuple, block: tuple, plane: tuple) -> bool:
    """Whether the blocks of ``grid`` fit in ``plane`` (so every block position is a plane position)."""
    return all(p >= g * s for p, g, s in zip(plane, grid, block)) and math.prod(plane) < 2**31
