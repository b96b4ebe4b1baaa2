"""Elementwise ops: activations (relu, hardswish, gelu, ...), arithmetic (add/sub/mul/div with scalars and
broadcasting), comparisons, where, clamp, dropout in eval mode.

Elementwise ops run in whatever layout their inputs have. When inputs disagree, the output takes the layout of
the higher-rank, non-parameter input and the others follow; a lower-rank operand (a ``(C, 1, 1)`` bias) is padded
with size-1 dims as torch broadcasting does before it is brought to that layout.
"""

from __future__ import annotations


import mlx.core as mx
import numpy as np

from .. import layout as L
from ..ir import Ref
from ..precision import saturating_cast
from ..registry import kernel, register
from ..spec import AXIS, SCALAR, TENSOR, Bool, Enum, Float, Opt, SpecError
from ._layers import float64_math as f64
from . import _layers as act
from . import _special_functions as special_functions



_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _softplus(x, beta=1.0, threshold=20.0):
    scaled = x * beta
    soft = f64.softplus(scaled) if x.dtype == mx.float64 else mx.logaddexp(scaled, mx.zeros_like(scaled))
    return mx.where(scaled > threshold, x, soft / beta)


def _float64_or(mlx_fn, float64_fn):
    """``float64_fn`` for float64 arrays (MLX computes ``mlx_fn`` in float32 precision there: ``layers/_float64.py``)."""
    return lambda x: float64_fn(x) if x.dtype == mx.float64 else mlx_fn(x)


_sigmoid_any = _float64_or(mx.sigmoid, f64.sigmoid)




def _hardtanh(x, min_val=-1.0, max_val=1.0):
    return act.hardtanh(x, min_val, max_val)  # one native pass (and gradient) on the CPU, mx.clip elsewhere


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    if x.dtype == mx.float64:  # torch's expm1; MLX's float64 exp is float32-precise, its expm1 exact
        return scale * mx.where(x > 0, x, alpha * mx.expm1(x * input_scale))
    return scale * mx.where(x > 0, x, alpha * (mx.exp(x * input_scale) - 1))


def _nan_to_num(x, nan, posinf, neginf):
    """torch.nan_to_num; MLX's refuses float64 at evaluation ("Does not yet support given type"), so float64 takes
    ``where`` with the dtype's finite extremes (torch's defaults)."""
    if x.dtype != mx.float64:
        return mx.nan_to_num(x, nan, posinf, neginf)
    big = float(np.finfo(np.float64).max)
    x = mx.where(mx.isnan(x), mx.array(nan, x.dtype), x)
    x = mx.where(mx.isposinf(x), mx.array(big if posinf is None else posinf, x.dtype), x)
    return mx.where(mx.isneginf(x), mx.array(-big if neginf is None else neginf, x.dtype), x)


def _celu(x, alpha):
    """torch: ``elu(x, alpha, scale=1, input_scale=1 / alpha)``."""
    if alpha == 0:
        raise ValueError("celu: 'alpha' must not be 0 (torch divides by it)")
    return _elu(x, alpha, 1.0, 1.0 / alpha)


