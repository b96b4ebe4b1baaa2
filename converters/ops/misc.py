"""Casts, tensor creation and indexing-style ops: to/_to_copy/type_as, *_like, zeros/ones/full/arange,
masked_fill, flip, roll, index_select, gather, embedding, max/min over a dim, logsumexp, prod, vector
norm, einsum, tril/triu, diagonal, pixel_(un)shuffle, channel_shuffle.

Created tensors take the dtype the example run recorded for them (torch's promotion rules were already applied).
"""

from __future__ import annotations

import math

import mlx.core as mx

from .. import layout as L
from ..index_errors import IndexRangeError, IndexTypeError
from ..ir import Ref
from ..registry import kernel, register
from ..limits import check_elements
from ..precision import saturating_cast
from ..spec import (AXES, AXIS, DTYPE, GEOMETRY, MAX_LEN, SCALAR, SIZES, TENSOR, Bool, Enum, Float, Int, Opt, Seq,
                    Str, DTYPES)
from ._layers import float64_math as _float64
from ._layers import channel_shuffle, export_note, exporting, roll
from .elementwise import aligned_inputs, k_where
from .shape import _dims

# dtype names of an artifact -> MLX dtypes: an explicit table (never getattr with a name read from a file).
# float64 computes in float64 on the CPU, as torch does (convs: porter.layers' float64 engine); complex64 is MLX's
# only complex.
_MX_DTYPES = {"bool": mx.bool_, "uint8": mx.uint8, "uint16": mx.uint16, "uint32": mx.uint32, "uint64": mx.uint64,
              "int8": mx.int8, "int16": mx.int16, "int32": mx.int32, "int64": mx.int64, "float16": mx.float16,
              "bfloat16": mx.bfloat16, "float32": mx.float32, "float64": mx.float64, "complex64": mx.complex64}


def mx_dtype(name):
    if name is None:
        return None
    try:
        return _MX_DTYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}") from None


@kernel("cast", inputs=[SCALAR], attrs={"dtype": DTYPE})
def k_cast(x, *, dtype):
    return x.astype(mx_dtype(dtype)) if isinstance(x, mx.array) else mx.array(x, dtype=mx_dtype(dtype))


def _typed(value, dtype):
    """``value`` as a 0-d array of ``dtype``: ``mx.full(shape, 1, dtype=mx.bool_)`` returns int32 and
    ``mx.full(shape, 1.5, dtype=mx.int64)`` float32 (MLX 0.32 types a Python scalar before the dtype)."""
    dtype = mx_dtype(dtype)
    if isinstance(value, mx.array):
        return value if dtype is None else value.astype(dtype)
    return mx.array(value, dtype=dtype) if dtype is not None else mx.array(value)


@kernel("tensor_from_scalars", inputs=[Seq(SCALAR)], attrs={"shape": Seq(Int(0, MAX_LEN), 0, MAX_LEN),
                                                           "dtype": DTYPE})
def k_tensor_from_scalars(values, *, shape, dtype):
    """``torch.tensor(nested data)``: the scalars (Python numbers or 0-d arrays; a list value such as
    ``x.shape`` stands for its items) in order, as ``shape``."""
    values = [item for v in values for item in (v if isinstance(v, (list, tuple)) else [v])]
    count = 1
    for d in shape:
        count *= d
    if count != len(values):
        raise ValueError(f"tensor_from_scalars: {len(values)} value(s) for shape {tuple(shape)}")
    if not values:
        return mx.zeros(shape, dtype=mx_dtype(dtype))
    return mx.stack([_typed(v, dtype).reshape(()) for v in values]).reshape(shape)


@kernel("fill_like", inputs=[TENSOR, SCALAR], attrs={"dtype": DTYPE})
def k_fill_like(x, value, *, dtype):
    return mx.full(x.shape, _typed(value, dtype))


@kernel("full", inputs=[SIZES, SCALAR], attrs={"dtype": DTYPE})
def k_full(size, value, *, dtype):
    shape = [int(s) for s in size]
    check_elements(shape, "full")
    return mx.full(shape, _typed(value, dtype))


