"""Sums over many elements with torch's accuracy, and the bias gradients that need them.

MLX's CPU sum keeps one float accumulator per output over the whole reduced extent: over 262 Ki positions of
one-signed values (a conv bias's gradient on a 64^3 volume) it errs by ~1e-5 relative, torch's cascade sum by ~4e-8.
:func:`blocked_sum` sums blocks of :data:`SUM_BLOCK` terms, then those partial sums the same way, level by level (a
float sum of 64 terms errs by at most 64 ulp, and each level adds its own 64 at most: torch's float32 error within a
few times, at most +2% of a conv's or batch norm's forward+backward). float16 and bfloat16 are
summed in float32 and rounded once, as MLX's own sum does; float64 is left to MLX (one double accumulator is already
far below float32's error).

:func:`add_bias` is ``y + bias`` over the last axis whose bias gradient is that blocked sum (conv, transposed conv,
linear); :func:`route_bias_grad` gives the same gradient to a bias an op has already added (``mx.addmm``, the
native GEMMs with the bias in the tile).
"""

from __future__ import annotations

import math

import mlx.core as mx

from . import _export

SUM_BLOCK = 64
# below this many terms per output MLX's own sum is kept (its error, at most BLOCKED_MIN ulp, is torch's order there)
BLOCKED_MIN = 4096
_HALF = (mx.float16, mx.bfloat16)


def blocked_sum(x: mx.array, axes, keepdims: bool = False) -> mx.array:
    """``x.sum(axis=axes, keepdims=keepdims)`` in blocks of :data:`SUM_BLOCK` terms where ``axes`` are consecutive
    and span at least :data:`BLOCKED_MIN` elements of a float32/float16/bfloat16 ``x``; else MLX's own sum."""
    axes = sorted(a % x.ndim for a in ((axes,) if isinstance(axes, int) else axes))
    if not axes:
        return x
    if not _applies(x, axes):
        return x.sum(axis=axes, keepdims=keepdims)
    first, last = axes[0], axes[-1] + 1
    work = x.reshape(math.prod(x.shape[:first]), math.prod(x.shape[first:last]), -1)
    if x.dtype in _HALF:
        work = work.astype(mx.float32)
    while work.shape[1] > SUM_BLOCK:
        work = _partial_sums(work)
    kept = x.shape[:first] + ((1,) * len(axes) if keepdims else ()) + x.shape[last:]
    return work.sum(axis=1).astype(x.dtype).reshape(kept)


def blocked_mean(x: mx.array, axes, keepdims: bool = False) -> mx.array:
    """``x.mean(axis=axes, keepdims=keepdims)`` from :func:`blocked_sum` (float16/bfloat16: the float32 sum divided,
    then rounded once); MLX's own mean where the blocked sum would not apply."""
    axes = sorted(a % x.ndim for a in ((axes,) if isinstance(axes, int) else axes))
    count = math.prod(x.shape[a] for a in axes)
    if not _applies(x, axes):
        return x.mean(axis=axes, keepdims=keepdims)
    wide = x.astype(mx.float32) if x.dtype in _HALF else x
    return (blocked_sum(wide, axes, keepdims) / count).astype(x.dtype)


def _applies(x: mx.array, axes: list) -> bool:
    """Consecutive sorted ``axes`` over at least BLOCKED_MIN elements of a float32/float16/bfloat16 ``x``."""
    if not axes:
        return False
    first, last = axes[0], axes[-1] + 1
    return (axes == list(range(first, last)) and math.prod(x.shape[first:last]) >= BLOCKED_MIN
            and x.dtype in (mx.float32, *_HALF))


