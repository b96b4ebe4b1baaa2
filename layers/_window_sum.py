"""The one window-sum engine behind the average-type pools (avg, adaptive avg, LP), beside ``_window_max.py``.

It owns the native window tables and the dispatch: where the native kernels are active (``_native.active``: built,
enabled, CPU, and not exporting, see ``layers/_export.py``) a pool is one multi-threaded pass of the ``window_sum``
kernel (``layers/csrc``); otherwise it is plain MLX ops with the same values. The layers keep their argument and input
checks and hand over a batched, checked ``(N, *spatial, C)`` input and the output size.

* Sliding windows (avg pool; LP pool's ``x ** p`` average): the sum is separable, so the pure-MLX path takes it one
  spatial axis at a time as a sum of ``k`` strided slices of the zero-padded input; the divisor is a precomputed
  per-position table (docs/SEMANTICS.md §4.1), a product of per-axis factors.
* Adaptive windows ``[o*L // O, ceil((o+1)*L / O))`` (docs/SEMANTICS.md §5.1): overlapping and of varying length
  when ``O`` does not divide ``L``. Pure MLX: one axis at a time, a reshape-and-sum when ``O`` divides ``L``, else a
  sum over window taps, each tap one gather of ``O`` rows (taps past a short window read an appended zero row); the
  result is divided by the product of the window lengths, as torch divides each box sum.
"""

from __future__ import annotations

import math
from functools import lru_cache

import mlx.core as mx
import numpy as np

from . import _native
from ._utils import adaptive_tables, adaptive_windows

SLIDING_KERNEL = "avg pool (window sum)"
ADAPTIVE_KERNEL = "adaptive avg pool (window sum)"
POWER_KERNEL = "LP pool (power window sum)"


def native(x, kernel: str) -> bool:
    """Whether a window sum of ``x`` runs natively: a non-empty MLX array, and the kernels active (not exporting:
    ``kernel`` names it in the export's list of replacements)."""
    return isinstance(x, mx.array) and x.size > 0 and _native.active(kernel)


