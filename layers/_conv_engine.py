"""How a checked convolution is computed: the strategies behind ``conv1d/2d/3d`` and ``Conv1d/2d/3d``.

:func:`conv` takes what ``layers/conv.py`` has checked and normalised (batched channels-last ``x`` ``(N, *S, C_in)``,
non-empty; ``weight`` ``(C_out, *kernel, C_in/groups)``; per-dim ``stride``, ``lo``/``hi`` zero padding, ``dilation``)
and returns ``(N, *out, C_out)`` without the bias. The choice, in order (:func:`conv_core` after float64):

* float64: ``layers/_conv_f64.py`` (MLX's conv computes float64 in float32; the native kernels take float32);
* 1x1, one group, no padding: a matmul over channels (:data:`MATMUL_1X1`; float32 with a short K over many rows:
  the native short-K GEMM of ``linear.py``, else one native node over MLX's BLAS, ``linear.BLAS_NODE``);
* depthwise (``groups == C_in``): the native kernel, else a tap sum with a written-out VJP (``_conv_depthwise.py``);
* grouped with narrow groups: the native direct grouped conv (:data:`GROUPED_MAX_GROUP_WIDTH`);
* stride-1 3x3, large enough: native Winograd F(2x2, 3x3) (:data:`WINOGRAD`, :data:`WINOGRAD_MIN_TILES`); a large
  one's forward as one cache-blocked pass, no whole-batch transformed buffers (``_native.WINOGRAD_FUSED_2D``);
* 3-d stride-1 (kD, 3, 3), large enough: native 3-d Winograd, every frame transformed once, the depth taps summed in
  the GEMMs, native weight gradient (:data:`WINOGRAD_3D`);
* 3-d grouped: grouped 2-d convs over depth taps (MLX's 3-d conv has no groups);
* strided (dilation 1): MLX's conv with a custom VJP through a space-to-depth stride-1 conv (3-d, one group:
  ``layers/_conv3d_grads.py``, :data:`STRIDED_GRADS_3D`);
* dilated (stride 1): one GEMM per tap over the outputs it reads inside the image where most taps read padding
  (:data:`DILATED_TAPS`), else the dilation phases folded into the batch;
* 3-d, one group, stride 1, undilated, float32 (R(2+1)D's (3, 1, 1) temporal convs): native im2col + GEMM over
  blocks of output rows, MLX's conv gradient (:data:`COLUMNS_3D_STRIDE1`);
* otherwise MLX's ``conv_general``.

Native kernels are asked through ``_native.active`` and custom VJPs check ``_export.active``: in export mode every
strategy builds serializable MLX ops (``layers/_export.py``). The module-level switches are read on every call.
"""

from __future__ import annotations

import math

import mlx.core as mx

from . import _conv_f64, _conv_grads, _export, _native
from ._conv3d_grads import input_grad as strided_input_grad
from ._conv3d_grads import weight_grad as strided_weight_grad
from ._conv_depthwise import NATIVE_DTYPES as _NATIVE_DTYPES
from ._conv_depthwise import depthwise_conv
from .linear import blas_product, small_k_product

