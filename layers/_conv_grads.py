"""Gradients of 2-d convs that MLX's own conv VJP computes slowly on the CPU (used by ``layers/_conv_engine.py``).

Layouts as in ``_conv_engine``: ``x`` ``(N, H, W, C_in)``, ``weight`` ``(C_out, kH, kW, C_in/groups)``, cotangent
``(N, H_out, W_out, C_out)``; ``lo``/``hi`` zero padding per spatial dim.

* :func:`input_grad_stride1`: a stride-1, undilated conv's input gradient is a stride-1 conv of the cotangent with
  the kernel flipped and its channels swapped per group, padded ``k - 1 - lo`` / ``k - 1 - hi``. MLX builds that
  kernel by copying a reversed, transposed view, single-threaded (measured 6.7 ms for 512x3x3x512 float32, more than
  the conv itself); Porter's native :func:`porter.layers._native.flip_conv_weight` writes it in one threaded pass,
  and the conv then takes Porter's own strategies (Winograd for 3x3 where it pays).
* :func:`input_grad_strided`: a strided conv's input gradient as a transposed conv by sub-pixel phases.
* :func:`weight_grad_im2col`: GEMMs ``cotangent^T @ im2col(x)`` (one group, dilation 1, any stride): measured
  0.4-0.5x the time of MLX's strided conv weight gradient (3x3/s2 64->128 at 56x56: 0.82 against 1.87 ms). The
  columns come from the native threaded im2col (``layers/csrc/col2im_kernels.h``; padding never materialized) over
  chunks of examples of at most :data:`WEIGHT_GRAD_COLS_BYTES`, accumulated with ``mx.addmm``: on AMD Zen 3, 1
  thread, batch 8, ResNet's 7x7/s2 stem (3 channels) 120 -> 72 ms and 3x3/s2 64->128 at 56x56 25 -> 16 ms against
  the 49 / 9 strided slices concatenated on the channel axis (MLX's single-threaded copy, 3 floats per tap for the
  stem) as one 59 MB / 15 MB buffer.
* :func:`conv_stride1_op`: a stride-1 conv, MLX's forward, with the input gradient above (MLX's weight gradient).
"""

from __future__ import annotations

import functools

import mlx.core as mx

from . import _native


# strided input gradients by phases only with at least this many input channels: the phase convs have C_in outputs,
# and MLX's conv with few outputs is slow (a 7x7/s2 stem with 3 input channels: 36 ms against 14 for the folded conv)
PHASE_MIN_CHANNELS = 16

# im2col bytes a strided conv's weight gradient holds at once (a chunk of examples; at least one example): smaller
# buffers are reused from the heap instead of page-faulted in, and the step's peak stays bounded at any batch size
WEIGHT_GRAD_COLS_BYTES = 16 << 20


