"""More writes as values: ``diagonal_scatter``, ``index_reduce`` (``prod``/``mean``/``amax``/``amin``,
``include_self`` either way), ``put``/``put_`` (flat indices, ``accumulate`` either way).

Every tensor in torch's layout. ``index_reduce`` is ``scatter_reduce`` with its 1-d index spread over the other dims
(``scatter.scatter_values``: torch's reductions, ``mean`` dividing by the count written plus self when included).
``put`` writes ``source``'s flat entries at ``index``'s flat positions of the flattened input (negative positions
from the end); with duplicate positions and no ``accumulate`` torch leaves the winner unspecified.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import AXIS, INT_OR_REF, TENSOR, Bool, Enum
from .misc import checked_indices
from .scatter import scatter_values, _grids


@kernel("diagonal_scatter", inputs=[TENSOR, TENSOR, INT_OR_REF], attrs={"axis1": AXIS, "axis2": AXIS})
def k_diagonal_scatter(x, src, offset, *, axis1, axis2):
    """``x`` with its ``offset`` diagonal over ``(axis1, axis2)`` replaced by ``src`` (the other dims first, the
    diagonal last, as ``torch.diagonal`` gives it)."""
    offset = int(offset)
    if x.ndim < 2 or axis1 % x.ndim == axis2 % x.ndim:
        raise ValueError("diagonal_scatter: dim1 and dim2 cannot be the same")
    axis1, axis2 = axis1 % x.ndim, axis2 % x.ndim
    order = [d for d in range(x.ndim) if d not in (axis1, axis2)] + [axis1, axis2]
    moved = x.transpose(order)
    n1, n2 = moved.shape[-2:]
    length = max(0, min(n1 + min(offset, 0), n2 - max(offset, 0)))
    if tuple(src.shape) != (*moved.shape[:-2], length):
        raise ValueError(f"diagonal_scatter: src has shape {tuple(src.shape)}, the diagonal "
                         f"{(*moved.shape[:-2], length)}")
    if length == 0:
        return mx.array(x)
    i, j = mx.arange(n1)[:, None], mx.arange(n2)[None, :]
    on = (j - i) == offset
    # on the diagonal, entry k of it sits at row k (offset >= 0) or column k (offset < 0): min(i, j) either way
    k = mx.clip(mx.minimum(i, j), 0, length - 1).reshape(-1)
    spread = mx.take(src.astype(x.dtype), k, axis=-1).reshape(*moved.shape[:-2], n1, n2)
    back = [0] * x.ndim
    for position, d in enumerate(order):
        back[d] = position
    return mx.where(on, spread, moved).transpose(back)


@register("aten.diagonal_scatter.default")
def convert_diagonal_scatter(ctx, call):
    x, src = call.arg("self"), call.arg("src")
    rank = ctx.meta(x).rank
    ctx.emit("diagonal_scatter", [ctx.tensor(x, L.identity(rank)), ctx.tensor(src, L.identity(ctx.meta(src).rank)),
                                  ctx.value(call.arg("offset"))],
             {"axis1": call.arg("dim1") % rank, "axis2": call.arg("dim2") % rank}, perm=L.identity(rank))


@kernel("index_reduce", inputs=[TENSOR, TENSOR, TENSOR],
        attrs={"axis": AXIS, "reduce": Enum("prod", "mean", "amax", "amin"), "include_self": Bool()})
def k_index_reduce(x, index, src, *, axis, reduce, include_self):
    """Rows ``index`` (1-d) of ``axis`` reduced with ``src``'s rows in turn."""
    if x.ndim == 0:
        x, src = x.reshape(1), src.reshape(1)
        return k_index_reduce(x, index.reshape(-1), src, axis=0, reduce=reduce,
                              include_self=include_self).reshape(())
    index = index.reshape(-1)
    shape = list(x.shape)
    shape[axis] = index.size
    if list(src.shape) != shape:
        raise ValueError(f"index_reduce: source has shape {tuple(src.shape)}, expected {tuple(shape)}")
    if index.size == 0:
        return mx.array(x)
    index = checked_indices(index, x.shape[axis], "index_reduce") % x.shape[axis]
    view = [1] * x.ndim
    view[axis] = index.size
    spread = mx.broadcast_to(index.reshape(view), shape)
    return scatter_values(x, _grids(spread, axis), src.astype(x.dtype), reduce, include_self)


@register("aten.index_reduce.default", "aten.index_reduce_.default")
def convert_index_reduce(ctx, call):
    x, index, src = call.arg("self"), call.arg("index"), call.arg("source")
    rank = ctx.meta(x).rank
    reduce = call.arg("reduce")
    if reduce not in ("prod", "mean", "amax", "amin"):
        call.fail("reduce", "expected one of prod, mean, amax, amin")
    ctx.emit("index_reduce", [ctx.tensor(x, L.identity(rank)), ctx.tensor(index, L.identity(ctx.meta(index).rank)),
                              ctx.tensor(src, L.identity(ctx.meta(src).rank))],
             {"axis": call.arg("dim") % max(rank, 1), "reduce": reduce,
              "include_self": bool(call.arg("include_self"))}, perm=L.identity(rank))


@kernel("put", inputs=[TENSOR, TENSOR, TENSOR], attrs={"accumulate": Bool()})
def k_put(x, index, src, *, accumulate):
    """``x`` flattened, ``src``'s entries written (or added) at ``index``'s positions, reshaped back."""
    if index.size != src.size:
        raise ValueError(f"put: source has {src.size} entries but index has {index.size}")
    check_elements(list(x.shape), "put")
    if index.size == 0:
        return mx.array(x)
    if x.size == 0:
        raise IndexError("put: cannot write into an empty tensor")
    flat = x.reshape(-1)
    index = checked_indices(index.reshape(-1), flat.size, "put", long_only=True) % flat.size
    values = src.reshape(-1).astype(x.dtype)
    if accumulate:
        return flat.at[index].add(values).reshape(x.shape)
    out = mx.array(flat)
    out[index] = values
    return out.reshape(x.shape)


@register("aten.put.default", "aten.put_.default")
def convert_put(ctx, call):
    x, index, src = call.arg("self"), call.arg("index"), call.arg("source")
    ident = [L.identity(ctx.meta(v).rank) for v in (x, index, src)]
    ctx.emit("put", [ctx.tensor(v, p) for v, p in zip((x, index, src), ident)],
             {"accumulate": bool(call.arg("accumulate"))}, perm=ident[0])
