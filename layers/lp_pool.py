"""Power-average pooling (LPPool1d/2d/3d and lp_pool1d/2d/3d), exact to torch, channels-last.

Torch does not compute ``(sum |x|^p)^(1/p)`` (docs/SEMANTICS.md §7.1). It computes
``(avg_pool(x ** p) * prod(kernel)) ** (1/p)``: ``x ** p`` without ``abs`` (odd ``p`` and negative sums give NaN,
``p = 1`` gives the signed sum), and ceil-mode partial windows are rescaled by ``kernel / count`` because the
average divides by the real elements only. ``p = +inf`` / ``-inf`` are max / min of ``|x|`` via max pooling.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn

from . import _export, _native, _window_sum
from ._utils import as_batched
from .avg_pool import avg_pool, check_avg_pool_args, check_avg_pool_input

_LOW_PRECISION = (mx.float16, mx.bfloat16)


def _kernel(kernel_size, nd: int, layer: str) -> tuple:
    """Torch unpacks ``kernel_size`` without broadcasting a length-1 tuple (``kw, kh = _pair(k)``)."""
    if nd == 1:
        if isinstance(kernel_size, bool) or not isinstance(kernel_size, numbers.Integral):
            raise TypeError(
                f"[{layer}] 'kernel_size' must be an int for 1-d LP pooling (torch multiplies by it), "
                f"but got {kernel_size!r}"
            )
        return (int(kernel_size),)
    if isinstance(kernel_size, (list, tuple)):
        if len(kernel_size) != nd:
            raise ValueError(f"[{layer}] 'kernel_size' must be an int or a tuple of {nd} ints, but got {kernel_size!r}")
        return tuple(kernel_size)
    return (kernel_size,) * nd


def _check_norm_type(norm_type, layer: str) -> None:
    if isinstance(norm_type, bool) or not isinstance(norm_type, numbers.Real):
        raise TypeError(f"[{layer}] 'norm_type' must be an int or a float, but got {norm_type!r}")


def _wide(dtype):
    """The type each stage is computed in: float32 for fp16/bf16/float32 (then rounded), float64 stays float64."""
    return mx.float64 if dtype == mx.float64 else mx.float32


def _round(a: mx.array, dtype) -> mx.array:
    # torch rounds to fp16/bf16 after every stage of the composite (pow, avg, mul, pow)
    return a.astype(dtype) if dtype in _LOW_PRECISION else a


def _pow_forward(x: mx.array, exponent: float, bf16_steps: bool = False) -> mx.array:
    """``x ** exponent`` as torch's CPU kernel computes it: exact shortcuts for the common exponents (also much
    faster than a generic pow), ``std::pow`` otherwise. ``bf16_steps``: torch's bfloat16 kernel rounds the square
    inside ``x ** 3`` and ``x ** -2`` to bfloat16 (its fp16 kernel rounds only the result); so does this."""
    if exponent == 1:
        return x
    if exponent == 2:
        return x * x
    if exponent == 3:
        return _bf16_step(x * x, bf16_steps) * x
    if exponent == 0.5:
        return mx.sqrt(x)
    if exponent == -0.5:
        return mx.rsqrt(x)
    if exponent == -1:
        return mx.reciprocal(x)
    if exponent == -2:
        return mx.reciprocal(_bf16_step(x * x, bf16_steps))
    return mx.power(x, exponent)


def _bf16_step(a: mx.array, bf16_steps: bool) -> mx.array:
    return a.astype(mx.bfloat16).astype(a.dtype) if bf16_steps else a


@lru_cache(maxsize=64)
def _pow_function(exponent: float, bf16_steps: bool):
    """``x ** exponent`` with torch's pow backward ``grad * (p * x ** (p - 1))`` (the shortcuts' own derivatives
    differ from it at 0 and inf, e.g. ``1 / (x * x)`` at inf gives inf * 0 = NaN where torch gives 0)."""

    @mx.custom_function
    def power(x):
        return _pow_forward(x, exponent, bf16_steps)

    @power.vjp
    def power_vjp(x, cotangent, output):  # a single primal arrives as the array itself
        return cotangent * (exponent * _pow_forward(x, exponent - 1))

    return power


def _pow(x: mx.array, exponent: float, dtype=None) -> mx.array:
    """``x ** exponent`` for an input of ``dtype`` computed in a wider ``x`` (see :func:`_pow_forward`).

    Torch's fp16/bf16 pow takes a Python float exponent in the tensor's dtype (``x ** (1 / 3)`` on bfloat16 uses
    0.333984375), so the exponent is rounded the same way here."""
    if dtype in _LOW_PRECISION:
        exponent = mx.array(exponent, dtype=mx.float32).astype(dtype).astype(mx.float32).item()
    if exponent == 1:
        return x
    if _export.active():  # its custom VJP cannot be serialized; the forward is the same
        _export.note("LP pool's pow with torch's VJP (mx.custom_function) -> its forward ops")
        return _pow_forward(x, float(exponent), dtype == mx.bfloat16)
    return _pow_function(float(exponent), dtype == mx.bfloat16)(x)


def _root(a: mx.array, scale: int, inv_p: float, dtype) -> mx.array:
    """``(a * scale) ** inv_p`` with torch's gradient: exactly 0 where ``a == 0`` (not pow's inf * 0 = NaN).

    Torch's composite passes ``a`` through ``sign(a) * relu(|a|)``; relu's backward selects 0 at ``a == 0``. The
    ``where`` below does the same: the guarded branch never sees 0, and the value at 0 is a constant (``0 ** inv_p``:
    0 for p > 0, inf for p < 0) that carries no gradient.
    """
    wide = _wide(dtype)
    work = a.astype(wide)
    zero = work == 0
    safe = mx.where(zero, 1.0, work)
    root = _round(_pow(_round(safe * scale, dtype).astype(wide), inv_p, dtype), dtype)
    at_zero = mx.array(0.0 if inv_p > 0 else float("inf"), dtype=root.dtype)
    return mx.where(zero, at_zero, root)


def lp_pool(x: mx.array, nd: int, norm_type, kernel_size, stride=None, ceil_mode: bool = False, *,
            layer: str = None) -> mx.array:
    """Generic N-d LP pool on ``(N, *spatial, C)`` or ``(*spatial, C)`` input, torch's formula."""
    layer = layer or f"lp_pool{nd}d"
    _check_norm_type(norm_type, layer)
    if math.isinf(norm_type):
        from .max_pool import max_pool  # p = +-inf is torch's max_pool of |x| (padding 0, dilation 1)

        if norm_type > 0:
            return max_pool(mx.abs(x), nd, kernel_size, stride, 0, 1, ceil_mode, layer=layer)
        return -max_pool(-mx.abs(x), nd, kernel_size, stride, 0, 1, ceil_mode, layer=layer)
    k = _kernel(kernel_size, nd, layer)
    _, s, _ = check_avg_pool_args(nd, k, stride, 0, ceil_mode, True, None, layer)
    if norm_type == 0:
        raise ValueError(f"[{layer}] 'norm_type' must be non-zero (torch raises ZeroDivisionError: 1.0 / norm_type)")
    dtype = x.dtype
    if dtype == mx.bool_:
        x, dtype = x.astype(mx.int64), mx.int64
    integer = not mx.issubdtype(dtype, mx.floating)
    if integer and isinstance(norm_type, numbers.Integral) and dtype != mx.int64:
        # int ** int keeps the dtype, and torch's avg_pool has no kernel for integers other than int64
        raise TypeError(f"[{layer}] 'input': \"avg_pool{max(nd, 2)}d\" not implemented for '{dtype}' (an integer "
                        f"norm_type keeps the integer dtype; int64, floating input or a float norm_type work)")
    if integer and isinstance(norm_type, numbers.Integral):
        # int ** int stays integral in torch, and the average is then an integer (truncating) average
        if norm_type < 0:
            raise ValueError(f"[{layer}] 'norm_type': Integers to negative integer powers are not allowed.")
        powered = mx.power(x.astype(mx.int64), int(norm_type))
    else:
        if integer:
            x, dtype = x.astype(mx.float32), mx.float32  # int ** float promotes to the default float
        if dtype in (mx.float32, mx.float64) and _window_sum.native(x, _window_sum.POWER_KERNEL):
            # x ** p and its window average in one pass (layers/csrc); fp16/bf16 round between torch's stages
            k = tuple(int(v) for v in k)
            xb, batched = as_batched(x, nd, layer)
            out = check_avg_pool_input(xb, nd, k, s, (0,) * nd, bool(ceil_mode), layer)
            a = _window_sum.native_power_average(xb, out, k, s, float(norm_type))
            return _native.lp_root(a if batched else a[0], math.prod(k), 1.0 / norm_type)
        powered = _round(_pow(x.astype(_wide(dtype)), float(norm_type), dtype), dtype)
    a = avg_pool(powered, nd, k, stride, 0, ceil_mode, True, None, layer=layer)
    scale = math.prod(k)
    out_dtype = mx.float32 if integer else dtype
    return _root(a, scale, 1.0 / norm_type, out_dtype)