# ---------------------------------------------------------------------------------------------------- sliding
@lru_cache(maxsize=256)
def _axis_divisors(length: int, k: int, s: int, p: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-window (pool_size, count) on one axis: the window clipped at ``L + p``, and its real elements."""
    start = np.arange(out, dtype=np.int64) * s - p
    end = np.minimum(start + k, length + p)
    pool = end - start
    count = np.minimum(end, length) - np.maximum(start, 0)
    return pool, count


@lru_cache(maxsize=256)
def _divisor(spatial, out, k, s, p, count_include_pad: bool, divisor_override, integer: bool):
    """The divisor: an int when every window divides by the same number, else a ``(1, *out, 1)`` table."""
    if divisor_override is not None:
        return divisor_override
    table = None
    for axis, (n, ki, si, pi, oi) in enumerate(zip(spatial, k, s, p, out)):
        pool, count = _axis_divisors(n, ki, si, pi, oi)
        factor = (pool if count_include_pad else count).reshape([oi if a == axis else 1 for a in range(len(out))])
        table = factor if table is None else table * factor
    if np.all(table == table.flat[0]):
        return int(table.flat[0])  # a scalar division is cheaper than a broadcast table
    table = mx.array(table.reshape((1,) + table.shape + (1,)))
    return table if integer else table.astype(mx.float32)


@lru_cache(maxsize=256)
def sliding_tables(spatial, out, k, s, p, count_include_pad: bool) -> tuple:
    """Per-dim real taps ``[max(start, 0), min(start + k, L))`` and divisors (pool size or real count): the native
    kernel's ``(firsts, ends, divisors)``."""
    firsts, ends, divisors = [], [], []
    for n, ki, si, pi, oi in zip(spatial, k, s, p, out):
        start = np.arange(oi, dtype=np.int64) * si - pi
        pool, count = _axis_divisors(n, ki, si, pi, oi)
        firsts.append(tuple(int(v) for v in np.maximum(start, 0)))
        ends.append(tuple(int(v) for v in np.minimum(start + ki, n)))
        divisors.append(tuple(int(v) for v in (pool if count_include_pad else count)))
    return tuple(firsts), tuple(ends), tuple(divisors)


def _pad_widths(spatial, k, s, p, out) -> list[tuple[int, int]]:
    """Zero padding per spatial axis: ``p`` on the left, and on the right as much as the last window reaches."""
    return [(pi, max(0, (oi - 1) * si + ki - pi - n)) for n, ki, si, pi, oi in zip(spatial, k, s, p, out)]


def _window_sum_axis(x: mx.array, axis: int, k: int, s: int, out: int) -> mx.array:
    """Sum of each length-``k`` window along ``axis`` of an already padded ``x``: a sum of ``k`` strided slices."""
    span = (out - 1) * s + 1
    index = [slice(None)] * x.ndim
    total = None
    for j in range(k):  # a loop over kernel taps, not over output positions
        index[axis] = slice(j, j + span, s)
        tap = x[tuple(index)]
        total = tap if total is None else total + tap
    return total


def _trunc_divide(num: mx.array, den) -> mx.array:
    """C integer division (toward zero), as torch's int64 avg pool."""
    q = mx.floor_divide(num, den)
    fix = (mx.remainder(num, den) != 0) & ((num < 0) != (mx.array(den) < 0))
    return mx.where(fix, q + 1, q)


def sliding_average(xb: mx.array, out: tuple, k: tuple, s: tuple, p: tuple, count_include_pad: bool,
                    divisor_override) -> mx.array:
    """Torch's average pool of a batched, checked ``(N, *spatial, C)`` input to ``(N, *out, C)``: the window sum
    divided by ``divisor_override``, else by the window's size (``count_include_pad``) or its real elements."""
    nd = len(out)
    spatial = tuple(xb.shape[1 : 1 + nd])
    if xb.dtype != mx.int64 and native(xb, SLIDING_KERNEL):
        tables = sliding_tables(spatial, out, k, s, p, count_include_pad)
        return _native.window_sum(xb, *tables, divisor_override or 0)  # one pass (layers/csrc)
    integer = xb.dtype == mx.int64
    # fp16/bf16 accumulate in float32 and round once, as torch's CPU kernel does
    work = xb.astype(mx.float32) if xb.dtype in (mx.float16, mx.bfloat16) else xb
    widths = _pad_widths(spatial, k, s, p, out)
    if any(lo or hi for lo, hi in widths):
        work = mx.pad(work, [(0, 0)] + widths + [(0, 0)])  # one copy for every axis
    for axis in range(nd):
        work = _window_sum_axis(work, 1 + axis, k[axis], s[axis], out[axis])
    den = _divisor(spatial, out, k, s, p, count_include_pad, divisor_override, integer)
    result = _trunc_divide(work, den) if integer else work / den
    return result.astype(xb.dtype)


def native_power_average(xb: mx.array, out: tuple, k: tuple, s: tuple, power: float) -> mx.array:
    """``avg_pool(xb ** power)`` (padding 0, count_include_pad) in one native pass with torch's pow gradient (LP
    pooling; float32/float64). Only where :func:`native` said yes for :data:`POWER_KERNEL`: the pure-MLX form rounds
    between torch's stages, which the LP layer does itself."""
    nd = len(out)
    tables = sliding_tables(tuple(xb.shape[1 : 1 + nd]), out, k, s, (0,) * nd, True)
    return _native.window_sum(xb, *tables, power=power)


# ---------------------------------------------------------------------------------------------------- adaptive
@lru_cache(maxsize=256)
def _window_taps(length: int, out: int) -> tuple[list[mx.array], np.ndarray]:
    """Per tap ``j``, the rows ``start + j`` of every window (``length``, an appended zero row, once a window is
    shorter than ``j + 1``), and the window lengths."""
    starts, ends = (np.asarray(v, dtype=np.int64) for v in adaptive_windows(length, out))
    sizes = ends - starts
    taps = [np.where(j < sizes, starts + j, length).astype(np.int32) for j in range(int(sizes.max()))]
    return [mx.array(t) for t in taps], sizes


def _box_sum_axis(x: mx.array, axis: int, out: int) -> tuple[mx.array, np.ndarray]:
    """Sum every adaptive window along ``axis``; return the sums and the window lengths."""
    length = x.shape[axis]
    if out == 1:
        return x.sum(axis=axis, keepdims=True), np.array([length])
    if length % out == 0:
        # equal, disjoint windows: a reshape exposes them as an axis of their own
        k = length // out
        shape = (*x.shape[:axis], out, k, *x.shape[axis + 1 :])
        return x.reshape(shape).sum(axis=axis + 1), np.full(out, k)
    # a tap sum, not a product with a 0/1 window matrix: that would multiply an inf or NaN outside a window by 0
    # and spread NaN into every window of the row (torch sums only the window's own elements)
    taps, sizes = _window_taps(length, out)
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, 1)
    padded = mx.pad(x, widths)
    total = None
    for rows in taps:  # a loop over window taps (at most ceil(L / O) + 1), not over output positions
        tap = mx.take(padded, rows, axis=axis)
        total = tap if total is None else total + tap
    return total, sizes


