"""How a checked transposed convolution is computed: the strategies behind ``conv_transpose1d/2d/3d`` and
``ConvTranspose1d/2d/3d`` (``layers/conv_transpose.py`` checks the arguments and says why not ``mx.conv_transpose*``).

:func:`conv_transpose` takes a batched channels-last, non-empty ``x`` ``(N, *S, C_in)``, ``weight`` in the forward
conv's layout ``(C_out, *kernel, C_in/groups)`` and per-dim ``stride``, ``padding``, ``output_padding``,
``dilation``, and returns ``(N, *out, C_out)`` without the bias. The choice, in order: float64 goes to
``layers/_conv_f64.py``; 3-d grouped runs one transposed conv per group (MLX's 3-d conv has no groups); kernel ==
stride without padding is one matmul and a reshape (:func:`_patch_expand`); 1-d/2-d, one group, strided or dilated,
on the CPU with the native kernels: one GEMM and the native col2im (:func:`_columns_conv_transpose`, :data:`COLUMNS`);
without dilation one stride-1 conv per output phase (:func:`phase_conv_transpose`); with dilation the zero-stuffed
input through the forward engine's stride-1 dilated conv (:func:`_stuffed_conv_transpose`). Autodiff gives the
gradients (the native col2im carries its own).
"""

from __future__ import annotations

import itertools
import math

import mlx.core as mx

from . import _conv_f64, _native
from ._conv_engine import conv_core
from ._utils import interleave_phases

# 1-d and 2-d one-group transposed convs with a stride or dilation > 1 run as one GEMM ``x @ w`` into columns (every
# input pixel's k x C_out contributions) and the native col2im that sums them where they land, when this is on and
# the columns take at most COLUMNS_MAX_BYTES (torch's CPU path is the same GEMM + col2im). Measured (1 thread, CPU ms,
# phases -> columns, torch in brackets): k3s2 p1 op1 64->32 on (8,28,28,64) 5.1 -> 2.3 (2.7), k3s2 p1 d2 32->16 on
# (4,28,28,32) 4.1 -> 0.34 (0.53), k4s2 p1 256->128 on (8,16,16,256) 20.0 -> 12.7 (12.3); docs/BENCHMARKS.md. The
# phase convs copied their im2col single-threaded and interleaved the phases in another pass.
COLUMNS = True
COLUMNS_MAX_BYTES = 256 << 20


def base_size(length: int, k: int, s: int, p: int, d: int) -> int:
    """Output length without output_padding: ``(L-1)*s - 2p + d*(k-1) + 1``."""
    return (length - 1) * s - 2 * p + d * (k - 1) + 1


def conv_transpose(x, weight, stride, padding, output_padding, dilation, groups) -> mx.array:
    """A checked, non-empty transposed conv without bias (see the module docstring for the layouts)."""
    if x.dtype == mx.float64:  # MLX's conv computes float64 in float32 (see layers/_conv_f64.py)
        return _conv_f64.conv_transpose(x, weight, stride, padding, output_padding, dilation, groups)
    return conv_transpose_core(x, weight, stride, padding, output_padding, dilation, groups)


def conv_transpose_core(x, weight, stride, padding, output_padding, dilation, groups) -> mx.array:
    if len(weight.shape) == 5 and groups > 1:
        # MLX's 3-d conv has no groups: one transposed conv per group (a loop over groups, not over positions)
        c_in_g, c_out_g = weight.shape[-1], weight.shape[0] // groups
        parts = [
            conv_transpose_core(
                x[..., g * c_in_g : (g + 1) * c_in_g],
                weight[g * c_out_g : (g + 1) * c_out_g],
                stride,
                padding,
                output_padding,
                dilation,
                1,
            )
            for g in range(groups)
        ]
        return mx.concatenate(parts, axis=-1)
    kernel = tuple(weight.shape[1:-1])
    no_overlap = kernel == tuple(stride) and all(d == 1 or k == 1 for k, d in zip(kernel, dilation))
    if groups == 1 and no_overlap and not any(padding) and not any(output_padding):
        return _patch_expand(x, weight)
    if _columns_pay(x, weight, stride, dilation, groups):
        return _columns_conv_transpose(x, weight, stride, padding, output_padding, dilation)
    if all(d == 1 for d in dilation):
        return phase_conv_transpose(x, weight, stride, padding, output_padding, groups)
    return _stuffed_conv_transpose(x, weight, stride, padding, output_padding, dilation, groups)


