"""QuantizedConv1d / QuantizedConv2d / QuantizedConv3d: Porter's convolutions with ``mx.quantize``d weights.

MLX has a quantized ``Linear`` and ``Embedding`` but no quantized convolution. Here the conv weight, MLX layout
``(C_out, *kernel, C_in/groups)``, is flattened to ``(C_out, K)`` with ``K = prod(kernel) * C_in/groups`` (the
reduction of one output value, taps major, channels minor) and quantized along ``K`` in groups of ``group_size``
(affine mode: ``w ~ scale * q + bias`` per group, ``q`` in ``bits`` bits packed into uint32). The packed weight,
``scales`` and ``biases`` are the module's parameters and are frozen (as in ``mlx.nn.QuantizedLinear``); the
conv's own ``bias`` stays a trainable float parameter.

Two ways to compute, same numbers up to float round-off (chosen per call by :func:`uses_quantized_matmul`):

- ``"matmul"``: the zero-padded input unfolded into ``(N * out, K)`` patches (one strided slice per kernel tap,
  same tap/channel order as the weight), then ``mx.quantized_matmul`` (batched over groups). The default off the
  CPU, where MLX has dedicated quantized matmul kernels; that choice is not measured (Porter is developed on Linux
  CPUs: ``benchmarks/quantized.py`` measures it on a GPU). MLX's CPU quantized matmul measured 40-100x slower than
  a float matmul of the same shape.
- ``"dequantize"``: the weight is dequantized for the call (Porter's native multi-threaded pass on the CPU, MLX's
  numbers bit for bit, 4-6x faster than ``mx.dequantize``) and Porter's float conv (``conv_nd``: Winograd,
  depthwise/grouped native kernels) runs with it. The default on the CPU.

Input ``(N, *spatial, C_in)`` or unbatched ``(*spatial, C_in)``, as the float layers.
"""

from __future__ import annotations

import itertools
import math
import warnings

import mlx.core as mx
import mlx.nn as nn

from .conv import (
    _ConvNd,
    conv_nd,
    init_conv_geometry,
    init_conv_params,
)
from . import _native
from .padding import pad

BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)
MODES = ("affine",)
DEFAULT_GROUP_SIZE, DEFAULT_BITS = 64, 4
# "auto": quantized matmul off the CPU (GPU backends), dequantize + float conv on the CPU (see the module docstring);
# "matmul" / "dequantize" force one path (tests, benchmarks/quantized.py)
STRATEGY = "auto"
_STRATEGIES = ("auto", "matmul", "dequantize")
# float32 weights are dequantized by Porter's native kernel when it is active (csrc/quantize_kernels.h); measured
# 4-6x faster than mx.dequantize on a 512x512x3x3 weight (0.4-0.8 ms against 2.3-3.3 ms), same numbers bit for bit
NATIVE_DEQUANTIZE = True


# ---------------------------------------------------------------------------------------------------- checks
def quantization_problem(reduction: int, group_size, bits, mode, dtype=mx.float32) -> str | None:
    """Why a conv whose output values each reduce ``reduction`` weights cannot be quantized, or ``None``.

    ``reduction`` is ``prod(kernel) * C_in/groups``: the weight is quantized along it, in whole groups.
    """
    if mode not in MODES:
        return f"'mode' must be one of {MODES} for convolutions, but got mode={mode!r}"
    if group_size not in GROUP_SIZES or isinstance(group_size, bool):
        return f"'group_size' must be one of {GROUP_SIZES}, but got group_size={group_size!r}"
    if bits not in BITS or isinstance(bits, bool):
        return f"'bits' must be one of {BITS}, but got bits={bits!r}"
    if dtype not in (mx.float32, mx.float16, mx.bfloat16):  # MLX's quantize has no float64 (fails at eval)
        return f"mx.quantize takes float32, float16 or bfloat16 weights, but the weight is {dtype}"
    if reduction % group_size:
        return (
            f"the reduction length prod(kernel_size) * in_channels / groups = {reduction} is not divisible by "
            f"group_size={group_size}"
        )
    return None


def _defaults(group_size, bits):
    """``None`` means MLX's affine defaults (what ``nn.quantize`` passes when not told)."""
    return DEFAULT_GROUP_SIZE if group_size is None else group_size, DEFAULT_BITS if bits is None else bits


def uses_quantized_matmul(x: mx.array) -> bool:
    """Whether a quantized conv on ``x`` runs as ``mx.quantized_matmul`` over unfolded patches (see module doc)."""
    if STRATEGY not in _STRATEGIES:
        raise ValueError(f"[QuantizedConv] STRATEGY must be one of {_STRATEGIES}, but got {STRATEGY!r}")
    if x.size == 0:  # zero batch or channels: conv_nd's rule (bias or zeros of the output shape)
        return False
    if STRATEGY != "auto":
        return STRATEGY == "matmul"
    return mx.default_device() != mx.cpu


