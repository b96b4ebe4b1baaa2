"""Scans along one dim: cumsum, cumprod, logcumsumexp, cummax / cummin (values and indices). They run in any layout
(the dim is found through it).

Integer and bool inputs accumulate in int64 as torch's do (MLX would keep int32); ``dtype=`` casts first.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import AXIS, DTYPE, TENSOR, Enum, Opt
from .misc import mx_dtype

_SCANS = {"cumsum": mx.cumsum, "cumprod": mx.cumprod, "logcumsumexp": mx.logcumsumexp}


def _run(fn, x, axis, dtype):
    if dtype is not None:
        x = x.astype(mx_dtype(dtype))
    return _SCANS[fn](x, axis=axis)


@kernel("cumsum", inputs=[TENSOR], attrs={"axis": AXIS, "dtype": Opt(DTYPE)})
def k_cumsum(x, *, axis, dtype=None):
    return _run("cumsum", x, axis, dtype)


@kernel("scan", inputs=[TENSOR], attrs={"axis": AXIS, "dtype": Opt(DTYPE), "fn": Enum("cumprod", "logcumsumexp")})
def k_scan(x, *, axis, fn, dtype=None):
    return _run(fn, x, axis, dtype)


def _scan(fn):
    def convert_scan(ctx, call):
        x = call.arg("self")
        perm = ctx.perm(x)
        dtype = call.arg("dtype") if call.has("dtype") else None
        if dtype is None and call.meta.dtype == "int64" and ctx.meta(x).dtype != "int64":
            dtype = "int64"  # torch accumulates bool and narrower integers in int64; MLX would keep int32
        attrs = {"axis": L.axis_of(perm, call.arg("dim")), "dtype": dtype}
        if fn == "cumsum":
            return ctx.emit("cumsum", [ctx.tensor(x)], attrs, perm=perm)
        ctx.emit("scan", [ctx.tensor(x)], {**attrs, "fn": fn}, perm=perm)

    convert_scan.__name__ = f"convert_{fn}"
    return convert_scan


register("aten.cumsum.default")(_scan("cumsum"))
register("aten.cumprod.default")(_scan("cumprod"))
register("aten.logcumsumexp.default")(_scan("logcumsumexp"))


@kernel("cumextreme", inputs=[TENSOR], attrs={"axis": AXIS, "fn": Enum("cummax", "cummin")})
def k_cumextreme(x, *, axis, fn):
    """``[values, indices]`` of torch's cummax / cummin: a NaN propagates to every later value (its index is the
    latest NaN's); among equal values the latest index wins (torch compares with ``>=`` / ``<=``)."""
    if x.ndim == 0:
        return [x, mx.zeros((), dtype=mx.int64)]
    scan = mx.cummax if fn == "cummax" else mx.cummin
    work = x.astype(mx.int32) if x.dtype == mx.bool_ else x
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    position = mx.broadcast_to(mx.arange(x.shape[axis], dtype=mx.int32).reshape(shape), x.shape)
    if mx.issubdtype(work.dtype, mx.inexact):
        nan = mx.isnan(work)
        fill = mx.array(-mx.inf if fn == "cummax" else mx.inf, work.dtype)
        running = scan(mx.where(nan, fill, work), axis=axis)
        seen = mx.cummax(nan.astype(mx.int32), axis=axis) > 0
        at = mx.cummax(mx.where(work == running, position, 0), axis=axis)
        latest_nan = mx.cummax(mx.where(nan, position, -1), axis=axis)
        values = mx.where(seen, mx.array(mx.nan, work.dtype), running)
        index = mx.where(seen, latest_nan, at)
    else:
        values = scan(work, axis=axis)
        index = mx.cummax(mx.where(work == values, position, 0), axis=axis)
    return [values.astype(x.dtype), mx.stop_gradient(index).astype(mx.int64)]


def _cumextreme(fn):
    def convert_cumextreme(ctx, call):
        from ..convert import Info

        x = call.arg("self")
        perm = ctx.perm(x)
        ctx.emit("cumextreme", [ctx.tensor(x)], {"axis": L.axis_of(perm, call.arg("dim")), "fn": fn},
                 items=[Info(m, perm) for m in call.meta.items])

    convert_cumextreme.__name__ = f"convert_{fn}"
    return convert_cumextreme


register("aten.cummax.default")(_cumextreme("cummax"))
register("aten.cummin.default")(_cumextreme("cummin"))
