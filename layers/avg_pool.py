"""Average pooling (AvgPool1d/2d/3d and avg_pool1d/2d/3d), exact to torch, channels-last.

One generic N-d implementation (:func:`avg_pool`) and thin public classes. This file checks the arguments and the
input in torch's order; the window sum, native or pure MLX, is ``layers/_window_sum.py``'s
(:func:`~porter.layers._window_sum.sliding_average`).
"""

from __future__ import annotations

import numbers
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from . import _window_sum
from ._utils import as_batched, format_shape, plan_cache, pool_output_size

_ORDINAL = {1: "one", 2: "two", 3: "three"}


# ---------------------------------------------------------------------------------------------------- arguments
def _pool_tuple(value, nd: int, name: str, layer: str, fn: str, *, allow_empty: bool = False) -> Optional[tuple]:
    """Torch's int-or-sequence rule for pooling arguments, with its messages (length 1 broadcasts)."""
    if isinstance(value, (list, tuple)):
        items = tuple(value)
        if allow_empty and len(items) == 0:
            return None  # stride=[] means "same as kernel_size", as in torch
        if nd == 1 and len(items) != 1:
            raise ValueError(f"[{layer}] {fn}() argument '{name}' should contain one int (got {len(items)})")
        if nd > 1 and len(items) not in (1, nd):
            either = "either " if nd == 2 else ""
            omitted = "omitted, " if name == "stride" else ""
            raise ValueError(
                f"[{layer}] {fn}: {name} must {either}be {omitted}a single int, or a tuple of {_ORDINAL[nd]} ints "
                f"(got {items!r})"
            )
        items = items * nd if len(items) == 1 else items
    else:
        items = (value,) * nd
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise TypeError(
                f"[{layer}] {fn}(): argument '{name}' must be tuple of ints, not {type(item).__name__} (got {value!r})"
            )
    return tuple(int(i) for i in items)


def _check_bool(value, name: str, layer: str, fn: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"[{layer}] {fn}(): argument '{name}' must be bool, not {type(value).__name__}")
    return value


def _half_kernel(k: int) -> int:
    # ATen's ((k - 1) * dilation + 1) / 2 with dilation 1, in C integer division (toward zero: k = -1 gives 0)
    return int(k / 2)


def check_avg_pool_args(
    nd: int, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, layer: str
) -> tuple[tuple, tuple, tuple]:
    """Validate the input-independent arguments in torch's order; return ``(kernel, stride, padding)``.

    Order (measured on torch 2.13): argument types and lengths, ``divisor_override == 0``, then per axis
    ``stride == 0``, ``padding < 0``, ``padding > kernel // 2``, then ``kernel <= 0`` and ``stride <= 0``.
    """
    fn = f"avg_pool{nd}d"
    k = _pool_tuple(kernel_size, nd, "kernel_size", layer, fn)
    s = None if stride is None else _pool_tuple(stride, nd, "stride", layer, fn, allow_empty=True)
    p = _pool_tuple(padding, nd, "padding", layer, fn)
    s = k if s is None else s
    _check_bool(ceil_mode, "ceil_mode", layer, fn)
    _check_bool(count_include_pad, "count_include_pad", layer, fn)
    if divisor_override is not None:
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, numbers.Integral):
            raise TypeError(
                f"[{layer}] {fn}(): argument 'divisor_override' must be int, not {type(divisor_override).__name__}"
            )
        if divisor_override == 0:
            raise ValueError(f"[{layer}] 'divisor_override': divisor must be not zero")
    for ki, si, pi in zip(k, s, p):
        if si == 0:
            raise ValueError(f"[{layer}] 'stride': stride should not be zero")
        if pi < 0:
            raise ValueError(f"[{layer}] 'padding': pad must be non-negative, but got pad: {pi}")
        if pi > _half_kernel(ki):
            raise ValueError(
                f"[{layer}] 'padding': pad should be at most half of effective kernel size, but got pad={pi}, "
                f"kernel_size={ki} and dilation=1"
            )
    # torch runs 1d as 2d with a kernel and stride of 1 on a singleton H axis, and prints that axis too
    names, shown_k, shown_s = ("HW", (1,) + k, (1,) + s) if nd == 1 else ({2: "HW", 3: "THW"}[nd], k, s)
    if any(ki <= 0 for ki in k):
        got = " ".join(f"k{n}: {ki}" for n, ki in zip(names, shown_k))
        raise ValueError(f"[{layer}] 'kernel_size': kernel size should be greater than zero, but got {got}")
    if any(si <= 0 for si in s):
        got = " ".join(f"d{n}: {si}" for n, si in zip(names, shown_s))
        raise ValueError(f"[{layer}] 'stride': stride should be greater than zero, but got {got}")
    return k, s, p