UNARY = {
    "relu": act.relu,  # one multi-threaded native pass on CPU; MLX's maximum is single-threaded there
    # transcendental activations: one native vectorized pass each on CPU (porter.layers.activation)
    "sigmoid": act.sigmoid,
    "tanh": act.tanh,
    "hardswish": act.hardswish,  # one native pass each on CPU, computed in float32 for 16-bit (torch's CPU too)
    "hardsigmoid": act.hardsigmoid,
    "silu": act.silu,
    "mish": lambda x: x * mx.tanh(_softplus(x)),
    "gelu": act.gelu,
    "hardtanh": _hardtanh,
    "elu": _elu,
    "leaky_relu": lambda x, negative_slope=0.01: mx.where(x > 0, x, x * negative_slope),
    "celu": lambda x, alpha=1.0: _celu(x, alpha),
    "selu": lambda x: _elu(x, _SELU_ALPHA, _SELU_SCALE),
    # no overflow either way; the gradient at 0 is torch's 1/2 (minimum/abs would give 0 there)
    "log_sigmoid": lambda x: f64.log_sigmoid(x, None if x.dtype == mx.float64 else mx.exp),
    # NaN passes through the shrinks and threshold as in torch (its comparisons are false on NaN)
    "hardshrink": lambda x, lambd=0.5: mx.where((x >= -lambd) & (x <= lambd), mx.zeros_like(x), x),
    "softshrink": lambda x, lambd=0.5: mx.where(x > lambd, x - lambd, mx.where(x < -lambd, x + lambd, x * 0)),
    "threshold": lambda x, threshold, value: mx.where(x <= threshold, mx.array(value, x.dtype), x),
    "softplus": _softplus,
    "neg": mx.negative,
    "exp": act.exp,
    "log": mx.log,
    "sqrt": mx.sqrt,
    "rsqrt": mx.rsqrt,
    "abs": mx.abs,
    "sign": mx.sign,
    "erf": lambda x: special_functions.apply("erf", x),  # mx.erf: 0 below |x| ~ 1e-5, ~1e-6 off elsewhere
    "sin": _float64_or(mx.sin, f64.sin),
    "cos": _float64_or(mx.cos, f64.cos),
    "tan": mx.tan,
    "asin": mx.arcsin,
    "acos": mx.arccos,
    "atan": mx.arctan,
    "sinh": mx.sinh,
    "cosh": mx.cosh,
    "asinh": mx.arcsinh,
    "acosh": mx.arccosh,
    "atanh": mx.arctanh,
    "erfc": lambda x: special_functions.apply("erfc", x),
    "exp2": lambda x: mx.power(mx.array(2, x.dtype), x),
    "signbit": lambda x: _signbit(x),
    "reciprocal": mx.reciprocal,
    "square": mx.square,
    "pow_scalar": lambda x, exponent: x**exponent,
    "clamp": lambda x, min=None, max=None: mx.clip(x, min, max),
    "logical_not": mx.logical_not,
    "stop_gradient": mx.stop_gradient,
    "glu": lambda x, axis: (lambda a, b: a * _sigmoid_any(b))(*mx.split(x, 2, axis=axis)),
    "repeat_interleave": lambda x, repeats, axis=None: mx.repeat(x, repeats, axis),
    "floor": mx.floor,
    "ceil": mx.ceil,
    "round": lambda x, decimals=0: _round(x, decimals),
    "trunc": lambda x: mx.where(x < 0, mx.ceil(x), mx.floor(x)),
    "frac": lambda x: x - mx.where(x < 0, mx.ceil(x), mx.floor(x)),
    "log1p": mx.log1p,
    "expm1": mx.expm1,
    "log2": mx.log2,
    "log10": mx.log10,
    "erfinv": lambda x: special_functions.apply("erfinv", x),  # torch's Newton steps (mx.erfinv: 4e-5 off)
    "isnan": mx.isnan,
    "isinf": mx.isinf,
    "isfinite": mx.isfinite,
    "nan_to_num": lambda x, nan=0.0, posinf=None, neginf=None: _nan_to_num(x, nan, posinf, neginf),
    "logit": lambda x, eps=None: (lambda z: mx.log(z / (1 - z)))(x if eps is None else mx.clip(x, eps, 1 - eps)),
    "bitwise_not": lambda x: mx.logical_not(x) if x.dtype == mx.bool_ else mx.bitwise_invert(x),
}

