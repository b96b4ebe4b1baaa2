"""The one max-over-windows engine behind every max-type pool (sliding, adaptive, fractional).

A *window spec* describes, for a batched channels-last input ``(N, *spatial, C)``, the candidate values ("taps") of
every output position along each dim, in torch's scan order, and their input coordinates, from which torch's flat
per-plane index follows (``h*W + w``, ``(t*H + h)*W + w``). From that this module computes

* the value: an elementwise ``mx.maximum`` over the taps (NaN propagates, as torch's ``v > best or isnan(v)`` scan);
* the index: the FIRST tap equal to the max (torch updates on strict ``>``) or, when the max is NaN, the LAST NaN tap
  (every NaN replaces the current best in torch's scan);
* the gradient: a custom VJP that scatter-adds the output gradient at the chosen index only (overlapping windows
  accumulate). ``mx.max``'s own VJP splits the gradient among tied maxima, which torch never does.

The value-only forward never computes an argmax: the backward recomputes the indices from the saved input. Indices
come from :class:`SeparableWindows`, one dim at a time. Sliding windows read their taps as strided slices and, on large
inputs, run as fused ``mx.compile`` kernels; adaptive and fractional windows gather theirs.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Optional, Sequence

import mlx.core as mx
import numpy as np

from . import _export, _native

# Index arithmetic runs in float32 (fast on MLX's CPU backend) while every flat index fits its mantissa exactly.
FLOAT_INDEX_LIMIT = 1 << 24
# Fusing pays off only on large arrays; each new graph costs a one-off C++ compile (~0.5 s) on the CPU backend.
COMPILE_MIN_ELEMENTS = 1 << 16


class WindowSpec:
    """What a max-type pool says about its windows. Subclasses: sliding, adaptive and fractional windows.

    Attributes set by subclasses:
        out_spatial: output extents.
        plane: input spatial extents (the flat index runs over them).
        compile_key: a hashable key pinning every constant of the spec's graph (shapes included) when it may be
            fused with ``mx.compile``; ``None`` otherwise.
    """

    out_spatial: tuple
    plane: tuple
    compile_key: Optional[tuple] = None

    def taps(self, x: mx.array) -> list:
        """Every candidate value, each ``(N, *out_spatial, C)`` (for a fused value-only max over all taps)."""
        raise NotImplementedError

    def native_tables(self) -> Optional[tuple]:
        """Per-dim ``(first, end, step)`` tap tables for the native kernel (``layers/csrc/windows.h``): output ``o``
        reads ``first[o], first[o] + step, ... < end[o]``. ``None``: the spec has no such form (fractional)."""
        return None

    def valid_mask(self) -> Optional[mx.array]:
        """Broadcastable bool mask of outputs whose window holds at least one real element (``None``: all do)."""
        return None

    def compute(self, x: mx.array, kind: str):
        """``kind="values"``: the max; ``"indices"``: ``(max, int32 flat index)``."""
        raise NotImplementedError

    def gradient(self, x: mx.array, grad: mx.array, index: Optional[mx.array], best: Optional[mx.array] = None):
        """Input gradient: all of each output's gradient to its index (scatter-add). ``index`` is the forward's
        when it computed one, else ``None`` (recomputed here); ``best``: the forward's max, when known."""
        if index is None:
            index = self.gradient_index(x, best)
        return _scatter_grad(self, x.shape, grad, index)

    def gradient_index(self, x: mx.array, best: Optional[mx.array]) -> mx.array:
        """Torch's flat index, recomputed for the backward (``best``: the forward's max, when known)."""
        return self.compute(x, "indices")[1]


