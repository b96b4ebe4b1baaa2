"""Conv1d / Conv2d / Conv3d and their functional forms, exact to torch, channels-last.

Input ``(N, *spatial, C_in)`` or unbatched ``(*spatial, C_in)``; weight in MLX's layout
``(C_out, *kernel, C_in/groups)``
(torch's ``(C_out, C_in/groups, *kernel)`` converts with :func:`porter.layers.conv_weights.torch_conv_weight_to_mlx`).
One generic N-d implementation; the public classes only fix the number of spatial dims. This file is the
torch-facing half (argument checks in torch's order, the functional forms, the modules); how a checked conv is
computed (float64, native depthwise/grouped/Winograd kernels, MLX's conv and Porter's strided, dilated and 3-d grouped
forms) is chosen in ``layers/_conv_engine.py``.
"""

from __future__ import annotations

import math
import numbers

import mlx.core as mx
import mlx.nn as nn

from . import _blocked_sum, _conv_engine, _conv_nonfinite, _grad_order
from ._utils import ntuple
from .padding import pad

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")
_PADDING_STRINGS = ("same", "valid")


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

    if x.size == 0:  # zero batch: an empty output of the output shape; zero input channels: torch 2.13 returns
        # (N, 0, *spatial), no output channel and no bias (the bias broadcast over C_out was a shape torch never gives)
        out_spatial = tuple((p - e) // s + 1 for p, e, s in zip(padded, extent, stride))
        y = mx.zeros((x.shape[0], *out_spatial, c_out if c_in else 0), dtype=x.dtype)
        bias = bias if c_in else None
    else:  # the strategy (float64, native, Winograd, MLX's conv...) is the engine's choice
        y = None
        if bias is not None:  # a 1x1 conv: the bias inside the product, its gradient still a blocked sum
            pointwise = lambda b: _conv_engine.pointwise_with_bias(x, weight, b, stride, lo, hi, groups)  # noqa: E731
            y = _blocked_sum.bias_inside((*x.shape[:-1], c_out), x.dtype, bias, pointwise)
            if y is not None:
                bias = None  # added inside the product
        if y is None:
            y = _conv_engine.conv(x, weight, stride, lo, hi, dilation, groups)
        if _conv_nonfinite.multiplies_padding(x.dtype, nd, dilation, groups, c_in):  # torch's NaN at the borders
            y = _conv_nonfinite.with_padding_products(y, weight, spatial, stride, lo, dilation)
    if bias is not None:
        y = _blocked_sum.add_bias(y, bias)  # its gradient over N x spatial in blocks
    return y if batched else y[0]


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


def init_conv_geometry(module: nn.Module, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                       padding_mode) -> None:
    """Check torch's conv module arguments and set them on ``module`` (``module.nd`` spatial dims): channels,
    ``groups``, ``kernel_size``/``stride``/``dilation`` as tuples, padding (``padding`` as given for a string, else
    the low side; ``_pad_lo``/``_pad_hi`` per dim) and ``padding_mode``. Shared by the float and quantized convs."""
    layer, nd = type(module).__name__, module.nd
    module.groups = check_channels(in_channels, out_channels, groups, layer)
    module.in_channels, module.out_channels = int(in_channels), int(out_channels)
    module.kernel_size = ntuple(kernel_size, nd, "kernel_size", layer)
    module.stride = ntuple(stride, nd, "stride", layer)
    module.dilation = ntuple(dilation, nd, "dilation", layer)
    check_positive(module.kernel_size, "kernel_size", layer)
    check_positive(module.stride, "stride", layer)
    check_positive(module.dilation, "dilation", layer)
    module._pad_lo, module._pad_hi = padding_pairs(
        padding, module.kernel_size, module.stride, module.dilation, layer, strict_module=True
    )
    module.padding = padding if isinstance(padding, str) else module._pad_lo
    if padding_mode not in _PADDING_MODES:
        raise ValueError(
            f"[{layer}] padding_mode must be one of {set(_PADDING_MODES)}, but got padding_mode='{padding_mode}'"
        )
    module.padding_mode = padding_mode


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
        init_conv_geometry(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                           padding_mode)
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
        x, weight, bias = _grad_order.weights_first(self, x, self.weight, self.bias)
        padding = self.padding
        if self.padding_mode != "zeros":
            check_arrays(x, weight, bias, self.nd, layer, f"conv{self.nd}d")  # before padding a bad input
            # torch pads explicitly first (F.pad order: last spatial dim first), then convolves unpadded
            pairs = [v for lo, hi in zip(self._pad_lo[::-1], self._pad_hi[::-1]) for v in (lo, hi)]
            x = pad(x, pairs, mode=self.padding_mode)
            padding = 0
        return conv_nd(x, weight, bias, self.stride, padding, self.dilation, self.groups, nd=self.nd, layer=layer)

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
