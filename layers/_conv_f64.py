"""float64 convolution and transposed convolution, computed in float64 (torch's CPU numbers), channels-last.

MLX 0.32's CPU convolution computes float64 in float32 (measured: about 1e-7 relative error against torch's float64)
and refuses some float64 configurations at evaluation ("[Convolution::eval] got unsupported data type": kernel
dilation > 1, 2-d groups > 1, depthwise included). Its float64 ``matmul`` (BLAS dgemm), pad, strided
slices, stack, reshape and transpose are exact float64 ops with float64 gradients, so the conv here is an unfold:
one strided slice per kernel tap stacked into columns ``(N*P, K*C_in/g)`` and one (per-group batched) matmul with the
weight ``(C_out, K*C_in/g)``; a depthwise conv is a per-channel multiply-add per tap. MLX differentiates those ops,
so input and weight gradients (and higher ones) are float64 too, and ``mx.compile``/``mx.vmap`` see plain ops.

Layouts are the layers' own: input ``(N, *spatial, C_in)`` (batched; the callers add and drop the batch axis),
weight ``(C_out, *kernel, C_in/groups)`` for both the conv and the transposed conv. The native CPU kernels and MLX's
conv are never used here: the conv engines (``_conv_engine.conv``, ``_conv_transpose_engine.conv_transpose``)
send every float64 input to this module first.
"""

from __future__ import annotations

import itertools
import math

import mlx.core as mx


def conv(x, weight, stride, lo, hi, dilation, groups) -> mx.array:
    """Cross-correlation of ``x`` ``(N, *S, C_in)`` with ``weight`` ``(C_out, *k, C_in/groups)``: torch's conv.

    ``lo``/``hi`` are per-dim zero padding before/after (non-negative), ``stride``/``dilation`` per dim.
    Returns ``(N, *out, C_out)`` with ``out = (S + lo + hi - d*(k-1) - 1) // s + 1``.
    """
    if any(lo) or any(hi):
        x = mx.pad(x, [(0, 0)] + [(a, b) for a, b in zip(lo, hi)] + [(0, 0)])
    n, c_in = x.shape[0], x.shape[-1]
    c_out, kernel = weight.shape[0], tuple(weight.shape[1:-1])
    out = [(p - d * (k - 1) - 1) // s + 1 for p, k, s, d in zip(x.shape[1:-1], kernel, stride, dilation)]
    taps = []  # tap t of the kernel reads x[s*o + d*t] for every output o
    for tap in itertools.product(*(range(k) for k in kernel)):
        window = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dilation, out, stride))
        taps.append(x[(slice(None),) + window])
    if groups == c_in:
        return _depthwise(taps, weight)
    rows, k_total = n * math.prod(out), len(taps)
    if groups == 1:
        cols = taps[0][..., None, :] if k_total == 1 else mx.stack(taps, axis=-2)  # (N, *out, K, C_in)
        y = cols.reshape(rows, k_total * c_in) @ weight.reshape(c_out, k_total * c_in).T
    else:  # channel c = g*(C_in/g) + j: columns (G, rows, K, C_in/g) in one copy, one matmul per group, batched
        c_g, o_g = c_in // groups, c_out // groups
        cols = mx.stack([t.reshape(rows, groups, c_g).transpose(1, 0, 2) for t in taps], axis=2)
        w = weight.reshape(groups, o_g, k_total * c_g).transpose(0, 2, 1)
        y = (cols.reshape(groups, rows, k_total * c_g) @ w).transpose(1, 0, 2).reshape(rows, c_out)
    return y.reshape(n, *out, c_out)