# 1x1 convolutions (no padding, one group; a stride just subsamples) run as a plain matmul when this is on. Measured
# with mlx 0.32 CPU on (8,56,56,64)->256, (8,28,28,128) s2, (32,7,7,512): forward about equal to mx.conv_general,
# input gradient 2-4x faster (the conv's vjp takes a slower path). Same math; benchmarks/cases_conv.py has both rows.
MATMUL_1X1 = True
# Stride-1 undilated 3x3 convs (one group, float32) run as Winograd F(2x2, 3x3) in the native kernels when this is
# on and the conv has at least WINOGRAD_MIN_TILES 2x2 output tiles and WINOGRAD_MIN_CHANNELS channels in and out.
# Measured with mlx 0.32 CPU, 2 threads: 0.42-0.56x mx.conv_general's time on ResNet's 64@56, 128@28, 256@14 at
# batch 1, 0.52-0.70x at batch 8; equal on 512@7 at batch 1 (16 tiles), slower below (the transformed weight is
# 16/9 the weight's size and is read once per call). benchmarks/cases_conv.py has the rows.
WINOGRAD = True
# 2-d conv gradients that MLX computes slowly (layers/_conv_grads.py) take Porter's formulations when this is on: the
# input gradient of stride-1 convs (MLX's conv forward) and of strided convs as a conv with the natively flipped
# kernel, the weight gradient of strided one-group convs as one GEMM over im2col. Measured (1 thread, CPU ms):
# 512@7x7 input gradient 9.4 -> 3.5-4.1, 3x3/s2 256->512@14 input 18.1 -> 6.1-6.6 and weight 2.7 -> 0.7-0.9.
FAST_GRADS = True
WINOGRAD_MIN_TILES = 32
WINOGRAD_MIN_CHANNELS = 16
# Grouped 3-d convs (MLX's 3-d conv has no groups) always, and one-group 3-d convs whose taps take Winograd (3x3 in
# H, W, stride 1 there, >= WINOGRAD_MIN_TILES_3D tiles per tap over all frames) when this is on, run as a sum over
# depth taps of 2-d convs with the depth folded into the batch. Measured (mlx 0.32 CPU, 2 threads, forward, wall):
# 3x3x3 64@(16,56,56) 51.6 ms against 76.0 for MLX's 3-d conv, 128@(8,28,28) 16.0 / 23.2, 256@(4,14,14) (196 tiles)
# 7.8 / 8.4; without Winograd the taps lose: 512@(2,7,7) 9.3 / 4.8, stride 2 and R3D's 3x7x7 stem 1.1-2.2x slower
# (each tap streams its own weight: with few output positions that reading is most of the time).
DEPTH_AS_BATCH_3D = True
WINOGRAD_MIN_TILES_3D = 128
# One-group stride-1 undilated (kD, 3, 3) float32 convs with padding <= kernel - 1 (every R3D/MC3 3x3x3 and 1x3x3
# stride-1 conv) run as one native 3-d Winograd op (layers/csrc/conv3d_kernels.h) when this is on and they have at
# least WINOGRAD_MIN_TILES_3D output tiles over all frames: the input transformed once instead of once per depth tap,
# the taps summed inside the GEMMs (no per-tap output), and the weight gradient in the Winograd domain too.
WINOGRAD_3D = True
# Strided one-group 3-d convs (R3D's stem, stride-2 3x3x3 and (1,2,2) convs) take their weight gradient from
# layers/_conv3d_grads.py when this is on (im2col GEMMs over bounded chunks of frames: 1x3x3 s(1,2,2) 64->128 on
# 16x56x56 53 -> 23 ms, 3x3x3 s2 64->128 54 -> 28, 256->512 on 4x14x14 15 -> 5; 1 thread), and, strided in every
# dim, their input gradient too (by stride phases: 3x3x3 s2 46 -> 41 and 81 -> 16 ms; with a unit stride the
# phases' MLX convs lose to the space-to-depth conv's vjp: the (3,7,7) (1,2,2) stem 521 -> 1185 ms, so not there).
STRIDED_GRADS_3D = True
# Dilated stride-1 one-group 2-d convs whose taps mostly read zero padding (DeepLabV3's ASPP: rate 12-36 on a 28x28
# map) run as one GEMM per tap over the output region that tap reads inside the image, summed, when this is on and
# those regions hold at most DILATED_TAPS_MAX_SHARE of the kernel's (taps x outputs) work. Measured (2 threads, batch
# 1, 2048->256 @28x28, phases -> taps, torch in brackets): rate 12 (share 0.51) 46.0 -> 20.6 ms (10.6), rate 24 (0.18)
# 86.4 -> 13.8 (5.6), rate 36 (0.11) 60.7 -> 3.0 (17.3); denser convs lose a little: rate 4 512->512 (0.82) 10.6 ->
# 12.5, so they keep the phases.
DILATED_TAPS = True
DILATED_TAPS_MAX_SHARE = 0.6
# Strided (forward only: the custom VJP below is unchanged) and dilated one-group float32 2-d convs with at least
# COLUMNS_MIN_CHANNELS input channels run as the native multi-threaded im2col (layers/csrc/col2im_kernels.h) and one
# GEMM against the weight as it is laid out, when this is on and the columns take at most COLUMNS_MAX_BYTES. MLX's
# conv is the same im2col + GEMM with a single-threaded im2col copy (identical sums); the dilated phases fold and
# unfold the input and output. Measured (1 thread, CPU ms, MLX -> columns): 3x3/s2 24->96 @192 3.11 -> 2.61,
# 128->128 @56 1.29 -> 1.00, batch 8 13.6 -> 11.9; 3x3 d2 512->512 @28 16.7 -> 15.8, d4 256->256 4.7 -> 4.4; with 3
# input channels (stems) the columns lose (0.74 -> 1.13), hence the channel floor.
COLUMNS = True
COLUMNS_MIN_CHANNELS = 16
COLUMNS_MAX_BYTES = 256 << 20
# Strided one-group float32 3-d convs (forward only: their VJP is the strided op's) run as native im2col + GEMM over
# blocks of output rows (layers/csrc/conv3d_columns_kernels.h) when this is on: MLX's conv_general gathers the whole
# batch's columns in one buffer, allocated when the op is scheduled (R3D-18's 3x7x7 stem: 88 MB per clip, 700 MB at
# batch 8; its first 3x3x3/s2 conv 350 MB), so the torch-free process peaked at 1385 MB against torch's 936.
COLUMNS_3D = True
# Stride-1 undilated one-group float32 3-d convs that no path above takes (a (3, 1, 1) temporal conv, (1, 1, 3), a 3x5x5)
# run forward through the same blocked columns when this is on, with MLX's conv gradient (mx.vjp of conv_general).
# MLX's conv gathers the whole batch's columns at once: R(2+1)D-18's temporal 144 -> 64 conv on (8, 16, 56, 56) took
# 1008 MB beside its 98 MB output (columns 98 MB) and 593 -> 548 ms of CPU (1 thread); the port's peak RSS at batch 8
# was 2313 MB against torch's 1276 (docs/BENCHMARKS.md, session 13).
COLUMNS_3D_STRIDE1 = True