BINARY = {
    "add": act.add,  # MLX's, large float32 operands on Porter's threads (layers/binary.py)
    "sub": act.subtract,
    "mul": act.multiply,
    "div": act.divide,
    "div_floor": lambda a, b: mx.floor(mx.divide(a, b)),
    "div_trunc": lambda a, b: (lambda q: mx.where(q < 0, mx.ceil(q), mx.floor(q)))(mx.divide(a, b)),
    "floor_divide": mx.floor_divide,
    "remainder": mx.remainder,  # Python's sign rule (the divisor's), as torch.remainder and %
    "atan2": mx.arctan2,
    "copysign": lambda a, b: mx.where(_signbit(b), -mx.abs(a), mx.abs(a)),
    "fmax": lambda a, b: mx.where(mx.isnan(a), b, mx.where(mx.isnan(b), a, mx.maximum(a, b))),  # NaN-ignoring
    "fmin": lambda a, b: mx.where(mx.isnan(a), b, mx.where(mx.isnan(b), a, mx.minimum(a, b))),
    "pow": mx.power,
    "maximum": mx.maximum,
    "minimum": mx.minimum,
    "eq": mx.equal,
    "ne": mx.not_equal,
    "lt": mx.less,
    "le": mx.less_equal,
    "gt": mx.greater,
    "ge": mx.greater_equal,
    "logical_and": mx.logical_and,
    "logical_or": mx.logical_or,
    "logical_xor": lambda a, b: mx.not_equal(_truth(a), _truth(b)),
    "bitwise_and": mx.bitwise_and,
    "bitwise_or": mx.bitwise_or,
    "bitwise_xor": mx.bitwise_xor,
    "left_shift": lambda a, b: _shift(a, b, mx.left_shift),
    "right_shift": lambda a, b: _shift(a, b, mx.right_shift),
}


def _shift(a, b, fn):
    """``a << b`` / ``a >> b`` on integers as torch's: a count outside ``[0, bits)`` shifts every bit out (0, or
    the sign for a right shift of a negative value) where MLX would take it modulo the width; ``>>`` is arithmetic on
    signed types."""
    dtype = mx.result_type(a, b) if isinstance(b, mx.array) else a.dtype  # a Python count keeps the tensor's type
    a, b = a.astype(dtype), mx.array(b)
    bits = 8 * dtype.size
    out_of_range = (b < 0) | (b >= bits)
    spilled = mx.where(a < 0, -1, 0).astype(dtype) if fn is mx.right_shift else mx.zeros_like(a)
    return mx.where(out_of_range, spilled, fn(a, mx.clip(b, 0, bits - 1).astype(dtype)))


def _signbit(x):
    """True where the sign bit is set, -0.0 included (``1 / -0.0 = -inf``)."""
    if not mx.issubdtype(x.dtype, mx.floating):
        return x < 0
    return (x < 0) | ((x == 0) & (mx.reciprocal(x) < 0))


def _round(x, decimals=0):
    """Half to even; with decimals, torch's ``nearbyint(x * 10**d) / 10**d`` (``x / 10**-d`` for d < 0)."""
    if decimals == 0:
        return mx.round(x)
    scale = mx.array(10.0 ** abs(decimals), dtype=x.dtype)
    return mx.round(x * scale) / scale if decimals > 0 else mx.round(x / scale) * scale


def _truth(v):
    """A value as a bool mask (non-zero is true), as torch's logical ops read their operands."""
    return v.astype(mx.bool_) if isinstance(v, mx.array) else mx.array(bool(v))



_NUMBER = Float(allow_inf=True)
_UNARY_ATTRS = {"approximate": Enum("none", "tanh"), "min_val": _NUMBER, "max_val": _NUMBER, "alpha": _NUMBER,
                "scale": _NUMBER, "input_scale": _NUMBER, "negative_slope": _NUMBER, "beta": _NUMBER,
                "threshold": _NUMBER, "exponent": _NUMBER, "min": Opt(_NUMBER), "max": Opt(_NUMBER),
                "lambd": Float(), "value": _NUMBER}


def _check_unary(inputs, attrs):
    import inspect

    try:
        takes = list(inspect.signature(UNARY[attrs["fn"]]).parameters)[1:]
    except (TypeError, ValueError):  # an MLX builtin (mx.sigmoid): takes the array only
        takes = []
    extra = sorted(set(attrs) - {"fn"} - set(takes))
    if extra:
        raise SpecError(f"the unary function {attrs['fn']!r} takes no attribute(s) {extra}", "")


@kernel("unary", inputs=[TENSOR], attrs={"fn": Enum(*UNARY), **_UNARY_ATTRS}, check=_check_unary)
def k_unary(x, *, fn, **kwargs):
    return UNARY[fn](x, **kwargs)


