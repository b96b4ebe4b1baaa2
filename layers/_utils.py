"""Argument normalisation and layout helpers shared by every Porter layer.

All layers are channels-last: a batched input is ``(N, *spatial, C)``, an unbatched one ``(*spatial, C)``.
Error messages name the layer (``[MaxPool2d]``) and the argument, reusing torch's wording where torch has one.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Callable, Sequence

import mlx.core as mx

_ORDINAL = {1: "one", 2: "two", 3: "three"}


def ntuple(value, n: int, name: str, layer: str, *, allow_none: bool = False) -> tuple:
    """Turn an int or a sequence into an ``n``-tuple of ints.

    A length-1 sequence is broadcast (as torch does); any other length than 1 or ``n`` raises ``ValueError``.
    Floats and bools raise ``TypeError``. ``allow_none`` lets ``None`` entries through (adaptive ``output_size``).
    """
    # fast paths (this runs on every layer call): a plain int, or a tuple of n plain ints (``bool`` is not ``int``)
    if type(value) is int:
        return (value,) * n
    if type(value) is tuple and len(value) == n and all(type(item) is int for item in value):
        return value
    if isinstance(value, (list, tuple)):
        items = tuple(value)
        if len(items) == 1:
            items = items * n
        elif len(items) != n:
            raise ValueError(
                f"[{layer}] '{name}' must either be a single int, or a tuple of {_ORDINAL.get(n, n)} ints, "
                f"but got {tuple(value)!r}."
            )
    else:
        items = (value,) * n
    for item in items:
        if item is None and allow_none:
            continue
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise TypeError(
                f"[{layer}] '{name}' must be an int or a tuple of ints, but got {value!r} "
                f"(an element of type {type(item).__name__})."
            )
    return tuple(item if item is None else int(item) for item in items)


def pool_output_size(length: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """Torch's sliding-window output length (docs/SEMANTICS.md §1), including the ceil-mode drop rule."""
    num = length + 2 * padding - dilation * (kernel - 1) - 1
    out = (num + (stride - 1 if ceil_mode else 0)) // stride + 1  # floor division, as ATen's div_rtn
    # ceil mode keeps a partial last window only if it starts inside the input or its left padding
    if ceil_mode and (out - 1) * stride >= length + padding:
        out -= 1
    return out


def check_rank(x: mx.array, nd: int, layer: str, name: str = "input") -> bool:
    """Check ``x`` is ``(N, *spatial, C)`` or ``(*spatial, C)``; return True when batched."""
    if x.ndim == nd + 2:
        return True
    if x.ndim == nd + 1:
        return False
    raise ValueError(
        f"[{layer}] expected '{name}' of rank {nd + 1} (unbatched, {_layout(nd, False)}) or {nd + 2} "
        f"(batched, {_layout(nd, True)}), but got shape {tuple(x.shape)}."
    )


def _layout(nd: int, batched: bool) -> str:
    spatial = {1: ["L"], 2: ["H", "W"], 3: ["D", "H", "W"]}[nd]
    return "(" + ", ".join((["N"] if batched else []) + spatial + ["C"]) + ")"


def check_float_pool_input(x: mx.array, nd: int, layer: str, where: str, op: str, empty_says: str):
    """Torch's input checks of the float-only max-type pools (adaptive, fractional); returns ``(x_batched, batched)``.

    ``where`` prefixes the shape errors as torch's kernel names itself (``adaptive_max_pool2d()``), ``op`` is the
    name in the dtype error, ``empty_says`` torch's wording before the shape in the empty-input error.
    """
    if x.ndim not in (nd + 1, nd + 2):
        raise ValueError(
            f"[{layer}] {where}: Expected {nd + 1}D or {nd + 2}D tensor, but got shape {tuple(x.shape)} "
            f"(channels-last: spatial dims then C, with an optional leading N)"
        )
    batched = x.ndim == nd + 2
    if 0 in (x.shape[1:] if batched else x.shape):
        raise ValueError(
            f"[{layer}] {where}: Expected input to have non-zero size for non-batch dimensions, {empty_says} "
            f"{list(x.shape)} (channels-last)"
        )
    if not mx.issubdtype(x.dtype, mx.floating):
        raise TypeError(f"[{layer}] \"{op}\" not implemented for dtype {x.dtype} (floating inputs only, as torch)")
    if isinstance(x, ShapeOnly):
        return None, batched
    return (x if batched else x[None]), batched


