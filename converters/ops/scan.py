"""Scans along one dim: cumsum, cumprod, logcumsumexp. They run in any layout (the dim is found through it).

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