def _as_array(v, like):
    if isinstance(v, mx.array):
        return v
    # a Python scalar takes the tensor's dtype, as torch's type promotion does for float tensors
    dtype = like.dtype if isinstance(like, mx.array) else None
    if dtype is None:
        return v
    if dtype == mx.bool_ and isinstance(v, bool):
        return mx.array(v)  # MLX would type a Python bool against a bool array as int32 (x ^ True)
    if dtype == mx.bool_ and isinstance(v, int):
        return mx.array(v, dtype=mx.int64)  # torch: bool tensor with an int scalar is int64 (MLX: int32)
    if not mx.issubdtype(dtype, mx.floating):
        return v
    return saturating_cast(v, dtype)  # float32's finfo extremes as a half dtype's (converters/precision.py)


@kernel("binary", inputs=[SCALAR, SCALAR], attrs={"fn": Enum(*BINARY), "alpha": _NUMBER, "reverse": Bool()})
def k_binary(a, b, *, fn, alpha=1, reverse=False):
    if alpha != 1:  # add/sub: self + alpha * other; rsub (reverse): other - alpha * self
        if reverse:
            a = a * alpha
        else:
            b = b * alpha
    if reverse:
        a, b = b, a
    like = a if isinstance(a, mx.array) else b
    a, b = _zero_dim_as_scalar(a, b), _zero_dim_as_scalar(b, a)
    if fn in _OPMATH_SCALAR_FNS and _half_with_inexact_scalar(a, b) and (fn == "mul" or isinstance(a, mx.array)):
        return BINARY[fn](_in_float32(a), _in_float32(b)).astype(like.dtype)
    return BINARY[fn](_as_array(a, like), _as_array(b, like))


# torch's CPU mul and div of a float16/bfloat16 tensor by a Python number keep the number in float32 (the kernels'
# "opmath") and round the result once; MLX would round the number to the half dtype first: 1e30 becomes inf (and
# inf * 0 = NaN where torch gives 0: XLNet's ``attn_score - 1e30 * mask``), 1e-8 becomes 0. (torch's add and sub
# round the number to the tensor's dtype first, as MLX does.)
_OPMATH_SCALAR_FNS = frozenset({"mul", "div"})


def _half_with_inexact_scalar(a, b) -> bool:
    """One operand a float16/bfloat16 array, the other a finite Python number that dtype does not hold exactly
    (float32's finfo extremes excepted: they become the half dtype's own, :func:`saturating_cast`)."""
    for array, number in ((a, b), (b, a)):
        if (isinstance(array, mx.array) and array.dtype in (mx.float16, mx.bfloat16)
                and isinstance(number, (int, float)) and not isinstance(number, bool)):
            if isinstance(number, float) and abs(number) == float(mx.finfo(mx.float32).max):
                return False
            value = np.float32(number)
            if not np.isfinite(value):
                return False
            if array.dtype == mx.bfloat16:
                return int(value.view(np.uint32)) & 0xFFFF != 0  # bfloat16 is float32's top half
            with np.errstate(over="ignore"):
                return bool(np.float32(np.float16(value)) != value)
    return False


def _in_float32(v):
    return v.astype(mx.float32) if isinstance(v, mx.array) else mx.array(v, dtype=mx.float32)


def _zero_dim_as_scalar(v, other):
    """Torch promotes a 0-dim float tensor with a float tensor of more dims like a scalar (the result keeps the
    other's dtype: float32 activations times a float64 0-dim buffer stay float32); MLX would promote to the wider."""
    if (isinstance(v, mx.array) and isinstance(other, mx.array) and v.ndim == 0 and other.ndim > 0
            and mx.issubdtype(v.dtype, mx.floating) and mx.issubdtype(other.dtype, mx.floating)):
        return v.astype(other.dtype)
    return v


@kernel("where", inputs=[SCALAR, SCALAR, SCALAR])
def k_where(cond, a, b):
    like = a if isinstance(a, mx.array) else b
    return mx.where(cond, _as_array(a, like), _as_array(b, like))


