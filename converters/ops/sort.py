"""Ordering ops: sort / argsort / msort / topk / kthvalue / median / nanmedian, and searchsorted / bucketize.

Every tensor here stays in torch's layout (indices count positions along torch's dims). Orderings follow torch's
CPU kernels: NaN ranks above every number (last ascending, first descending), and equal values keep their input
order (a stable sort, as torch's ``stable=True``). Torch's default ``stable=False`` CPU sort is stable only on rows
of up to 16: on longer rows (torch 2.13, AVX2) it orders ties its own way (a float16 sort of 8000 values with
ties: 3917 indices differ from the stable order), which torch leaves unspecified; values agree. ``topk`` returns its ``k``
entries in sorted order: torch's own order among tied values (and with ``sorted=False``) is left to its kernel and
differs between its CPU and CUDA builds, so there the values match torch and the indices name one of the tied
entries (``kthvalue`` and ``median`` likewise).
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import AXIS, INT_OR_REF, SCALAR, TENSOR, Bool, Enum, Opt


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


@kernel("mode", inputs=[TENSOR], attrs={"axis": AXIS, "keepdims": Bool()})
def k_mode(x, *, axis, keepdims):
    """``[values, indices]``: the most frequent value along ``axis`` (the smallest of those tied) and the position of
    its last occurrence (what torch's CPU kernel gives on rows of up to 16, where its sort is stable; longer rows
    give one of the positions there). NaNs, which torch's kernel cannot order, each count once here."""
    if x.ndim == 0:
        return [x, mx.zeros((), dtype=mx.int64)]
    n = x.shape[axis]
    if n == 0:
        raise IndexError("mode(): Expected reduction dim to have non-zero size")
    v = mx.moveaxis(mx.stop_gradient(x), axis, -1)
    check_elements([*v.shape, n], "mode")
    count = mx.sum(v[..., :, None] == v[..., None, :], axis=-1)
    top = count == mx.max(count, axis=-1, keepdims=True)
    inexact = mx.issubdtype(v.dtype, mx.inexact)
    if inexact:
        big = mx.array(float("inf"), dtype=v.dtype)
    else:
        big = mx.array(True) if v.dtype == mx.bool_ else mx.array(mx.iinfo(v.dtype).max, dtype=v.dtype)
    value = mx.min(mx.where(top & (v == v), v, big), axis=-1, keepdims=True)  # NaN loses to every number
    if inexact:
        value = mx.where(mx.all(mx.isnan(v), axis=-1, keepdims=True), v[..., :1], value)
    where = mx.where(v == value, mx.arange(n), -1)
    index = mx.max(where, axis=-1, keepdims=True)
    index = mx.where(index < 0, 0, index)
    values = mx.take_along_axis(mx.moveaxis(x, axis, -1), index, axis=-1)
    values, index = mx.moveaxis(values, -1, axis), mx.moveaxis(index, -1, axis)
    if not keepdims:
        values, index = mx.squeeze(values, axis), mx.squeeze(index, axis)
    return [values, index.astype(mx.int64)]


@register("aten.mode.default")
def convert_mode(ctx, call):
    from ..convert import Info

    x = call.arg("self")
    rank = ctx.meta(x).rank
    keep = call.arg("keepdim")
    out = L.identity(rank) if keep or rank == 0 else L.identity(rank - 1)
    ctx.emit("mode", [ctx.tensor(x, L.identity(rank))], {"axis": call.arg("dim") % max(rank, 1), "keepdims": keep},
             items=[Info(m, out) for m in call.meta.items])


def _ordering(name):
    """Converters of sort-type ops; every tensor in torch's layout (see the module docstring)."""

    def convert(ctx, call):
        from ..convert import Info

        x = call.arg("self")
        rank = ctx.meta(x).rank
        ident = L.identity(rank)
        axis = 0 if name == "msort" else call.arg("dim") % max(rank, 1)
        if call.has("stable"):
            call.arg("stable")  # stable either way: torch's unstable order among ties is unspecified (docstring)
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