def _partial_sums(x: mx.array) -> mx.array:
    """``(outer, n, k) -> (outer, ceil(n / block), k)``: each block of rows summed, the last block the remainder.

    A block of SUM_BLOCK rows, or with outer > 1 one of SUM_BLOCK / 2 .. SUM_BLOCK rows that divides ``n``: a
    prefix of ``x`` then reshapes into blocks without a copy (slices and reshapes, not ``as_strided``: those
    ``mx.vmap`` maps, per-example gradients included)."""
    outer, n, k = x.shape
    block = SUM_BLOCK
    if outer > 1:
        block = next((b for b in range(SUM_BLOCK, SUM_BLOCK // 2 - 1, -1) if n % b == 0), SUM_BLOCK)
    full = n - n % block
    parts = x[:, :full].reshape(outer, full // block, block, k).sum(axis=2)
    if full == n:
        return parts
    return mx.concatenate([parts, x[:, full:].sum(axis=1, keepdims=True)], axis=1)


def routes(shape: tuple, dtype, param: mx.array) -> bool:
    """Whether a parameter over the trailing axes of an output of ``shape`` and ``dtype`` (a bias ``(C,)`` over the
    last axis, a norm's affine over ``normalized_shape``) gets the blocked gradient: at least :data:`BLOCKED_MIN`
    positions, float32/float16/bfloat16, outside export (a custom VJP cannot be serialized; the forward is the
    same)."""
    lead = len(shape) - param.ndim
    return (param.ndim >= 1 and lead >= 1 and tuple(shape[lead:]) == tuple(param.shape)
            and math.prod(shape[:lead]) >= BLOCKED_MIN and dtype in (mx.float32, *_HALF) and not _export.active())


@mx.custom_function
def _route(y, bias):
    return y


@_route.vjp
def _route_vjp(primals, cotangent, output):
    y, bias = primals
    return cotangent, blocked_sum(cotangent, range(cotangent.ndim - bias.ndim)).astype(bias.dtype)


def route_bias_grad(y: mx.array, bias: mx.array) -> mx.array:
    """``y`` unchanged, where ``y`` already holds ``bias`` (added with its gradient stopped): ``bias`` then gets
    :func:`blocked_sum` of ``y``'s cotangent over the axes before its own."""
    return _route(y, bias)


def bias_inside(shape: tuple, dtype, bias: mx.array, product):
    """``product(b)``, which adds ``b`` (``bias`` itself, or with its gradient stopped) to an output of ``shape`` and
    ``dtype`` (a GEMM's C, an add), with the bias gradient summed by :func:`blocked_sum` where :func:`routes` says;
    ``None`` when ``product`` returns ``None`` (the caller's other path)."""
    routed = routes(shape, dtype, bias)
    y = product(mx.stop_gradient(bias) if routed else bias)
    if y is None:
        return None
    return route_bias_grad(y, bias) if routed else y


def add_bias(y: mx.array, bias: mx.array) -> mx.array:
    """``y + bias`` (``bias`` over ``y``'s trailing axes, the same values) with the bias gradient summed by
    :func:`blocked_sum` where ``y`` has at least :data:`BLOCKED_MIN` positions."""
    return bias_inside(y.shape, y.dtype, bias, lambda b: y + b)


@mx.custom_function
def _route_scale(out, y, weight):
    return out


@_route_scale.vjp
def _route_scale_vjp(primals, cotangent, output):
    _, y, weight = primals  # y arrives with its gradient stopped: its own flows through out's graph
    return cotangent, mx.zeros_like(y), blocked_sum(cotangent * y, range(y.ndim - weight.ndim)).astype(weight.dtype)


def affine(y: mx.array, weight, bias) -> mx.array:
    """``y * weight + bias`` (either may be ``None``; both over ``y``'s trailing axes, in ``y``'s dtype), the two
    parameters' gradients summed by :func:`blocked_sum` over at least :data:`BLOCKED_MIN` positions."""
    param = weight if weight is not None else bias
    if param is None or not routes(y.shape, y.dtype, param):
        y = y if weight is None else y * weight
        return y if bias is None else y + bias
    out = y if weight is None else _route_scale(y * mx.stop_gradient(weight), mx.stop_gradient(y), weight)
    return out if bias is None else add_bias(out, bias)