class SeparableWindows(WindowSpec):
    """Windows that are boxes of per-dim tap lists, reduced one dim at a time (last dim first) instead of over the
    product of taps: ``sum(K_i)`` taps rather than ``prod(K_i)``. Exact for torch's rule: reducing the innermost
    dim first keeps, per row, the first max (or last NaN); the next dim then picks the first row holding the max
    (or the last row holding a NaN), which is the row-major first max (last NaN) of the box.

    Subclasses give, per dim, ``kernel[dim]`` taps, ``take(a, dim, j)`` (tap ``j`` of every window along ``dim``,
    for the values and for the carried index alike) and ``start(dim)`` (each window's first coordinate,
    broadcastable along ``dim``); tap ``j`` sits at ``start + j * step(dim)``. With a ``compile_key`` the whole
    reduction runs as one ``mx.compile`` graph on large inputs.
    """

    kernel: tuple

    def prepare(self, x: mx.array) -> mx.array:
        return x

    def take(self, a: mx.array, dim: int, j: int) -> mx.array:
        raise NotImplementedError

    def taps_along(self, a: mx.array, dim: int) -> list:
        """Every tap of every window along ``dim``; subclasses may gather them all at once."""
        return [self.take(a, dim, j) for j in range(self.kernel[dim])]

    def start(self, dim: int, dtype) -> mx.array:
        raise NotImplementedError

    def step(self, dim: int) -> int:
        return 1

    def coord(self, dim: int, j: int, dtype) -> mx.array:
        """Input coordinate of tap ``j`` of every window along ``dim`` (broadcastable along ``dim``)."""
        return self.start(dim, dtype) + j * self.step(dim)

    def extra_inputs(self, dtype) -> tuple:
        """Arrays the reduction's ``fixup`` needs (passed as inputs so a compiled graph does not bake them in)."""
        return ()

    def fixup(self, best: mx.array, index: mx.array, *extra) -> mx.array:
        """Last word on the index (e.g. windows whose max is the padding value)."""
        return index

    def compute(self, x, kind):
        extra = self.extra_inputs(_index_type(self)) if kind == "indices" else ()
        fn = fused(self, x, "separable-" + kind, lambda: self._reducer(kind))
        return (fn or self._reducer(kind))(x, *extra)

    def _reducer(self, kind: str) -> Callable:
        def reduce(x, *extra):
            a = self.prepare(x)
            itype = _index_type(self)
            strides = plane_strides(self.plane)
            index = None
            for dim in reversed(range(len(self.plane))):
                taps = self.taps_along(a, dim)
                best = max_value(taps)
                if kind == "indices":
                    cands = [self.coord(dim, j, itype) * strides[dim] for j in range(self.kernel[dim])]
                    if index is not None:
                        cands = [c + inner for c, inner in zip(cands, self.taps_along(index, dim))]
                    index = chosen_offset(taps, best, cands, itype)
                a = best
            if kind == "values":
                return a
            return a, self.fixup(a, index, *extra).astype(mx.int32)

        return reduce


def plane_strides(plane: Sequence[int]) -> tuple:
    """Row-major strides of a spatial plane: torch's flat index is ``sum(coord * stride)``."""
    strides, acc = [], 1
    for size in reversed(plane):
        strides.append(acc)
        acc *= size
    return tuple(strides[::-1])


def flat_grid(per_dim: Sequence, plane: Sequence[int], dtype) -> mx.array:
    """Flat plane index of per-dim coordinate vectors (numpy), as an array broadcastable to ``(1, *out, 1)``."""
    nd = len(plane)
    flat = np.zeros([1] * (nd + 2), dtype=np.int64)
    for dim, (coords, stride) in enumerate(zip(per_dim, plane_strides(plane))):
        shape = [1] * (nd + 2)
        shape[1 + dim] = -1
        flat = flat + np.asarray(coords, dtype=np.int64).reshape(shape) * stride
    return mx.array(flat).astype(dtype)


# ---------------------------------------------------------------------------------------------------- selection
def max_value(taps: Sequence[mx.array]) -> mx.array:
    best = taps[0]
    for v in taps[1:]:
        best = mx.maximum(best, v)  # propagates NaN, like torch's scan
    return best


