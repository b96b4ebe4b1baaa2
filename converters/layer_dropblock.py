"""timm's ``DropBlock2d`` (its default ``fast`` form, without noise) in training mode, torch-free.

As timm's ``drop_block_fast_2d`` computes it on a (B, C, H, W) map: with ``k = min(block_size, H, W)`` the seed
rate is ``gamma = gamma_scale * drop_prob * H * W / k**2 / ((W - block_size + 1) * (H - block_size + 1))``; seeds
are Bernoulli(``gamma``) per element, each grown into a k x k block by a stride-1 max pool padded by ``k // 2``
(clipped at the borders), and the kept elements are scaled by ``numel / (kept + 1e-6)`` (counted over the whole
batch, in float32, then cast to the map's dtype): ``x * keep * scale``. Identity in eval and at ``drop_prob == 0``.
"""

from __future__ import annotations

import mlx.core as mx


def _check(name: str, value, ok: bool, what: str):
    if not ok:
        raise ValueError(f"[DropBlock2d] '{name}' {what} but got {value!r}")


def seed_rate(drop_prob: float, block_size: int, gamma_scale: float, h: int, w: int) -> float:
    """timm's ``gamma`` for an h x w map; a ValueError where torch's ``bernoulli_`` would fail (not in [0, 1])."""
    k = min(block_size, h, w)
    span = (w - block_size + 1) * (h - block_size + 1)
    gamma = gamma_scale * drop_prob * h * w / k ** 2 / span if span else float("inf")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"[DropBlock2d] the seed rate {gamma} for a {h}x{w} map with block_size {block_size} is "
                         f"outside [0, 1] (timm's formula; torch's bernoulli_ fails here too)")
    return gamma


def _grow(seeds: mx.array, k: int, axis: int) -> mx.array:
    """Max over a k-wide stride-1 window along ``axis``, padded by k // 2 (0: seeds are 0/1), the input's size."""
    pad = [(0, 0)] * seeds.ndim
    pad[axis] = (k // 2, k // 2)
    padded = mx.pad(seeds, pad)
    size = seeds.shape[axis]
    out = None
    for i in range(k):
        window = mx.take(padded, mx.arange(i, i + size), axis=axis)
        out = window if out is None else mx.maximum(out, window)
    return out


def drop_block(x: mx.array, drop_prob: float, block_size: int, gamma_scale: float, axes: tuple,
               training: bool = True) -> mx.array:
    """timm's fast ``DropBlock2d`` on ``x`` whose torch dims 2 and 3 (H, W) are array axes ``axes``."""
    _check("drop_prob", drop_prob, not isinstance(drop_prob, bool) and 0.0 <= drop_prob <= 1.0, "must be in [0, 1]")
    _check("block_size", block_size, isinstance(block_size, int) and block_size >= 1, "must be a positive int")
    _check("axes", axes, len(axes) == 2 and axes[0] != axes[1] and all(
        not isinstance(a, bool) and isinstance(a, int) and 0 <= a < x.ndim for a in axes),
        f"must be two different axes of the {x.ndim}-d input (where torch's H and W are)")
    if not training or drop_prob == 0.0:
        return x
    h, w = x.shape[axes[0]], x.shape[axes[1]]
    k = min(block_size, h, w)
    _check("block_size", block_size, k % 2 == 1,
           f"must give an odd block on a {h}x{w} map (an even one makes torch's pooled mask one larger than the map)")
    seeds = mx.random.bernoulli(seed_rate(drop_prob, block_size, gamma_scale, h, w), x.shape).astype(mx.float32)
    keep = 1.0 - _grow(_grow(seeds, k, axes[0]), k, axes[1])
    scale = (keep.size / (keep.sum() + 1e-6)).astype(x.dtype)
    return x * keep.astype(x.dtype) * scale
