"""Number-representation ops: ``ldexp``, ``frexp``, ``nextafter`` (float bits), ``gcd`` / ``lcm`` (integers).

Elementwise, any layout (both operands brought to the output's by ``aligned_inputs``). ``frexp`` and ``nextafter``
work on the IEEE bits of float16/bfloat16/float32/float64 as torch's (C library) kernels do: ``frexp`` gives a
mantissa in ``[0.5, 1)`` (sign kept) and an int32 exponent, ``(x, 0)`` for 0, inf and NaN, subnormals normalized;
``nextafter(x, y)`` the next representable value from ``x`` towards ``y`` (``y`` when equal, NaN when either is).
``gcd``/``lcm`` follow torch's loops: ``gcd`` of the absolute values by Euclid (as many rounds as the dtype can need,
Fibonacci's bound), ``lcm = |a / gcd * b|`` and 0 when the gcd is 0.
"""

from __future__ import annotations

import mlx.core as mx

from ..registry import kernel, register
from ..spec import DTYPE, SCALAR, Enum
from .elementwise import aligned_inputs
from .misc import _MX_DTYPES

# dtype -> (same-width integer view, mantissa bits, exponent bias for a mantissa in [0.5, 1))
_BITS = {mx.float16: (mx.int16, 10, 14), mx.bfloat16: (mx.int16, 7, 126), mx.float32: (mx.int32, 23, 126),
         mx.float64: (mx.int64, 52, 1022)}
# Euclid's rounds: consecutive Fibonacci numbers are the worst case, F(n) ~ phi^n
_GCD_ROUNDS = {mx.uint8: 13, mx.int8: 12, mx.int16: 24, mx.uint16: 25, mx.int32: 47, mx.uint32: 48, mx.int64: 93,
               mx.uint64: 94}


def _float_bits(x):
    if x.dtype not in _BITS:
        raise TypeError(f"expected a floating-point tensor, got {x.dtype}")
    return _BITS[x.dtype]


def frexp(x):
    """``(mantissa, exponent)`` of ``x`` (see the module docstring)."""
    view, mbits, bias = _float_bits(x)
    finite = mx.isfinite(x) & (x != 0)
    # subnormals: scale into the normal range first (exact), and take the scale back out of the exponent
    small = mx.abs(x) < mx.array(2.0 ** (1 - bias), dtype=x.dtype)
    scaled = mx.where(small, x * mx.array(2.0 ** (mbits + 1), dtype=x.dtype), x)
    bits = scaled.view(view)
    ebits = view.size * 8 - 1 - mbits
    field = (bits >> mbits) & ((1 << ebits) - 1)
    exponent = field.astype(mx.int32) - bias - mx.where(small, mbits + 1, 0).astype(mx.int32)
    mantissa_bits = (bits & ~(((1 << ebits) - 1) << mbits)) | mx.array(bias << mbits, dtype=view)
    mantissa = mantissa_bits.view(x.dtype)
    return [mx.where(finite, mantissa, x), mx.where(finite, exponent, 0).astype(mx.int32)]


def nextafter(x, y):
    view, _, _ = _float_bits(x)
    bits = x.view(view)
    up = (y > x) == (x > 0)  # away from zero
    stepped = mx.where(up, bits + 1, bits - 1).view(x.dtype)
    tiny = mx.array(1, dtype=view).view(x.dtype)  # the smallest subnormal
    from_zero = mx.where(y > 0, tiny, -tiny)
    out = mx.where(x == 0, from_zero, stepped)
    out = mx.where(x == y, y, out)
    return mx.where(mx.isnan(x) | mx.isnan(y), mx.array(float("nan"), dtype=x.dtype), out)


def gcd(a, b):
    if a.dtype not in _GCD_ROUNDS:
        raise TypeError(f"gcd/lcm: expected integer tensors, got {a.dtype}")
    a, b = mx.abs(a), mx.abs(b)
    for _ in range(_GCD_ROUNDS[a.dtype]):
        nonzero = a != 0
        a, b = mx.where(nonzero, b % mx.where(nonzero, a, 1), a), mx.where(nonzero, a, b)
    return b


def lcm(a, b):
    g = gcd(a, b)
    return mx.where(g == 0, mx.zeros_like(g), mx.abs(a // mx.where(g == 0, 1, g) * b))


@kernel("number_bits", inputs=[SCALAR, SCALAR], attrs={"fn": Enum("ldexp", "nextafter", "gcd", "lcm"),
                                                       "dtype": DTYPE})
def k_number_bits(a, b, *, fn, dtype):
    """Binary number ops in the result dtype ``dtype`` (operands broadcast, in one layout)."""
    dtype = _MX_DTYPES[dtype]
    a = a.astype(dtype) if isinstance(a, mx.array) else mx.array(a, dtype=dtype)  # a float64 literal stays exact
    b = b if isinstance(b, mx.array) else mx.array(b)
    if fn == "ldexp":  # torch: self * 2 ** other, in the result dtype
        return a * mx.power(mx.array(2.0, dtype=dtype), b.astype(dtype))
    b = b.astype(dtype)
    a, b = mx.broadcast_arrays(a, b)
    return {"nextafter": nextafter, "gcd": gcd, "lcm": lcm}[fn](a, b)


@kernel("frexp", inputs=[SCALAR])
def k_frexp(x):
    return frexp(mx.array(x))


def _binary(fn):
    def convert(ctx, call):
        specs, perm = aligned_inputs(ctx, call, [call.arg("self"), call.arg("other")])
        ctx.emit("number_bits", specs, {"fn": fn, "dtype": call.meta.dtype}, perm=perm)

    convert.__name__ = f"convert_{fn}"
    return convert


register("aten.ldexp.Tensor", "aten.ldexp_.default")(_binary("ldexp"))
register("aten.nextafter.default", "aten.nextafter_.default")(_binary("nextafter"))
register("aten.gcd.default", "aten.gcd_.default")(_binary("gcd"))
register("aten.lcm.default", "aten.lcm_.default")(_binary("lcm"))


@register("aten.frexp.Tensor")
def convert_frexp(ctx, call):
    from ..convert import Info

    x = call.arg("self")
    perm = ctx.perm(x)
    ctx.emit("frexp", [ctx.tensor(x)], items=[Info(m, perm) for m in call.meta.items])
