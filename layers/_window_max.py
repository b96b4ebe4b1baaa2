"""The one max-over-windows engine behind every max-type pool (sliding, adaptive, fractional).

A *window spec* describes, for a batched channels-last input ``(N, *spatial, C)``, the candidate values ("taps") of
every output position, in torch's scan order (row-major over the per-dim taps, outer dim slowest), and how a tap number
turns into torch's flat per-plane input index (``h*W + w``, ``(t*H + h)*W + w``). From that this module computes

* the value: an elementwise ``mx.maximum`` over the taps (NaN propagates, as torch's ``v > best or isnan(v)`` scan);
* the index: the FIRST tap equal to the max (torch updates on strict ``>``) or, when the max is NaN, the LAST NaN tap
  (every NaN replaces the current best in torch's scan);
* the gradient: a custom VJP that scatter-adds the output gradient at the chosen index only (overlapping windows
  accumulate). ``mx.max``'s own VJP splits the gradient among tied maxima, which torch never does.

The value-only forward never computes an argmax: the backward recomputes the indices from the saved input. Sliding
windows read their taps as strided slices and, on large inputs, run as one fused ``mx.compile`` kernel.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import mlx.core as mx

# Fusing pays off only on large arrays; each new graph costs a one-off C++ compile (~0.5 s) on the CPU backend.
COMPILE_MIN_ELEMENTS = 1 << 16


class WindowSpec:
    """What a max-type pool needs to say about its windows. Subclasses: sliding, adaptive and fractional windows.

    Attributes set by subclasses: ``out_spatial`` (output extents), ``plane`` (input spatial extents),
    ``compile_key`` (a hashable key when the spec's taps may be fused with ``mx.compile``, else ``None``).
    """

    out_spatial: tuple
    plane: tuple
    compile_key: Optional[tuple] = None

    def taps(self, x: mx.array) -> list:
        """The candidate values, each ``(N, *out_spatial, C)``, in torch's scan order."""
        raise NotImplementedError

    def flat_index(self, tap: mx.array, best: mx.array) -> mx.array:
        """Turn the chosen tap number (int32, output-shaped) into torch's flat per-plane index (int32)."""
        raise NotImplementedError

    def valid_mask(self) -> Optional[mx.array]:
        """Broadcastable bool mask of outputs whose window holds at least one real element (None: all do)."""
        return None


# ---------------------------------------------------------------------------------------------------- selection
def _max_value(taps: Sequence[mx.array]) -> mx.array:
    best = taps[0]
    for v in taps[1:]:
        best = mx.maximum(best, v)  # propagates NaN, like torch's scan
    return best


def _chosen_tap(taps: Sequence[mx.array], best: mx.array) -> mx.array:
    """Torch's tap: the first one equal to the max, or the last NaN when the max is NaN (float32 tap numbers).

    Tap numbers are carried as float32 constants: on MLX's CPU backend a ``where`` chain with float constants fuses
    into one kernel, while the int32 form runs ~10x slower; tap counts are far below 2**24, so floats are exact.
    """
    k = len(taps)
    tap = mx.array(float(k - 1))
    for t in range(k - 2, -1, -1):  # walking backwards leaves the first match
        tap = mx.where(taps[t] == best, float(t), tap)
    if mx.issubdtype(best.dtype, mx.floating):
        last_nan = mx.array(0.0)
        for t in range(k):  # walking forwards leaves the last NaN
            last_nan = mx.where(mx.isnan(taps[t]), float(t), last_nan)
        tap = mx.where(mx.isnan(best), last_nan, tap)
    return tap


def _values_fn(spec: WindowSpec) -> Callable:
    def values(x):
        return _max_value(spec.taps(x))

    return values


def _indices_fn(spec: WindowSpec) -> Callable:
    def values_and_indices(x):
        taps = spec.taps(x)
        best = _max_value(taps)
        tap = _chosen_tap(taps, best).astype(mx.int32)
        return best, spec.flat_index(tap, best)

    return values_and_indices


_COMPILED: dict = {}


def _compiled(key: tuple, kind: str, spec: WindowSpec) -> Callable:
    # ``key`` pins every constant the spec's graph uses (shapes included), so a cached function traced from an
    # earlier, equal spec builds the same graph.
    fn = _COMPILED.get((key, kind))
    if fn is None:
        if len(_COMPILED) > 256:
            _COMPILED.clear()
        fn = _COMPILED[(key, kind)] = mx.compile(_values_fn(spec) if kind == "values" else _indices_fn(spec))
    return fn


def _run(spec: WindowSpec, kind: str, x: mx.array):
    out_elements = x.shape[0] * x.shape[-1]
    for o in spec.out_spatial:
        out_elements *= o
    if spec.compile_key is not None and out_elements >= COMPILE_MIN_ELEMENTS:
        return _compiled((spec.compile_key, x.dtype), kind, spec)(x)
    return (_values_fn(spec) if kind == "values" else _indices_fn(spec))(x)


# ---------------------------------------------------------------------------------------------------- backward
def _scatter_grad(spec: WindowSpec, x_shape: tuple, grad: mx.array, index: mx.array) -> mx.array:
    """``grad_in[n, index, c] += grad`` per plane: torch's max-pool backward (overlapping windows accumulate)."""
    n, c = x_shape[0], x_shape[-1]
    plane = 1
    for size in spec.plane:
        plane *= size
    total = n * plane * c
    idx_type = mx.int32 if total < 2**31 else mx.int64
    valid = spec.valid_mask()
    index = index.astype(idx_type)
    if valid is not None:
        # an all-padding window (dilation) has no real element: torch's index points outside; drop its gradient
        grad = mx.where(valid, grad, mx.zeros_like(grad))
        index = mx.where(valid, index, mx.zeros_like(index))
    batch = mx.arange(n, dtype=idx_type).reshape((n,) + (1,) * (index.ndim - 1))
    where = (batch * plane + index) * c + mx.arange(c, dtype=idx_type)
    flat = mx.zeros((total,), dtype=grad.dtype).at[where.reshape(-1)].add(grad.reshape(-1))
    return flat.reshape(x_shape)


# ---------------------------------------------------------------------------------------------------- entry point
def window_max(x: mx.array, spec: WindowSpec, return_indices: bool):
    """Max over the windows of ``spec`` on batched channels-last ``x``; ``(values, int64 indices)`` if asked.

    Differentiable w.r.t. ``x`` with torch's gradient (all of it to the returned index).
    """
    out_shape = (x.shape[0],) + tuple(spec.out_spatial) + (x.shape[-1],)
    if 0 in out_shape:
        empty = mx.zeros(out_shape, dtype=x.dtype)
        return (empty, mx.zeros(out_shape, dtype=mx.int64)) if return_indices else empty

    if return_indices:

        @mx.custom_function
        def pool(a):
            best, index = _run(spec, "indices", a)
            return best, index.astype(mx.int64)

        @pool.vjp
        def pool_vjp(a, cotangents, outputs):
            return _scatter_grad(spec, a.shape, cotangents[0], outputs[1])

        return pool(x)

    @mx.custom_function
    def pool_values(a):
        return _run(spec, "values", a)

    @pool_values.vjp
    def pool_values_vjp(a, cotangent, output):
        _, index = _run(spec, "indices", a)  # recomputed here so the forward never pays for an argmax
        return _scatter_grad(spec, a.shape, cotangent, index)

    return pool_values(x)


def lowest(dtype) -> float:
    """The value padding takes in a max pool: -inf for floats, the type's minimum for integers (torch's start value)."""
    if mx.issubdtype(dtype, mx.floating):
        return float("-inf")
    return int(mx.iinfo(dtype).min)