def _global_sum(x: mx.array) -> mx.array:
    """Sum over every spatial axis of ``(N, *spatial, C)``, keeping them as 1s.

    MLX's CPU reduction over a middle axis runs faster with longer contiguous rows: with few channels, summing
    ``g`` spatial positions' channel rows as one ``g * C`` row first, then the ``g`` partial sums, measured
    ~20% faster (1.67 -> 1.35 ms on (8, 56, 56, 256)); with C >= 1024 it is slower.
    """
    n, c = x.shape[0], x.shape[-1]
    positions = math.prod(x.shape[1:-1])
    keep = (n,) + (1,) * (x.ndim - 2) + (c,)
    group = next((g for g in (4, 8, 2) if positions % g == 0 and positions > g), 1) if c < 1024 else 1
    if group == 1:
        return x.reshape(n, positions, c).sum(axis=1).reshape(keep)
    partial = x.reshape(n, positions // group, group * c).sum(axis=1)
    return partial.reshape(n, group, c).sum(axis=1).reshape(keep)


def adaptive_average(xb: mx.array, out: tuple) -> mx.array:
    """Torch's adaptive average pool of a batched, checked, non-empty float ``(N, *spatial, C)`` input to
    ``(N, *out, C)`` (every entry of ``out`` >= 1)."""
    nd = len(out)
    spatial = tuple(xb.shape[1 : 1 + nd])
    if _native.active(ADAPTIVE_KERNEL):
        # one pass (layers/csrc), dividing by each window length in turn as torch does (sum / kh / kw)
        return _native.window_sum(xb, *adaptive_tables(spatial, out), sequential=True)  # divisors: lengths
    # fp16/bf16 accumulate in float32 and round once, as torch's CPU kernel does
    work = xb.astype(mx.float32) if xb.dtype in (mx.float16, mx.bfloat16) else xb
    divisor = None
    global_axes = tuple(1 + axis for axis, o in enumerate(out) if o == 1 and spatial[axis] > 1)
    if len(global_axes) == nd:
        work = _global_sum(work)
        divisor = np.full((1,) * (nd + 2), math.prod(spatial[a - 1] for a in global_axes))
    elif global_axes:
        # windows spanning a whole axis: one reduction over all such axes at once
        work = work.sum(axis=global_axes, keepdims=True)
        divisor = np.full((1,) * (nd + 2), math.prod(spatial[a - 1] for a in global_axes))
    for axis, o in enumerate(out):
        if o == spatial[axis] or 1 + axis in global_axes:
            continue  # identity windows of length 1, or already reduced
        work, lengths = _box_sum_axis(work, 1 + axis, o)
        shape = [1] * (nd + 2)
        shape[1 + axis] = o
        lengths = lengths.reshape(shape)
        divisor = lengths if divisor is None else divisor * lengths
    if divisor is not None:
        if np.all(divisor == divisor.flat[0]):
            work = work / float(divisor.flat[0])
        else:
            work = work / mx.array(divisor.astype(np.float32))
    return work.astype(xb.dtype)
