"""Conv1d / Conv2d / Conv3d and their functional forms, exact to torch, channels-last.

Input ``(N, *spatial, C_in)`` or unbatched ``(*spatial, C_in)``; weight in MLX's layout
``(C_out, *kernel, C_in/groups)``
(torch's ``(C_out, C_in/groups, *kernel)`` converts with :func:`porter.layers.conv_weights.torch_conv_weight_to_mlx`).
One generic N-d implementation; the public classes only fix the number of spatial dims.
"""

from __future__ import annotations

import itertools
import math
import numbers

import mlx.core as mx
import mlx.nn as nn

from . import _conv_f64, _export, _native
from ._utils import ntuple
from .padding import pad

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_PADDING_STRINGS = ("same", "valid")

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
# dtypes the native depthwise kernel takes (float16/bfloat16 accumulate in float32 there)
_NATIVE_DTYPES = (mx.float32, mx.float16, mx.bfloat16, mx.float64)


# ---------------------------------------------------------------------------------------------------- checks
def check_groups(groups, layer: str) -> int:
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral):
        raise TypeError(f"[{layer}] 'groups' must be an int, but got {groups!r}.")
    if groups <= 0:
        raise ValueError(f"[{layer}] non-positive groups is not supported (got groups={groups}).")
    return int(groups)


def check_positive(values: tuple, name: str, layer: str) -> None:
    """Stride, dilation and kernel size must be positive (torch's wording for stride and dilation)."""
    if all(v > 0 for v in values):
        return
    if name == "stride":
        raise ValueError(f"[{layer}] non-positive stride is not supported (got stride={values}).")
    if name == "dilation":
        raise ValueError(f"[{layer}] dilation should be greater than zero, but got {list(values)}")
    raise ValueError(f"[{layer}] '{name}' must be positive but got {values}.")


def check_arrays(input, weight, bias, nd: int, layer: str, func: str) -> None:
    """Types, ranks and dtypes of a conv's operands (shapes that depend on groups are checked by the caller)."""
    for name, value in (("input", input), ("weight", weight), ("bias", bias)):
        if not (value is None and name == "bias") and not isinstance(value, mx.array):
            raise TypeError(f"[{layer}] '{name}' must be an mx.array, but got {type(value).__name__}.")
    if input.ndim not in (nd + 1, nd + 2):
        raise ValueError(
            f"[{layer}] Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {func}, but got input of "
            f"size: {list(input.shape)} (layout (N, *spatial, C) or (*spatial, C))"
        )
    if weight.ndim != nd + 2:
        raise ValueError(
            f"[{layer}] Expected {nd + 2}-dimensional weight (C_out, *kernel, C_in/groups), but got weight of size "
            f"{list(weight.shape)}"
        )
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and value.dtype != input.dtype:
            raise TypeError(
                f"[{layer}] expected scalar type {input.dtype} but found {value.dtype} ('{name}' must have the "
                f"input's dtype)"
            )


def check_bias(bias, c_out: int, weight, layer: str, transposed: bool = False) -> None:
    if bias is not None and tuple(bias.shape) != (c_out,):
        prefix = "transposed=1, " if transposed else ""
        raise ValueError(
            f"[{layer}] Given {prefix}weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
            f"{c_out} elements, but got bias of size {list(bias.shape)} instead"
        )


