"""Elementwise ops: activations (relu, hardswish, gelu, ...), arithmetic (add/sub/mul/div with scalars and
broadcasting), comparisons, where, clamp, dropout in eval mode.

Elementwise ops run in whatever layout their inputs have. When inputs disagree, the output takes the layout of
the higher-rank, non-parameter input and the others follow; a lower-rank operand (a ``(C, 1, 1)`` bias) is padded
with size-1 dims as torch broadcasting does before it is brought to that layout.
"""

from __future__ import annotations


import mlx.core as mx

from porter.layers import _native
from porter.layers import activation as act

from .. import layout as L
from ..ir import Ref
from ..registry import kernel, register



def _softplus(x, beta=1.0, threshold=20.0):
    scaled = x * beta
    return mx.where(scaled > threshold, x, mx.logaddexp(scaled, mx.zeros_like(scaled)) / beta)


def _hardtanh(x, min_val=-1.0, max_val=1.0):
    return mx.clip(x, min_val, max_val)


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    return scale * mx.where(x > 0, x, alpha * (mx.exp(x * input_scale) - 1))


def _relu(x):
    if mx.issubdtype(x.dtype, mx.floating) and _native.active():
        return _native.relu(x)  # one multi-threaded pass (layers/csrc); MLX's maximum is single-threaded on CPU
    return mx.maximum(x, 0)


UNARY = {
    "relu": _relu,
    # transcendental activations: one native vectorized pass each on CPU (porter.layers.activation)
    "sigmoid": act.sigmoid,
    "tanh": act.tanh,
    "hardswish": lambda x: x * mx.clip(x + 3, 0, 6) / 6,
    "hardsigmoid": lambda x: mx.clip(x + 3, 0, 6) / 6,
    "silu": act.silu,
    "mish": lambda x: x * mx.tanh(_softplus(x)),
    "gelu": act.gelu,
    "hardtanh": _hardtanh,
    "elu": _elu,
    "leaky_relu": lambda x, negative_slope=0.01: mx.where(x > 0, x, x * negative_slope),
    "softplus": _softplus,
    "neg": mx.negative,
    "exp": act.exp,
    "log": mx.log,
    "sqrt": mx.sqrt,
    "rsqrt": mx.rsqrt,
    "abs": mx.abs,
    "sign": mx.sign,
    "erf": mx.erf,
    "sin": mx.sin,
    "cos": mx.cos,
    "reciprocal": mx.reciprocal,
    "square": mx.square,
    "pow_scalar": lambda x, exponent: x**exponent,
    "clamp": lambda x, min=None, max=None: mx.clip(x, min, max),
    "logical_not": mx.logical_not,
}

BINARY = {
    "add": mx.add,
    "sub": mx.subtract,
    "mul": mx.multiply,
    "div": mx.divide,
    "div_floor": lambda a, b: mx.floor(mx.divide(a, b)),
    "div_trunc": lambda a, b: (lambda q: mx.where(q < 0, mx.ceil(q), mx.floor(q)))(mx.divide(a, b)),
    "floor_divide": mx.floor_divide,
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
}


@kernel("unary")
def k_unary(x, *, fn, **kwargs):
    return UNARY[fn](x, **kwargs)


def _as_array(v, like):
    if isinstance(v, mx.array):
        return v
    # a Python scalar takes the tensor's dtype, as torch's type promotion does for float tensors
    dtype = like.dtype if isinstance(like, mx.array) else None
    return mx.array(v, dtype=dtype) if dtype is not None and mx.issubdtype(dtype, mx.floating) else v


@kernel("binary")
def k_binary(a, b, *, fn, alpha=1, reverse=False):
    if alpha != 1:
        b = b * alpha
    if reverse:
        a, b = b, a
    like = a if isinstance(a, mx.array) else b
    return BINARY[fn](_as_array(a, like), _as_array(b, like))


@kernel("where")
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
register(*_both("aten.pow.Tensor_Scalar"))(_unary("pow_scalar", "exponent"))
register(*_both("aten.clamp.default"))(_unary("clamp", "min", "max"))
register(*_both("aten.clamp_min.default"))(_unary("clamp", "min"))
register(*_both("aten.clamp_max.default"))(_unary("clamp", "max"))
register("aten.logical_not.default")(_unary("logical_not"))


def _binary(fn, reverse=False):
    def convert_binary(ctx, call):
        a, b = call.arg("self"), call.arg("other")
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
register(*_both("aten.floor_divide.default"))(_binary("floor_divide"))
register(*_both("aten.pow.Tensor_Tensor"))(_binary("pow"))
register("aten.maximum.default")(_binary("maximum"))
register("aten.minimum.default")(_binary("minimum"))
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    register(f"aten.{_cmp}.Tensor", f"aten.{_cmp}.Scalar")(_binary(_cmp))
register("aten.logical_and.default")(_binary("logical_and"))
register("aten.logical_or.default")(_binary("logical_or"))


@register("aten.where.self")
def convert_where(ctx, call):
    specs, perm = aligned_inputs(ctx, call, [call.arg("condition"), call.arg("self"), call.arg("other")])
    ctx.emit("where", specs, perm=perm)


@register("aten.dropout.default", "aten.dropout_.default", "aten.feature_dropout.default",
          "aten.alpha_dropout.default", "aten.feature_alpha_dropout.default")
def convert_dropout(ctx, call):
    train = call.arg("train")
    call.arg("p")
    if train:
        call.fail("train", "dropout in training mode is random; convert the model in eval mode (model.eval())")
    ctx.alias(call.arg("input") if call.has("input") else call.arg("self"))