# ---------------------------------------------------------------------------------------------------- compute
def dequantize(weight, scales, biases, group_size: int, bits: int, mode: str = "affine") -> mx.array:
    """``mx.dequantize``, through the native kernel (same numbers, 4-6x faster: one multi-threaded pass) when it
    applies: float32 scales, affine mode, the native kernels active (the CPU)."""
    if NATIVE_DEQUANTIZE and mode == "affine" and scales.dtype == mx.float32 and _native.active():
        return _native.dequantize(weight, scales, biases, group_size, bits)
    return mx.dequantize(weight, scales, biases, group_size, bits, mode=mode)


def unfold(x: mx.array, kernel: tuple, stride: tuple, dilation: tuple) -> mx.array:
    """Patches of an already padded ``(N, *spatial, C)`` input: ``(N, *out, prod(kernel), C)``, taps in
    ``itertools.product`` order (the order of the weight's ``*kernel`` axes)."""
    out = [(p - d * (k - 1) - 1) // s + 1 for p, k, s, d in zip(x.shape[1:-1], kernel, stride, dilation)]
    taps = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        window = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dilation, out, stride))
        taps.append(x[(slice(None),) + window])
    return mx.stack(taps, axis=-2)


def quantized_conv_matmul(x, weight, scales, biases, kernel, stride, lo, hi, dilation, groups, group_size, bits):
    """Batched ``(N, *spatial, C_in)`` input, packed weight ``(C_out, K*bits/32)``: the conv as one quantized
    matmul per group over the unfolded input. Returns ``(N, *out, C_out)``."""
    if any(lo) or any(hi):
        x = mx.pad(x, [(0, 0)] + list(zip(lo, hi)) + [(0, 0)])
    patches = unfold(x, kernel, stride, dilation)  # (N, *out, T, C_in)
    n, out, taps, c_in = patches.shape[0], patches.shape[1:-2], patches.shape[-2], patches.shape[-1]
    c_out = weight.shape[0]
    m = n * math.prod(out)
    if groups == 1:
        y = mx.quantized_matmul(patches.reshape(m, taps * c_in), weight, scales, biases, True, group_size, bits)
    else:
        cg = c_in // groups
        p = patches.reshape(m, taps, groups, cg).transpose(2, 0, 1, 3).reshape(groups, m, taps * cg)
        per = c_out // groups
        y = mx.quantized_matmul(
            p,
            weight.reshape(groups, per, weight.shape[-1]),
            scales.reshape(groups, per, scales.shape[-1]),
            biases.reshape(groups, per, biases.shape[-1]),
            True,
            group_size,
            bits,
        )  # (G, M, C_out/G): output channel o is group o // (C_out/G)
        y = y.transpose(1, 0, 2)
    return y.reshape(n, *out, c_out)