def padding_pairs(padding, kernel: tuple, stride: tuple, dilation: tuple, layer: str, strict_module: bool = False):
    """Per-dim ``(lo, hi)`` padding from an int, a tuple, ``'valid'`` or ``'same'`` (docs/SEMANTICS.md §9.2).

    ``'same'`` pads ``d*(k-1)`` in total, ``total // 2`` before and the rest after (torch puts the extra element on
    the right), and needs stride 1.
    """
    nd = len(kernel)
    if isinstance(padding, str):
        if padding not in _PADDING_STRINGS:
            if strict_module:
                raise ValueError(
                    f"[{layer}] Invalid padding string {padding!r}, should be one of {set(_PADDING_STRINGS)}"
                )
            raise ValueError(f"[{layer}] Invalid padding string: {padding!r}")
        if padding == "valid":
            return (0,) * nd, (0,) * nd
        if any(s != 1 for s in stride):
            raise ValueError(f"[{layer}] padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        lo = tuple(t // 2 for t in total)
        return lo, tuple(t - l for t, l in zip(total, lo))
    pads = ntuple(padding, nd, "padding", layer)
    if any(p < 0 for p in pads):
        raise ValueError(f"[{layer}] negative padding is not supported (got padding={pads}).")
    return pads, pads


# ---------------------------------------------------------------------------------------------------- functional
def conv_nd(input, weight, bias, stride, padding, dilation, groups, *, nd: int, layer: str) -> mx.array:
    """The generic N-d convolution behind ``conv1d/2d/3d`` and ``Conv1d/2d/3d`` (see :func:`conv2d`)."""
    func = f"conv{nd}d"
    check_arrays(input, weight, bias, nd, layer, func)
    stride = ntuple(stride, nd, "stride", layer)
    dilation = ntuple(dilation, nd, "dilation", layer)
    groups = check_groups(groups, layer)
    check_positive(stride, "stride", layer)
    check_positive(dilation, "dilation", layer)
    kernel = tuple(weight.shape[1:-1])
    lo, hi = padding_pairs(padding, kernel, stride, dilation, layer)

    c_out = weight.shape[0]
    if c_out == 0 or c_out % groups:
        raise ValueError(
            f"[{layer}] Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got "
            f"weight of size {list(weight.shape)} instead"
        )
    batched = input.ndim == nd + 2
    x = input if batched else input[None]
    c_in = x.shape[-1]
    if c_in != weight.shape[-1] * groups:
        raise ValueError(
            f"[{layer}] Given groups={groups}, weight of size {list(weight.shape)}, expected input"
            f"{list(input.shape)} to have {weight.shape[-1] * groups} channels, but got {c_in} channels instead"
        )
    check_bias(bias, c_out, weight, layer)
    check_positive(kernel, "kernel size", layer)
    spatial = tuple(x.shape[1:-1])
    if any(s == 0 for s in spatial):
        raise ValueError(
            f"[{layer}] Only zero batch or zero channel inputs are supported, but got input shape: {list(input.shape)}"
        )
    padded = tuple(s + a + b for s, a, b in zip(spatial, lo, hi))
    extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    if any(p < e for p, e in zip(padded, extent)):
        raise ValueError(
            f"[{layer}] Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
            f"({' x '.join(map(str, extent))}). Kernel size can't be greater than actual input size"
        )

    if x.size == 0:  # zero batch or zero channels: torch returns bias (or zeros) of the output shape
        out_spatial = tuple((p - e) // s + 1 for p, e, s in zip(padded, extent, stride))
        y = mx.zeros((x.shape[0], *out_spatial, c_out), dtype=x.dtype)
    elif x.dtype == mx.float64:  # MLX's conv computes float64 in float32; never the native kernels either
        y = _conv_f64.conv(x, weight, stride, lo, hi, dilation, groups)
    else:
        y = _conv_core(x, weight, stride, lo, hi, dilation, groups)
    if bias is not None:
        y = y + bias
    return y if batched else y[0]


def _conv_core(x, weight, stride, lo, hi, dilation, groups, winograd: bool = True) -> mx.array:
    kernel = weight.shape[1:-1]
    if MATMUL_1X1 and groups == 1 and all(k == 1 for k in kernel) and not any(lo) and not any(hi):
        # a 1x1 conv is a matmul over channels; stride just subsamples the input
        if any(s != 1 for s in stride):
            x = x[(slice(None),) + tuple(slice(None, None, s) for s in stride)]
        c_out, c_in = weight.shape[0], weight.shape[-1]
        y = x.reshape(-1, c_in) @ weight.reshape(c_out, c_in).T
        return y.reshape(*x.shape[:-1], c_out)
    if groups > 1 and groups == x.shape[-1]:
        if x.dtype in _NATIVE_DTYPES and _native.active("depthwise conv"):
            # one pass per output, padding never materialized; gradients in the primitive (layers/csrc)
            return _native.depthwise_conv(x, weight, stride, lo, hi, dilation)
        return _depthwise_conv(x, weight, stride, lo, hi, dilation)
    if groups > 1 and _grouped_native(x, weight, groups):
        # ResNeXt/RegNet-style groups: one direct pass (MLX runs a small im2col + GEMM per group, ~60x slower);
        # input and weight gradients native too (layers/csrc/grouped_conv_kernels.h)
        return _native.grouped_conv(x, weight, stride, lo, hi, dilation, groups)
    if winograd and WINOGRAD and _winograd_pays(x, weight, stride, lo, hi, dilation, groups):
        return _native.winograd_conv3x3(x, weight, lo, hi)
    if len(kernel) == 3 and (groups > 1 or _depth_taps_winograd(x, weight, stride, lo, hi, dilation, groups)):
        return _depth_taps_conv3d(x, weight, stride, lo, hi, dilation, groups)
    if any(s > 1 for s in stride) and all(d == 1 for d in dilation):
        if _export.active():  # its custom VJP cannot be serialized; the forward is MLX's strided conv either way
            _export.note("strided conv's custom VJP (mx.custom_function) -> MLX conv_general")
            return mx.conv_general(x, weight, stride=list(stride), padding=(list(lo), list(hi)), groups=groups)
        return _strided_conv_op(tuple(stride), tuple(lo), tuple(hi), groups)(x, weight)
    if any(d > 1 for d in dilation) and all(s == 1 for s in stride):
        return _dilated_conv(x, weight, lo, hi, dilation, groups)
    return mx.conv_general(
        x, weight, stride=list(stride), padding=(list(lo), list(hi)), kernel_dilation=list(dilation), groups=groups
    )


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


def _depth_taps_winograd(x, weight, stride, lo, hi, dilation, groups) -> bool:
    """Whether a 3-d conv's depth taps, as 2-d convs over ``N * D_out`` frames, take Winograd."""
    if not (WINOGRAD and DEPTH_AS_BATCH_3D):
        return False
    n, depth, h, w = x.shape[:4]
    out_depth = (depth + lo[0] + hi[0] - dilation[0] * (weight.shape[1] - 1) - 1) // stride[0] + 1
    return _winograd_shape_pays((n * out_depth, h, w), x.dtype, weight[:, 0], stride[1:], lo[1:], hi[1:],
                                dilation[1:], groups, WINOGRAD_MIN_TILES_3D)


def interleave_phases(phases: list, stride) -> mx.array:
    """Per-phase results, each ``(N, *q, C)`` and listed in ``itertools.product`` order of the phase ``r`` (one
    entry per dim), interleaved into ``(N, *(q * stride), C)``: position ``q*s + r`` of a dim comes from phase ``r``."""
    nd = len(stride)
    n, q, c = phases[0].shape[0], phases[0].shape[1:-1], phases[0].shape[-1]
    y = mx.stack(phases, axis=-2).reshape(n, *q, *stride, c)
    order = [0] + [a for i in range(nd) for a in (1 + i, 1 + nd + i)] + [1 + 2 * nd]
    return y.transpose(order).reshape(n, *(a * s for a, s in zip(q, stride)), c)


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
        return mx.conv_general(x, weight, stride=list(stride), padding=(list(lo), list(hi)), groups=groups)

    @op.vjp
    def op_vjp(primals, cotangent, output):
        _, grads = mx.vjp(lambda x, w: _space_to_depth_conv(x, w, stride, lo, hi, groups), list(primals), [cotangent])
        return tuple(grads)

    return op


def _space_to_depth_conv(x, weight, stride, lo, hi, groups) -> mx.array:
    """A strided conv (dilation 1) as a stride-1 conv: every ``s``-block of the padded input becomes channels.

    Tap ``t = s*m + r`` of the kernel reads block ``q + m``, phase ``r``; the kernel, zero-padded to a multiple of
    ``s``, is folded the same way into ``ceil(k/s)`` taps over ``C*prod(s)`` channels (channel-major, so that each
    group's channels stay contiguous).
    """
    nd = x.ndim - 2
    n, spatial, kernel = x.shape[0], x.shape[1:-1], weight.shape[1:-1]
    c_out, c_in_g = weight.shape[0], weight.shape[-1]
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
    x = x.reshape(n, *(p // s for p, s in zip(needed, stride)), -1)
    w = mx.pad(weight, [(0, 0)] + [(0, m * s - k) for m, s, k in zip(blocks, stride, kernel)] + [(0, 0)])
    w = w.reshape(c_out, *[v for m, s in zip(blocks, stride) for v in (m, s)], c_in_g)
    w = w.transpose([0] + [1 + 2 * i for i in range(nd)] + [1 + 2 * nd] + [2 + 2 * i for i in range(nd)])
    w = w.reshape(c_out, *blocks, -1)
    return mx.conv_general(x, w, groups=groups)


def _depthwise_conv(x, weight, stride, lo, hi, dilation) -> mx.array:
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
            yj = _conv_core(xs, weight[:, j], stride[1:], lo[1:], hi[1:], dilation[1:], groups, winograd=False)
        y = yj if y is None else y + yj
    return y.reshape(n, out_depth, *y.shape[1:])


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> mx.array:
    """1-d convolution, torch's ``F.conv1d`` on channels-last data. See :func:`conv2d` for the arguments.

    Layout: input ``(N, L, C_in)`` or ``(L, C_in)``, weight ``(C_out, k, C_in/groups)``, output ``(N, L_out, C_out)``.
    """
    return conv_nd(input, weight, bias, stride, padding, dilation, groups, nd=1, layer="conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> mx.array:
    """2-d convolution, torch's ``F.conv2d`` on channels-last data.

    Args:
        input (mx.array): ``(N, H, W, C_in)`` or unbatched ``(H, W, C_in)``.
        weight (mx.array): ``(C_out, kH, kW, C_in/groups)`` (MLX layout).
        bias (mx.array, optional): ``(C_out,)``. Default: ``None``.
        stride (int or tuple, optional): Default: ``1``.
        padding (int, tuple, 'valid' or 'same', optional): zero padding on both sides; ``'same'`` splits
            ``d*(k-1)`` as ``total // 2`` before and the rest after. Default: ``0``.
        dilation (int or tuple, optional): Default: ``1``.
        groups (int, optional): Default: ``1``.

    Returns:
        mx.array: ``(N, H_out, W_out, C_out)`` (unbatched input gives an unbatched output).

    Example:
        >>> x = mx.random.normal((1, 8, 8, 3))
        >>> w = mx.random.normal((16, 3, 3, 3))
        >>> conv2d(x, w, padding="same").shape   # (1, 8, 8, 16)
    """
    return conv_nd(input, weight, bias, stride, padding, dilation, groups, nd=2, layer="conv2d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> mx.array:
    """3-d convolution, torch's ``F.conv3d`` on channels-last data. See :func:`conv2d` for the arguments.

    Layout: input ``(N, D, H, W, C_in)`` or ``(D, H, W, C_in)``, weight ``(C_out, kD, kH, kW, C_in/groups)``.
    """
    return conv_nd(input, weight, bias, stride, padding, dilation, groups, nd=3, layer="conv3d")


# ---------------------------------------------------------------------------------------------------- modules
def init_conv_params(module: nn.Module, shape: tuple, fan_in: int, bias: bool, out_channels: int) -> None:
    """Torch's default conv init: kaiming-uniform with a=sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    module.weight = mx.random.uniform(low=-bound, high=bound, shape=shape)
    module.bias = mx.random.uniform(low=-bound, high=bound, shape=(out_channels,)) if bias else None


def check_channels(in_channels, out_channels, groups, layer: str) -> int:
    """Torch's module-level channel checks (``groups must be a positive integer`` ...)."""
    for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise TypeError(f"[{layer}] '{name}' must be a non-negative int, but got {value!r}.")
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups <= 0:
        raise ValueError(f"[{layer}] groups must be a positive integer (got groups={groups!r}).")
    if in_channels % groups:
        raise ValueError(f"[{layer}] in_channels must be divisible by groups (got {in_channels} and {groups}).")
    if out_channels % groups:
        raise ValueError(f"[{layer}] out_channels must be divisible by groups (got {out_channels} and {groups}).")
    return int(groups)


class _ConvNd(nn.Module):
    """Generic N-d convolution module; ``Conv1d/2d/3d`` fix ``nd``."""

    nd = 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
    ):
        super().__init__()
        layer, nd = type(self).__name__, self.nd
        self.groups = check_channels(in_channels, out_channels, groups, layer)
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = ntuple(kernel_size, nd, "kernel_size", layer)
        self.stride = ntuple(stride, nd, "stride", layer)
        self.dilation = ntuple(dilation, nd, "dilation", layer)
        check_positive(self.kernel_size, "kernel_size", layer)
        check_positive(self.stride, "stride", layer)
        check_positive(self.dilation, "dilation", layer)
        self._pad_lo, self._pad_hi = padding_pairs(
            padding, self.kernel_size, self.stride, self.dilation, layer, strict_module=True
        )
        self.padding = padding if isinstance(padding, str) else self._pad_lo
        if padding_mode not in _PADDING_MODES:
            raise ValueError(
                f"[{layer}] padding_mode must be one of {set(_PADDING_MODES)}, but got padding_mode='{padding_mode}'"
            )
        self.padding_mode = padding_mode
        fan_in = (self.in_channels // self.groups) * math.prod(self.kernel_size)
        shape = (self.out_channels, *self.kernel_size, self.in_channels // self.groups)
        init_conv_params(self, shape, fan_in, bias, self.out_channels)

    def _extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self.nd:
            s += f", padding={self.padding!r}"
        if self.dilation != (1,) * self.nd:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode!r}"
        return s

    def __call__(self, x: mx.array) -> mx.array:
        layer = type(self).__name__
        bias = self.bias
        padding = self.padding
        if self.padding_mode != "zeros":
            check_arrays(x, self.weight, bias, self.nd, layer, f"conv{self.nd}d")  # before padding a bad input
            # torch pads explicitly first (F.pad order: last spatial dim first), then convolves unpadded
            pairs = [v for lo, hi in zip(self._pad_lo[::-1], self._pad_hi[::-1]) for v in (lo, hi)]
            x = pad(x, pairs, mode=self.padding_mode)
            padding = 0
        return conv_nd(x, self.weight, bias, self.stride, padding, self.dilation, self.groups, nd=self.nd, layer=layer)

    def to_quantized(self, group_size: int = 64, bits: int = 4, mode: str = "affine", quantize_input: bool = False):
        """``QuantizedConv{nd}d.from_conv(self, ...)`` (what ``mlx.nn.quantize`` calls), or ``self`` left in float
        with the reason in ``self.quantization_skipped`` when it cannot be quantized (layers/quantized_conv.py)."""
        from .quantized_conv import quantize_conv

        return quantize_conv(self, group_size, bits, mode, quantize_input)


class Conv1d(_ConvNd):
    """Torch's ``nn.Conv1d`` on channels-last input.

    Args:
        in_channels (int), out_channels (int), kernel_size (int or tuple): as in torch.
        stride (int or tuple, optional): Default: ``1``.
        padding (int, tuple, 'valid' or 'same', optional): Default: ``0``.
        dilation (int or tuple, optional): Default: ``1``.
        groups (int, optional): Default: ``1``.
        bias (bool, optional): Default: ``True``.
        padding_mode (str, optional): ``'zeros'``, ``'reflect'``, ``'replicate'`` or ``'circular'``.
            Default: ``'zeros'``.

    Shape: input ``(N, L, C_in)`` or ``(L, C_in)``; output ``(N, L_out, C_out)``. Weight ``(C_out, k, C_in/groups)``.

    Example:
        >>> conv = Conv1d(4, 8, 3, padding="same", padding_mode="reflect")
        >>> conv(mx.random.normal((2, 10, 4))).shape   # (2, 10, 8)
    """

    nd = 1


class Conv2d(_ConvNd):
    """Torch's ``nn.Conv2d`` on channels-last input; arguments as :class:`Conv1d`.

    Shape: input ``(N, H, W, C_in)`` or ``(H, W, C_in)``; output ``(N, H_out, W_out, C_out)``.
    Weight ``(C_out, kH, kW, C_in/groups)``.

    Example:
        >>> conv = Conv2d(3, 16, 3, stride=2, padding=1)
        >>> conv(mx.random.normal((1, 32, 32, 3))).shape   # (1, 16, 16, 16)
    """

    nd = 2


class Conv3d(_ConvNd):
    """Torch's ``nn.Conv3d`` on channels-last input; arguments as :class:`Conv1d`.

    Shape: input ``(N, D, H, W, C_in)`` or ``(D, H, W, C_in)``; output ``(N, D_out, H_out, W_out, C_out)``.
    Weight ``(C_out, kD, kH, kW, C_in/groups)``.

    Example:
        >>> conv = Conv3d(2, 4, (1, 3, 3), padding=(0, 1, 1))
        >>> conv(mx.random.normal((1, 5, 8, 8, 2))).shape   # (1, 5, 8, 8, 4)
    """

    nd = 3