# ---------------------------------------------------------------------------------------------------- layouts
def aligned_inputs(ctx, call, values):
    """Runtime specs of ``values`` brought to one layout (the output's); returns (specs, perm)."""
    rank = call.meta.rank
    tensors = [v for v in values if ctx.is_tensor(v)]
    full = [t for t in tensors if ctx.meta(t).rank == rank]
    preferred = [t for t in full if not ctx.is_param(t)] or full
    perm = ctx.perm(preferred[0]) if preferred else L.identity(rank)
    specs = []
    for v in values:
        if not ctx.is_tensor(v):
            specs.append(ctx.value(v))
        elif ctx.meta(v).rank == rank:
            specs.append(ctx.tensor(v, perm))
        elif ctx.meta(v).rank == 0:
            specs.append(ctx.tensor(v))
        else:
            specs.append(_broadcast_to_layout(ctx, v, rank, perm))
    return specs, perm


def _broadcast_to_layout(ctx, v: Ref, rank: int, perm: tuple):
    meta = ctx.meta(v)
    lead = rank - meta.rank
    source = ctx.tensor(v, L.identity(meta.rank))
    if perm == L.identity(rank):
        return source  # broadcasting in torch's layout needs nothing
    padded_shape = [1] * lead + list(meta.shape)
    if L.moves_data(padded_shape, L.identity(rank), perm):
        ctx.num_transposes += 1
    name = ctx.fresh(f"{v.name}_bcast")
    ref = ctx.emit("broadcast_layout", [source], {"lead": lead, "axes": list(perm)}, out=name, perm=perm,
                   meta=meta)
    return {"ref": ref.name}


# ---------------------------------------------------------------------------------------------------- converters
def _unary(fn, *arg_names, **fixed):
    def convert_unary(ctx, call):
        x = call.arg("self") if call.has("self") else call.arg("input")
        attrs = {"fn": fn, **fixed}
        for name in arg_names:
            value = call.arg(name)
            if isinstance(value, Ref):
                call.fail(name, "a tensor-valued argument is not supported here")
            if value is not None:
                attrs[name] = value
        ctx.emit("unary", [ctx.tensor(x)], attrs, perm=ctx.perm(x))

    convert_unary.__name__ = f"convert_{fn}"
    return convert_unary


def _both(*names):
    """An op and its in-place twin (relu and relu_)."""
    out = []
    for name in names:
        base, overload = name.rsplit(".", 1)
        out += [name, f"{base}_.{overload}"]
    return out


register(*_both("aten.relu.default"))(_unary("relu"))
register("aten.relu6.default")(_unary("hardtanh", min_val=0.0, max_val=6.0))
register(*_both("aten.sigmoid.default"))(_unary("sigmoid"))
register(*_both("aten.tanh.default"))(_unary("tanh"))
register(*_both("aten.hardswish.default"))(_unary("hardswish"))
register(*_both("aten.hardsigmoid.default"))(_unary("hardsigmoid"))
register(*_both("aten.silu.default"))(_unary("silu"))
register(*_both("aten.mish.default"))(_unary("mish"))
register(*_both("aten.gelu.default"))(_unary("gelu", "approximate"))
register(*_both("aten.hardtanh.default"))(_unary("hardtanh", "min_val", "max_val"))
register(*_both("aten.elu.default"))(_unary("elu", "alpha", "scale", "input_scale"))
register(*_both("aten.leaky_relu.default"))(_unary("leaky_relu", "negative_slope"))
register("aten.softplus.default")(_unary("softplus", "beta", "threshold"))
register(*_both("aten.celu.default"))(_unary("celu", "alpha"))
register(*_both("aten.selu.default"))(_unary("selu"))
register("aten.log_sigmoid.default")(_unary("log_sigmoid"))
register("aten.hardshrink.default")(_unary("hardshrink", "lambd"))
register("aten.softshrink.default")(_unary("softshrink", "lambd"))
register(*_both("aten.threshold.default"))(_unary("threshold", "threshold", "value"))
register(*_both("aten.neg.default"))(_unary("neg"))
register(*_both("aten.exp.default"))(_unary("exp"))
register(*_both("aten.log.default"))(_unary("log"))
register(*_both("aten.sqrt.default"))(_unary("sqrt"))
register(*_both("aten.rsqrt.default"))(_unary("rsqrt"))
register(*_both("aten.abs.default"))(_unary("abs"))
register(*_both("aten.sign.default"))(_unary("sign"))
register(*_both("aten.erf.default"))(_unary("erf"))
register(*_both("aten.sin.default"))(_unary("sin"))
register(*_both("aten.cos.default"))(_unary("cos"))
register(*_both("aten.reciprocal.default"))(_unary("reciprocal"))
register(*_both("aten.square.default"))(_unary("square"))
register("aten.pow.Tensor_Scalar", "aten.pow_.Scalar")(_unary("pow_scalar", "exponent"))
def _clamp(*bounds):
    """``clamp`` / ``clamp_min`` / ``clamp_max`` with number bounds; a bound computed from a size at run time
    (``x.clamp(max=x.shape[1] - 1)`` with a dynamic dim: a graph value, not a literal) goes the tensor-bound way."""
    by_literals = _unary("clamp", *bounds)

    def convert_clamp(ctx, call):
        if not any(isinstance(call.arg(b), Ref) for b in bounds):
            return by_literals(ctx, call)
        x = call.arg("self")
        present = [(fn, call.arg(b)) for fn, b in (("maximum", "min"), ("minimum", "max"))
                   if b in bounds and call.arg(b) is not None]
        specs, perm = aligned_inputs(ctx, call, [x] + [v for _, v in present])
        current = specs[0]
        for i, ((fn, _), spec) in enumerate(zip(present, specs[1:])):
            last = i == len(present) - 1
            out = ctx.emit("binary", [current, spec], {"fn": fn}, perm=perm,
                           out=None if last else ctx.fresh(f"{call.name}_{fn}"))
            current = {"ref": out.name}

    return convert_clamp