def flipped_weight(weight, groups) -> mx.array:
    """``weight`` ``(C_out, *kernel, C_in/g)`` -> ``(C_in, *kernel, C_out/g)``, reversed taps, channels swapped."""
    if _native.active("conv weight flip"):
        return _native.flip_conv_weight(weight, groups)
    nd = weight.ndim - 2
    c_out, c_in_g = weight.shape[0], weight.shape[-1]
    w = weight[(slice(None),) + (slice(None, None, -1),) * nd]
    w = w.reshape(groups, c_out // groups, *weight.shape[1:-1], c_in_g)
    w = w.transpose([0, nd + 2] + list(range(2, nd + 2)) + [1])
    return w.reshape(groups * c_in_g, *weight.shape[1:-1], c_out // groups)


def input_grad_stride1(cotangent, weight, lo, hi, groups) -> mx.array:
    """The input gradient of a stride-1, undilated conv with padding ``lo``/``hi`` (see the module docstring)."""
    from ._conv_engine import conv_core  # the conv strategies; _conv_engine imports this module

    kernel = weight.shape[1:-1]
    pads = [(k - 1 - a, k - 1 - b) for k, a, b in zip(kernel, lo, hi)]
    if any(p < 0 for pair in pads for p in pair):  # padding wider than the kernel: those outputs read no input
        size = cotangent.shape[1:-1]
        cotangent = cotangent[(slice(None),) + tuple(slice(max(-a, 0), n - max(-b, 0))
                                                     for (a, b), n in zip(pads, size))]
        pads = [(max(a, 0), max(b, 0)) for a, b in pads]
    ones = (1,) * len(kernel)
    return conv_core(cotangent, flipped_weight(weight, groups), ones, tuple(a for a, _ in pads),
                     tuple(b for _, b in pads), ones, groups)


def input_grad_strided(cotangent, weight, spatial, stride, lo, groups):
    """The input gradient of a strided, undilated conv of an input with spatial size ``spatial`` and padding ``lo``
    before, as the transposed conv of the cotangent by sub-pixel phases (one stride-1 conv per input phase, exactly
    the kernel's multiply-adds; ``layers/_conv_transpose_engine.py``), each with its sub-kernel flipped and taking
    Porter's stride-1 strategies. ``None`` where the padding after the input is so wide that the transposed conv
    would need a negative output padding, or the input has fewer than :data:`PHASE_MIN_CHANNELS` channels (the
    caller keeps its own path). Measured (1 thread, CPU ms): 3x3/s2
    256->512 at 14x14 6.1 -> 3.9, 128->256 at 28x28 2.1 -> 1.35 (against the folded stride-1 conv's gradient)."""
    from ._conv_engine import conv_core
    from ._conv_transpose_engine import phase_conv_transpose

    kernel, out = weight.shape[1:-1], cotangent.shape[1:-1]
    extra = [size - ((o - 1) * s - 2 * a + k) for size, o, s, a, k in zip(spatial, out, stride, lo, kernel)]
    if any(e < 0 for e in extra) or weight.shape[-1] * groups < PHASE_MIN_CHANNELS:
        return None
    nd = len(kernel)
    ones = (1,) * nd
    # (C_in, *kernel, C_out/groups): channels swapped per group, taps in order, as a reversed view of the flipped
    # kernel (each phase reverses its slice again, so only the small sub-kernels are copied; flipping a reversed
    # view of the weight instead cost 1.7 ms for 512x3x3x256, the flip alone 0.5)
    swapped = flipped_weight(weight, groups)[(slice(None),) + (slice(None, None, -1),) * nd]

    def phase(x, sub, sub_lo, sub_hi, groups):
        sub = mx.contiguous(sub[(slice(None),) + (slice(None, None, -1),) * nd])
        return conv_core(x, sub, ones, tuple(sub_lo), tuple(sub_hi), ones, groups)

    return phase_conv_transpose(cotangent, swapped, tuple(stride), tuple(lo), tuple(extra), groups, phase_conv=phase)


def weight_grad_im2col(x, cotangent, kernel, stride, lo, hi) -> mx.array:
    """The weight gradient ``(C_out, *kernel, C_in)`` of a one-group, undilated 2-d conv as GEMMs over im2col(x)."""
    if _native.active("im2col") and x.dtype == cotangent.dtype:
        return _weight_grad_native_columns(x, cotangent, kernel, stride, lo)
    n, c_in, c_out = x.shape[0], x.shape[-1], cotangent.shape[-1]
    out = cotangent.shape[1:-1]
    spatial = x.shape[1:-1]
    need = [(o - 1) * s + k for o, s, k in zip(out, stride, kernel)]  # padded length the conv reads
    high = [p - size - a for p, size, a in zip(need, spatial, lo)]
    if any(h < 0 for h in high):
        x = x[(slice(None),) + tuple(slice(0, size + min(h, 0)) for size, h in zip(spatial, high))]
    if any(lo) or any(h > 0 for h in high):
        x = mx.pad(x, [(0, 0)] + [(a, max(h, 0)) for a, h in zip(lo, high)] + [(0, 0)])
    taps = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            taps.append(x[:, i : i + (out[0] - 1) * stride[0] + 1 : stride[0],
                          j : j + (out[1] - 1) * stride[1] + 1 : stride[1]])
    cols = mx.concatenate(taps, axis=-1).reshape(-1, kernel[0] * kernel[1] * c_in)
    gw = cotangent.reshape(n * out[0] * out[1], c_out).T @ cols
    return gw.reshape(c_out, *kernel, c_in)


def _weight_grad_native_columns(x, cotangent, kernel, stride, lo) -> mx.array:
    """:func:`weight_grad_im2col` over the native im2col of chunks of examples (see the module docstring). Output
    ``(i, j)``'s tap ``(a, b)`` reads ``x[s*i + a - lo, ...]``, zero outside the image (the padding); input no output
    reads is never gathered."""
    n, c_in, c_out = x.shape[0], x.shape[-1], cotangent.shape[-1]
    out = cotangent.shape[1:-1]
    width = kernel[0] * kernel[1] * c_in
    geometry = [v for s, a in zip(stride, lo) for v in (s, 1, -a)]
    step = max(1, min(n, WEIGHT_GRAD_COLS_BYTES // (out[0] * out[1] * width * x.itemsize)))
    gw = None
    for start in range(0, n, step):
        cols = _native.im2col(x[start : start + step], out, kernel, geometry).reshape(-1, width)
        g = cotangent[start : start + step].reshape(-1, c_out).T
        gw = g @ cols if gw is None else mx.addmm(gw, g, cols)
    return gw.reshape(c_out, *kernel, c_in)


@functools.lru_cache(maxsize=None)
def conv_stride1_op(lo: tuple, hi: tuple, groups: int):
    """A stride-1, undilated 2-d conv: MLX's forward and weight gradient, the input gradient of
    :func:`input_grad_stride1` (MLX's: 9.4 ms for 512@7x7 batch 1 against 1.7 ms for the forward). No jvp, as
    MLX's conv (MLX pushes tangents through the custom function's inner conv too)."""

    def conv(x, weight):
        return mx.conv_general(x, weight, padding=(list(lo), list(hi)), groups=groups)

    @mx.custom_function
    def op(x, weight):
        return conv(x, weight)

    @op.vjp
    def op_vjp(primals, cotangent, output):
        x, weight = primals
        gw = mx.vjp(lambda w: conv(x, w), [weight], [cotangent])[1][0]
        return input_grad_stride1(cotangent, weight, lo, hi, groups), gw

    return op