def _depthwise(taps: list, weight) -> mx.array:
    """One group per input channel (``C_out = m*C``): a per-channel multiply-add per tap, no matmul (measured 2-4x
    faster than a batch of ``C`` single-column matmuls). Output channel ``c*m + j`` is input channel ``c``'s ``j``-th
    filter, as in torch."""
    c = taps[0].shape[-1]
    mult = weight.shape[0] // c
    w = weight.reshape(c, mult, len(taps))
    y = None
    for i, xs in enumerate(taps):
        if mult == 1:
            term = xs * w[:, 0, i]
        else:
            term = (xs[..., None] * w[:, :, i]).reshape(*xs.shape[:-1], c * mult)
        y = term if y is None else y + term
    return y


def conv_transpose(x, weight, stride, padding, output_padding, dilation, groups) -> mx.array:
    """Transposed conv of ``x`` ``(N, *S, C_in)`` with ``weight`` ``(C_out, *k, C_in/groups)`` (the equivalent
    forward conv's layout, see :mod:`porter.layers.conv_transpose`): torch's ``conv_transpose``.

    Output length ``(S-1)*s - 2p + d*(k-1) + output_padding + 1`` per dim. A transposed conv is a stride-1 conv of
    the zero-stuffed input (``s-1`` zeros between neighbours) with the flipped kernel, padded ``d*(k-1) - p`` before
    and that plus ``output_padding`` after; a negative amount is a crop of the result. Without dilation the stuffed
    zeros are skipped: one conv per output phase (:func:`_phase_conv_transpose`).
    """
    if all(d == 1 for d in dilation) and any(s > 1 for s in stride):
        return _phase_conv_transpose(x, weight, stride, padding, output_padding, groups)
    nd = x.ndim - 2
    n, spatial, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    if any(s > 1 for s in stride):  # zero-stuff: (N, S, 1, C) padded to (N, S, s, C), cut after the last input
        x = x.reshape(n, *[v for size in spatial for v in (size, 1)], c)
        x = mx.pad(x, [(0, 0)] + [w for s in stride for w in ((0, 0), (0, s - 1))] + [(0, 0)])
        x = x.reshape(n, *(size * s for size, s in zip(spatial, stride)), c)
        x = x[(slice(None),) + tuple(slice(0, (size - 1) * s + 1) for size, s in zip(spatial, stride))]
    kernel = weight.shape[1:-1]
    lo = [d * (k - 1) - p for k, d, p in zip(kernel, dilation, padding)]
    hi = [a + extra for a, extra in zip(lo, output_padding)]
    flipped = weight[(slice(None),) + (slice(None, None, -1),) * nd]
    return _conv_cropped(x, flipped, lo, hi, dilation, groups)


def _conv_cropped(x, weight, lo, hi, dilation, groups) -> mx.array:
    """Stride-1 :func:`conv` whose negative paddings are crops of the output (a transposed conv's ``p > d*(k-1)``)."""
    nd = x.ndim - 2
    y = conv(x, weight, (1,) * nd, [max(a, 0) for a in lo], [max(b, 0) for b in hi], dilation, groups)
    if any(a < 0 for a in lo) or any(b < 0 for b in hi):
        crop = tuple(slice(max(-a, 0), y.shape[i + 1] - max(-b, 0)) for i, (a, b) in enumerate(zip(lo, hi)))
        y = y[(slice(None),) + crop]
    return y


def _phase_conv_transpose(x, weight, stride, padding, output_padding, groups) -> mx.array:
    """Dilation 1, some stride > 1: the transposed-conv engine's phase decomposition (one stride-1 conv per output
    phase, none of the multiply-adds spent on stuffed zeros) with each phase computed by this module's float64 conv."""
    from ._conv_transpose_engine import phase_conv_transpose as phases  # here: that module imports this one

    def phase_conv(x, sub, lo, hi, groups):
        flipped = sub[(slice(None),) + (slice(None, None, -1),) * (x.ndim - 2)]
        return conv(x, flipped, (1,) * (x.ndim - 2), lo, hi, (1,) * (x.ndim - 2), groups)

    return phases(x, weight, stride, padding, output_padding, groups, phase_conv)