# ---------------------------------------------------------------------------------------------------- modules
class _QuantizedConvNd(nn.Module):
    """Generic N-d quantized convolution; ``QuantizedConv1d/2d/3d`` fix ``nd``."""

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
        group_size: int = DEFAULT_GROUP_SIZE,
        bits: int = DEFAULT_BITS,
        mode: str = "affine",
    ):
        super().__init__()
        layer = type(self).__name__
        init_conv_geometry(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                           padding_mode)
        group_size, bits = _defaults(group_size, bits)
        problem = quantization_problem(self.reduction, group_size, bits, mode)
        if problem:
            raise ValueError(f"[{layer}] {problem}.")
        self.group_size, self.bits, self.mode = int(group_size), int(bits), mode
        float_weight = nn.Module()  # torch's default init, then quantized
        init_conv_params(float_weight, self.weight_shape, self.reduction, bias, self.out_channels)
        self.set_float_weight(float_weight.weight)
        if bias:
            self.bias = float_weight.bias

    @property
    def reduction(self) -> int:
        """``K = prod(kernel_size) * in_channels / groups``: the weights one output value reduces."""
        return math.prod(self.kernel_size) * (self.in_channels // self.groups)

    @property
    def weight_shape(self) -> tuple:
        """The float weight's MLX layout ``(C_out, *kernel, C_in/groups)``."""
        return (self.out_channels, *self.kernel_size, self.in_channels // self.groups)

    def set_float_weight(self, weight: mx.array) -> None:
        """Quantize a float weight of layout ``(C_out, *kernel, C_in/groups)`` into this module (frozen)."""
        layer = type(self).__name__
        if not isinstance(weight, mx.array) or tuple(weight.shape) != self.weight_shape:
            got = list(weight.shape) if isinstance(weight, mx.array) else type(weight).__name__
            raise ValueError(f"[{layer}] 'weight' must have shape {list(self.weight_shape)}, but got {got}.")
        problem = quantization_problem(self.reduction, self.group_size, self.bits, self.mode, weight.dtype)
        if problem:
            raise ValueError(f"[{layer}] {problem}.")
        flat = weight.reshape(self.out_channels, self.reduction)
        self.weight, self.scales, self.biases = mx.quantize(flat, self.group_size, self.bits, mode=self.mode)
        self.freeze(recurse=False, keys=["weight", "scales", "biases"])

    def dequantized_weight(self) -> mx.array:
        """The weight the layer computes with, as float ``(C_out, *kernel, C_in/groups)`` (the scales' dtype):
        ``mx.dequantize``'s numbers, from Porter's native multi-threaded pass for float32 on the CPU."""
        return dequantize(self["weight"], self["scales"], self["biases"], self.group_size, self.bits,
                          self.mode).reshape(self.weight_shape)

    @classmethod
    def from_conv(cls, conv: nn.Module, group_size: int = DEFAULT_GROUP_SIZE, bits: int = DEFAULT_BITS,
                  mode: str = "affine"):
        """The quantized form of a float ``porter.layers.Conv{nd}d`` (same configuration, its bias kept as is).

        Raises ``ValueError`` naming the argument when it cannot be quantized (:func:`quantization_problem`);
        ``conv.to_quantized`` leaves such a conv in float instead.
        """
        layer = cls.__name__
        if not isinstance(conv, _ConvNd) or conv.nd != cls.nd:
            raise TypeError(f"[{layer}] 'conv' must be a porter.layers.Conv{cls.nd}d, but got {type(conv).__name__}.")
        padding = conv.padding if isinstance(conv.padding, str) else conv._pad_lo
        q = cls.__new__(cls)
        nn.Module.__init__(q)
        for name in ("in_channels", "out_channels", "kernel_size", "stride", "dilation", "groups", "padding_mode",
                     "_pad_lo", "_pad_hi"):
            setattr(q, name, getattr(conv, name))
        q.padding = padding
        q.group_size, q.bits = _defaults(group_size, bits)
        q.mode = mode
        problem = quantization_problem(q.reduction, q.group_size, q.bits, mode, conv.weight.dtype)
        if problem:
            raise ValueError(f"[{layer}] {problem}.")
        q.set_float_weight(conv.weight)
        if conv.get("bias") is not None:
            q.bias = conv.bias
        return q

    def _extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self.nd:
            s += f", padding={self.padding!r}"
        if self.dilation != (1,) * self.nd:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.get("bias") is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode!r}"
        return s + f", group_size={self.group_size}, bits={self.bits}, mode={self.mode}"

    def _check_input(self, x) -> None:
        layer, nd = type(self).__name__, self.nd
        if not isinstance(x, mx.array):
            raise TypeError(f"[{layer}] 'input' must be an mx.array, but got {type(x).__name__}.")
        if x.ndim not in (nd + 1, nd + 2):
            raise ValueError(
                f"[{layer}] Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to conv{nd}d, but got input "
                f"of size: {list(x.shape)} (layout (N, *spatial, C) or (*spatial, C))"
            )
        if x.shape[-1] != self.in_channels:
            raise ValueError(
                f"[{layer}] Given groups={self.groups}, weight of size {list(self.weight_shape)}, expected input"
                f"{list(x.shape)} to have {self.in_channels} channels, but got {x.shape[-1]} channels instead"
            )
        if x.dtype != self["scales"].dtype:
            raise TypeError(
                f"[{layer}] expected scalar type {self['scales'].dtype} but found {x.dtype} ('input' must have the "
                f"dtype the weight was quantized from)"
            )

    def __call__(self, x: mx.array) -> mx.array:
        layer = type(self).__name__
        self._check_input(x)
        bias = self.get("bias")
        padding, lo, hi = self.padding, self._pad_lo, self._pad_hi
        if self.padding_mode != "zeros":
            # torch pads explicitly first (F.pad order: last spatial dim first), then convolves unpadded
            pairs = [v for a, b in zip(lo[::-1], hi[::-1]) for v in (a, b)]
            x = pad(x, pairs, mode=self.padding_mode)
            padding, lo, hi = 0, (0,) * self.nd, (0,) * self.nd
        if not uses_quantized_matmul(x):
            w = self.dequantized_weight()
            return conv_nd(x, w, bias, self.stride, padding, self.dilation, self.groups, nd=self.nd, layer=layer)
        batched = x.ndim == self.nd + 2
        xb = x if batched else x[None]
        padded = tuple(s + a + b for s, a, b in zip(xb.shape[1:-1], lo, hi))
        extent = tuple(d * (k - 1) + 1 for k, d in zip(self.kernel_size, self.dilation))
        if any(p < e for p, e in zip(padded, extent)):
            raise ValueError(
                f"[{layer}] Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
                f"({' x '.join(map(str, extent))}). Kernel size can't be greater than actual input size"
            )
        y = quantized_conv_matmul(
            xb, self["weight"], self["scales"], self["biases"], self.kernel_size, self.stride, lo, hi,
            self.dilation, self.groups, self.group_size, self.bits,
        )
        if bias is not None:
            y = y + bias
        return y if batched else y[0]


class QuantizedConv1d(_QuantizedConvNd):
    """:class:`porter.layers.Conv1d` with a quantized weight (see the module docstring).

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode: as
            :class:`porter.layers.Conv1d`.
        group_size (int, optional): weights sharing one scale and bias along ``K = k * C_in/groups``; 32, 64 or
            128, and ``K`` must be a multiple of it. Default: ``64``.
        bits (int, optional): 4 or 8. Default: ``4``.
        mode (str, optional): ``'affine'`` (the only mode with per-group biases). Default: ``'affine'``.

    Shape: input ``(N, L, C_in)`` or ``(L, C_in)``; output ``(N, L_out, C_out)``. Parameters: ``weight`` uint32
    ``(C_out, K * bits / 32)``, ``scales`` and ``biases`` ``(C_out, K / group_size)`` (frozen), ``bias``
    ``(C_out,)``.

    Example:
        >>> conv = QuantizedConv1d.from_conv(Conv1d(64, 128, 3, padding=1), group_size=64, bits=8)
        >>> conv(mx.random.normal((2, 100, 64))).shape   # (2, 100, 128)
    """

    nd = 1


class QuantizedConv2d(_QuantizedConvNd):
    """:class:`porter.layers.Conv2d` with a quantized weight; arguments as :class:`QuantizedConv1d`.

    Shape: input ``(N, H, W, C_in)`` or ``(H, W, C_in)``; output ``(N, H_out, W_out, C_out)``;
    ``K = kH * kW * C_in/groups``.

    Example:
        >>> conv = QuantizedConv2d(64, 64, 3, padding=1, group_size=64, bits=4)
        >>> conv(mx.random.normal((1, 56, 56, 64))).shape   # (1, 56, 56, 64)
    """

    nd = 2


class QuantizedConv3d(_QuantizedConvNd):
    """:class:`porter.layers.Conv3d` with a quantized weight; arguments as :class:`QuantizedConv1d`.

    Shape: input ``(N, D, H, W, C_in)`` or ``(D, H, W, C_in)``; output ``(N, D_out, H_out, W_out, C_out)``;
    ``K = kD * kH * kW * C_in/groups``.

    Example:
        >>> conv = QuantizedConv3d(32, 64, 3, stride=(1, 2, 2), padding=1, group_size=32, bits=8)
        >>> conv(mx.random.normal((1, 4, 16, 16, 32))).shape   # (1, 4, 8, 8, 64)
    """

    nd = 3


QUANTIZED_CONV = {1: QuantizedConv1d, 2: QuantizedConv2d, 3: QuantizedConv3d}


def quantize_conv(conv: nn.Module, group_size=None, bits=None, mode: str = "affine", quantize_input: bool = False):
    """What ``Conv{nd}d.to_quantized`` returns: the quantized conv, or ``conv`` itself (float) when it cannot be
    quantized, with the reason in ``conv.quantization_skipped`` and a warning (``nn.quantize`` goes on)."""
    group_size, bits = _defaults(group_size, bits)
    problem = conv_quantization_problem(conv, group_size, bits, mode, quantize_input)
    if problem:
        conv.quantization_skipped = problem
        warnings.warn(f"[{type(conv).__name__}] left in float: {problem}", stacklevel=3)
        return conv
    return QUANTIZED_CONV[conv.nd].from_conv(conv, group_size, bits, mode)


def conv_quantization_problem(conv: nn.Module, group_size, bits, mode="affine", quantize_input=False) -> str | None:
    """Why a float ``porter.layers.Conv{nd}d`` cannot be quantized with these settings, or ``None``."""
    if quantize_input:
        return "quantize_input=True (activation quantization) is not supported for convolutions"
    group_size, bits = _defaults(group_size, bits)
    reduction = math.prod(conv.kernel_size) * (conv.in_channels // conv.groups)
    return quantization_problem(reduction, group_size, bits, mode, conv.weight.dtype)