register(*_both("aten.clamp.default"))(_clamp("min", "max"))
register(*_both("aten.clamp_min.default"))(_clamp("min"))
register(*_both("aten.clamp_max.default"))(_clamp("max"))
register("aten.logical_not.default")(_unary("logical_not"))
for _fn in ("floor", "ceil", "trunc", "frac", "log1p", "expm1", "log2", "log10", "erfinv", "isnan", "isinf",
            "isfinite", "signbit"):
    register(f"aten.{_fn}.default")(_unary(_fn))
register("aten.round.default")(_unary("round"))
register("aten.round.decimals")(_unary("round", "decimals"))
register("aten.nan_to_num.default")(_unary("nan_to_num", "nan", "posinf", "neginf"))
register("aten.logit.default")(_unary("logit", "eps"))


@register(*_both("aten.rrelu.default"))
def convert_rrelu(ctx, call):
    """Eval-mode RReLU is a leaky ReLU with the mean slope ``(lower + upper) / 2``; train mode draws random
    slopes, which a port cannot reproduce."""
    if call.arg("training"):
        call.fail("training", "rrelu in training mode draws random slopes; convert the model in eval mode")
    call.arg("generator")
    lower, upper = call.arg("lower"), call.arg("upper")
    for name, v in (("lower", lower), ("upper", upper)):
        if isinstance(v, Ref):
            call.fail(name, "a tensor-valued argument is not supported here")
    x = call.arg("self")
    ctx.emit("unary", [ctx.tensor(x)], {"fn": "leaky_relu", "negative_slope": (lower + upper) / 2},
             perm=ctx.perm(x))


# detach keeps the values and cuts the gradient (also what a torch.no_grad() region's outputs go through)
register("aten.detach.default", "aten.detach_.default")(_unary("stop_gradient"))


def _binary(fn, reverse=False):
    def convert_binary(ctx, call):
        a, b = call.arg("self"), call.arg("other" if call.has("other") else "exponent")  # pow names it exponent
        attrs = {"fn": fn}
        if call.has("alpha"):
            alpha = call.arg("alpha")
            if isinstance(alpha, Ref):
                call.fail("alpha", "a symbolic alpha is not supported")
            if alpha != 1:
                attrs["alpha"] = alpha
        if call.has("rounding_mode"):
            mode = call.arg("rounding_mode")
            if mode is not None:
                attrs["fn"] = {"floor": "div_floor", "trunc": "div_trunc"}[mode]
        if reverse:
            attrs["reverse"] = True
        specs, perm = aligned_inputs(ctx, call, [a, b])
        ctx.emit("binary", specs, attrs, perm=perm)

    convert_binary.__name__ = f"convert_{fn}"
    return convert_binary


