"""Writes into tensors, as values: ``fill``/``fill_``, ``copy``/``copy_``, ``index_put`` with a boolean mask
(``y[mask] = v``) or integer index tensors (``y[:, idx] = v``, ``y.index_put_((i, j), v, accumulate=True)``), and ``select_scatter``/``slice_scatter``, the ops that write a modified view back into its base.

The capture (``converters/capture_regions.py``) turns an in-place write into a view (``y[:, 0] = 1``,
``y[..., 1:] = x``) into the write on the view followed by these scatters up to the base, so every later reader of
the base sees the write, as in torch. Every result here is a new array: MLX arrays are shared between graph values.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import AXIS, INT_OR_REF, TENSOR, Bool, Opt, Seq
from ._layers import export_note, exporting
from .misc import checked_indices
from .shape import _sizes_of, slice_bounds


@kernel("slice_scatter", inputs=[TENSOR, TENSOR, Opt(INT_OR_REF), Opt(INT_OR_REF), Opt(INT_OR_REF)],
        attrs={"axis": AXIS})
def k_slice_scatter(x, src, start, end, step, *, axis):
    """``x`` with ``x[start:end:step]`` along ``axis`` replaced by ``src``."""
    out = mx.array(x)  # a copy: x may be read elsewhere
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, end, step)
    out[tuple(index)] = src.astype(x.dtype)
    return out


@kernel("select_scatter", inputs=[TENSOR, TENSOR, INT_OR_REF], attrs={"axis": AXIS})
def k_select_scatter(x, src, index, *, axis):
    """``x`` with position ``index`` of ``axis`` replaced by ``src`` (which lacks that axis)."""
    size, index = x.shape[axis], int(index)
    if not -size <= index < size:  # MLX does not bound-check a write: an artifact's index must be checked here
        raise IndexError(f"select_scatter: index {index} is out of bounds for dimension {axis} with size {size}")
    out = mx.array(x)
    key = [slice(None)] * x.ndim
    key[axis] = index % size
    out[tuple(key)] = src.astype(x.dtype)
    return out


def _ident(ctx, v):
    return ctx.tensor(v, L.identity(ctx.meta(v).rank))


@register("aten.slice_scatter.default")
def convert_slice_scatter(ctx, call):
    x, src = call.arg("self"), call.arg("src")
    ident = L.identity(ctx.meta(x).rank)
    ctx.emit("slice_scatter", [ctx.tensor(x, ident), _ident(ctx, src), *slice_bounds(ctx, call)],
             {"axis": L.axis_of(ident, call.arg("dim"))}, perm=ident)


@register("aten.select_scatter.default")
def convert_select_scatter(ctx, call):
    x, src = call.arg("self"), call.arg("src")
    ident = L.identity(ctx.meta(x).rank)
    ctx.emit("select_scatter", [ctx.tensor(x, ident), _ident(ctx, src), ctx.value(call.arg("index"))],
             {"axis": L.axis_of(ident, call.arg("dim"))}, perm=ident)


@register("aten.fill.Scalar", "aten.fill_.Scalar", "aten.fill.Tensor", "aten.fill_.Tensor", "aten.zero.default",
          "aten.zero_.default")
def convert_fill(ctx, call):
    x = call.arg("self")
    value = call.arg("value") if call.has("value") else 0
    if ctx.is_tensor(value) and ctx.meta(value).rank != 0:
        call.fail("value", "fill takes a 0-dim tensor")
    ctx.emit("fill_like", [ctx.tensor(x), ctx.tensor(value) if ctx.is_tensor(value) else ctx.value(value)],
             {"dtype": ctx.meta(x).dtype}, perm=ctx.perm(x))


@register("aten.copy.default", "aten.copy_.default")
def convert_copy_into(ctx, call):
    """``self.copy_(src)``: ``src`` broadcast to ``self``'s shape, in ``self``'s dtype."""
    x, src = call.arg("self"), call.arg("src")
    call.arg("non_blocking")  # a transfer hint: same values
    rank = ctx.meta(x).rank
    lead = rank - ctx.meta(src).rank
    sizes = _sizes_of(ctx, call, x)
    out = ctx.emit("expand", [_ident(ctx, src), ctx.value(sizes)], {"lead": lead, "perm": list(range(rank))},
                   perm=L.identity(rank), out=ctx.fresh(call.name))
    ctx.emit("cast", [{"ref": out.name}], {"dtype": ctx.meta(x).dtype}, perm=L.identity(rank))


@kernel("index_put", inputs=[TENSOR, Seq(Opt(TENSOR)), TENSOR], attrs={"accumulate": Bool()})
def k_index_put(x, indices, values, *, accumulate):
    """``x`` with ``x[indices] = values`` (numpy-style advanced indexing by integer tensors, None = whole dim;
    ``values`` broadcast to the indexed shape), or ``+=`` with every repeated index summed when ``accumulate``.
    Indices are checked on the host (MLX's scatters do not bound-check) and negative ones count from the end."""
    if len(indices) > x.ndim:
        raise IndexError(f"index_put: {len(indices)} indices for a tensor of {x.ndim} dims")
    key = []
    for d, index in enumerate(indices):
        if index is None:
            key.append(slice(None))
            continue
        size = x.shape[d]
        index = checked_indices(index, size, "index_put").astype(mx.int32)
        key.append(mx.where(index < 0, index + size, index))
    key, values = tuple(key), values.astype(x.dtype)
    if accumulate:
        return x.at[key].add(values)
    out = mx.array(x)  # a copy: x may be read elsewhere
    out[key] = values
    return out


@register("aten.index_put.default", "aten.index_put_.default")
def convert_index_put(ctx, call):
    """``y[mask] = v`` with one boolean mask over ``y``'s leading dims and a single value: a ``where``; integer
    index tensors: the ``index_put`` kernel (a scatter, or a scatter-add with ``accumulate``)."""
    x, indices, values = call.arg("self"), call.arg("indices"), call.arg("values")
    accumulate = call.arg("accumulate")
    given = [i for i in indices if i is not None]
    if given and all(ctx.meta(i).dtype != "bool" for i in given):
        ident = L.identity(ctx.meta(x).rank)
        specs = [None if i is None else _ident(ctx, i) for i in indices]
        ctx.emit("index_put", [ctx.tensor(x, ident), specs, _ident(ctx, values)], {"accumulate": bool(accumulate)},
                 perm=ident)
        return
    if accumulate:
        call.fail("accumulate", "accumulating writes through a boolean mask are not supported")
    masks = given
    if len(indices) != 1 or len(masks) != 1 or ctx.meta(masks[0]).dtype != "bool":
        call.fail("indices", "a boolean mask must be the only index (y[mask] = v); it cannot be mixed with others")
    mask = masks[0]
    rank, mask_rank = ctx.meta(x).rank, ctx.meta(mask).rank
    shape = ctx.meta(values).shape
    if any(s != 1 for s in shape):
        call.fail("values", "only one value written at every masked position is supported (y[mask] = v)")
    ident = L.identity(rank)
    # the mask covers the leading dims: trailing size-1 dims make it broadcast over the rest
    mask_spec = _ident(ctx, mask)
    if mask_rank < rank:
        sizes = ctx.value(list(_sizes_of(ctx, call, mask)) + [1] * (rank - mask_rank))
        mask_spec = {"ref": ctx.emit("reshape", [mask_spec, sizes], perm=ident, out=ctx.fresh(f"{call.name}_mask"),
                                     meta=ctx.meta(x)).name}
    value = {"ref": ctx.emit("reshape", [_ident(ctx, values), []], perm=(), out=ctx.fresh(f"{call.name}_value"),
                             meta=ctx.meta(values)).name}
    value = {"ref": ctx.emit("cast", [value], {"dtype": ctx.meta(x).dtype}, perm=(),
                             out=ctx.fresh(f"{call.name}_typed"), meta=ctx.meta(values)).name}
    ctx.emit("where", [mask_spec, value, ctx.tensor(x, ident)], perm=ident)


@kernel("masked_scatter", inputs=[TENSOR, TENSOR, TENSOR])
def k_masked_scatter(x, mask, source):
    """torch ``x.masked_scatter(mask, source)``: the positions where ``mask`` (broadcast to ``x``) is True, in
    row-major order, take ``source``'s elements in order (a LLaVA-style model writes image features into its token
    embeddings so). The output has ``x``'s shape; ``source`` must hold at least as many elements as ``mask`` has
    True entries (checked on the host, as torch checks it)."""
    mask = mx.broadcast_to(mask, x.shape).reshape(-1)
    flat = source.reshape(-1).astype(x.dtype)
    count = mx.sum(mask.astype(mx.int32))
    if not exporting():
        mx.eval(count)
        if count.item() > flat.size:
            raise ValueError(f"masked_scatter: mask has {count.item()} True entries but source has only "
                             f"{flat.size} elements")
    else:
        export_note("masked_scatter's host-side source size check -> a short source repeats its last element")
    position = mx.clip(mx.cumsum(mask.astype(mx.int32)) - 1, 0, max(flat.size - 1, 0))
    taken = mx.take(flat, position) if flat.size else mx.zeros_like(x.reshape(-1))
    return mx.where(mask, taken, x.reshape(-1)).reshape(x.shape)


@register("aten.masked_scatter.default", "aten.masked_scatter_.default")
def convert_masked_scatter(ctx, call):
    x, mask, source = call.arg("self"), call.arg("mask"), call.arg("source")
    rank = ctx.meta(x).rank
    if ctx.meta(mask).rank > rank:
        call.fail("mask", "a mask with more dims than self is not supported")
    ctx.emit("masked_scatter", [_ident(ctx, x), _ident(ctx, mask), _ident(ctx, source)], perm=L.identity(rank))