def as_batched(x: mx.array, nd: int, layer: str) -> tuple[mx.array, bool]:
    """Return ``x`` with a leading batch axis and whether it had one (so the caller can strip it again)."""
    batched = check_rank(x, nd, layer)
    return (x if batched else x[None]), batched


def _typed(value):
    if type(value) in (tuple, list):
        return (type(value), tuple(_typed(item) for item in value))
    return (type(value), value)


def plan_cache(fn: Callable) -> Callable:
    """Memoize a layer's argument and shape checks (and what they work out) per call signature.

    The key records every argument's type as well as its value, recursively, so that values that compare equal
    across types (``True == 1``, ``2.0 == 2``, ``[2] == (2,)`` after conversion) do not share an entry: a call that
    must raise always reaches the checks. Errors are never cached; unhashable arguments skip the cache.
    """
    cache: dict = {}

    @functools.wraps(fn)
    def cached(*args):
        try:
            key = _typed(args)
            return cache[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable argument
            return fn(*args)
        value = fn(*args)
        if len(cache) >= 1024:
            cache.clear()
        cache[key] = value
        return value

    cached.cache = cache
    return cached


class ShapeOnly:
    """What the input checks read of an array (``shape``, ``ndim``, ``dtype``, ``size``): lets a layer run its
    checks once per input shape and dtype and cache the outcome (errors are never cached: they propagate)."""

    def __init__(self, shape: tuple, dtype):
        self.shape, self.dtype, self.ndim = tuple(shape), dtype, len(shape)
        size = 1
        for n in self.shape:
            size *= n
        self.size = size


def broadcast_size(a: Sequence[int], b: Sequence[int]) -> int:
    """Elements of numpy's broadcast of shapes ``a`` and ``b`` (0 when they do not broadcast: the caller leaves the
    error to MLX's op)."""
    try:
        return math.prod(mx.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        return 0


def format_shape(shape: Sequence[int]) -> str:
    """Torch's ``2x3x4`` shape spelling used in its pooling error messages."""
    return "x".join(str(int(s)) for s in shape)


@functools.lru_cache(maxsize=256)
def adaptive_tables(plane: tuple, out: tuple) -> tuple:
    """Per-dim adaptive windows as the native kernels' tables: ``(firsts, ends, lengths)``, tuples of per-dim tuples
    (window ``o`` of a dim reads ``[firsts[o], ends[o])``, ``lengths[o]`` elements)."""
    firsts, ends, lengths = [], [], []
    for length, o in zip(plane, out):
        starts, stops = adaptive_windows(length, o)
        firsts.append(tuple(starts))
        ends.append(tuple(stops))
        lengths.append(tuple(b - a for a, b in zip(starts, stops)))
    return tuple(firsts), tuple(ends), tuple(lengths)


def adaptive_windows(length: int, out: int) -> tuple[list[int], list[int]]:
    """Torch's adaptive-pool windows on one axis: ``start = o*L // O``, ``end = ceil((o+1)*L / O)``.

    Exact integer arithmetic (torch 2.13); windows may overlap and differ in length.
    """
    starts = [(o * length) // out for o in range(out)]
    ends = [((o + 1) * length + out - 1) // out for o in range(out)]
    return starts, ends


def interleave_phases(phases: list, stride) -> mx.array:
    """Per-phase results, each ``(N, *q, C)`` and listed in ``itertools.product`` order of the phase ``r`` (one
    entry per dim), interleaved into ``(N, *(q * stride), C)``: position ``q*s + r`` of a dim comes from phase ``r``."""
    nd = len(stride)
    n, q, c = phases[0].shape[0], phases[0].shape[1:-1], phases[0].shape[-1]
    y = mx.stack(phases, axis=-2).reshape(n, *q, *stride, c)
    order = [0] + [a for i in range(nd) for a in (1 + i, 1 + nd + i)] + [1 + 2 * nd]
    return y.transpose(order).reshape(n, *(a * s for a, s in zip(q, stride)), c)
