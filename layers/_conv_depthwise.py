"""Depthwise convolution in pure MLX (one input channel per group): the fallback of the native depthwise kernel
(``_native.depthwise_conv``, ``layers/csrc/conv_kernels.h``), chosen by ``layers/_conv_engine.py``.

Layouts: batched channels-last ``x`` ``(N, *S, C)``, ``weight`` ``(C*m, *kernel, 1)`` (output channel ``c*m + j``
reads input channel ``c``, as in torch), per-dim ``stride``, ``lo``/``hi`` zero padding and ``dilation``.
"""

from __future__ import annotations

import itertools

import mlx.core as mx

from . import _export
from ._utils import interleave_phases

# dtypes the native depthwise kernel takes (float16/bfloat16 accumulate in float32 there)
NATIVE_DTYPES = (mx.float32, mx.float16, mx.bfloat16, mx.float64)


def depthwise_conv(x, weight, stride, lo, hi, dilation) -> mx.array:
    """Depthwise conv (one input channel per group) as a sum over kernel taps of shifted, strided input slices times
    the tap's per-channel weight: elementwise work only, faster than MLX's grouped CPU conv forward and backward.

    A channel multiplier ``m = C_out / C_in`` maps output channel ``c*m + j`` to input channel ``c``, as in torch.
    The backward is written out (:func:`_depthwise_op`). This is the fallback of the native kernel
    (``_native.depthwise_conv``, layers/csrc/conv_kernels.h), which computes the same sums without the padded copy.
    """
    if any(lo) or any(hi):
        x = mx.pad(x, [(0, 0)] + [(a, b) for a, b in zip(lo, hi)] + [(0, 0)])
    if _export.active():  # its custom VJP cannot be serialized; the forward is the same tap sum
        _export.note("depthwise conv's custom VJP (mx.custom_function) -> its tap sum")
        return _tap_sum(x, weight, tuple(stride), tuple(dilation))
    return _depthwise_op(tuple(stride), tuple(dilation))(x, weight)


def _tap_sum(x, weight, stride, dilation, reduce_to: int = 0) -> mx.array:
    """``sum_t x[s*o + d*t] * w[t]`` per channel over the kernel taps ``t`` of ``weight`` ``(C*m, *k, 1)``.

    ``x`` is already padded. ``reduce_to=C``: ``x`` has the ``C*m`` channels and the ``m`` products of each
    input channel are summed (the input gradient of a multiplier-``m`` depthwise conv).
    """
    kernel = weight.shape[1:-1]
    c_in = reduce_to or x.shape[-1]
    mult = weight.shape[0] // c_in
    out = [(n - d * (k - 1) - 1) // s + 1 for n, k, s, d in zip(x.shape[1:-1], kernel, stride, dilation)]
    acc_dtype = mx.float32 if x.dtype in (mx.float16, mx.bfloat16) else x.dtype  # accumulate halves in float32
    w = weight.reshape(c_in, mult, *kernel).astype(acc_dtype)
    y = None
    for tap in itertools.product(*(range(k) for k in kernel)):
        window = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dilation, out, stride))
        xs = x[(slice(None),) + window].astype(acc_dtype)
        w_tap = w[(slice(None), slice(None)) + tap]  # (C_in, m)
        if mult == 1:
            term = xs * w_tap[:, 0]
        elif reduce_to:
            term = (xs.reshape(*xs.shape[:-1], c_in, mult) * w_tap).sum(axis=-1)
        else:
            term = (xs[..., None] * w_tap).reshape(*xs.shape[:-1], c_in * mult)
        y = term if y is None else y + term
    return y.astype(x.dtype)


