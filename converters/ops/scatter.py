"""Scatter-style ops: scatter (src / value, with or without torch's ``reduce=``), scatter_add, scatter_reduce,
index_add, index_copy, index_fill.

Every tensor stays in torch's layout (an index names positions along torch's dims). Indices are checked on the
host, as torch checks them (MLX's scatters do not bound-check: an out-of-range index would write other memory).
Repeated indices: sums, products, means, max and min reduce over every source written to a position (NaN
propagates, as in torch); a plain ``scatter`` / ``index_copy`` keeps one of the repeated sources (torch documents
the same as nondeterministic). Integer ``mean`` rounds down, as torch's.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import AXIS, SCALAR, TENSOR, Bool, Enum, Float
from ._layers import exporting
from .misc import checked_indices

REDUCTIONS = ("none", "sum", "prod", "mean", "amax", "amin")
_IDENTITY = {"sum": 0, "mean": 0, "prod": 1}


def _grids(index, axis: int):
    """Full coordinates of every entry of ``index``: ``index`` itself along ``axis``, positions elsewhere."""
    out = []
    for d, size in enumerate(index.shape):
        if d == axis:
            out.append(index)
        else:
            shape = [1] * index.ndim
            shape[d] = size
            out.append(mx.arange(size).reshape(shape))
    return tuple(out)


def _check_shapes(x, index, src, axis: int, what: str) -> None:
    if index.ndim != x.ndim:
        raise ValueError(f"{what}: index has {index.ndim} dims but self has {x.ndim}")
    for d in range(x.ndim):
        if d != axis and index.shape[d] > x.shape[d]:
            raise ValueError(f"{what}: index size {index.shape[d]} exceeds self's size {x.shape[d]} in dim {d}")
        if src is not None and index.shape[d] > src.shape[d]:
            raise ValueError(f"{what}: index size {index.shape[d]} exceeds src's size {src.shape[d]} in dim {d}")


def _lowest(dtype):
    return -float("inf") if mx.issubdtype(dtype, mx.inexact) else mx.iinfo(dtype).min


def _highest(dtype):
    return float("inf") if mx.issubdtype(dtype, mx.inexact) else mx.iinfo(dtype).max


def scatter_values(x, coords, values, reduce: str, include_self: bool):
    """``x`` with ``values`` written at ``coords`` (a tuple of broadcast index arrays), reduced by ``reduce``."""
    if reduce == "none":
        out = mx.array(x)  # a copy: x may be read elsewhere
        out[coords] = values
        return out
    count = mx.zeros(x.shape, dtype=mx.int32).at[coords].add(mx.ones(values.shape, dtype=mx.int32))
    hit = count > 0
    if reduce in ("sum", "mean", "prod"):
        base = x if include_self else mx.where(hit, mx.array(_IDENTITY[reduce], dtype=x.dtype), x)
        out = base.at[coords].multiply(values) if reduce == "prod" else base.at[coords].add(values)
        if reduce == "mean":
            n = (count + 1 if include_self else mx.maximum(count, 1)).astype(x.dtype)
            out = mx.where(hit, out / n if mx.issubdtype(x.dtype, mx.inexact) else mx.floor_divide(out, n), x)
        return out
    if not mx.issubdtype(x.dtype, mx.inexact) or exporting():
        return _scatter_extreme(x, coords, values, reduce, include_self, hit)
    forward = mx.custom_function(lambda a, v: _scatter_extreme(a, coords, v, reduce, include_self, hit))

    @forward.vjp
    def backward(primals, cotangent, output):
        """torch's ``scatter_reduce`` amax/amin gradient: shared evenly among the entries equal to the result
        (``self`` where it is included or untouched, and every tied source); MLX's own scatter-max VJP gave each
        tied source the whole gradient (a GraphSAGE max over repeated messages)."""
        a, v = primals
        g, result = _single(cotangent), _single(output)
        self_is = (a == result).astype(g.dtype)
        src_is = (v == result[coords]).astype(g.dtype)
        shares = self_is.at[coords].add(src_is)
        shared = g / mx.where(shares == 0, mx.array(1, dtype=g.dtype), shares)
        grad_self = self_is * shared
        if not include_self:
            grad_self = mx.where(hit, mx.array(0, dtype=g.dtype), grad_self)
        return grad_self, src_is * shared[coords]

    return forward(x, values)


def _single(value):
    return value[0] if isinstance(value, (list, tuple)) else value


def _scatter_extreme(x, coords, values, reduce: str, include_self: bool, hit):
    fill = _lowest(x.dtype) if reduce == "amax" else _highest(x.dtype)
    base = x if include_self else mx.where(hit, mx.array(fill, dtype=x.dtype), x)
    out = base.at[coords].maximum(values) if reduce == "amax" else base.at[coords].minimum(values)
    if mx.issubdtype(x.dtype, mx.inexact):  # MLX's scatter max/min skip NaN; torch's propagate it
        nan = mx.zeros(x.shape, dtype=mx.int32).at[coords].add(mx.isnan(values).astype(mx.int32)) > 0
        if include_self:
            nan = nan | mx.isnan(x)
        out = mx.where(nan, mx.array(float("nan"), dtype=x.dtype), out)
    return out


@kernel("scatter", inputs=[TENSOR, TENSOR, SCALAR],
        attrs={"axis": AXIS, "reduce": Enum(*REDUCTIONS), "include_self": Bool()})
def k_scatter(x, index, src, *, axis, reduce, include_self):
    """torch.scatter / scatter_add / scatter_reduce along ``axis``: ``src`` a tensor (its leading block of
    ``index``'s shape is read) or a scalar."""
    if x.ndim == 0:
        x, index = x.reshape(1), index.reshape(1)
        src = src.reshape(1) if isinstance(src, mx.array) and src.ndim == 0 else src
        return k_scatter(x, index, src, axis=0, reduce=reduce, include_self=include_self).reshape(())
    tensor_src = isinstance(src, mx.array) and src.ndim > 0
    _check_shapes(x, index, src if tensor_src else None, axis, "scatter")
    if index.size == 0:
        return mx.array(x)
    index = checked_indices(index, x.shape[axis], "scatter") % x.shape[axis]
    if tensor_src:
        values = src[tuple(slice(0, s) for s in index.shape)].astype(x.dtype)
    else:
        values = mx.broadcast_to(_scalar_as(src, x.dtype), index.shape)
    return scatter_values(x, _grids(index, axis), values, reduce, include_self)


def _scalar_as(value, dtype):
    """A scalar fill value (a Python number or a 0-d array) in ``dtype``: a Python float straight into it (through
    MLX's float32 default a float64 fill lost 9 digits)."""
    return value.astype(dtype) if isinstance(value, mx.array) else mx.array(value, dtype=dtype)


@kernel("index_scatter", inputs=[TENSOR, TENSOR, SCALAR],
        attrs={"axis": AXIS, "reduce": Enum("none", "sum"), "alpha": Float(allow_inf=True, allow_nan=True)})
def k_index_scatter(x, index, src, *, axis, reduce, alpha):
    """torch.index_add (``reduce="sum"``, ``src * alpha``), index_copy and index_fill (``reduce="none"``; index_fill
    has a scalar ``src``): rows ``index`` (1-d) of ``axis`` take ``src``'s rows in turn."""
    if x.ndim == 0:
        return k_index_scatter(x.reshape(1), index.reshape(-1), src, axis=0, reduce=reduce, alpha=alpha).reshape(())
    what = "index_add" if reduce == "sum" else "index_copy/index_fill"  # torch: int32 for index_add, else int64
    index = checked_indices(index.reshape(-1), x.shape[axis], what, long_only=reduce != "sum") % x.shape[axis]
    # no trailing slice(None)s in the key: with them MLX 0.32's scatter-add VJP fails ("[reshape] Cannot reshape
    # array of size E into shape (E, C)" for x.at[(index, slice(None))].add(v)); without, it is right
    key = [slice(None)] * axis + [index]
    shape = list(x.shape)
    shape[axis] = index.size
    if isinstance(src, mx.array) and src.ndim > 0:
        if list(src.shape) != shape:
            raise ValueError(f"index_add/index_copy: source has shape {tuple(src.shape)}, expected {tuple(shape)}")
        values = src.astype(x.dtype)
    else:
        values = mx.broadcast_to(_scalar_as(src, x.dtype), shape)
    if alpha != 1:
        values = values * mx.array(alpha, dtype=x.dtype)
    if reduce == "sum":
        return x.at[tuple(key)].add(values)
    out = mx.array(x)
    out[tuple(key)] = values
    return out


def _scatter(reduce_default: str, form: str):
    """Converters of the scatter ops: ``form`` "src" (a tensor source) or "value" (a scalar)."""

    def convert(ctx, call):
        x, index = call.arg("self"), call.arg("index")
        rank = ctx.meta(x).rank
        ident = L.identity(rank)
        reduce, include_self = reduce_default, True
        if call.has("reduce"):
            given = call.arg("reduce")
            if reduce_default == "none":  # scatter(..., reduce="add"|"multiply"): torch's older spelling
                if given is not None and given not in ("add", "multiply"):
                    call.fail("reduce", "expected 'add' or 'multiply'")
                reduce = {"add": "sum", "multiply": "prod", None: "none"}[given]
            else:
                if given not in REDUCTIONS[1:]:
                    call.fail("reduce", f"expected one of {', '.join(REDUCTIONS[1:])}")
                reduce = given
        if call.has("include_self"):
            include_self = bool(call.arg("include_self"))
        source = call.arg("src") if form == "src" else call.arg("value")
        src = ctx.tensor(source, ident) if form == "src" else ctx.value(source)
        ctx.emit("scatter", [ctx.tensor(x, ident), ctx.tensor(index, L.identity(ctx.meta(index).rank)), src],
                 {"axis": call.arg("dim") % max(rank, 1), "reduce": reduce, "include_self": include_self},
                 perm=ident)

    convert.__name__ = f"convert_scatter_{reduce_default}_{form}"
    return convert


register("aten.scatter.src", "aten.scatter_.src", "aten.scatter.reduce", "aten.scatter_.reduce")(
    _scatter("none", "src"))
register("aten.scatter.value", "aten.scatter_.value", "aten.scatter.value_reduce", "aten.scatter_.value_reduce")(
    _scatter("none", "value"))
register("aten.scatter_add.default", "aten.scatter_add_.default")(_scatter("sum", "src"))
register("aten.scatter_reduce.two", "aten.scatter_reduce_.two")(_scatter("amax", "src"))


def _index(kind: str):
    def convert(ctx, call):
        x, index = call.arg("self"), call.arg("index")
        rank = ctx.meta(x).rank
        ident = L.identity(rank)
        if kind == "fill":
            src = ctx.tensor(call.arg("value"), L.identity(0)) if ctx.is_tensor(call.arg("value")) \
                else ctx.value(call.arg("value"))
        else:
            src = ctx.tensor(call.arg("source"), ident)
        alpha = 1.0
        if kind == "add":
            alpha = call.arg("alpha")
            if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
                call.fail("alpha", "alpha must be a number known when converting")
        ctx.emit("index_scatter", [ctx.tensor(x, ident), ctx.tensor(index, L.identity(ctx.meta(index).rank)), src],
                 {"axis": call.arg("dim") % max(rank, 1), "reduce": "sum" if kind == "add" else "none",
                  "alpha": float(alpha)}, perm=ident)

    convert.__name__ = f"convert_index_{kind}"
    return convert


register("aten.index_add.default", "aten.index_add_.default")(_index("add"))
register("aten.index_copy.default", "aten.index_copy_.default")(_index("copy"))
register("aten.index_fill.int_Scalar", "aten.index_fill_.int_Scalar", "aten.index_fill.int_Tensor",
         "aten.index_fill_.int_Tensor")(_index("fill"))