_ARITH = {
    "add": ["Tensor", "Scalar"], "sub": ["Tensor", "Scalar"], "mul": ["Tensor", "Scalar"],
    "div": ["Tensor", "Scalar", "Tensor_mode", "Scalar_mode"],
}
for _fn, _overloads in _ARITH.items():
    register(*_both(*(f"aten.{_fn}.{o}" for o in _overloads)))(_binary(_fn))
register("aten.rsub.Tensor", "aten.rsub.Scalar")(_binary("sub", reverse=True))
register("aten.floor_divide.default", "aten.floor_divide_.Tensor",  # no floor_divide_.default
         "aten.floor_divide.Scalar")(_binary("floor_divide"))  # TorchScript's t // 2 on a tensor
register(*_both("aten.remainder.Tensor", "aten.remainder.Scalar"))(_binary("remainder"))
register("aten.atan2.default")(_binary("atan2"))
register(*_both("aten.copysign.Tensor", "aten.copysign.Scalar"))(_binary("copysign"))
register("aten.fmax.default")(_binary("fmax"))
register("aten.fmin.default")(_binary("fmin"))
for _fn in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc", "exp2"):
    register(*_both(f"aten.{_fn}.default"))(_unary(_fn))
register("aten.pow.Tensor_Tensor", "aten.pow_.Tensor")(_binary("pow"))
register("aten.maximum.default", "aten.max.other")(_binary("maximum"))
register("aten.minimum.default", "aten.min.other")(_binary("minimum"))
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    register(f"aten.{_cmp}.Tensor", f"aten.{_cmp}.Scalar")(_binary(_cmp))
register("aten.logical_and.default")(_binary("logical_and"))
register("aten.logical_or.default")(_binary("logical_or"))


@register("aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar")
def convert_where(ctx, call):
    a, b = call.arg("self"), call.arg("other")
    specs, perm = aligned_inputs(ctx, call, [call.arg("condition"), a, b])
    tensors = [v for v in (a, b) if ctx.is_tensor(v)]
    if all(ctx.meta(t).dtype == call.meta.dtype for t in tensors) and (tensors or call.meta.dtype == "float32"):
        return ctx.emit("where", specs, perm=perm)
    # a Python scalar branch: MLX types it as int32/float32, torch's promotion decided the dtype recorded here
    where = ctx.emit("where", specs, perm=perm, out=ctx.fresh(call.name))
    ctx.emit("cast", [ctx.tensor(where)], {"dtype": call.meta.dtype}, perm=perm)


@register("aten.clamp.Tensor", "aten.clamp_.Tensor")
def convert_clamp_tensor(ctx, call):
    """``clamp`` with tensor bounds: ``minimum(maximum(x, min), max)`` (NaN in x or a bound propagates)."""
    x, low, high = call.arg("self"), call.arg("min"), call.arg("max")
    present = [v for v in (low, high) if v is not None]
    specs, perm = aligned_inputs(ctx, call, [x, *present])
    current, rest = specs[0], specs[1:]
    for fn, bound in (("maximum", low), ("minimum", high)):
        if bound is None:
            continue
        last = bound is high or high is None
        out = ctx.emit("binary", [current, rest.pop(0)], {"fn": fn}, perm=perm,
                       out=None if last else ctx.fresh(f"{call.name}_{fn}"))
        current = {"ref": out.name}
    if not present:
        ctx.emit("identity", [current], perm=perm)