def conv(x, weight, stride, lo, hi, dilation, groups) -> mx.array:
    """A checked, non-empty conv without bias (see the module docstring for the layouts)."""
    if x.dtype == mx.float64:  # MLX's conv computes float64 in float32; never the native kernels either
        return _conv_f64.conv(x, weight, stride, lo, hi, dilation, groups)
    return conv_core(x, weight, stride, lo, hi, dilation, groups)


def pointwise_with_bias(x, weight, bias, stride, lo, hi, groups):
    """A 1x1 one-group unpadded float32 conv with its bias added inside the product (one native node: the short-K
    GEMM or MLX's BLAS with the bias as the GEMM's C), or ``None`` where :func:`conv_core` and a separate add run."""
    kernel = weight.shape[1:-1]
    if not (MATMUL_1X1 and groups == 1 and all(k == 1 for k in kernel) and not any(lo) and not any(hi)
            and x.dtype == mx.float32):
        return None
    if any(s != 1 for s in stride):
        x = x[(slice(None),) + tuple(slice(None, None, s) for s in stride)]
    y = small_k_product(x, weight, bias)
    return blas_product(x, weight, bias) if y is None else y


def conv_core(x, weight, stride, lo, hi, dilation, groups, winograd: bool = True) -> mx.array:
    """:func:`conv` for float16/bfloat16/float32: the first strategy that applies, in the module docstring's order."""
    kernel = weight.shape[1:-1]
    if MATMUL_1X1 and groups == 1 and all(k == 1 for k in kernel) and not any(lo) and not any(hi):
        # a 1x1 conv is a matmul over channels; stride just subsamples the input
        if any(s != 1 for s in stride):
            x = x[(slice(None),) + tuple(slice(None, None, s) for s in stride)]
        # one native node where it can: the short-K GEMM (ResNet-50's 64 -> 256 at 56x56), else MLX's BLAS
        y = small_k_product(x, weight)
        y = blas_product(x, weight) if y is None else y
        if y is not None:
            return y
        c_out, c_in = weight.shape[0], weight.shape[-1]
        x2, w2 = x.reshape(-1, c_in), weight.reshape(c_out, c_in)
        return (x2 @ w2.T).reshape(*x.shape[:-1], c_out)
    if groups > 1 and groups == x.shape[-1]:
        if x.dtype in _NATIVE_DTYPES and _native.active("depthwise conv"):
            # one pass per output, padding never materialized; gradients in the primitive (layers/csrc)
            return _native.depthwise_conv(x, weight, stride, lo, hi, dilation)
        return depthwise_conv(x, weight, stride, lo, hi, dilation)
    if groups > 1 and _grouped_native(x, weight, groups):
        # ResNeXt/RegNet-style groups: one direct pass (MLX runs a small im2col + GEMM per group, ~60x slower);
        # input and weight gradients native too (layers/csrc/grouped_conv_kernels.h)
        return _native.grouped_conv(x, weight, stride, lo, hi, dilation, groups)
    if winograd and WINOGRAD and _winograd_pays(x, weight, stride, lo, hi, dilation, groups):
        return _native.winograd_conv3x3(x, weight, lo, hi)
    if len(kernel) == 3 and WINOGRAD_3D and _winograd3d_pays(x, weight, stride, lo, hi, dilation, groups):
        return _native.winograd_conv3d(x, weight, lo, hi)
    if len(kernel) == 3 and (groups > 1 or _depth_taps_winograd(x, weight, stride, lo, hi, dilation, groups)):
        return _depth_taps_conv3d(x, weight, stride, lo, hi, dilation, groups)
    if any(s > 1 for s in stride) and all(d == 1 for d in dilation):
        if _export.active():  # its custom VJP cannot be serialized; the forward is MLX's strided conv either way
            _export.note("strided conv's custom VJP (mx.custom_function) -> MLX conv_general")
            return mx.conv_general(x, weight, stride=list(stride), padding=(list(lo), list(hi)), groups=groups)
        return _strided_conv_op(tuple(stride), tuple(lo), tuple(hi), groups)(x, weight)
    if any(d > 1 for d in dilation) and all(s == 1 for s in stride):
        plan = _dilated_taps_plan(x, weight, lo, hi, dilation) if DILATED_TAPS and len(kernel) == 2 and groups == 1 \
            else None
        if plan is not None:
            return _dilated_taps_conv(x, weight, plan)
        if _columns_pay(x, weight, stride, lo, hi, dilation, groups):
            return _columns_conv(x, weight, stride, lo, hi, dilation)
        return _dilated_conv(x, weight, lo, hi, dilation, groups)
    if (FAST_GRADS and len(kernel) == 2 and all(s == 1 for s in stride) and all(d == 1 for d in dilation)
            and not _export.active() and _native.active("conv weight flip")):
        # stride 1, undilated: MLX's forward, Porter's input gradient (layers/_conv_grads.py)
        return _conv_grads.conv_stride1_op(tuple(lo), tuple(hi), groups)(x, weight)
    if (COLUMNS_3D_STRIDE1 and len(kernel) == 3 and all(s == 1 for s in stride) and all(d == 1 for d in dilation)
            and not _export.active() and _columns3d_pay(x, weight, groups)):
        return _stride1_columns3d_op(tuple(lo), tuple(hi))(x, weight)
    return mx.conv_general(
        x, weight, stride=list(stride), padding=(list(lo), list(hi)), kernel_dilation=list(dilation), groups=groups
    )