def chosen_offset(taps: Sequence[mx.array], best: mx.array, offsets: Sequence, itype) -> mx.array:
    """Torch's choice as a tap offset: the first tap equal to the max, or the last NaN when the max is NaN.

    Offsets are carried as float constants: on MLX's CPU backend a ``where`` chain with float constants fuses into one
    fast kernel, while the int32 form runs several times slower. ``itype`` is int32 for planes of 2**24 elements or
    more, where float32 would no longer be exact. ``offsets`` may also be arrays (the separable engine's candidates).
    """
    k = len(taps)
    const = [o if isinstance(o, mx.array) else mx.array(o, dtype=itype) for o in offsets]
    chosen = const[k - 1]
    for t in range(k - 2, -1, -1):  # walking backwards leaves the first match
        chosen = mx.where(taps[t] == best, const[t], chosen)
    if mx.issubdtype(best.dtype, mx.floating):
        last_nan = const[0]
        for t in range(k):  # walking forwards leaves the last NaN
            last_nan = mx.where(mx.isnan(taps[t]), const[t], last_nan)
        chosen = mx.where(mx.isnan(best), last_nan, chosen)
    if chosen.shape != best.shape:
        # one tap of an integer input: no where() has broadcast the offset table to the data's shape yet
        chosen = mx.broadcast_to(chosen, best.shape)
    return chosen


def _index_type(spec: WindowSpec):
    plane = 1
    for size in spec.plane:
        plane *= size
    return mx.float32 if plane < FLOAT_INDEX_LIMIT else mx.int32


def _values_fn(spec: WindowSpec) -> Callable:
    def values(x):
        return max_value(spec.taps(x))

    return values


_COMPILED: dict = {}


def fusable(spec: WindowSpec, x: mx.array) -> bool:
    """Whether ``spec`` on ``x`` runs through ``mx.compile``: the spec allows it and the output is large enough."""
    out_elements = x.shape[0] * x.shape[-1]
    for o in spec.out_spatial:
        out_elements *= o
    return spec.compile_key is not None and out_elements >= COMPILE_MIN_ELEMENTS


def fused(spec: WindowSpec, x: mx.array, kind: str, build: Callable[[], Callable]) -> Optional[Callable]:
    """A cached ``mx.compile`` of ``build()`` for this spec, kind and dtype when :func:`fusable`, else None.

    ``spec.compile_key`` pins every constant the spec's graph uses (shapes included), so a function traced from an
    earlier, equal spec builds the same graph.
    """
    if not fusable(spec, x):
        return None
    key = (spec.compile_key, kind, x.dtype)
    fn = _COMPILED.get(key)
    if fn is None:
        if len(_COMPILED) > 256:
            _COMPILED.clear()
        fn = _COMPILED[key] = mx.compile(build())
    return fn


def fused_max(spec: WindowSpec, x: mx.array) -> mx.array:
    """The value-only max over all of ``spec.taps`` (one fused kernel on large inputs)."""
    fn = fused(spec, x, "values", lambda: _values_fn(spec))
    return (fn or _values_fn(spec))(x)