_checked_args = plan_cache(check_avg_pool_args)


def check_avg_pool_input(x: mx.array, nd: int, k, s, p, ceil_mode: bool, layer: str) -> tuple[int, ...]:
    """Input checks that follow the argument checks (batched ``x``); return the output spatial size."""
    spatial, channels = tuple(x.shape[1 : 1 + nd]), x.shape[-1]
    if channels == 0 or any(n == 0 for n in spatial):
        raise ValueError(
            f"[{layer}] 'input': Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with optional 0 dim batch size "
            f"for input, but got: {list(x.shape)} (non-batch dimensions must be non-empty)"
        )
    if not (mx.issubdtype(x.dtype, mx.floating) or x.dtype == mx.int64):
        raise TypeError(f"[{layer}] 'input': \"avg_pool{nd}d\" not implemented for '{x.dtype}' (float or int64 only)")
    if nd == 3 and any(n < ki for n, ki in zip(spatial, k)):
        raise ValueError(
            f"[{layer}] 'input': input image (T: {spatial[0]} H: {spatial[1]} W: {spatial[2]}) smaller than kernel "
            f"size (kT: {k[0]} kH: {k[1]} kW: {k[2]})"
        )
    out = tuple(pool_output_size(n, ki, si, pi, 1, ceil_mode) for n, ki, si, pi in zip(spatial, k, s, p))
    if any(o < 1 for o in out):
        # torch runs 1d as 2d on a singleton H axis, so its message shows C x 1 x L
        lead = (channels, 1) if nd == 1 else (channels,)
        raise ValueError(
            f"[{layer}] 'input': Given input size: ({format_shape(lead + spatial)}). Calculated output size: "
            f"({format_shape(lead + out)}). Output size is too small"
        )
    return out


# ---------------------------------------------------------------------------------------------------- compute
def avg_pool(
    x: mx.array,
    nd: int,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
    *,
    layer: Optional[str] = None,
) -> mx.array:
    """Generic N-d average pool on ``(N, *spatial, C)`` or ``(*spatial, C)`` input (torch semantics)."""
    layer = layer or f"avg_pool{nd}d"
    k, s, p = _checked_args(nd, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, layer)
    return avg_pool_checked(x, nd, k, s, p, ceil_mode, count_include_pad, divisor_override, layer)


def avg_pool_checked(x: mx.array, nd: int, k: tuple, s: tuple, p: tuple, ceil_mode: bool, count_include_pad: bool,
                     divisor_override: Optional[int], layer: str) -> mx.array:
    """:func:`avg_pool` with arguments already normalised by :func:`check_avg_pool_args` (modules validate once)."""
    xb, batched = as_batched(x, nd, layer)
    out_shape = check_avg_pool_input(xb, nd, k, s, p, ceil_mode, layer)  # cheaper than a cached plan's key
    out = _window_sum.sliding_average(xb, out_shape, k, s, p, count_include_pad, divisor_override)
    return out if batched else out[0]