def _stride1_columns3d_op(lo, hi):
    """A stride-1 undilated one-group 3-d conv: the native blocked columns forward (:data:`COLUMNS_3D_STRIDE1`),
    MLX's conv for the gradients."""

    def mlx_conv(x, weight):
        return mx.conv_general(x, weight, padding=(list(lo), list(hi)))

    @mx.custom_function
    def op(x, weight):
        out = _conv_out_sizes(x, weight, (1, 1, 1), lo, hi, (1, 1, 1))
        return _native.conv3d_columns(x, weight, (1, 1, 1), lo, out)

    @op.vjp
    def op_vjp(primals, cotangent, output):
        return tuple(mx.vjp(mlx_conv, list(primals), [cotangent])[1])

    return op


# groups of at most this many input channels run as Porter's direct grouped conv; wider groups keep MLX's GEMMs
GROUPED_MAX_GROUP_WIDTH = 64


def _grouped_native(x, weight, groups) -> bool:
    return (weight.shape[-1] <= GROUPED_MAX_GROUP_WIDTH and x.dtype in (mx.float32, mx.float64)
            and weight.dtype == x.dtype and _native.active("grouped conv"))


def _winograd_pays(x, weight, stride, lo, hi, dilation, groups, min_tiles: int = 0) -> bool:
    """Whether a 2-d conv of ``x`` ``(N, H, W, C_in)`` takes the Winograd kernel (see WINOGRAD above)."""
    return _winograd_shape_pays(x.shape[:3], x.dtype, weight, stride, lo, hi, dilation, groups, min_tiles)


