"""Ordering ops: sort / argsort / msort / topk / kthvalue.

Every tensor here stays in torch's layout (indices count positions along torch's dims). Orderings follow torch's
CPU kernels: NaN ranks above every number (last ascending, first descending), and equal values keep their input
order (a stable sort, as torch's ``stable=True``; its default CPU sort gives the same). ``topk`` returns its ``k``
entries in sorted order: torch's own order among tied values (and with ``sorted=False``) is left to its kernel and
differs between its CPU and CUDA builds, so there the values match torch and the indices name one of the tied
entries (``kthvalue`` likewise).
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import AXIS, INT_OR_REF, TENSOR, Bool, Enum


def stable_order(x, axis: int, descending: bool):
    """Indices that sort ``x`` along ``axis`` as torch's stable sort does (NaN above every number); outside the
    gradient (the values taken with them carry it, as in torch)."""
    x = mx.stop_gradient(x)
    if x.dtype == mx.bool_:
        x = x.astype(mx.int32)
    if mx.issubdtype(x.dtype, mx.inexact):
        nan = mx.isnan(x)
        key = mx.where(nan, mx.zeros_like(x), x)
        order = mx.argsort(-key if descending else key, axis=axis)
        # then NaNs last (ascending) or first (descending), each group keeping the order found so far
        flag = mx.take_along_axis(nan if not descending else mx.logical_not(nan), order, axis=axis)
        return mx.take_along_axis(order, mx.argsort(flag.astype(mx.int32), axis=axis), axis=axis)
    # integers: ~x reverses the order without overflow (unsigned too), and ties stay in input order
    return mx.argsort(~x if descending else x, axis=axis)


def _pick(values, order, outputs):
    if outputs == "values":
        return values
    if outputs == "indices":
        return order.astype(mx.int64)
    return [values, order.astype(mx.int64)]


OUTPUTS = Enum("both", "values", "indices")


@kernel("sort", inputs=[TENSOR], attrs={"axis": AXIS, "descending": Bool(), "outputs": OUTPUTS})
def k_sort(x, *, axis, descending, outputs):
    if x.ndim == 0:
        return _pick(x, mx.zeros((), dtype=mx.int32), outputs)
    order = stable_order(x, axis, descending)
    return _pick(mx.take_along_axis(x, order, axis=axis), order, outputs)


def _first(x, axis, k, descending):
    """The first ``k`` positions along ``axis`` of ``x``'s stable order."""
    size = x.shape[axis] if x.ndim else 1
    if not 0 <= k <= size:
        raise ValueError(f"k ({k}) is out of range for a dimension of size {size}")
    if x.ndim == 0:
        return mx.zeros((), dtype=mx.int32)
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, k)
    return stable_order(x, axis, descending)[tuple(index)]


@kernel("topk", inputs=[TENSOR, INT_OR_REF], attrs={"axis": AXIS, "largest": Bool()})
def k_topk(x, k, *, axis, largest):
    order = _first(x, axis, int(k), largest)
    return _pick(mx.take_along_axis(x, order, axis=axis) if x.ndim else x, order, "both")


@kernel("kthvalue", inputs=[TENSOR, INT_OR_REF], attrs={"axis": AXIS, "keepdims": Bool()})
def k_kthvalue(x, k, *, axis, keepdims):
    k = int(k)
    if k < 1:
        raise ValueError(f"kthvalue: k ({k}) must be at least 1")
    order = _first(x, axis, k, False)
    if x.ndim == 0:
        return [x, order.astype(mx.int64)]
    index = [slice(None)] * x.ndim
    index[axis] = slice(k - 1, k)
    order = order[tuple(index)]
    values = mx.take_along_axis(x, order, axis=axis)
    if not keepdims:
        values, order = mx.squeeze(values, axis), mx.squeeze(order, axis)
    return [values, order.astype(mx.int64)]


def _ordering(name):
    """Converters of sort-type ops; every tensor in torch's layout (see the module docstring)."""

    def convert(ctx, call):
        from ..convert import Info

        x = call.arg("self")
        rank = ctx.meta(x).rank
        ident = L.identity(rank)
        axis = 0 if name == "msort" else call.arg("dim") % max(rank, 1)
        if call.has("stable"):
            call.arg("stable")  # torch's CPU sort is stable either way; so is this one
        if name == "topk":
            call.arg("sorted")  # sorted or not, the k entries come sorted (see the module docstring)
            return ctx.emit("topk", [ctx.tensor(x, ident), ctx.value(call.arg("k"))],
                            {"axis": axis, "largest": call.arg("largest")},
                            items=[Info(m, ident) for m in call.meta.items])
        if name == "kthvalue":
            out = ident if call.arg("keepdim") else L.identity(max(rank - 1, 0))
            return ctx.emit("kthvalue", [ctx.tensor(x, ident), ctx.value(call.arg("k"))],
                            {"axis": axis, "keepdims": call.arg("keepdim")},
                            items=[Info(m, out) for m in call.meta.items])
        descending = False if name == "msort" else call.arg("descending")
        attrs = {"axis": axis, "descending": descending}
        if name == "sort":
            return ctx.emit("sort", [ctx.tensor(x, ident)], dict(attrs, outputs="both"),
                            items=[Info(m, ident) for m in call.meta.items])
        outputs = "indices" if name == "argsort" else "values"
        return ctx.emit("sort", [ctx.tensor(x, ident)], dict(attrs, outputs=outputs), perm=ident)

    convert.__name__ = f"convert_{name}"
    return convert


for _op, _name in (("aten.sort.default", "sort"), ("aten.sort.stable", "sort"), ("aten.argsort.default", "argsort"),
                   ("aten.argsort.stable", "argsort"), ("aten.msort.default", "msort"),
                   ("aten.topk.default", "topk"), ("aten.kthvalue.default", "kthvalue")):
    register(_op)(_ordering(_name))