def _depthwise_op(stride, dilation):
    """Depthwise conv of an already padded input (:func:`_tap_sum`) with a written-out backward.

    MLX differentiates the tap sum slice by slice: each tap's input gradient is a full-size zero array with the
    slice scattered in (measured about 2x the forward). Here the input gradient is a tap sum over the cotangent:
    with stride 1, the cotangent padded by ``d*(k-1)`` with the flipped kernel; with a stride (dilation 1), one such
    sum per input phase ``r`` with the taps ``w[r::s]``, interleaved (as in the sub-pixel transposed conv). Strided
    and dilated at once keeps MLX's gradient. The weight gradient of tap ``t`` is ``sum(x[s*o + d*t] * g[o])``.
    """
    nd = len(stride)

    @mx.custom_function
    def op(x, weight):
        return _tap_sum(x, weight, stride, dilation)

    @op.vjp
    def op_vjp(primals, cotangent, output):
        x, weight = primals
        kernel, c_in = weight.shape[1:-1], x.shape[-1]
        mult = weight.shape[0] // c_in
        if all(s == 1 for s in stride):
            reach = [d * (k - 1) for k, d in zip(kernel, dilation)]
            g = mx.pad(cotangent, [(0, 0)] + [(r, r) for r in reach] + [(0, 0)])
            flipped = weight[(slice(None),) + (slice(None, None, -1),) * nd]
            dx = _tap_sum(g, flipped, stride, dilation, reduce_to=c_in)
        elif all(d == 1 for d in dilation):
            dx = _depthwise_strided_input_grad(cotangent, weight, stride, x.shape, c_in)
        else:
            _, (dx,) = mx.vjp(lambda x: _tap_sum(x, weight, stride, dilation), [x], [cotangent])
        acc_dtype = mx.float32 if x.dtype in (mx.float16, mx.bfloat16) else x.dtype
        out = cotangent.shape[1:-1]
        g = cotangent.astype(acc_dtype).reshape(x.shape[0], *out, c_in, mult)
        positions = tuple(range(nd + 1))  # reduce the strided windows in place: a reshape would copy them
        taps = []
        for tap in itertools.product(*(range(k) for k in kernel)):
            window = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dilation, out, stride))
            xs = x[(slice(None),) + window].astype(acc_dtype)
            taps.append((xs[..., None] * g).sum(axis=positions))  # (C_in, m)
        dw = mx.stack(taps, axis=-1).reshape(c_in * mult, *kernel, 1)
        return dx, dw.astype(weight.dtype)

    return op


def _depthwise_strided_input_grad(cotangent, weight, stride, x_shape, c_in) -> mx.array:
    """Input gradient of a strided depthwise conv (dilation 1): input position ``s*q + r`` receives ``g[q - m] *
    w[s*m + r]``, a stride-1 tap sum of the cotangent per phase ``r``; the phases are interleaved and fitted to
    the (padded) input length."""
    nd = len(stride)
    n, out, kernel = cotangent.shape[0], cotangent.shape[1:-1], weight.shape[1:-1]
    taps = [-(-k // s) for k, s in zip(kernel, stride)]
    q = [o + m - 1 for o, m in zip(out, taps)]
    phases = []
    for r in itertools.product(*(range(s) for s in stride)):
        sizes = [len(range(ri, k, s)) for ri, k, s in zip(r, kernel, stride)]
        if 0 in sizes:  # kernel smaller than the stride: these inputs are never read
            phases.append(mx.zeros((n, *q, c_in), dtype=cotangent.dtype))
            continue
        sub = weight[(slice(None),) + tuple(slice(ri, None, s) for ri, s in zip(r, stride))]
        g = mx.pad(cotangent, [(0, 0)] + [(m - 1, t - 1) for m, t in zip(sizes, taps)] + [(0, 0)])
        flipped = sub[(slice(None),) + (slice(None, None, -1),) * nd]
        phases.append(_tap_sum(g, flipped, (1,) * nd, (1,) * nd, reduce_to=c_in))
    dx = interleave_phases(phases, stride)
    size = x_shape[1:-1]
    extra = [max(0, L - a * s) for L, a, s in zip(size, q, stride)]  # trailing inputs no output reads
    if any(extra):
        dx = mx.pad(dx, [(0, 0)] + [(0, e) for e in extra] + [(0, 0)])
    return dx[(slice(None),) + tuple(slice(0, L) for L in size)]
