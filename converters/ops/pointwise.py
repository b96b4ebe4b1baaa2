"""Pointwise arithmetic beyond one binary op: addcmul, addcdiv, lerp, hypot, fmod.

Each runs in whatever layout its inputs have (``elementwise.aligned_inputs`` brings them to one) and follows
torch's formula, so the rounding matches: ``lerp`` switches formula at ``|weight| = 0.5`` as torch's kernel does,
``hypot`` scales by the larger operand (no overflow for ``|x| > 1.8e19`` in float32), ``fmod`` keeps the
dividend's sign (C's ``fmod``; ``remainder`` keeps the divisor's).
"""

from __future__ import annotations

import mlx.core as mx

from ..ir import Ref
from ..registry import kernel, register
from ..spec import SCALAR, Enum, Float
from .elementwise import _as_array, _both, aligned_inputs


def _lerp(start, end, weight):
    return mx.where(mx.abs(weight) < 0.5, start + weight * (end - start), end - (end - start) * (1 - weight))


def _hypot(a, b):
    a, b = mx.abs(a), mx.abs(b)
    big, small = mx.maximum(a, b), mx.minimum(a, b)
    ratio = mx.where(big > 0, small / mx.where(big > 0, big, 1), 0)
    out = big * mx.sqrt(1 + ratio * ratio)
    return mx.where(mx.isinf(a) | mx.isinf(b), mx.array(float("inf"), out.dtype), out)  # hypot(inf, nan) = inf


def _fmod(a, b):
    magnitude = mx.remainder(mx.abs(a), mx.abs(b))  # both operands non-negative: remainder == fmod exactly
    return mx.where(a < 0, -magnitude, magnitude)


_TERNARY = {
    "addcmul": lambda x, t1, t2, value: x + value * t1 * t2,
    "addcdiv": lambda x, t1, t2, value: x + value * (t1 / t2),
    "lerp": lambda x, end, weight, value: _lerp(x, end, weight),
    "hypot": lambda a, b, _, value: _hypot(a, b),
    "fmod": lambda a, b, _, value: _fmod(a, b),
}


@kernel("pointwise", inputs=[SCALAR, SCALAR, SCALAR], attrs={"fn": Enum(*_TERNARY), "value": Float()})
def k_pointwise(a, b, c, *, fn, value=1):
    like = next(v for v in (a, b, c) if isinstance(v, mx.array))
    return _TERNARY[fn](_as_array(a, like), _as_array(b, like), _as_array(c, like), value)


def _pointwise(fn, names, value_arg=None):
    def convert_pointwise(ctx, call):
        values = [call.arg(n) if call.has(n) else 0 for n in names]
        attrs = {"fn": fn}
        if value_arg is not None:
            value = call.arg(value_arg)
            if isinstance(value, Ref):
                call.fail(value_arg, "a symbolic value is not supported")
            attrs["value"] = value
        specs, perm = aligned_inputs(ctx, call, values)
        ctx.emit("pointwise", specs, attrs, perm=perm)

    convert_pointwise.__name__ = f"convert_{fn}"
    return convert_pointwise


register(*_both("aten.addcmul.default"))(_pointwise("addcmul", ("self", "tensor1", "tensor2"), "value"))
register(*_both("aten.addcdiv.default"))(_pointwise("addcdiv", ("self", "tensor1", "tensor2"), "value"))
register(*_both("aten.lerp.Scalar", "aten.lerp.Tensor"))(_pointwise("lerp", ("self", "end", "weight")))
register(*_both("aten.hypot.default"))(_pointwise("hypot", ("self", "other", "_")))
register(*_both("aten.fmod.Scalar", "aten.fmod.Tensor"))(_pointwise("fmod", ("self", "other", "_")))