@kernel("arange", inputs=[SCALAR, SCALAR, SCALAR], attrs={"dtype": DTYPE})
def k_arange(start, end, step, *, dtype):
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    check_elements([max(0, -(-(end - start) // step))], "arange")
    return mx.arange(start, end, step, dtype=mx_dtype(dtype))


@kernel("flip", inputs=[TENSOR], attrs={"axes": AXES})
def k_flip(x, *, axes):
    index = [slice(None)] * x.ndim
    for a in axes:
        index[a] = slice(None, None, -1)
    return x[tuple(index)]


@kernel("roll", inputs=[TENSOR, SIZES], attrs={"axes": AXES})
def k_roll(x, shifts, *, axes):
    if not axes:
        return mx.roll(x.reshape(-1), int(shifts[0])).reshape(x.shape)
    return roll(x, [int(s) for s in shifts], axes)  # one threaded pass on the CPU (layers/roll.py)


# integer dtypes torch's index ops refuse ("gather(): Expected dtype int32/int64 for index"); uint8 is a mask in
# torch's x[idx] (deprecated), never positions. Wider unsigned ones are MLX's own index dtypes (argsort's uint32).
_NARROW_INTEGERS = (mx.uint8, mx.int8, mx.uint16, mx.int16)


def check_index_dtype(index, what: str, narrow: bool = False, long_only: bool = False) -> None:
    """``IndexTypeError`` for an ``index`` array of a dtype torch's op ``what`` refuses (:func:`checked_indices`;
    ``long_only``: torch's int64-only ops, ``put``, ``index_copy``, ``index_fill``)."""
    if not isinstance(index, mx.array):
        return
    if what in ("index", "index_put") and index.dtype in (mx.bool_, mx.uint8):
        # torch's x[mask] (and x[mask] = v): data-dependent positions (conversion turns a constant mask into
        # positions); MLX gathered by a uint8 "mask" [1, 0, 1, 0] as positions 1, 0, 1, 0 (torch: rows 0 and 2)
        raise IndexTypeError(f"{what}: a {index.dtype} index is a mask in torch (uint8 deprecated), not positions, "
                             "and a port takes no mask computed at run time")
    if not mx.issubdtype(index.dtype, mx.integer):
        # a float or bool index (a crafted graph feeding a weight or a mask in) failed inside MLX's evaluation
        raise IndexTypeError(f"{what}: expected an integer index array but got {index.dtype}")
    if long_only and index.dtype != mx.int64:
        raise IndexTypeError(f"{what}: expected an int64 index array (torch refuses {index.dtype} indices here) but "
                             f"got {index.dtype}")
    if not narrow and index.dtype in _NARROW_INTEGERS:
        raise IndexTypeError(f"{what}: expected an int32 or int64 index array (torch refuses {index.dtype} "
                             f"indices) but got {index.dtype}")


def checked_indices(index, size: int, what: str, narrow: bool = False, long_only: bool = False):
    """``index`` unchanged when it is an integer array torch's op takes (not 8/16-bit unless ``narrow``:
    embedding_bag casts them; int64 alone with ``long_only``) and every entry is in ``[-size, size)``; else ``IndexTypeError`` (a TypeError) or
    ``IndexRangeError`` (an IndexError) as torch raises, which the runtime names with the node and the input
    (``converters/index_errors.py``). MLX's gathers do not check bounds (an index past the end reads other memory,
    or crashes), and indices can come from a stored buffer of an artifact as well as from the caller. Returned
    under ``stop_gradient``: integer indices carry no gradient, and MLX's scatters refuse to be asked for one
    (``Cannot calculate VJP with respect to indices``) when the indices were computed from what is differentiated
    (a VQ-VAE's ``argmin`` code into a one-hot ``scatter_``)."""
    check_index_dtype(index, what, narrow, long_only)
    if isinstance(index, mx.array) and index.size:
        index = mx.stop_gradient(index)
        if exporting():  # an exported function cannot stop to check on the host: a bad index reads entry 0
            export_note(f"{what}'s host-side index range check -> out-of-range indices read index 0")
            return mx.where((index >= -size) & (index < size), index, 0)
        lo, hi = mx.min(index), mx.max(index)
        mx.eval(lo, hi)
        if lo.item() < -size or hi.item() >= size:
            raise IndexRangeError(f"{what}: index {hi.item() if hi.item() >= size else lo.item()} is out of range "
                                  f"for a dimension of size {size}")
    return index


@kernel("index_select", inputs=[TENSOR, TENSOR], attrs={"axis": AXIS})
def k_index_select(x, index, *, axis):
    return mx.take(x, checked_indices(index.reshape(-1), x.shape[axis], "index_select"), axis=axis)


@kernel("index_select_0d", inputs=[TENSOR, TENSOR])
def k_index_select_0d(x, index):
    """torch's ``index_select`` of a 0-d ``x``: ``index`` holds one value, which must be 0 (torch refuses -1 here);
    the result is ``x`` (0-d), read through the index so a bad one is caught as torch catches it."""
    if index.size != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index.size} value(s)")
    check_index_dtype(index, "index_select")
    index = mx.stop_gradient(index.reshape(1))
    if exporting():
        index = checked_indices(index, 1, "index_select")  # no host check: a bad index reads entry 0
    else:
        value = index.item()  # one host read: the range check and torch's "only 0" rule together
        if not -1 <= value < 1:
            raise IndexRangeError(f"index_select: index {value} is out of range for a dimension of size 1")
        if value < 0:
            raise IndexRangeError(f"index_select: index {value} is out of range for a 0-d tensor (only 0 is valid)")
    return mx.take(x.reshape(1), mx.maximum(index, 0), axis=0).reshape(())


@kernel("gather", inputs=[TENSOR, TENSOR], attrs={"axis": AXIS})
def k_gather(x, index, *, axis):
    return mx.take_along_axis(x, checked_indices(index, x.shape[axis], "gather"), axis=axis)


def embedding_lookup(weight, indices, padding_idx=None, what: str = "embedding"):
    """Rows ``weight[indices]`` (``(*indices.shape, D)``); a row looked up at ``padding_idx`` passes no gradient to
    the weight, as torch's embedding backward skips it (the values are the row's all the same)."""
    rows = mx.take(weight, checked_indices(indices, weight.shape[0], what), axis=0)
    if padding_idx is None:
        return rows
    return mx.where(mx.expand_dims(indices != padding_idx, -1), rows, mx.stop_gradient(rows))


@kernel("embedding", inputs=[TENSOR, TENSOR], attrs={"padding_idx": Opt(Int(0, (1 << 31) - 1))})
def k_embedding(weight, indices, *, padding_idx=None):
    """``padding_idx`` (absent in artifacts written before it was recorded): the row whose gradient is zero."""
    return embedding_lookup(weight, indices, padding_idx)


@kernel("max_dim", inputs=[TENSOR], attrs={"axis": Opt(AXIS), "keepdims": Bool(), "fn": Enum("max", "min")})
def k_max_dim(x, *, axis, keepdims, fn):
    """``max(x, dim)`` / ``min(x, dim)``: values and int64 indices; ``axis`` None for a 0-d ``x``."""
    if x.ndim == 0:  # (MLX's argmax of a 0-d array with keepdims fails)
        return [x, mx.zeros((), mx.int64)]
    values = (mx.max if fn == "max" else mx.min)(x, axis=axis, keepdims=keepdims)
    indices = (mx.argmax if fn == "max" else mx.argmin)(x, axis=axis, keepdims=keepdims).astype(mx.int64)
    return [values, indices]


@kernel("logsumexp", inputs=[TENSOR], attrs={"axes": AXES, "keepdims": Bool()})
def k_logsumexp(x, *, axes, keepdims):
    if x.size == 0:  # MLX refuses an empty array; torch's sum of no terms is 0, its log -inf
        kept = {a % x.ndim for a in axes}
        shape = [1 if i in kept else n for i, n in enumerate(x.shape) if keepdims or i not in kept]
        return mx.full(shape, -math.inf, x.dtype)
    if x.dtype == mx.float64:  # MLX's is float32-precise there (layers/_float64.py)
        return _float64.logsumexp(x, axes, keepdims)
    return mx.logsumexp(x, axis=axes, keepdims=keepdims)


@kernel("prod", inputs=[TENSOR], attrs={"axes": AXES, "keepdims": Bool(), "dtype": Opt(DTYPE)})
def k_prod(x, *, axes, keepdims, dtype=None):
    if dtype is not None:
        x = x.astype(mx_dtype(dtype))
    return mx.prod(x, axis=axes, keepdims=keepdims)


@kernel("vector_norm", inputs=[TENSOR], attrs={"ord": Float(allow_inf=True), "axes": AXES, "keepdims": Bool(),
                                               "dtype": Opt(DTYPE)})
def k_vector_norm(x, *, ord, axes, keepdims, dtype=None):
    """``torch.linalg.vector_norm``: ``dtype`` casts the input first, as torch does. A float16/bfloat16 input is
    summed in float32 and rounded once, as torch's CPU kernel does (its opmath type): in half, ``|x|^6`` of 8.5
    overflowed to inf where torch's norm is 8.5."""
    if dtype is not None:
        x = x.astype(mx_dtype(dtype))
    if x.dtype in (mx.float16, mx.bfloat16) and ord not in (0, float("inf"), float("-inf")):
        return k_vector_norm(x.astype(mx.float32), ord=ord, axes=axes, keepdims=keepdims).astype(x.dtype)
    a = mx.abs(x)
    if ord == float("inf"):
        return mx.max(a, axis=axes, keepdims=keepdims)
    if ord == float("-inf"):
        return mx.min(a, axis=axes, keepdims=keepdims)
    if ord == 0:
        return mx.sum((a != 0).astype(x.dtype), axis=axes, keepdims=keepdims)
    return mx.power(mx.sum(mx.power(a, ord), axis=axes, keepdims=keepdims), 1.0 / ord)


_EINSUM_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ,->. "


@kernel("einsum", more=TENSOR, attrs={"equation": Str(256, _EINSUM_CHARS)})
def k_einsum(*operands, equation):
    return mx.einsum(equation, *operands)


@kernel("tri", inputs=[TENSOR], attrs={"upper": Bool(), "diagonal": Int()})
def k_tri(x, *, upper, diagonal):
    # MLX's tril/triu return int32 for a bool input (a causal mask would turn into an additive one downstream)
    return (mx.triu(x, diagonal) if upper else mx.tril(x, diagonal)).astype(x.dtype)


@kernel("pixel_shuffle", inputs=[TENSOR], attrs={"factor": Int(1, GEOMETRY), "inverse": Bool(),
                                                  "channels_last": Bool()})
def k_pixel_shuffle(x, *, factor, inverse, channels_last=False):
    """Torch layout ``(*, C, H, W)``, or channels-last ``(*, H, W, C)``: channel ``c * r * r + i * r + j`` of
    pixel ``(h, w)`` is channel ``c`` of pixel ``(h * r + i, w * r + j)``."""
    r = factor
    if channels_last:
        *lead, h, w, c = x.shape
        n = len(lead)
        if not inverse:
            x = x.reshape(*lead, h, w, c // (r * r), r, r)
            x = x.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
            return x.reshape(*lead, h * r, w * r, c // (r * r))
        x = x.reshape(*lead, h // r, r, w // r, r, c)
        x = x.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
        return x.reshape(*lead, h // r, w // r, c * r * r)
    *lead, c, h, w = x.shape
    if not inverse:
        x = x.reshape(*lead, c // (r * r), r, r, h, w)
        n = len(lead)
        x = x.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
        return x.reshape(*lead, c // (r * r), h * r, w * r)
    x = x.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    x = x.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


# ---------------------------------------------------------------------------------------------------- converters
def _read_creation_flags(call):
    for flag in ("layout", "device", "pin_memory", "non_blocking", "memory_format", "copy", "requires_grad"):
        if call.has(flag):
            call.arg(flag)  # placement and memory-format requests do not change values


@register("aten.to.dtype", "aten._to_copy.default", "aten.to.dtype_layout", "aten.to.device", "aten.to.other",
          "aten.type_as.default")
def convert_cast(ctx, call):
    _read_creation_flags(call)
    x = call.arg("self")
    if call.has("dtype"):
        call.arg("dtype")
    if call.has("other"):
        call.arg("other")
    ctx.emit("cast", [ctx.tensor(x)], {"dtype": call.meta.dtype}, perm=ctx.perm(x))


@register("prims.convert_element_type.default")  # torch's decompositions upcast half with it (renorm's, in float16)
def convert_element_type(ctx, call):
    x = call.arg("a")
    call.arg("dtype")
    ctx.emit("cast", [ctx.tensor(x)], {"dtype": call.meta.dtype}, perm=ctx.perm(x))


def _fill_like(value_arg=None, value=None):
    def convert_fill_like(ctx, call):
        _read_creation_flags(call)
        x = call.arg("self")
        call.arg("dtype")
        v = call.arg(value_arg) if value_arg else value
        ctx.emit("fill_like", [ctx.tensor(x), ctx.value(v)], {"dtype": call.meta.dtype}, perm=ctx.perm(x))

    return convert_fill_like


register("aten.zeros_like.default", "aten.empty_like.default")(_fill_like(value=0))
register("aten.ones_like.default")(_fill_like(value=1))
register("aten.full_like.default")(_fill_like("fill_value"))


def _full(value_arg=None, value=None):
    def convert_full(ctx, call):
        _read_creation_flags(call)
        if call.has("self"):
            call.arg("self")  # new_* ops: only dtype/device come from self, already in the recorded dtype
        call.arg("dtype")
        v = call.arg(value_arg) if value_arg else value
        ctx.emit("full", [ctx.value(list(call.arg("size"))), ctx.value(v)], {"dtype": call.meta.dtype},
                 perm=L.identity(call.meta.rank))

    return convert_full


register("aten.zeros.default", "aten.new_zeros.default", "aten.empty.memory_format", "aten.new_empty.default")(
    _full(value=0))
register("aten.ones.default", "aten.new_ones.default")(_full(value=1))
register("aten.full.default", "aten.new_full.default")(_full("fill_value"))


@register("aten.scalar_tensor.default", "prims.scalar_tensor.default")  # prims: xlogy(2.0, t)'s decomposition
def convert_scalar_tensor(ctx, call):
    _read_creation_flags(call)
    call.arg("dtype")
    ctx.emit("full", [[], ctx.value(call.arg("s"))], {"dtype": call.meta.dtype}, perm=())


def _leaves(data) -> list:
    return [leaf for item in data for leaf in _leaves(item)] if isinstance(data, (list, tuple)) else [data]


@register("aten.tensor.default")
def convert_tensor_literal(ctx, call):
    """``torch.tensor(data)`` whose data holds graph values (TorchScript's frontend; literal data is a constant):
    the leaves in order, reshaped to the example's nested shape, in its recorded dtype."""
    _read_creation_flags(call)
    call.arg("dtype")
    leaves = _leaves(call.arg("data"))
    if len(leaves) > MAX_LEN:
        call.fail("data", f"a tensor built from more than {MAX_LEN} values computed by the forward is not supported")
    ctx.emit("tensor_from_scalars", [[ctx.value(v) for v in leaves]],
             {"shape": list(call.meta.shape), "dtype": call.meta.dtype}, perm=L.identity(call.meta.rank))


@register("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def convert_arange(ctx, call):
    _read_creation_flags(call)
    call.arg("dtype")
    start = call.arg("start") if call.has("start") else 0
    step = call.arg("step") if call.has("step") else 1
    ctx.emit("arange", [ctx.value(start), ctx.value(call.arg("end")), ctx.value(step)], {"dtype": call.meta.dtype},
             perm=(0,))


@register("aten.masked_fill.Scalar", "aten.masked_fill.Tensor", "aten.masked_fill_.Scalar",
          "aten.masked_fill_.Tensor")
def convert_masked_fill(ctx, call):
    specs, perm = aligned_inputs(ctx, call, [call.arg("mask"), call.arg("value"), call.arg("self")])
    ctx.emit("masked_fill", specs, perm=perm)


@kernel("masked_fill", inputs=[SCALAR, SCALAR, SCALAR])
def k_masked_fill(mask, value, x):
    """``x`` with ``value`` where ``mask`` holds, in ``x``'s dtype (torch casts the value to ``self``'s dtype).

    A finite fill value past the finite range of a floating ``x`` saturates to the dtype's extreme: a graph
    captured in float32 carries ``torch.finfo(torch.float32).min`` where the model wrote ``finfo(scores.dtype).min``
    (DeBERTa's, BERT-style masks); run by a float16 port it would overflow to -inf, and a fully masked softmax row
    (a padded query) would turn to NaN where torch's float16 model, filling with ``finfo(float16).min``, is
    uniform. Infinities and NaN are kept.
    """
    if not isinstance(x, mx.array) or not mx.issubdtype(x.dtype, mx.floating):
        return k_where(mask, value, x)
    return mx.where(mask, saturating_cast(value, x.dtype, clip=True), x)


@register("aten.flip.default")
def convert_flip(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    ctx.emit("flip", [ctx.tensor(x)], {"axes": [perm.index(d) for d in _dims(call.arg("dims"), len(perm))]},
             perm=perm)


@register("aten.roll.default")
def convert_roll(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    dims = list(call.arg("dims"))
    if not dims:
        perm = L.identity(len(perm))  # a flat roll follows torch's element order
        return ctx.emit("roll", [ctx.tensor(x, perm), ctx.value(list(call.arg("shifts")))], {"axes": []}, perm=perm)
    axes = [L.axis_of(perm, d) for d in dims]
    ctx.emit("roll", [ctx.tensor(x), ctx.value(list(call.arg("shifts")))], {"axes": axes}, perm=perm)


@register("aten.index_select.default")
def convert_index_select(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    index = call.arg("index")
    if not perm:  # a 0-d input: dim 0 / -1 address the value itself
        if call.arg("dim") not in (0, -1):
            call.fail("dim", f"a 0-d tensor takes dim 0 or -1, got {call.arg('dim')}")
        return ctx.emit("index_select_0d", [ctx.tensor(x), ctx.tensor(index, L.identity(ctx.meta(index).rank))],
                        perm=())
    ctx.emit("index_select", [ctx.tensor(x), ctx.tensor(index)], {"axis": L.axis_of(perm, call.arg("dim"))},
             perm=perm)


@register("aten.gather.default")
def convert_gather(ctx, call):
    if call.arg("sparse_grad"):
        call.fail("sparse_grad", "sparse gradients are not supported")
    x, index = call.arg("self"), call.arg("index")
    rank = ctx.meta(x).rank
    ident = L.identity(rank)
    ctx.emit("gather", [ctx.tensor(x, ident), ctx.tensor(index, ident)], {"axis": call.arg("dim") % max(rank, 1)},
             perm=ident)


@register("aten.embedding.default")
def convert_embedding(ctx, call):
    if call.arg("scale_grad_by_freq") or call.arg("sparse"):
        call.fail("scale_grad_by_freq" if call.arg("scale_grad_by_freq") else "sparse",
                  "gradient options of embedding are not supported")
    weight, indices = call.arg("weight"), call.arg("indices")
    # torch's backward skips the indices equal to padding_idx: nn.Embedding and F.embedding pass it non-negative,
    # -1 (the default) and any other negative or past-the-table value match no valid index
    padding_idx = call.arg("padding_idx")
    if not isinstance(padding_idx, int):
        call.fail("padding_idx", f"must be an int known at conversion, got {padding_idx!r}")
    attrs = {"padding_idx": padding_idx} if 0 <= padding_idx < ctx.meta(weight).shape[0] else {}
    index_perm = ctx.perm(indices)
    ctx.emit("embedding", [ctx.tensor(weight), ctx.tensor(indices)], attrs,
             perm=tuple(index_perm) + (len(index_perm),))


def _max_dim(fn):
    def convert_max_dim(ctx, call):
        from ..convert import Info

        x = call.arg("self")
        perm = ctx.perm(x)
        dim = call.arg("dim")
        dims = [dim % len(perm)] if perm else []  # a 0-d tensor: its one element, index 0
        keepdim = call.arg("keepdim")
        out_perm = perm if keepdim else L.remove_dims(perm, dims)
        items = [Info(m, out_perm) for m in call.meta.items]
        ctx.emit("max_dim", [ctx.tensor(x)], {"axis": perm.index(dims[0]) if dims else None, "keepdims": keepdim,
                                              "fn": fn}, items=items)

    convert_max_dim.__name__ = f"convert_{fn}_dim"
    return convert_max_dim


register("aten.max.dim")(_max_dim("max"))
register("aten.min.dim")(_max_dim("min"))


@register("aten.logsumexp.default")
def convert_logsumexp(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    dims = _dims(call.arg("dim"), len(perm))
    keepdim = call.arg("keepdim")
    ctx.emit("logsumexp", [ctx.tensor(x)], {"axes": [perm.index(d) for d in dims], "keepdims": keepdim},
             perm=perm if keepdim else L.remove_dims(perm, dims))


@register("aten.prod.dim_int", "aten.prod.default")
def convert_prod(ctx, call):
    """``x.prod(dim, keepdim)``, or ``x.prod()`` over every element (a 0-d result)."""
    x = call.arg("self")
    perm = ctx.perm(x)
    dims = [call.arg("dim") % max(len(perm), 1)] if call.has("dim") else list(range(len(perm)))
    keepdim = call.arg("keepdim") if call.has("keepdim") else False
    dtype = call.arg("dtype")
    if dtype is None and call.meta.dtype == "int64" and ctx.meta(x).dtype != "int64":
        dtype = "int64"  # torch multiplies bool and narrower integers in int64; MLX would keep int32
    ctx.emit("prod", [ctx.tensor(x)], {"axes": [perm.index(d) for d in dims if d < len(perm)], "keepdims": keepdim,
                                       "dtype": dtype},
             perm=perm if keepdim else L.remove_dims(perm, dims))


@register("aten.linalg_vector_norm.default")
def convert_vector_norm(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    dims = _dims(call.arg("dim"), len(perm))
    keepdim = call.arg("keepdim")
    ord_ = call.arg("ord")
    if isinstance(ord_, (Ref, bool)) or not isinstance(ord_, (int, float)) or ord_ != ord_:
        call.fail("ord", "the order must be a number (inf and -inf included) known at conversion")
    ctx.emit("vector_norm", [ctx.tensor(x)], {"ord": float(ord_), "axes": [perm.index(d) for d in dims if d < len(perm)],
                                              "keepdims": keepdim, "dtype": call.arg("dtype")},
             perm=perm if keepdim else L.remove_dims(perm, dims))


@register("aten.einsum.default")
def convert_einsum(ctx, call):
    if call.arg("path") is not None:
        call.arg("path")  # a contraction order hint: same values
    operands = [ctx.tensor(t, L.identity(ctx.meta(t).rank)) for t in call.arg("tensors")]
    ctx.emit("einsum", operands, {"equation": call.arg("equation")}, perm=L.identity(call.meta.rank))


def _tri(upper):
    def convert_tri(ctx, call):
        x = call.arg("self")
        ident = L.identity(ctx.meta(x).rank)
        ctx.emit("tri", [ctx.tensor(x, ident)], {"upper": upper, "diagonal": call.arg("diagonal")}, perm=ident)

    convert_tri.__name__ = "convert_triu" if upper else "convert_tril"
    return convert_tri


register("aten.tril.default")(_tri(False))
register("aten.triu.default")(_tri(True))


@kernel("diagonal", inputs=[TENSOR], attrs={"offset": Int(), "axis1": AXIS, "axis2": AXIS})
def k_diagonal(x, *, offset, axis1, axis2):
    """Torch layout: the two dims removed, the diagonal appended last (torch's and MLX's order alike)."""
    if axis1 == axis2:
        raise ValueError(f"diagonal: the two dims must differ, got {axis1} twice")
    return mx.diagonal(x, offset, axis1, axis2)


@register("aten.diagonal.default", "aten.linalg_diagonal.default")
def convert_diagonal(ctx, call):
    x = call.arg("self") if call.has("self") else call.arg("A")  # linalg.diagonal names it A, dims default -2, -1
    rank = ctx.meta(x).rank
    dims = [call.arg("dim1") % max(rank, 1), call.arg("dim2") % max(rank, 1)]
    if isinstance(call.arg("offset"), Ref):
        call.fail("offset", "a symbolic offset is not supported")
    ident = L.identity(rank)
    ctx.emit("diagonal", [ctx.tensor(x, ident)], {"offset": call.arg("offset"), "axis1": dims[0], "axis2": dims[1]},
             perm=L.identity(rank - 1))


def _pixel_shuffle(inverse):
    def convert_pixel_shuffle(ctx, call):
        x = call.arg("self")
        rank = ctx.meta(x).rank
        factor = call.arg("downscale_factor" if inverse else "upscale_factor")
        # an (N, C, H, W) or (C, H, W) input already channels-last stays so (a super-resolution net's last conv):
        # no transpose before, and a channels-last image out
        perm = ctx.perm(x)
        if perm not in ((L.channels_last(4),) if rank == 4 else (L.channels_last_unbatched(3),) if rank == 3 else ()):
            perm = L.identity(rank)
        ctx.emit("pixel_shuffle", [ctx.tensor(x, perm)],
                 {"factor": factor, "inverse": inverse, "channels_last": perm != L.identity(rank)}, perm=perm)

    convert_pixel_shuffle.__name__ = "convert_pixel_unshuffle" if inverse else "convert_pixel_shuffle"
    return convert_pixel_shuffle


register("aten.pixel_shuffle.default", channels_last=True)(_pixel_shuffle(False))
register("aten.pixel_unshuffle.default", channels_last=True)(_pixel_shuffle(True))


@kernel("channel_shuffle", inputs=[TENSOR], attrs={"axis": AXIS, "groups": Int(1, 1 << 24)})
def k_channel_shuffle(x, *, axis, groups):
    """Torch's channel shuffle along array axis ``axis`` (any layout): channel ``g * (C / groups) + i`` moves to
    ``i * groups + g``."""
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"channel_shuffle: axis {axis} is out of range for a {x.ndim}-d array")
    axis %= x.ndim  # a negative axis (an artifact may record one) counts from the end
    c = x.shape[axis]
    if c % groups:
        raise ValueError(f"channel_shuffle: {c} channels do not split into {groups} groups")
    if axis == x.ndim - 1:  # channels-last: the native copy on the CPU (layers/shuffle.py)
        return channel_shuffle(x, groups)
    split = x.reshape(*x.shape[:axis], groups, c // groups, *x.shape[axis + 1:])
    return split.swapaxes(axis, axis + 1).reshape(x.shape)


@register("aten.channel_shuffle.default")
def convert_channel_shuffle(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    if len(perm) < 3:
        call.fail("self", "channel_shuffle needs (N, C, *) input with at least one spatial dim")
    groups = call.arg("groups")
    if isinstance(groups, Ref) or groups < 1:
        call.fail("groups", "must be a positive int")
    ctx.emit("channel_shuffle", [ctx.tensor(x)], {"axis": perm.index(1), "groups": groups}, perm=perm)


@kernel("index", inputs=[TENSOR, Seq(Opt(TENSOR))])
def k_index(x, indices):
    """torch ``x[..., idx, ...]`` with index tensors (None = whole dim), numpy-style advanced indexing."""
    if len(indices) > x.ndim:
        raise IndexError(f"index: {len(indices)} indices for a tensor of {x.ndim} dims")
    key = tuple(slice(None) if i is None else
                checked_indices(i, x.shape[d], "index").astype(mx.int32)
                for d, i in enumerate(indices))
    return x[key]


@register("aten.index.Tensor")
def convert_index(ctx, call):
    x = call.arg("self")
    indices = call.arg("indices")
    if any(i is not None and ctx.meta(i).dtype == "bool" for i in indices):
        call.fail("indices", "boolean masks give data-dependent shapes; not supported")
    ident = L.identity(ctx.meta(x).rank)
    specs = [None if i is None else ctx.tensor(i, L.identity(ctx.meta(i).rank)) for i in indices]
    ctx.emit("index", [ctx.tensor(x, ident), specs], perm=L.identity(call.meta.rank))


@register("aten.diff.default")
def convert_diff(ctx, call):
    """``torch.diff``: ``n`` rounds of ``x[1:] - x[:-1]`` along ``dim`` (``!=`` for bool, as torch's xor) after
    concatenating ``prepend``/``append``; built from the concat, slice and binary kernels."""
    x, n = call.arg("self"), call.arg("n")
    perm = ctx.perm(x)
    rank = len(perm)
    if rank == 0:
        call.fail("self", "diff needs at least one dimension")
    if isinstance(n, Ref) or n < 0:
        call.fail("n", "the order must be a non-negative constant")
    axis = L.axis_of(perm, call.arg("dim"))
    pieces = [call.arg("prepend"), x, call.arg("append")]
    for name, piece in zip(("prepend", "self", "append"), pieces):
        if piece is not None and ctx.meta(piece).rank != rank:
            call.fail(name, f"must have as many dimensions as the input ({rank})")
    pieces = [p for p in pieces if p is not None]
    current = ctx.tensor(x)
    if len(pieces) > 1:
        joined = ctx.emit("concat", [[ctx.tensor(p, perm) for p in pieces]], {"axis": axis}, perm=perm,
                          out=ctx.fresh(f"{call.name}_joined"))
        current = {"ref": joined.name}
    fn = "ne" if ctx.meta(x).dtype == "bool" else "sub"
    for step in range(n):
        hi = ctx.emit("slice", [current, 1, None, 1], {"axis": axis}, perm=perm, out=ctx.fresh(f"{call.name}_hi"))
        lo = ctx.emit("slice", [current, 0, -1, 1], {"axis": axis}, perm=perm, out=ctx.fresh(f"{call.name}_lo"))
        last = step == n - 1
        out = ctx.emit("binary", [{"ref": hi.name}, {"ref": lo.name}], {"fn": fn}, perm=perm,
                       out=None if last else ctx.fresh(f"{call.name}_d{step}"))
        current = {"ref": out.name}
    if n == 0:
        ctx.emit("identity", [current], perm=perm)


_INDEXING = ("ij", "xy")


@kernel("meshgrid", inputs=[Seq(TENSOR, 1, 1 << 16)], attrs={"indexing": Enum(*_INDEXING)})
def k_meshgrid(tensors, *, indexing):
    """torch.meshgrid of 1-d tensors: ``indexing`` "ij" (matrix) or "xy" (Cartesian: first two dims swapped)."""
    return list(mx.meshgrid(*[t.reshape(-1) for t in tensors], indexing=indexing))


@register("aten.meshgrid.default", "aten.meshgrid.indexing")
def convert_meshgrid(ctx, call):
    from ..convert import Info

    indexing = call.arg("indexing") if call.has("indexing") else "ij"  # torch's default (with a warning)
    if indexing not in _INDEXING:
        call.fail("indexing", f"must be one of {_INDEXING}")
    tensors = call.arg("tensors")
    if any(ctx.meta(t).rank > 1 for t in tensors):
        call.fail("tensors", "meshgrid takes 0-d or 1-d tensors")
    items = [Info(m, L.identity(m.rank)) for m in call.meta.items]
    ctx.emit("meshgrid", [[ctx.tensor(t) for t in tensors]], {"indexing": indexing}, items=items)