def _patch_expand(x: mx.array, weight: mx.array) -> mx.array:
    """Kernel == stride, no padding (the usual 2x2/stride-2 upsampling): windows do not overlap, so every input
    pixel writes its own ``k`` patch, ``patch = x @ w``: one matmul and a reshape, with no zero-stuffed input."""
    nd = x.ndim - 2
    c_out, kernel, c_in = weight.shape[0], weight.shape[1:-1], weight.shape[-1]
    y = x.reshape(-1, c_in) @ weight.reshape(-1, c_in).T  # (N*prod(S), C_out*prod(k))
    y = y.reshape(*x.shape[:-1], c_out, *kernel)  # (N, S1..Sn, C_out, k1..kn)
    order = [0] + [a for i in range(nd) for a in (1 + i, 2 + nd + i)] + [1 + nd]
    y = y.transpose(order)  # (N, S1, k1, ..., Sn, kn, C_out)
    return y.reshape(x.shape[0], *(s * k for s, k in zip(x.shape[1:-1], kernel)), c_out)


def _columns_pay(x, weight, stride, dilation, groups) -> bool:
    """Whether :func:`_columns_conv_transpose` computes this transposed conv (see :data:`COLUMNS`)."""
    if not COLUMNS or groups != 1 or x.ndim not in (3, 4) or x.dtype not in _COLUMN_DTYPES:
        return False
    if all(s == 1 for s in stride) and all(d == 1 for d in dilation):  # a plain conv: Winograd may take it
        return False
    cols = math.prod(x.shape[:-1]) * math.prod(weight.shape[:-1]) * x.itemsize
    return cols <= COLUMNS_MAX_BYTES and _native.active("col2im")


_COLUMN_DTYPES = (mx.float32, mx.float16, mx.bfloat16)


def _columns_conv_transpose(x, weight, stride, padding, output_padding, dilation) -> mx.array:
    """A 1-d/2-d one-group transposed conv as ``cols = x @ w`` and the native col2im.

    ``cols[n, i, j, a, b, :]`` is input pixel ``(i, j)``'s contribution through kernel tap ``(kH-1-a, kW-1-b)``
    (the natively flipped weight ``(C_in, kH, kW, C_out)``, one contiguous GEMM operand), which lands at output
    ``s*i + d*(k-1-a) - p`` per dim (``porter.layers._native.col2im``: step ``-d``, offset ``d*(k-1) - p``);
    positions past the output (padding crops, output_padding adds positions that only some taps reach) are the
    kernel's bounds. Exactly the kernel's multiply-adds, in one GEMM; a 1-d conv runs as a 2-d one of height 1.
    """
    one_d = x.ndim == 3
    if one_d:
        x, weight = x[:, None], weight[:, None]
        stride, padding, output_padding, dilation = (1, *stride), (0, *padding), (0, *output_padding), (1, *dilation)
    n, h, w, c_in = x.shape
    c_out, kernel = weight.shape[0], weight.shape[1:-1]
    flipped = _native.flip_conv_weight(weight, 1)  # (C_in, kH, kW, C_out), taps reversed
    cols = (x.reshape(-1, c_in) @ flipped.reshape(c_in, -1)).reshape(n, h, w, *kernel, c_out)
    out = [base_size(size, k, s, p, d) + op
           for size, k, s, p, d, op in zip((h, w), kernel, stride, padding, dilation, output_padding)]
    geometry = [v for k, s, p, d in zip(kernel, stride, padding, dilation) for v in (s, -d, d * (k - 1) - p)]
    y = _native.col2im(cols, out, geometry)
    return y[:, 0] if one_d else y


def _flipped_conv(x, sub, lo, hi, groups) -> mx.array:
    """A stride-1 conv of ``x`` with the flipped kernel ``sub``, padded by ``lo``/``hi`` per dim (MLX's conv)."""
    return mx.conv_general(x, sub, padding=(lo, hi), groups=groups, flip=True)