@register("aten.glu.default")
def convert_glu(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    ctx.emit("unary", [ctx.tensor(x)], {"fn": "glu", "axis": L.axis_of(perm, call.arg("dim"))}, perm=perm)


@register("aten.repeat_interleave.self_int")
def convert_repeat_interleave(ctx, call):
    x, repeats, dim = call.arg("self"), call.arg("repeats"), call.arg("dim")
    call.arg("output_size")  # a size hint: the result is the same
    if isinstance(repeats, Ref):
        call.fail("repeats", "a symbolic repeat count is not supported")
    if dim is None:  # flattened in torch's element order
        ident = L.identity(ctx.meta(x).rank)
        return ctx.emit("unary", [ctx.tensor(x, ident)], {"fn": "repeat_interleave", "repeats": repeats},
                        perm=(0,))
    perm = ctx.perm(x)
    ctx.emit("unary", [ctx.tensor(x)], {"fn": "repeat_interleave", "repeats": repeats,
                                        "axis": L.axis_of(perm, dim)}, perm=perm)


@register("aten.outer.default")
def convert_outer(ctx, call):
    a, b = call.arg("self"), call.arg("vec2")
    col = ctx.emit("unsqueeze", [ctx.tensor(a)], {"axis": 1}, perm=(0, 1), out=ctx.fresh(f"{call.name}_col"))
    row = ctx.emit("unsqueeze", [ctx.tensor(b)], {"axis": 0}, perm=(0, 1), out=ctx.fresh(f"{call.name}_row"))
    ctx.emit("binary", [{"ref": col.name}, {"ref": row.name}], {"fn": "mul"}, perm=(0, 1))


@register("aten.pow.Scalar")
def convert_pow_scalar(ctx, call):
    """``base ** t`` with a Python number as the base (``10000.0 ** (2 * i / d)`` in sinusoidal embeddings)."""
    base, exponent = call.arg("self"), call.arg("exponent")
    if isinstance(base, Ref):
        call.fail("self", "a symbolic base is not supported")
    x = ctx.tensor(exponent)
    if ctx.meta(exponent).dtype != call.meta.dtype:  # an integer exponent with a float base: torch computes in float
        x = {"ref": ctx.emit("cast", [x], {"dtype": call.meta.dtype}, perm=ctx.perm(exponent),
                             out=ctx.fresh(call.name)).name}
    ctx.emit("binary", [x, base], {"fn": "pow", "reverse": True}, perm=ctx.perm(exponent))


@kernel("prelu", inputs=[TENSOR, TENSOR], attrs={"axis": Opt(AXIS)})
def k_prelu(x, weight, *, axis):
    """``weight`` is torch's ``(C,)`` (or ``(1,)``) slope, applied along array axis ``axis`` (torch's dim 1);
    ``axis=None``: a weight that already broadcasts against ``x``."""
    if axis is not None and weight.size > 1:
        if x.shape[axis] != weight.size:  # a channel dim the capture kept symbolic: torch refuses the mismatch too
            raise ValueError(f"prelu: the input has {x.shape[axis]} channels (torch dim 1) and the slope "
                             f"{weight.size} values; they must match (or the slope have one)")
        shape = [1] * x.ndim
        shape[axis] = weight.size
        weight = weight.reshape(shape)
    return mx.where(x > 0, x, x * weight)


@register("aten._prelu_kernel.default")
def convert_prelu_kernel(ctx, call):
    """The decomposed form: ``weight`` already broadcasts against the input (``(C, 1, 1)``)."""
    specs, perm = aligned_inputs(ctx, call, [call.arg("self"), call.arg("weight")])
    ctx.emit("prelu", specs, {"axis": None}, perm=perm)


@register("aten.prelu.default")
def convert_prelu(ctx, call):
    x, weight = call.arg("self"), call.arg("weight")
    perm = ctx.perm(x)
    rank = len(perm)
    channels = ctx.meta(weight).shape[0] if ctx.meta(weight).rank == 1 else None
    # a symbolic channel dim (torch kept it dynamic: nothing but the prelu reads it) is checked per call by the kernel
    known = ctx.meta(x).shape[1] if rank >= 2 and isinstance(ctx.meta(x).shape[1], int) else None
    if ctx.meta(weight).rank != 1 or (channels != 1 and (rank < 2 or known not in (None, channels))):
        call.fail("weight", "the slope must have one value or one per channel (input dim 1)")
    axis = perm.index(1) if rank >= 2 else 0
    ctx.emit("prelu", [ctx.tensor(x), ctx.tensor(weight)], {"axis": axis}, perm=perm)


@register("aten.dropout.default", "aten.dropout_.default", "aten.feature_dropout.default",
          "aten.alpha_dropout.default", "aten.feature_alpha_dropout.default")
def convert_dropout(ctx, call):
    train = call.arg("train")
    call.arg("p")
    if train:
        call.fail("train", "dropout in training mode is random; convert the model in eval mode (model.eval())")
    ctx.alias(call.arg("input") if call.has("input") else call.arg("self"))