# ---------------------------------------------------------------------------------------------------- backward
def first_max_tap(windows: mx.array, best: mx.array, axes: tuple, shape: tuple) -> mx.array:
    """Torch's choice among the taps on ``axes`` of ``windows`` (taps row-major over ``shape``), given the max
    ``best`` (broadcastable, 1 on ``axes``): the first tap equal to it, or the last NaN in a window holding NaN.

    Four passes, for the backward, where ``mx.compile`` does not fuse inside a custom VJP (the separable engine's
    ~100 elementwise ops would each make a full pass): each tap scores ``K - j`` where it equals the max and
    ``(j + 1) * (K + 1)`` where it is NaN, so the top score names the tap; small unsigned scores keep the passes
    cheap, and there is no data-dependent branch. Returns int32 tap numbers.
    """
    first_max, last_nan = _tap_scores(tuple(shape), windows.ndim, tuple(axes))
    score = (windows == best) * first_max
    if mx.issubdtype(windows.dtype, mx.floating):
        score = score + mx.isnan(windows) * last_nan
    count = math.prod(shape)
    top = score.max(axis=axes).astype(mx.int32)
    # top is never 0 while ``best`` is the max of these windows; the clamp keeps a later table lookup in bounds
    # (MLX's take does not check) should a caller pass anything else
    return mx.minimum(mx.where(top > count, top // (count + 1) - 1, count - top), count - 1)


@lru_cache(maxsize=64)
def _tap_scores(shape: tuple, ndim: int, axes: tuple) -> tuple:
    """Per tap ``j`` (row-major over ``shape``, laid on ``axes`` of an ``ndim`` array), ``K - j`` and
    ``(j + 1) * (K + 1)`` in the smallest unsigned type holding their sums."""
    count = math.prod(shape)
    top = count * (count + 1) + count
    dtype = mx.uint8 if top < 1 << 8 else mx.uint16 if top < 1 << 16 else mx.uint32
    full = [1] * ndim
    for axis, size in zip(axes, shape):
        full[axis] = size
    j = np.arange(count).reshape(full)
    return mx.array(count - j).astype(dtype), mx.array((j + 1) * (count + 1)).astype(dtype)


def _scatter_grad(spec: WindowSpec, x_shape: tuple, grad: mx.array, index: mx.array) -> mx.array:
    """``grad_in[n, index, c] += grad`` per plane: torch's max-pool backward (overlapping windows accumulate)."""
    n, c = x_shape[0], x_shape[-1]
    plane = 1
    for size in spec.plane:
        plane *= size
    index = index.astype(mx.int32 if plane < 2**31 else mx.int64)
    valid = spec.valid_mask()
    if valid is not None:
        # an all-padding window (dilation) has no real element: torch's index points outside; drop its gradient
        grad = mx.where(valid, grad, mx.zeros_like(grad))
        index = mx.where(valid, index, mx.zeros_like(index))
    index, grad = index.reshape(n, -1, c), grad.reshape(n, -1, c)

    def gather(a):
        return mx.take_along_axis(a, index, axis=1)

    # the adjoint of a gather along the plane axis is exactly the scatter-add we need, and MLX runs it ~4x faster
    # than a flat ``.at[].add`` (its axis-wise scatter keeps the channel loop contiguous)
    _, (out,) = mx.vjp(gather, [mx.zeros((n, plane, c), dtype=grad.dtype)], [grad])
    return out.reshape(x_shape)


# ---------------------------------------------------------------------------------------------------- entry point
def window_max(x: mx.array, spec: WindowSpec, return_indices: bool):
    """Max over the windows of ``spec`` on batched channels-last ``x``; ``(values, int64 indices)`` if asked.

    Differentiable w.r.t. ``x`` with torch's gradient (all of it to the returned index).
    """
    out_shape = (x.shape[0],) + tuple(spec.out_spatial) + (x.shape[-1],)
    if 0 in out_shape:
        empty = mx.zeros(out_shape, dtype=x.dtype)
        return (empty, mx.zeros(out_shape, dtype=mx.int64)) if return_indices else empty

    tables = spec.native_tables()
    if tables is not None and _native.active("max pool (window max)"):
        return _native.window_max(x, *tables, return_indices)  # one multi-threaded pass (layers/csrc)

    if _export.active():  # a custom VJP cannot be serialized; an export has no gradient to keep
        _export.note("max pool's custom VJP (mx.custom_function) -> its forward ops")
        if not return_indices:
            return spec.compute(x, "values")
        best, index = spec.compute(x, "indices")
        return best, index.astype(mx.int64)

    if return_indices:

        @mx.custom_function
        def pool(a):
            best, index = spec.compute(a, "indices")
            return best, index.astype(mx.int64)

        @pool.vjp
        def pool_vjp(a, cotangents, outputs):
            return spec.gradient(a, cotangents[0], outputs[1])

        return pool(x)

    @mx.custom_function
    def pool_values(a):
        return spec.compute(a, "values")

    @pool_values.vjp
    def pool_values_vjp(a, cotangent, output):
        best = output[0] if isinstance(output, (list, tuple)) else output
        # recomputes the choice: the forward never pays for an argmax
        return spec.gradient(a, cotangent, None, best=best)

    return pool_values(x)


def lowest(dtype) -> float:
    """The value padding takes in a max pool: -inf for floats, the type's minimum for integers (torch's start value)."""
    if mx.issubdtype(dtype, mx.floating):
        return float("-inf")
    return int(mx.iinfo(dtype).min)