def lp_pool1d(x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """LP pool on ``(N, L, C)`` or ``(L, C)``; torch's ``lp_pool1d`` (``kernel_size`` must be an int)."""
    return lp_pool(x, 1, norm_type, kernel_size, stride, ceil_mode, layer="lp_pool1d")


def lp_pool2d(x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """LP pool on ``(N, H, W, C)`` or ``(H, W, C)``; torch's ``lp_pool2d``."""
    return lp_pool(x, 2, norm_type, kernel_size, stride, ceil_mode, layer="lp_pool2d")


def lp_pool3d(x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """LP pool on ``(N, D, H, W, C)`` or ``(D, H, W, C)``; torch's ``lp_pool3d``."""
    return lp_pool(x, 3, norm_type, kernel_size, stride, ceil_mode, layer="lp_pool3d")


class _LPPoolNd(nn.Module):
    nd = 0

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        name = type(self).__name__
        _check_norm_type(norm_type, name)
        if not math.isinf(norm_type):
            k = _kernel(kernel_size, self.nd, name)
            check_avg_pool_args(self.nd, k, stride, 0, ceil_mode, True, None, name)
            if norm_type == 0:
                raise ValueError(f"[{name}] 'norm_type' must be non-zero (torch: ZeroDivisionError in 1.0 / norm_type)")
        # the module passes float(norm_type), as torch's LPPool modules do
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = float(norm_type), kernel_size, stride, ceil_mode

    def __call__(self, x: mx.array) -> mx.array:
        return lp_pool(x, self.nd, self.norm_type, self.kernel_size, self.stride, self.ceil_mode,
                       layer=type(self).__name__)

    def _extra_repr(self) -> str:
        return f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, " \
               f"ceil_mode={self.ceil_mode}"


class LPPool1d(_LPPoolNd):
    """Torch's ``nn.LPPool1d`` on channels-last input: ``(avg_pool(x ** p) * k) ** (1/p)``.

    Args:
        norm_type (int or float): ``p``; non-zero, ``inf`` / ``-inf`` give max / min of ``|x|``.
        kernel_size (int): window length.
        stride (int, optional): window step. Default: ``kernel_size``.
        ceil_mode (bool, optional): ceil instead of floor for the output length. Default: ``False``.

    Shape: input ``(N, L, C)`` or ``(L, C)``; output ``(N, L_out, C)`` or ``(L_out, C)``.

    Example:
        >>> LPPool1d(2, 3, stride=2)(mx.ones((2, 9, 4))).shape
        (2, 4, 4)
    """

    nd = 1


class LPPool2d(_LPPoolNd):
    """Torch's ``nn.LPPool2d`` on channels-last input: ``(avg_pool(x ** p) * kH * kW) ** (1/p)``.

    Args:
        norm_type (int or float): ``p``; non-zero, ``inf`` / ``-inf`` give max / min of ``|x|``.
        kernel_size (int or tuple): window ``(kH, kW)``.
        stride (int or tuple, optional): window step. Default: ``kernel_size``.
        ceil_mode (bool, optional): ceil instead of floor for the output size. Default: ``False``.

    Shape: input ``(N, H, W, C)`` or ``(H, W, C)``; output ``(N, H_out, W_out, C)`` or ``(H_out, W_out, C)``.

    Example:
        >>> LPPool2d(2, (3, 2))(mx.ones((1, 9, 8, 3))).shape
        (1, 3, 4, 3)
    """

    nd = 2


class LPPool3d(_LPPoolNd):
    """Torch's ``nn.LPPool3d`` on channels-last input: ``(avg_pool(x ** p) * kD * kH * kW) ** (1/p)``.

    Args:
        norm_type (int or float): ``p``; non-zero, ``inf`` / ``-inf`` give max / min of ``|x|``.
        kernel_size (int or tuple): window ``(kD, kH, kW)``.
        stride (int or tuple, optional): window step. Default: ``kernel_size``.
        ceil_mode (bool, optional): ceil instead of floor for the output size. Default: ``False``.

    Shape: input ``(N, D, H, W, C)`` or ``(D, H, W, C)``; output ``(N, D_out, H_out, W_out, C)``.

    Example:
        >>> LPPool3d(2, 2)(mx.ones((1, 4, 4, 4, 3))).shape
        (1, 2, 2, 2, 3)
    """

    nd = 3