@kernel("median", inputs=[TENSOR], attrs={"axis": Opt(AXIS), "keepdims": Bool(), "ignore_nan": Bool()})
def k_median(x, *, axis, keepdims, ignore_nan):
    """torch's lower median along ``axis`` (``None``: of every element, the value only) as ``[values, indices]``.
    A NaN makes the median NaN (its index the first NaN's); ``ignore_nan`` (nanmedian) takes the lower median of
    the numbers, NaN where there are none."""
    if axis is None:
        x, axis = x.reshape(-1), 0
        flat = True
    else:
        flat = False
    if x.ndim == 0:
        return x if flat else [x, mx.zeros((), dtype=mx.int64)]
    n = x.shape[axis]
    if n == 0:
        raise ValueError("median: cannot take the median of an empty dim")
    order = stable_order(x, axis, False)  # NaN last, ties in input order
    if mx.issubdtype(x.dtype, mx.inexact):
        missing = mx.sum(mx.isnan(x), axis=axis, keepdims=True).astype(mx.int32)
        if ignore_nan:
            k = mx.maximum((n - missing - 1) // 2, 0)
        else:  # the first NaN of the sorted order (the input's first NaN: the sort is stable)
            k = mx.where(missing > 0, n - missing, (n - 1) // 2)
    else:
        shape = list(x.shape)
        shape[axis] = 1
        k = mx.full(shape, (n - 1) // 2, dtype=mx.int32)
    index = mx.stop_gradient(mx.take_along_axis(order, k, axis=axis))  # the values carry the gradient
    values = mx.take_along_axis(x, index, axis=axis)
    if flat:
        return values.reshape(())
    if not keepdims:
        values, index = mx.squeeze(values, axis), mx.squeeze(index, axis)
    return [values, index.astype(mx.int64)]


def _median(ignore_nan):
    def convert_median(ctx, call):
        from ..convert import Info

        x = call.arg("self")
        rank = ctx.meta(x).rank
        ident = L.identity(rank)
        if not call.has("dim"):  # median of every element: the value only
            return ctx.emit("median", [ctx.tensor(x, ident)], {"axis": None, "keepdims": False,
                                                               "ignore_nan": ignore_nan}, perm=())
        keep = call.arg("keepdim")
        out = ident if keep else L.identity(max(rank - 1, 0))
        ctx.emit("median", [ctx.tensor(x, ident)], {"axis": call.arg("dim") % max(rank, 1), "keepdims": keep,
                                                    "ignore_nan": ignore_nan},
                 items=[Info(m, out) for m in call.meta.items])

    convert_median.__name__ = "convert_nanmedian" if ignore_nan else "convert_median"
    return convert_median


register("aten.median.dim", "aten.median.default")(_median(False))
register("aten.nanmedian.dim", "aten.nanmedian.default")(_median(True))


@kernel("searchsorted", inputs=[TENSOR, TENSOR], attrs={"right": Bool(), "int32": Bool()})
def k_searchsorted(seq, values, *, right, int32):
    """torch's searchsorted: for each value, how many entries of the sorted innermost rows of ``seq`` lie below it
    (``right``: at or below); a NaN value goes after every entry. ``seq`` 1-d, or with ``values``' leading dims."""
    if seq.ndim == 0:
        raise ValueError("searchsorted: the sorted sequence must have at least one dim")
    if seq.ndim > 1 and tuple(seq.shape[:-1]) != tuple(values.shape[:-1]):
        raise ValueError(f"searchsorted: the leading dims of the sequence {tuple(seq.shape)} and the values "
                         f"{tuple(values.shape)} differ")
    check_elements([values.size, seq.shape[-1]], "searchsorted")
    if seq.ndim == 1:
        v, s = values[..., None], seq
    else:
        v, s = values[..., :, None], seq[..., None, :]
    below = (s <= v) if right else (s < v)
    count = mx.sum(below.astype(mx.int32), axis=-1)
    if mx.issubdtype(values.dtype, mx.inexact):
        count = mx.where(mx.isnan(values), seq.shape[-1], count)
    return count.astype(mx.int32 if int32 else mx.int64)


@register("aten.searchsorted.Tensor", "aten.bucketize.Tensor")
def convert_searchsorted(ctx, call):
    bucketize = call.op.startswith("aten.bucketize")
    seq, values = (call.arg("boundaries"), call.arg("self")) if bucketize else (call.arg("sorted_sequence"),
                                                                             call.arg("self"))
    if bucketize and ctx.meta(seq).rank != 1:
        call.fail("boundaries", "must be 1-d")
    right = bool(call.arg("right"))
    if not bucketize:
        side = call.arg("side")
        if side is not None:
            if side not in ("left", "right") or (call.arg("right") and side == "left"):
                call.fail("side", "must be 'left' or 'right', and agree with right=")
            right = side == "right"
        if call.arg("sorter") is not None:
            call.fail("sorter", "a sorter permutation is not supported (sort the sequence first)")
    ident = [L.identity(ctx.meta(v).rank) for v in (seq, values)]
    ctx.emit("searchsorted", [ctx.tensor(seq, ident[0]), ctx.tensor(values, ident[1])],
             {"right": right, "int32": bool(call.arg("out_int32"))}, perm=ident[1])


@kernel("isin", inputs=[SCALAR, SCALAR], attrs={"invert": Bool()})
def k_isin(elements, test, *, invert):
    """Whether each entry of ``elements`` (any layout, kept) equals some entry of ``test`` (any shape), compared
    in the promoted dtype as torch does (NaN is in no set). One comparison per pair: bounded by the element limit."""
    elements = elements if isinstance(elements, mx.array) else mx.array(elements)
    # a Python number takes the tensor's float dtype (torch's promotion): through float32 a float64 0.1 is not 0.1
    floating = mx.issubdtype(elements.dtype, mx.floating) and isinstance(test, float)
    test = (mx.array(test, dtype=elements.dtype) if floating else mx.array(test)).reshape(-1)
    check_elements([elements.size, test.size], "isin")
    if test.size == 0:
        found = mx.zeros(elements.shape, dtype=mx.bool_)
    else:
        found = mx.any(elements[..., None] == test, axis=-1)
    return mx.logical_not(found) if invert else found


@register("aten.isin.Tensor_Tensor", "aten.isin.Tensor_Scalar", "aten.isin.Scalar_Tensor")
def convert_isin(ctx, call):
    """Kept whole: torch's decomposition picks its algorithm by comparing sizes, a guard that pinned every dim of
    the elements to the example (``10 * numel ** 0.145 > ...``)."""
    elements = call.arg("elements") if call.has("elements") else call.arg("element")
    test = call.arg("test_elements") if call.has("test_elements") else call.arg("test_element")
    call.arg("assume_unique")  # only a speed hint in torch: the result is the same
    test_spec = ctx.tensor(test, L.identity(ctx.meta(test).rank)) if ctx.is_tensor(test) else ctx.value(test)
    elements_spec = ctx.tensor(elements) if ctx.is_tensor(elements) else ctx.value(elements)
    perm = ctx.perm(elements) if ctx.is_tensor(elements) else L.identity(0)
    ctx.emit("isin", [elements_spec, test_spec], {"invert": bool(call.arg("invert"))}, perm=perm)
