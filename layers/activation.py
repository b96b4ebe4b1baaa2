"""Transcendental activations, hardswish/hardsigmoid and softmax, torch's ``nn`` names, with torch's gradients.

On the CPU with Porter's native kernels built, each is one multi-threaded, vectorized pass
(``csrc/activation_kernels.h``; MLX's own CPU ops call libm per element on one thread, 15-35x slower than torch), and
so is its gradient. Elsewhere (Apple GPUs, CUDA, no build) the same functions run as MLX ops, with the same results
to float rounding; float64 arrays there take ``_float64.py``'s forms of ``exp``, ``sigmoid`` and ``softmax`` and
``_erf64.py``'s ``erfc`` for GELU (MLX's own compute float64 in float32 precision). Elementwise functions accept any shape; :func:`softmax` takes the axis of
the array as laid out (channels-last: torch's ``dim=1`` of an ``(N, C, H, W)`` tensor is ``axis=-1`` here).
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

from . import _erf64, _float64, _native

APPROXIMATE = ("none", "tanh")
# Last-axis softmax on the native path takes the vector rows kernel (csrc/softmax_kernels.h; 0.96x torch's CPU time
# on ViT-B's 197-key rows against 1.77x for the any-axis kernel). False keeps the any-axis kernel: a switch for
# benchmarks (benchmarks/transformer_ops.py), read when the op is built.
SOFTMAX_ROWS = True
_SQRT_HALF = math.sqrt(0.5)
_GELU_BETA = math.sqrt(2.0 / math.pi)


def _native_ok(x: mx.array, kind: str) -> bool:
    return isinstance(x, mx.array) and mx.issubdtype(x.dtype, mx.floating) and _native.active(kind)


def _in_float32(fn, x: mx.array) -> mx.array:
    """``fn(x)`` computed in float32 for 16-bit ``x`` and rounded once (torch's CPU kernels and the native path do
    the same)."""
    if x.dtype in (mx.float16, mx.bfloat16):
        return fn(x.astype(mx.float32)).astype(x.dtype)
    return fn(x)


def _mlx_form(fn, fn64, x: mx.array) -> mx.array:
    """The MLX-ops path: ``fn64(x)`` for float64 (``_float64.py``: MLX's ``exp``/``sigmoid``/``softmax`` are only
    float32-accurate there), else ``fn`` in float32 for 16-bit ``x``."""
    return fn64(x) if x.dtype == mx.float64 else _in_float32(fn, x)


def _checked(x, what: str) -> mx.array:
    if not isinstance(x, mx.array):
        raise TypeError(f"[{what}] 'x' must be an mx.array but got {type(x).__name__}")
    return x


def relu(x: mx.array) -> mx.array:
    """``max(x, 0)`` elementwise (torch's ``relu``; NaN stays NaN, gradient where the output is positive). Shape:
    any. Floats take one multi-threaded native pass on the CPU (MLX's ``maximum`` is single-threaded there)."""
    x = _checked(x, "relu")
    return _native.relu(x) if _native_ok(x, "relu") else mx.maximum(x, 0)


def hardtanh(x: mx.array, min_val: float = -1.0, max_val: float = 1.0) -> mx.array:
    """``x`` clamped to ``[min_val, max_val]`` elementwise (torch's ``hardtanh``; ``ReLU6`` is ``hardtanh(x, 0, 6)``;
    NaN stays NaN), gradient where ``min_val < x < max_val`` (torch's ``hardtanh_backward``). Shape: any. Floats take
    one multi-threaded native pass on the CPU, and so does the gradient (MLX's ``clip`` and its gradient are
    several single-threaded passes)."""
    x = _checked(x, "hardtanh")
    if not float(min_val) <= float(max_val):
        raise ValueError(f"[hardtanh] 'min_val' cannot be greater than 'max_val' but got {min_val} > {max_val}.")
    if _native_ok(x, "hardtanh"):
        return _native.hardtanh(x, float(min_val), float(max_val))
    return mx.clip(x, min_val, max_val)


def exp(x: mx.array) -> mx.array:
    """``e ** x`` elementwise (torch's ``exp``). Shape: any."""
    x = _checked(x, "exp")
    return _native.activation(x, "exp") if _native_ok(x, "exp") else _mlx_form(mx.exp, _float64.exp, x)


def sigmoid(x: mx.array) -> mx.array:
    """``1 / (1 + e ** -x)`` elementwise (torch's ``sigmoid``). Shape: any."""
    x = _checked(x, "sigmoid")
    return _native.activation(x, "sigmoid") if _native_ok(x, "sigmoid") else _mlx_form(mx.sigmoid, _float64.sigmoid, x)


def silu(x: mx.array) -> mx.array:
    """``x * sigmoid(x)`` elementwise (torch's ``silu``, a.k.a. swish). Shape: any."""
    x = _checked(x, "silu")
    if _native_ok(x, "silu"):
        return _native.activation(x, "silu")
    return _mlx_form(lambda a: a * mx.sigmoid(a), lambda a: a * _float64.sigmoid(a), x)


def tanh(x: mx.array) -> mx.array:
    """Hyperbolic tangent elementwise (torch's ``tanh``). Shape: any."""
    x = _checked(x, "tanh")
    return _native.activation(x, "tanh") if _native_ok(x, "tanh") else _in_float32(mx.tanh, x)


def _hard_gate(a: mx.array) -> mx.array:
    return mx.minimum(mx.maximum(a + 3, 0), 6)


def hardswish(x: mx.array) -> mx.array:
    """``x * min(max(x + 3, 0), 6) / 6`` elementwise (torch's ``hardswish``, its gradient branches included). Shape:
    any. One native pass on the CPU (MLX's ops take four single-threaded passes)."""
    x = _checked(x, "hardswish")
    if _native_ok(x, "hardswish"):
        return _native.activation(x, "hardswish")
    return _in_float32(lambda a: a * _hard_gate(a) / 6, x)


def hardsigmoid(x: mx.array) -> mx.array:
    """``min(max(x + 3, 0), 6) / 6`` elementwise (torch's ``hardsigmoid``). Shape: any."""
    x = _checked(x, "hardsigmoid")
    if _native_ok(x, "hardsigmoid"):
        return _native.activation(x, "hardsigmoid")
    return _mlx_form(lambda a: _hard_gate(a) / 6, _hardsigmoid64, x)


# torch's double hardsigmoid backward multiplies by 1/6 rounded to float32 (a `1.0f / 6.0f` constant), 3e-8 from
# 1/6; the native kernel does too
_SIXTH_F32 = 0.1666666716337204


def _hardsigmoid64(a: mx.array) -> mx.array:
    """``gate / 6`` whose gradient is ``gate' * _SIXTH_F32``, as torch's float64 hardsigmoid (value within an ulp)."""
    gate = _hard_gate(a)
    slope = gate * _SIXTH_F32
    return slope + mx.stop_gradient(gate / 6 - slope)


def gelu(x: mx.array, approximate: str = "none") -> mx.array:
    """torch's ``gelu``: ``x * Phi(x)`` (``approximate="none"``, via erf) or its tanh approximation
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (``approximate="tanh"``). Shape: any.

    Args:
        x (mx.array): input.
        approximate (str, optional): ``"none"`` or ``"tanh"``. Default: ``"none"``.
    """
    x = _checked(x, "gelu")
    if approximate not in APPROXIMATE:
        raise ValueError(f"[gelu] 'approximate' must be 'none' or 'tanh' but got {approximate!r}")
    if _native_ok(x, "gelu"):
        return _native.activation(x, "gelu" if approximate == "none" else "gelu_tanh")
    if approximate == "tanh":
        return _in_float32(lambda a: 0.5 * a * (1 + mx.tanh(_GELU_BETA * (a + 0.044715 * a**3))), x)
    # float64: erfc(-x / sqrt 2) = 1 + erf(x / sqrt 2) from float64 tables (MLX's erf is float32-accurate there)
    return _mlx_form(lambda a: 0.5 * a * (1 + mx.erf(a * _SQRT_HALF)),
                     lambda a: 0.5 * a * _erf64.erfc(a * -_SQRT_HALF), x)


def softmax(x: mx.array, axis: int = -1) -> mx.array:
    """torch's ``softmax`` along ``axis`` of the array (any axis; computed in float32 for 16-bit inputs).

    Args:
        x (mx.array): input, any shape with at least one dim.
        axis (int, optional): the array axis to normalise over. Default: ``-1``.
    """
    x = _checked(x, "softmax")
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"[softmax] 'axis' must be an int but got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"[softmax] 'axis' must be in [{-x.ndim}, {x.ndim - 1}] for a {x.ndim}-d input but got {axis}")
    if _native_ok(x, "softmax"):
        return _native.softmax(x, axis, SOFTMAX_ROWS)
    return _mlx_form(lambda a: mx.softmax(a, axis=axis), lambda a: _float64.softmax(a, axis), x)


class _Elementwise(nn.Module):
    fn = staticmethod(exp)

    def __call__(self, x: mx.array) -> mx.array:
        return type(self).fn(x)


class Sigmoid(_Elementwise):
    """torch's ``nn.Sigmoid``. Shape: any.

    Example:
        >>> Sigmoid()(mx.zeros((2, 3))).tolist()[0]
        [0.5, 0.5, 0.5]
    """

    fn = staticmethod(sigmoid)


class SiLU(_Elementwise):
    """torch's ``nn.SiLU`` (``x * sigmoid(x)``). Shape: any.

    Example:
        >>> SiLU()(mx.random.normal((1, 56, 56, 96))).shape
        (1, 56, 56, 96)
    """

    fn = staticmethod(silu)


class Tanh(_Elementwise):
    """torch's ``nn.Tanh``. Shape: any.

    Example:
        >>> Tanh()(mx.zeros((4,))).tolist()
        [0.0, 0.0, 0.0, 0.0]
    """

    fn = staticmethod(tanh)


class Hardswish(_Elementwise):
    """torch's ``nn.Hardswish``. Shape: any.

    Example:
        >>> Hardswish()(mx.array([-4.0, 0.0, 1.0, 4.0])).tolist()
        [-0.0, 0.0, 0.6666666865348816, 4.0]
    """

    fn = staticmethod(hardswish)


class Hardsigmoid(_Elementwise):
    """torch's ``nn.Hardsigmoid``. Shape: any.

    Example:
        >>> Hardsigmoid()(mx.array([-4.0, 0.0, 4.0])).tolist()
        [0.0, 0.5, 1.0]
    """

    fn = staticmethod(hardsigmoid)


class GELU(nn.Module):
    """torch's ``nn.GELU``. Shape: any.

    Args:
        approximate (str, optional): ``"none"`` (erf) or ``"tanh"``. Default: ``"none"``.

    Example:
        >>> GELU(approximate="tanh")(mx.random.normal((1, 197, 768))).shape
        (1, 197, 768)
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in APPROXIMATE:
            raise ValueError(f"[GELU] 'approximate' must be 'none' or 'tanh' but got {approximate!r}")
        self.approximate = approximate

    def __call__(self, x: mx.array) -> mx.array:
        return gelu(x, self.approximate)


class Softmax(nn.Module):
    """torch's ``nn.Softmax`` over an array axis.

    Args:
        axis (int, optional): the axis of the array (channels-last layout) to normalise over. Default: ``-1``.

    Example:
        >>> Softmax(axis=-1)(mx.zeros((2, 4))).tolist()[0]
        [0.25, 0.25, 0.25, 0.25]
    """

    def __init__(self, axis: int = -1):
        super().__init__()
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise TypeError(f"[Softmax] 'axis' must be an int but got {axis!r}")
        self.axis = axis

    def __call__(self, x: mx.array) -> mx.array:
        return softmax(x, self.axis)
