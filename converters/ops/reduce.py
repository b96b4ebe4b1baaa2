"""Reductions and normalising reductions over ``dim`` arguments: mean, sum, amax/amin, var/std, softmax,
log_softmax, argmax. The torch dims are translated to array axes through the input's layout, so a global
average over (H, W) of a channels-last tensor needs no transpose.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import AXES, AXIS, DTYPE, TENSOR, Bool, Enum, Float, Opt
from ._layers import float64_math as _float64
from ._layers import blocked_mean, blocked_sum, softmax
from .misc import mx_dtype
from .shape import _dims

# mean and sum over many elements in blocks (torch's accuracy: MLX's one float accumulator errs ~1e-5 over 64^3)
_REDUCE = {"mean": blocked_mean, "sum": blocked_sum, "amax": mx.max, "amin": mx.min, "any": mx.any, "all": mx.all}


@kernel("reduce", inputs=[TENSOR], attrs={"fn": Enum(*_REDUCE), "axes": AXES, "keepdims": Bool(), "dtype": Opt(DTYPE)})
def k_reduce(x, *, fn, axes, keepdims, dtype=None):
    if dtype is not None:
        x = x.astype(mx_dtype(dtype))
    if fn in ("mean", "sum"):
        return _REDUCE[fn](x, range(x.ndim) if axes is None else axes, keepdims=keepdims)
    return _REDUCE[fn](x, axis=axes, keepdims=keepdims)


@kernel("variance", inputs=[TENSOR], attrs={"axes": AXES, "keepdims": Bool(), "correction": Float(), "std": Bool()})
def k_variance(x, *, axes, keepdims, correction, std):
    mean = blocked_mean(x, axes, keepdims=True)
    count = 1
    for a in axes:
        count *= x.shape[a]
    v = blocked_sum(mx.square(x - mean), axes, keepdims=keepdims) / max(count - correction, 0)
    return mx.sqrt(v) if std else v


@kernel("variance_mean", inputs=[TENSOR],
        attrs={"axes": AXES, "keepdims": Bool(), "correction": Float(), "std": Bool()})
def k_variance_mean(x, *, axes, keepdims, correction, std):
    """``(var or std, mean)`` as ``torch.var_mean`` / ``torch.std_mean`` return them."""
    return [k_variance(x, axes=axes, keepdims=keepdims, correction=correction, std=std),
            blocked_mean(x, axes, keepdims=keepdims)]


@kernel("softmax", inputs=[TENSOR], attrs={"axis": AXIS, "log": Bool(), "dtype": Opt(DTYPE)})
def k_softmax(x, *, axis, log=False, dtype=None):
    if dtype is not None:
        x = x.astype(mx_dtype(dtype))
    if x.dtype == mx.float64:  # MLX's exp is float32-precise there (layers/_float64.py)
        return _float64.log_softmax(x, axis) if log else _float64.softmax(x, axis)
    if log:  # an empty x: MLX's logsumexp refuses it, torch returns it as it is
        return x if x.size == 0 else x - mx.logsumexp(x, axis=axis, keepdims=True)
    return softmax(x, axis)  # one native pass on CPU (porter.layers.functional.softmax)


@kernel("argmax", inputs=[TENSOR], attrs={"axis": Opt(AXIS), "keepdims": Bool(), "fn": Enum("argmax", "argmin")})
def k_argmax(x, *, axis, keepdims, fn):
    f = mx.argmax if fn == "argmax" else mx.argmin
    if axis is None:
        return f(x.reshape(-1)).astype(mx.int64)
    return f(x, axis=axis, keepdims=keepdims).astype(mx.int64)


def _reduce(fn):
    def convert_reduce(ctx, call):
        x = call.arg("self")
        perm = ctx.perm(x)
        rank = len(perm)
        dims = _dims(call.arg("dim") if call.has("dim") else None, rank)
        keepdim = call.arg("keepdim") if call.has("keepdim") else False
        dtype = call.arg("dtype") if call.has("dtype") else None
        if dtype is None and call.meta.dtype == "int64" and ctx.meta(x).dtype != "int64":
            dtype = "int64"  # torch sums bool and narrower integers in int64; MLX would keep int32
        out_perm = perm if keepdim else L.remove_dims(perm, dims)
        ctx.emit("reduce", [ctx.tensor(x)], {"fn": fn, "axes": [perm.index(d) for d in dims], "keepdims": keepdim,
                                              "dtype": dtype}, perm=out_perm)

    convert_reduce.__name__ = f"convert_{fn}"
    return convert_reduce


register("aten.mean.dim", "aten.mean.default")(_reduce("mean"))
register("aten.sum.dim_IntList", "aten.sum.default")(_reduce("sum"))
register("aten.amax.default", "aten.max.default")(_reduce("amax"))  # max.default: of every element
register("aten.amin.default", "aten.min.default")(_reduce("amin"))
register("aten.any.dim", "aten.any.dims", "aten.any.default")(_reduce("any"))
register("aten.all.dim", "aten.all.dims", "aten.all.default")(_reduce("all"))


def _variance(std, with_mean=False):
    def convert_variance(ctx, call):
        x = call.arg("self")
        perm = ctx.perm(x)
        dims = _dims(call.arg("dim") if call.has("dim") else None, len(perm))
        keepdim = call.arg("keepdim") if call.has("keepdim") else False
        if call.has("correction"):
            correction = call.arg("correction")
            correction = 1 if correction is None else correction
        else:
            correction = 1 if call.arg("unbiased") else 0
        out_perm = perm if keepdim else L.remove_dims(perm, dims)
        attrs = {"axes": [perm.index(d) for d in dims], "keepdims": keepdim, "correction": correction, "std": std}
        if not with_mean:
            return ctx.emit("variance", [ctx.tensor(x)], attrs, perm=out_perm)
        from ..convert import Info

        ctx.emit("variance_mean", [ctx.tensor(x)], attrs, items=[Info(m, out_perm) for m in call.meta.items])

    convert_variance.__name__ = ("convert_std" if std else "convert_var") + ("_mean" if with_mean else "")
    return convert_variance


register("aten.var.correction", "aten.var.dim", "aten.var.default")(_variance(False))
register("aten.std.correction", "aten.std.dim", "aten.std.default")(_variance(True))
register("aten.var_mean.correction", "aten.var_mean.dim")(_variance(False, True))
register("aten.std_mean.correction", "aten.std_mean.dim")(_variance(True, True))


def _softmax(log):
    def convert_softmax(ctx, call):
        x = call.arg("self")
        perm = ctx.perm(x)
        dtype = None
        if call.has("dtype"):
            dtype = call.arg("dtype")
        if call.has("half_to_float") and call.arg("half_to_float"):
            dtype = "float32"
        ctx.emit("softmax", [ctx.tensor(x)], {"axis": L.axis_of(perm, call.arg("dim")), "log": log, "dtype": dtype},
                 perm=perm)

    convert_softmax.__name__ = "convert_log_softmax" if log else "convert_softmax"
    return convert_softmax


register("aten.softmax.int", "aten._softmax.default")(_softmax(False))
register("aten.log_softmax.int", "aten._log_softmax.default")(_softmax(True))


def _arg(fn):
    def convert_arg(ctx, call):
        x = call.arg("self")
        perm = ctx.perm(x)
        dim, keepdim = call.arg("dim"), call.arg("keepdim")
        if dim is None or not perm:  # (a 0-d tensor's dim 0 / -1: index 0 of its one element)
            x_spec = ctx.tensor(x, L.identity(len(perm)))  # flat index in torch order
            return ctx.emit("argmax", [x_spec], {"axis": None, "keepdims": False, "fn": fn}, perm=())
        dim %= len(perm)
        out_perm = perm if keepdim else L.remove_dims(perm, [dim])
        ctx.emit("argmax", [ctx.tensor(x)], {"axis": perm.index(dim), "keepdims": keepdim, "fn": fn}, perm=out_perm)

    convert_arg.__name__ = f"convert_{fn}"
    return convert_arg


register("aten.argmax.default")(_arg("argmax"))
register("aten.argmin.default")(_arg("argmin"))