def _winograd_shape_pays(nhw, dtype, weight, stride, lo, hi, dilation, groups, min_tiles: int = 0) -> bool:
    if groups != 1 or weight.shape[1:-1] != (3, 3) or any(s != 1 for s in stride) or any(d != 1 for d in dilation):
        return False
    if dtype != mx.float32 or weight.dtype != mx.float32:
        return False
    if min(weight.shape[0], weight.shape[-1]) < WINOGRAD_MIN_CHANNELS:
        return False
    n, h, w = nhw
    ho, wo = h + lo[0] + hi[0] - 2, w + lo[1] + hi[1] - 2
    return (n * ((ho + 1) // 2) * ((wo + 1) // 2) >= max(min_tiles, WINOGRAD_MIN_TILES)
            and _native.active("Winograd 3x3 conv"))


def _winograd3d_pays(x, weight, stride, lo, hi, dilation, groups) -> bool:
    """Whether a 3-d conv takes the native 3-d Winograd op (see WINOGRAD_3D above)."""
    kernel = weight.shape[1:-1]
    if groups != 1 or kernel[1:] != (3, 3) or any(s != 1 for s in stride) or any(d != 1 for d in dilation):
        return False
    if x.dtype != mx.float32 or weight.dtype != mx.float32:
        return False
    if min(weight.shape[0], weight.shape[-1]) < WINOGRAD_MIN_CHANNELS:
        return False
    if any(p > k - 1 for p, k in zip(lo + hi, kernel + kernel)):  # the input gradient's padding k - 1 - p >= 0
        return False
    n, d, h, w = x.shape[:4]
    out = [size + a + b - k + 1 for size, a, b, k in zip((d, h, w), lo, hi, kernel)]
    return (n * out[0] * ((out[1] + 1) // 2) * ((out[2] + 1) // 2) >= WINOGRAD_MIN_TILES_3D
            and _native.active("Winograd 3-d conv"))


def _depth_taps_winograd(x, weight, stride, lo, hi, dilation, groups) -> bool:
    """Whether a 3-d conv's depth taps, as 2-d convs over ``N * D_out`` frames, take Winograd."""
    if not (WINOGRAD and DEPTH_AS_BATCH_3D):
        return False
    n, depth, h, w = x.shape[:4]
    out_depth = (depth + lo[0] + hi[0] - dilation[0] * (weight.shape[1] - 1) - 1) // stride[0] + 1
    return _winograd_shape_pays((n * out_depth, h, w), x.dtype, weight[:, 0], stride[1:], lo[1:], hi[1:],
                                dilation[1:], groups, WINOGRAD_MIN_TILES_3D)


def _tap_ranges(size, out, k, d, lo):
    """Per tap along one dim: the output range ``[a, b)`` whose reads ``o + t*d - lo`` fall inside ``[0, size)``."""
    ranges = []
    for t in range(k):
        shift = t * d - lo
        a, b = max(0, -shift), min(out, size - shift)
        ranges.append((a, b, shift) if a < b else None)
    return ranges


def _dilated_taps_plan(x, weight, lo, hi, dilation):
    """``(out sizes, row ranges, column ranges)`` of a 2-d conv's taps (:func:`_tap_ranges`) when the products that
    read the image rather than its zero padding are at most :data:`DILATED_TAPS_MAX_SHARE` of (taps x outputs);
    else None."""
    sizes, kernel = x.shape[1:-1], weight.shape[1:-1]
    outs = [s + a + b - d * (k - 1) for s, a, b, d, k in zip(sizes, lo, hi, dilation, kernel)]
    rows, cols = [_tap_ranges(s, o, k, d, a) for s, o, k, d, a in zip(sizes, outs, kernel, dilation, lo)]
    total = len(rows) * len(cols) * outs[0] * outs[1]
    live = sum((r[1] - r[0]) * (c[1] - c[0]) for r in rows if r for c in cols if c)
    return (outs, rows, cols) if total > 0 and live <= DILATED_TAPS_MAX_SHARE * total else None


def _dilated_taps_conv(x, weight, plan) -> mx.array:
    """A dilated stride-1 one-group 2-d conv as a sum over kernel taps of one GEMM each, over only the outputs whose
    read for that tap lands inside the image (a tap reading only padding contributes nothing and is skipped).

    Output ``(o_h, o_w)`` takes ``x[o_h + i*d_h - lo_h, o_w + j*d_w - lo_w] @ weight[:, i, j, :]^T`` over the taps
    ``(i, j)`` that read inside ``x`` (``plan``: :func:`_dilated_taps_plan`); each tap's block is zero-padded back to
    the output's size and the blocks summed. Same products as torch's conv (padding products are zeros there), summed in another order.
    """
    n, c = x.shape[0], x.shape[-1]
    (out_h, out_w), rows, cols = plan
    c_out = weight.shape[0]
    y = None
    for i, r in enumerate(rows):
        for j, q in enumerate(cols):
            if r is None or q is None:
                continue
            (a, b, sh), (e, f, sw) = r, q
            block = x[:, a + sh:b + sh, e + sw:f + sw, :]
            part = (block.reshape(-1, c) @ weight[:, i, j, :].T).reshape(n, b - a, f - e, c_out)
            part = mx.pad(part, [(0, 0), (a, out_h - b), (e, out_w - f), (0, 0)])
            y = part if y is None else y + part
    if y is None:  # every tap reads padding only
        dtype = (mx.zeros((1, 1), dtype=x.dtype) @ mx.zeros((1, 1), dtype=weight.dtype)).dtype  # as the GEMMs'
        return mx.zeros((n, out_h, out_w, c_out), dtype=dtype)
    return y


def _conv_out_sizes(x, weight, stride, lo, hi, dilation) -> list:
    sizes = zip(x.shape[1:-1], weight.shape[1:-1], stride, lo, hi, dilation)
    return [(size + a + b - d * (k - 1) - 1) // s + 1 for size, k, s, a, b, d in sizes]


def _columns_pay(x, weight, stride, lo, hi, dilation, groups) -> bool:
    """Whether a strided or dilated 2-d conv runs as :func:`_columns_conv` (see :data:`COLUMNS`)."""
    if not COLUMNS or groups != 1 or x.ndim != 4 or x.shape[-1] < COLUMNS_MIN_CHANNELS:
        return False
    if x.dtype != mx.float32 or weight.dtype != mx.float32:
        return False
    out = _conv_out_sizes(x, weight, stride, lo, hi, dilation)
    cols = x.shape[0] * math.prod(out) * math.prod(weight.shape[1:]) * x.itemsize
    return min(out) > 0 and cols <= COLUMNS_MAX_BYTES and _native.active("im2col")


def _columns3d_pay(x, weight, groups) -> bool:
    """Whether a strided 3-d conv's forward runs as the native blocked columns (see :data:`COLUMNS_3D`)."""
    return (COLUMNS_3D and groups == 1 and x.ndim == 5 and x.dtype == mx.float32 and weight.dtype == mx.float32
            and _native.conv3d_columns_available())


def _columns_conv(x, weight, stride, lo, hi, dilation) -> mx.array:
    """A one-group 2-d conv as ``im2col(x) @ weight^T``: the native gather ``(N, H_out, W_out, kH, kW, C_in)`` (tap
    ``(a, b)`` of output ``(i, j)`` reads ``x[s*i + d*a - lo, ...]``, zero outside: the padding, ``hi`` included, is
    never materialized) is one GEMM operand, the weight ``(C_out, kH*kW*C_in)`` as laid out the other. Autodiff gives
    the gradients (the gather's VJP is the native col2im)."""
    n, c_in, c_out, kernel = x.shape[0], x.shape[-1], weight.shape[0], weight.shape[1:-1]
    out = _conv_out_sizes(x, weight, stride, lo, hi, dilation)
    geometry = [v for s, d, a in zip(stride, dilation, lo) for v in (s, d, -a)]
    cols = _native.im2col(x, out, kernel, geometry)
    y = cols.reshape(-1, math.prod(kernel) * c_in) @ weight.reshape(c_out, -1).T
    return y.reshape(n, *out, c_out)


def _dilated_conv(x, weight, lo, hi, dilation, groups) -> mx.array:
    """A dilated stride-1 conv as an undilated one over the input's ``d`` phases folded into the batch.

    MLX's ``kernel_dilation`` path is slow on CPU (measured 3x3, d=2, (4,56,56,32)->16: 95 ms against 8 ms
    undilated). Output ``d*q + r`` reads only inputs ``d*j + r``: phase ``r`` of the (padded) input, convolved
    without dilation, gives those outputs. Same multiply-adds; the phases are split and interleaved by reshapes.
    """
    nd = x.ndim - 2
    n, c = x.shape[0], x.shape[-1]
    padded = [size + a + b for size, a, b in zip(x.shape[1:-1], lo, hi)]
    out = [p - d * (k - 1) for p, d, k in zip(padded, dilation, weight.shape[1:-1])]
    blocks = [-(-p // d) for p, d in zip(padded, dilation)]  # per-phase length; the input is padded to d*blocks
    x = mx.pad(x, [(0, 0)] + [(a, b + m * d - p) for a, b, m, d, p in zip(lo, hi, blocks, dilation, padded)] + [(0, 0)])
    x = x.reshape(n, *[v for m, d in zip(blocks, dilation) for v in (m, d)], c)
    phase_axes = [2 + 2 * i for i in range(nd)]
    x = x.transpose([0] + phase_axes + [1 + 2 * i for i in range(nd)] + [1 + 2 * nd])
    x = x.reshape(n * math.prod(dilation), *blocks, c)
    y = mx.conv_general(x, weight, groups=groups)  # (N * prod(d), *per-phase out, C_out)
    per_phase = y.shape[1:-1]
    y = y.reshape(n, *dilation, *per_phase, y.shape[-1])
    y = y.transpose([0] + [a for i in range(nd) for a in (1 + nd + i, 1 + i)] + [1 + 2 * nd])
    y = y.reshape(n, *(m * d for m, d in zip(per_phase, dilation)), y.shape[-1])
    return y[(slice(None),) + tuple(slice(0, o) for o in out)]


def _strided_conv_op(stride, lo, hi, groups):
    """A strided conv: MLX's forward, with the gradients of the same conv written as a stride-1 conv.

    MLX's own vjp of a strided conv is very slow on CPU (measured 3x3/s2 64->64 on (8,56,56,64): input gradient
    ~590 ms, weight gradient ~180 ms, forward ~12 ms). :func:`_space_to_depth_conv` computes the same function as a
    stride-1 conv, whose gradients are ordinary; its forward is slower than MLX's strided one, so it is only
    differentiated.
    """

    @mx.custom_function
    def op(x, weight):
        if _columns_pay(x, weight, stride, lo, hi, (1,) * len(stride), groups):
            return _columns_conv(x, weight, stride, lo, hi, (1,) * len(stride))
        if _columns3d_pay(x, weight, groups):
            out = _conv_out_sizes(x, weight, stride, lo, hi, (1,) * 3)
            return _native.conv3d_columns(x, weight, stride, lo, out)
        return mx.conv_general(x, weight, stride=list(stride), padding=(list(lo), list(hi)), groups=groups)

    @op.vjp
    def op_vjp(primals, cotangent, output):
        x, weight = primals
        if STRIDED_GRADS_3D and len(stride) == 3 and groups == 1:  # chunked GEMMs; by stride phases (see there)
            if all(s > 1 for s in stride):
                return strided_input_grad(cotangent, weight, x.shape, stride, lo), strided_weight_grad(
                    x, cotangent, weight.shape, stride, lo)
            _, (gx,) = mx.vjp(lambda a: _space_to_depth_conv(a, weight, stride, lo, hi, groups), [x], [cotangent])
            return gx, strided_weight_grad(x, cotangent, weight.shape, stride, lo)
        if FAST_GRADS and len(stride) == 2 and _native.active("conv weight flip"):
            # the input gradient as a transposed conv by sub-pixel phases (else the folded stride-1 conv's, with a
            # natively flipped kernel, unfolded by autodiff of the reshapes); the weight gradient as one GEMM over
            # im2col(x) where there is one group
            gx = _conv_grads.input_grad_strided(cotangent, weight, x.shape[1:-1], stride, lo, groups)
            if gx is None:
                w_folded = _space_to_depth_weight(weight, stride)
                g_folded = _conv_grads.input_grad_stride1(cotangent, w_folded, (0, 0), (0, 0), groups)
                folded = lambda x: _space_to_depth_input(x, weight.shape[1:-1], stride, lo, hi)  # noqa: E731
                gx = mx.vjp(folded, [x], [g_folded])[1][0]
            if groups == 1:
                gw = _conv_grads.weight_grad_im2col(x, cotangent, weight.shape[1:-1], stride, lo, hi)
            else:
                gw = mx.vjp(lambda w: _space_to_depth_conv(x, w, stride, lo, hi, groups), [weight], [cotangent])[1][0]
            return gx, gw
        _, grads = mx.vjp(lambda x, w: _space_to_depth_conv(x, w, stride, lo, hi, groups), list(primals), [cotangent])
        return tuple(grads)

    return op


def _space_to_depth_conv(x, weight, stride, lo, hi, groups) -> mx.array:
    """A strided conv (dilation 1) as a stride-1 conv: every ``s``-block of the padded input becomes channels.

    Tap ``t = s*m + r`` of the kernel reads block ``q + m``, phase ``r``; the kernel, zero-padded to a multiple of
    ``s``, is folded the same way into ``ceil(k/s)`` taps over ``C*prod(s)`` channels (channel-major, so that each
    group's channels stay contiguous).
    """
    folded = _space_to_depth_input(x, weight.shape[1:-1], stride, lo, hi)
    return mx.conv_general(folded, _space_to_depth_weight(weight, stride), groups=groups)


def _space_to_depth_input(x, kernel, stride, lo, hi) -> mx.array:
    """The input of :func:`_space_to_depth_conv`: ``(N, *blocks, C*prod(s))``, channel-major."""
    nd = x.ndim - 2
    n, spatial = x.shape[0], x.shape[1:-1]
    blocks = [-(-k // s) for k, s in zip(kernel, stride)]
    out = [(size + a + b - k) // s + 1 for size, a, b, k, s in zip(spatial, lo, hi, kernel, stride)]
    needed = [(o - 1 + m) * s for o, m, s in zip(out, blocks, stride)]  # padded length the folded conv reads
    high = [p - size - a for p, size, a in zip(needed, spatial, lo)]
    if any(h < 0 for h in high):  # trailing input no output reads
        x = x[(slice(None),) + tuple(slice(0, size + min(h, 0)) for size, h in zip(spatial, high))]
    x = mx.pad(x, [(0, 0)] + [(a, max(h, 0)) for a, h in zip(lo, high)] + [(0, 0)])
    split = [v for p, s in zip(needed, stride) for v in (p // s, s)]
    x = x.reshape(n, *split, x.shape[-1])
    x = x.transpose([0] + [1 + 2 * i for i in range(nd)] + [1 + 2 * nd] + [2 + 2 * i for i in range(nd)])
    return x.reshape(n, *(p // s for p, s in zip(needed, stride)), -1)


def _space_to_depth_weight(weight, stride) -> mx.array:
    """The kernel of :func:`_space_to_depth_conv`: ``(C_out, *ceil(k/s), C_in/groups*prod(s))``."""
    nd = weight.ndim - 2
    kernel, c_out, c_in_g = weight.shape[1:-1], weight.shape[0], weight.shape[-1]
    blocks = [-(-k // s) for k, s in zip(kernel, stride)]
    w = mx.pad(weight, [(0, 0)] + [(0, m * s - k) for m, s, k in zip(blocks, stride, kernel)] + [(0, 0)])
    w = w.reshape(c_out, *[v for m, s in zip(blocks, stride) for v in (m, s)], c_in_g)
    w = w.transpose([0] + [1 + 2 * i for i in range(nd)] + [1 + 2 * nd] + [2 + 2 * i for i in range(nd)])
    return w.reshape(c_out, *blocks, -1)


def _depth_taps_conv3d(x, weight, stride, lo, hi, dilation, groups) -> mx.array:
    """A 3-d conv as a sum, over the depth taps, of 2-d convs of depth slices folded into the batch.

    MLX's 3-d conv has no groups, and its CPU path is slow (measured 3x3x3 64->64 on (1,8,56,56,64): 38.5 ms; as
    three 2-d convs that take Porter's 2-d paths, Winograd for 3x3: 23.8 ms; its gradients are the 2-d convs' too).
    A loop over depth taps (not over output positions or groups), so the extra memory is one output-sized partial
    sum, and depthwise 3-d convs stay a few ops.
    """
    if lo[0] or hi[0]:
        x = mx.pad(x, [(0, 0), (lo[0], hi[0])] + [(0, 0)] * 3)
    n, depth = x.shape[0], x.shape[1]
    s, d = stride[0], dilation[0]
    out_depth = (depth - d * (weight.shape[1] - 1) - 1) // s + 1
    y, transforms = None, None
    for j in range(weight.shape[1]):
        xs = x[:, j * d : j * d + (out_depth - 1) * s + 1 : s]  # the depth slice tap j sees at each output depth
        xs = xs.reshape(n * out_depth, *xs.shape[2:])
        if j == 0 and WINOGRAD and _winograd_pays(xs, weight[:, 0], stride[1:], lo[1:], hi[1:], dilation[1:], groups,
                                                  WINOGRAD_MIN_TILES_3D):
            transforms = _native.winograd_depth_taps(weight)  # cached by the 3-d weight, all taps at once
        if transforms is not None:
            yj = _native.winograd_conv3x3_with(xs, weight[:, j], transforms[j], lo[1:], hi[1:])
        else:
            # never the 2-d Winograd path: it caches by the weight array, and a tap sliced per call is new each time
            yj = conv_core(xs, weight[:, j], stride[1:], lo[1:], hi[1:], dilation[1:], groups, winograd=False)
        y = yj if y is None else y + yj
    return y.reshape(n, out_depth, *y.shape[1:])