# ---------------------------------------------------------------------------------------------------- functional
def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-d average pool on ``(N, L, C)`` or ``(L, C)``; torch's ``avg_pool1d`` (no ``divisor_override``)."""
    return avg_pool(x, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None, layer="avg_pool1d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """2-d average pool on ``(N, H, W, C)`` or ``(H, W, C)``; torch's ``avg_pool2d``."""
    return avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                    layer="avg_pool2d")


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """3-d average pool on ``(N, D, H, W, C)`` or ``(D, H, W, C)``; torch's ``avg_pool3d``."""
    return avg_pool(x, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                    layer="avg_pool3d")


# ---------------------------------------------------------------------------------------------------- modules
class _AvgPoolNd(nn.Module):
    nd = 0

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        name = type(self).__name__
        # validate once here: the call only checks the input
        self._checked = check_avg_pool_args(self.nd, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                            divisor_override, name)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def __call__(self, x: mx.array) -> mx.array:
        return avg_pool_checked(x, self.nd, *self._checked, self.ceil_mode, self.count_include_pad,
                                self.divisor_override, type(self).__name__)

    def _extra_repr(self) -> str:
        extra = f", divisor_override={self.divisor_override}" if self.divisor_override is not None else ""
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"ceil_mode={self.ceil_mode}, count_include_pad={self.count_include_pad}{extra}")


class AvgPool1d(_AvgPoolNd):
    """Torch's ``nn.AvgPool1d`` on channels-last input.

    Args:
        kernel_size (int or tuple): window length.
        stride (int or tuple, optional): window step. Default: ``kernel_size``.
        padding (int or tuple, optional): implicit zero padding on both sides, at most ``kernel_size // 2``.
            Default: ``0``.
        ceil_mode (bool, optional): use ceil instead of floor for the output length. Default: ``False``.
        count_include_pad (bool, optional): count the zero padding in the divisor. Default: ``True``.

    Shape: input ``(N, L, C)`` or ``(L, C)``; output ``(N, L_out, C)`` or ``(L_out, C)``.

    Example:
        >>> pool = AvgPool1d(3, stride=2, padding=1)
        >>> pool(mx.ones((2, 10, 4))).shape
        (2, 5, 4)
    """

    nd = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad, None)


class AvgPool2d(_AvgPoolNd):
    """Torch's ``nn.AvgPool2d`` on channels-last input.

    Args:
        kernel_size (int or tuple): window size ``(kH, kW)``.
        stride (int or tuple, optional): window step. Default: ``kernel_size``.
        padding (int or tuple, optional): implicit zero padding, at most half the kernel. Default: ``0``.
        ceil_mode (bool, optional): ceil instead of floor for the output size. Default: ``False``.
        count_include_pad (bool, optional): count the zero padding in the divisor. Default: ``True``.
        divisor_override (int, optional): divide every window sum by this (non-zero, may be negative).
            Default: ``None``.

    Shape: input ``(N, H, W, C)`` or ``(H, W, C)``; output ``(N, H_out, W_out, C)`` or ``(H_out, W_out, C)``.

    Example:
        >>> pool = AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        >>> pool(mx.ones((2, 9, 9, 4))).shape
        (2, 5, 5, 4)
    """

    nd = 2


class AvgPool3d(_AvgPoolNd):
    """Torch's ``nn.AvgPool3d`` on channels-last input.

    Args:
        kernel_size (int or tuple): window size ``(kD, kH, kW)``; every input extent must be at least the kernel.
        stride (int or tuple, optional): window step. Default: ``kernel_size``.
        padding (int or tuple, optional): implicit zero padding, at most half the kernel. Default: ``0``.
        ceil_mode (bool, optional): ceil instead of floor for the output size. Default: ``False``.
        count_include_pad (bool, optional): count the zero padding in the divisor. Default: ``True``.
        divisor_override (int, optional): divide every window sum by this. Default: ``None``.

    Shape: input ``(N, D, H, W, C)`` or ``(D, H, W, C)``; output ``(N, D_out, H_out, W_out, C)``.

    Example:
        >>> pool = AvgPool3d(2)
        >>> pool(mx.ones((1, 4, 4, 4, 3))).shape
        (1, 2, 2, 2, 3)
    """

    nd = 3