def phase_conv_transpose(x, weight, stride, padding, output_padding, groups, phase_conv=_flipped_conv) -> mx.array:
    """Dilation 1: one stride-1 conv per output phase (sub-pixel decomposition), no zero-stuffed input.

    Output position ``o`` gets ``x[i] * w[t]`` where ``s*i + t = o + p``. Writing ``o + p = s*q + r`` (phase ``r`` in
    ``[0, s)``), only the taps ``t = s*m + r`` reach it, from ``x[q - m]``: a plain conv of ``x`` with the sub-kernel
    ``w[r::s]``. MLX's ``input_dilation`` conv computes every zero of the stuffed input (measured 50x slower than
    torch for k3/s2 on CPU); the phases together do exactly the kernel's multiply-adds, and their gradients are
    ordinary stride-1 conv gradients. The phases are interleaved by a stack and a reshape, then cropped by ``p``.
    ``phase_conv(x, sub, lo, hi, groups)`` computes one phase: a stride-1 conv with the flipped ``sub`` (the
    float64 engine passes its own).
    """
    kernel, n, spatial, c_out = tuple(weight.shape[1:-1]), x.shape[0], x.shape[1:-1], weight.shape[0]
    taps = [-(-k // s) for k, s in zip(kernel, stride)]  # the most taps any phase has, per dim
    q = [size + m - 1 for size, m in zip(spatial, taps)]  # every phase's length, padded to the longest
    phases = []
    for r in itertools.product(*(range(s) for s in stride)):
        sizes = [len(range(ri, k, s)) for ri, k, s in zip(r, kernel, stride)]
        if 0 in sizes:  # kernel smaller than the stride: no tap writes this phase
            phases.append(mx.zeros((n, *q, c_out), dtype=x.dtype))
            continue
        sub = weight[(slice(None),) + tuple(slice(ri, None, s) for ri, s in zip(r, stride))]
        phases.append(phase_conv(x, sub, [m - 1 for m in sizes], [m - 1 for m in taps], groups))
    y = interleave_phases(phases, stride)  # index o + p
    sizes = zip(spatial, kernel, stride, padding, output_padding)
    out = [base_size(size, k, s, p, 1) + op for size, k, s, p, op in sizes]
    extra = [max(0, p + o - a * s) for p, o, a, s in zip(padding, out, q, stride)]  # output_padding past every tap
    if any(extra):
        y = mx.pad(y, [(0, 0)] + [(0, e) for e in extra] + [(0, 0)])
    return y[(slice(None),) + tuple(slice(p, p + o) for p, o in zip(padding, out))]


def _stuffed_conv_transpose(x, weight, stride, padding, output_padding, dilation, groups) -> mx.array:
    """With dilation: the zero-stuffed input (built by a pad and a reshape) through Porter's stride-1 dilated conv
    (:func:`porter.layers._conv_engine.conv_core`, which folds the dilation phases into the batch) with the flipped
    kernel.

    ``prod(stride)`` times the multiply-adds of the phase path, but MLX's ``input_dilation``/``kernel_dilation``
    conv is far slower (measured (4,28,28,32)->16, k3 s2 d2: 25 ms forward before, torch 0.8 ms). Plain MLX ops
    throughout, so autodiff gives both gradients.
    """
    nd = x.ndim - 2
    n, spatial, c = x.shape[0], x.shape[1:-1], x.shape[-1]
    if any(s > 1 for s in stride):
        x = x.reshape(n, *[v for size in spatial for v in (size, 1)], c)
        x = mx.pad(x, [(0, 0)] + [w for s in stride for w in ((0, 0), (0, s - 1))] + [(0, 0)])
        x = x.reshape(n, *(size * s for size, s in zip(spatial, stride)), c)
        x = x[(slice(None),) + tuple(slice(0, (size - 1) * s + 1) for size, s in zip(spatial, stride))]
    kernel = weight.shape[1:-1]
    lo = [d * (k - 1) - p for k, d, p in zip(kernel, dilation, padding)]
    hi = [a + extra for a, extra in zip(lo, output_padding)]
    flipped = weight[(slice(None),) + (slice(None, None, -1),) * nd + (slice(None),)]
    y = conv_core(x, flipped, (1,) * nd, [max(a, 0) for a in lo], [max(b, 0) for b in hi], dilation, groups)
    if any(a < 0 for a in lo) or any(b < 0 for b in hi):  # padding beyond d*(k-1): crop what conv could not
        crop = tuple(slice(max(-a, 0), y.shape[i + 1] - max(-b, 0)) for i, (a, b) in enumerate(zip(lo, hi)))
        y = y[(slice(None),) + crop]
    return y
