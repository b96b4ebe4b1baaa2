"""Tensor-shape ops: view/reshape/flatten, permute/transpose, cat/stack, split/chunk, select/slice, squeeze,
expand, symbolic sizes, tuple access and no-op copies.

Layout tricks live here: permute and transpose only relabel the layout (no data moves); flatten/view keep a
channels-last tensor channels-last when the merged dims are adjacent in the array (the patch flatten of a ViT);
otherwise the tensor goes to torch's layout first so elements come out in torch's order (flatten after a conv).
"""

from __future__ import annotations

import math
import operator as _operator

import mlx.core as mx

from .. import layout as L
from ..ir import Ref, ValueMeta
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import (AXES, AXIS, INT_LIMIT, INT_OR_REF, MAX_LEN, PERM, SIZES, TENSOR, Enum, Float, Int, OneOf, Opt,
                    Ref as RefSpec, Seq, SpecError)
from ._layers import channel_shuffle, concatenate, reshape


# ---------------------------------------------------------------------------------------------------- kernels
@kernel("identity", inputs=[TENSOR])
def k_identity(x):
    return x


@kernel("transpose", inputs=[TENSOR], attrs={"axes": PERM})
def k_transpose(x, *, axes):
    return x.transpose(axes)


@kernel("swap_last_axes", inputs=[TENSOR])
def k_swap_last_axes(x):
    """``x.swapaxes(-1, -2)``, materialized: a channel shuffle of the merged last two axes (native on the CPU)."""
    if x.ndim < 2:
        raise ValueError(f"swap_last_axes: the input needs at least 2 dims but has shape {tuple(x.shape)}")
    *lead, a, b = x.shape
    return channel_shuffle(x.reshape(*lead, a * b), a).reshape(*lead, b, a)


@kernel("size", inputs=[TENSOR], attrs={"axis": AXIS})
def k_size(x, *, axis):
    return x.shape[axis]


@kernel("numel", inputs=[TENSOR])
def k_numel(x):
    return x.size


_INT_OPS = {
    "add": _operator.add, "sub": _operator.sub, "mul": _operator.mul, "floordiv": _operator.floordiv,
    "truediv": _operator.truediv, "mod": _operator.mod, "neg": _operator.neg, "pow": _operator.pow,
    "eq": _operator.eq, "ne": _operator.ne, "lt": _operator.lt, "le": _operator.le, "gt": _operator.gt,
    "ge": _operator.ge,
}
# symbolic-size helpers export records as Python calls (torch.sym_max(h, 1), math.ceil(h / 2))
_SYM_CALLS = {
    "torch.sym_max": max, "torch.sym_min": min, "torch.sym_float": float,  # torch.sym_int is recorded as math.trunc
    "math.ceil": math.ceil, "math.floor": math.floor, "math.trunc": math.trunc,
}


_ARITY = {"neg": 1, "torch.sym_float": 1, "torch.sym_int": 1, "math.ceil": 1, "math.floor": 1, "math.trunc": 1}


@kernel("int_op", more=OneOf(Int(), Float(), RefSpec()), attrs={"op": Enum(*_INT_OPS, *_SYM_CALLS)})
def k_int_op(*args, op):
    if len(args) != _ARITY.get(op, 2):
        raise ValueError(f"int_op {op!r} takes {_ARITY.get(op, 2)} argument(s) but got {len(args)}")
    if op == "pow" and all(isinstance(a, int) for a in args) and abs(args[0]) > 1 and not -64 <= args[1] <= 64:
        raise ValueError(f"int_op pow: exponent {args[1]} out of range")  # 10 ** 10 ** 10 would not finish
    result = (_INT_OPS.get(op) or _SYM_CALLS[op])(*args)
    if isinstance(result, complex):  # (-8.0) ** 0.5: Python's pow of a negative float base; no size is complex
        raise ValueError(f"int_op {op!r}: result {result} is complex")
    if isinstance(result, int) and not isinstance(result, bool) and abs(result) > INT_LIMIT:
        raise ValueError(f"int_op {op!r}: result {result} out of range")
    return result


@kernel("getitem", inputs=[RefSpec()], attrs={"index": Int(-(1 << 20), 1 << 20)})
def k_getitem(seq, *, index):
    if not isinstance(seq, (list, tuple)):  # an array here would be indexed without a bounds check by MLX
        raise TypeError(f"getitem reads an item of a tuple value but got {type(seq).__name__}")
    return seq[index]


@kernel("reshape", inputs=[TENSOR, SIZES], attrs={"merge": Opt(Seq(Opt(AXES)))})
def k_reshape(x, sizes, *, merge=None):
    """``sizes`` lists the output sizes in array order; ``merge[i]`` (when not None) names the input array axes
    whose sizes multiply into output axis ``i`` (kept dims and merged dims)."""
    if merge is not None:
        sizes = [
            s if axes is None else _prod(x.shape[a] for a in axes) for s, axes in zip(sizes, merge)
        ]
    sizes = [int(s) for s in sizes]
    check_elements([s for s in sizes if s != -1], "reshape")
    return reshape(x, sizes)


def _prod(values):
    out = 1
    for v in values:
        out *= v
    return out


_LEAD = Int(0, MAX_LEN)


@kernel("expand", inputs=[TENSOR, SIZES], attrs={"lead": _LEAD, "perm": PERM})
def k_expand(x, sizes, *, lead, perm):
    """torch ``expand(sizes)`` (``sizes`` in torch order) on an array in layout ``perm`` (of the result)."""
    if lead:
        x = x.reshape((1,) * lead + tuple(x.shape))
    target = [x.shape[i] if sizes[perm[i]] == -1 else int(sizes[perm[i]]) for i in range(x.ndim)]
    check_elements(target, "expand")
    return mx.broadcast_to(x, target)


@kernel("repeat", inputs=[TENSOR, SIZES], attrs={"lead": _LEAD, "perm": PERM})
def k_repeat(x, repeats, *, lead, perm):
    if lead:
        x = x.reshape((1,) * lead + tuple(x.shape))
    reps = [int(repeats[perm[i]]) for i in range(x.ndim)]
    check_elements([s * r for s, r in zip(x.shape, reps)], "repeat")
    return mx.tile(x, reps)


@kernel("concat", inputs=[Seq(TENSOR, 0, 1 << 16)], attrs={"axis": AXIS})
def k_concat(tensors, *, axis):
    return concatenate(tensors, axis=axis)  # a native multi-threaded copy on the CPU (layers/concat.py)


@kernel("stack", inputs=[Seq(TENSOR, 0, 1 << 16)], attrs={"axis": AXIS})
def k_stack(tensors, *, axis):
    return mx.stack(tensors, axis=axis)


_LIST_MODES = ("sizes", "indices")


def _check_split(inputs, attrs):
    """Modes "sizes" and "indices" take a list; "size", "chunks" and "sections" one int (or a reference)."""
    if isinstance(inputs[1], dict):  # a reference: its value is checked when it runs
        return
    if (attrs.get("mode") in _LIST_MODES) != isinstance(inputs[1], list):
        want = "a list" if attrs.get("mode") in _LIST_MODES else "one int"
        raise SpecError(f"mode {attrs.get('mode')!r} takes {want} as inputs[1]", ".mode")


@kernel("split", inputs=[TENSOR, OneOf(INT_OR_REF, SIZES)],
        attrs={"axis": AXIS, "mode": Enum("size", "sizes", "chunks", "sections", "indices")}, check=_check_split)
def k_split(x, size, *, axis, mode):
    """torch split/chunk along ``axis``: mode "size" (pieces of ``size``), "sizes" (a list), "chunks";
    ``tensor_split``: "sections" (``n`` pieces, the first ``length % n`` one longer) and "indices" (the pieces
    between the given positions, each cut as a Python slice: negative positions count from the end, a piece may be
    empty)."""
    length = x.shape[axis]
    if mode == "indices":
        cuts = [0] + [int(i) for i in size] + [length]
        pieces = []
        for start, stop in zip(cuts[:-1], cuts[1:]):
            key = [slice(None)] * x.ndim
            kept = range(length)[start:stop]  # Python's slice rules: clamped, negative from the end
            key[axis] = slice(kept.start, kept.start + len(kept))
            pieces.append(x[tuple(key)])
        return pieces
    if mode == "sections":
        n = int(size)
        if n < 1:
            raise ValueError(f"tensor_split: number of sections must be at least 1, got {n}")
        return mx.split(x, [(length // n + 1) * i if i <= length % n else length % n + (length // n) * i
                            for i in range(1, n)], axis=axis)
    if mode == "sizes":
        sizes = [int(s) for s in size]
    else:
        piece = int(size) if mode == "size" else -(-length // int(size))
        piece = max(piece, 1)
        sizes = [min(piece, length - start) for start in range(0, length, piece)] or [0]
    bounds, total = [], 0
    for s in sizes[:-1]:
        total += s
        bounds.append(total)
    return mx.split(x, bounds, axis=axis)


@kernel("unbind", inputs=[TENSOR], attrs={"axis": AXIS})
def k_unbind(x, *, axis):
    return [mx.take(x, i, axis=axis) for i in range(x.shape[axis])]


@kernel("select", inputs=[TENSOR, INT_OR_REF], attrs={"axis": AXIS})
def k_select(x, index, *, axis):
    index = int(index)
    if not -x.shape[axis] <= index < x.shape[axis]:
        raise IndexError(f"select: index {index} is out of range for a dimension of size {x.shape[axis]}")
    if index < 0:
        index += x.shape[axis]
    return mx.take(x, index, axis=axis)


@kernel("slice", inputs=[TENSOR, Opt(INT_OR_REF), Opt(INT_OR_REF), Opt(INT_OR_REF)], attrs={"axis": AXIS})
def k_slice(x, start, end, step, *, axis):
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, end, step)
    return x[tuple(index)]


@kernel("squeeze", inputs=[TENSOR], attrs={"axes": AXES})
def k_squeeze(x, *, axes):
    return mx.squeeze(x, axes) if axes else x


@kernel("unsqueeze", inputs=[TENSOR], attrs={"axis": AXIS})
def k_unsqueeze(x, *, axis):
    return mx.expand_dims(x, axis)


@kernel("broadcast_layout", inputs=[TENSOR], attrs={"lead": _LEAD, "axes": PERM})
def k_broadcast_layout(x, *, lead, axes):
    """A lower-rank torch-layout tensor brought to rank ``len(axes)`` (size-1 leading dims) and layout ``axes``."""
    x = x.reshape((1,) * lead + tuple(x.shape))
    return x.transpose(axes)


# ---------------------------------------------------------------------------------------------------- helpers
def _dims(dim, rank):
    """The torch dims a reduction's ``dim`` names (None or ``()``: every dim); none for a 0-d tensor, whose dim 0
    / -1 torch accepts and reduces over nothing."""
    if dim is None or rank == 0:
        return list(range(rank))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    if len(dims) == 0:
        return list(range(rank))
    return sorted(d % rank for d in dims)


def _sizes_equal(a, b) -> bool:
    return a == b


def reshape_groups(in_meta: ValueMeta, out_meta: ValueMeta):
    """Group torch dims of a view: list of (in dims, out dims), or None when the grouping is unclear.

    Uses the example sizes; a symbolic dim may only be matched one-to-one with the same symbolic expression.
    """
    ins, outs = in_meta.shape, out_meta.shape
    hi, ho = in_meta.hint or ins, out_meta.hint or outs
    if None in hi or None in ho:
        return None
    i = j = 0
    groups = []
    while i < len(ins) and j < len(outs):
        if _sizes_equal(ins[i], outs[j]):
            groups.append(([i], [j]))
            i, j = i + 1, j + 1
            continue
        gi, gj = [i], [j]
        pi, pj = hi[i], ho[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj and i < len(ins):
                pi *= hi[i]
                gi.append(i)
                i += 1
            elif pj < pi and j < len(outs):
                pj *= ho[j]
                gj.append(j)
                j += 1
            else:
                return None
        if pi == 0 or (len(gi) > 1 and len(gj) > 1):
            return None
        groups.append((gi, gj))
    if i != len(ins) or j != len(outs):
        return None
    return groups


def convert_view(ctx, call, x: Ref, size_values: list, out_meta: ValueMeta):
    """Emit a view/reshape of ``x`` to torch sizes ``size_values``, keeping x's layout when possible."""
    perm = ctx.perm(x)
    groups = reshape_groups(ctx.meta(x), out_meta) if perm != L.identity(len(perm)) else None
    if groups is None:
        return ctx.emit("reshape", [ctx.tensor(x, L.identity(len(perm))), ctx.value(size_values)],
                        perm=L.identity(out_meta.rank), meta=out_meta)
    source = _grouped_layout(perm, groups)
    new_perm, merge = _plan_in_layout(source, groups)
    sizes = [size_values[d] for d in new_perm]
    return ctx.emit("reshape", [_view_source(ctx, x, perm, source, groups), ctx.value(sizes)], {"merge": merge},
                    perm=new_perm, meta=out_meta)


def _view_source(ctx, x: Ref, perm: tuple, source: tuple, groups) -> dict:
    """``x`` in layout ``source`` for a view. A view that merges the last two array axes in swapped order (a channel
    shuffle: ``view(N, G, C/G, H, W).transpose(1, 2).reshape(N, C, H, W)`` in channels-last) copies anyway; there
    the swap is one native shuffle of the last axis (``swap_last_axes``) instead of MLX's strided transpose copy."""
    swapped = perm[:-2] + (perm[-1], perm[-2])
    if len(perm) >= 2 and source == swapped and any(sorted(gi) == sorted(perm[-2:]) for gi, _ in groups):
        name = ctx.fresh(f"{x.name}_swapped")
        ctx.emit("swap_last_axes", [ctx.tensor(x)], out=name, perm=source, meta=ctx.meta(x))
        return {"ref": name}
    return ctx.tensor(x, source)


def _grouped_layout(perm, groups) -> tuple:
    """``perm`` itself when every group's dims sit adjacent and in order in the array; otherwise the closest
    layout where they do, so one transpose fixes just those dims (a channel shuffle swaps two sub-axes of C and
    stays channels-last). Groups are ordered by their innermost array axis: the group holding the array's last
    axis stays last, so the copy moves contiguous runs and a feature dim that was innermost stays innermost
    (attention's ``(B, heads, N, hd)`` transposed to ``(B, N, heads, hd)`` and merged to ``(B, N, C)`` comes out in
    torch's layout, ready for the projection, not as ``(B, C, N)`` needing a second transpose)."""
    if _plan_in_layout(perm, groups) is not None:
        return perm
    ordered = sorted(groups, key=lambda g: max(perm.index(d) for d in g[0]))
    return tuple(d for gi, _ in ordered for d in gi)


def _plan_in_layout(perm, groups):
    """(new perm, merge spec) when every group's input dims are adjacent and in order in the array."""
    placed = []
    for gi, gj in groups:
        pos = [perm.index(d) for d in gi]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            return None
        placed.append((pos[0], gi, gj, pos))
    placed.sort()
    new_perm, merge = [], []
    for _, gi, gj, pos in placed:
        for d in gj:
            new_perm.append(d)
            merge.append(pos if len(gj) == 1 else None)
    return tuple(new_perm), merge


# ---------------------------------------------------------------------------------------------------- converters
@register("aten.sym_size.int", "aten.size.int")
def convert_sym_size(ctx, call):
    x = call.arg("self")
    ctx.emit("size", [ctx.tensor(x)], {"axis": L.axis_of(ctx.perm(x), call.arg("dim"))}, meta=ValueMeta("int"))


@register("aten.sym_numel.default")
def convert_numel(ctx, call):
    ctx.emit("numel", [ctx.tensor(call.arg("self"))], meta=ValueMeta("int"))


@register(*(f"operator.{op}" for op in _INT_OPS), *_SYM_CALLS)
def convert_int_op(ctx, call):
    op = call.op if call.op in _SYM_CALLS else call.op.split(".", 1)[1]
    args = [ctx.value(call.arg(n)) for n in ("a", "b") if call.has(n)]
    ctx.emit("int_op", args, {"op": op})


@register("operator.getitem")
def convert_getitem(ctx, call):
    seq, index = call.arg("a"), call.arg("b")
    info = ctx.info(seq)
    if info.items is None:
        raise NotImplementedError(f"getitem on a value without items ({seq.name})")
    item = info.items[index]
    ctx.emit("getitem", [ctx.value(seq)], {"index": index}, perm=item.perm, meta=item.meta, items=item.items)


@register("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")
def convert_reshape(ctx, call):
    x = call.arg("self")
    sizes = call.arg("size") if call.has("size") else call.arg("shape")
    convert_view(ctx, call, x, list(sizes), call.meta)


@register("aten.flatten.using_ints", "aten.ravel.default")
def convert_flatten(ctx, call):
    """``x.flatten(start_dim, end_dim)``; ``x.ravel()`` is the whole of it."""
    x = call.arg("self")
    rank = ctx.meta(x).rank
    start, end = (call.arg("start_dim"), call.arg("end_dim")) if call.has("start_dim") else (0, -1)
    if rank == 0:
        return ctx.emit("reshape", [ctx.tensor(x), [1]], perm=(0,))
    start, end = start % rank, end % rank
    groups = [([d], [d]) for d in range(start)]
    groups.append((list(range(start, end + 1)), [start]))
    groups += [([d], [d - (end - start)]) for d in range(end + 1, rank)]
    source = _grouped_layout(ctx.perm(x), groups)
    new_perm, merge = _plan_in_layout(source, groups)
    ctx.emit("reshape", [ctx.tensor(x, source), [None] * len(new_perm)], {"merge": merge}, perm=new_perm)


@register("aten.unflatten.int")
def convert_unflatten(ctx, call):
    x, dim, sizes = call.arg("self"), call.arg("dim"), call.arg("sizes")
    rank = ctx.meta(x).rank
    dim %= rank
    k = len(sizes)
    groups = [([d], [d]) for d in range(dim)] + [([dim], list(range(dim, dim + k)))]
    groups += [([d], [d + k - 1]) for d in range(dim + 1, rank)]
    perm = ctx.perm(x)
    new_perm, merge = _plan_in_layout(perm, groups)  # one input dim per group: always possible
    full = {}
    for gi, gj in groups:
        for n, d in enumerate(gj):
            full[d] = sizes[n] if len(gj) > 1 else None
    ctx.emit("reshape", [ctx.tensor(x), ctx.value([full[d] for d in new_perm])], {"merge": merge}, perm=new_perm)


@register("aten.permute.default")
def convert_permute(ctx, call):
    x = call.arg("self")
    ctx.emit("identity", [ctx.tensor(x)], perm=L.permute_perm(ctx.perm(x), tuple(call.arg("dims"))))


@register("aten.transpose.int", "aten.swapaxes.default", "aten.swapdims.default")
def convert_transpose(ctx, call):
    x = call.arg("self")
    rank = ctx.meta(x).rank
    a, b = (call.arg("dim0"), call.arg("dim1")) if call.has("dim0") else (call.arg("axis0"), call.arg("axis1"))
    dims = list(range(rank))
    if rank:
        dims[a % rank], dims[b % rank] = dims[b % rank], dims[a % rank]
    ctx.emit("identity", [ctx.tensor(x)], perm=L.permute_perm(ctx.perm(x), tuple(dims)))


@register("aten.t.default", "aten.numpy_T.default")
def convert_t(ctx, call):
    x = call.arg("self")
    rank = ctx.meta(x).rank
    dims = tuple(reversed(range(rank)))
    ctx.emit("identity", [ctx.tensor(x)], perm=L.permute_perm(ctx.perm(x), dims))


@register("aten.mT.default", "aten.mH.default", "aten.adjoint.default")
def convert_matrix_transpose(ctx, call):
    """``x.mT`` (and ``mH``/``adjoint``: the same for real tensors; complex ones never reach a port's graph): the
    last two dims swapped."""
    x = call.arg("self")
    rank = ctx.meta(x).rank
    if rank < 2:
        call.fail("self", f"needs at least 2 dims but has {rank}")
    dims = list(range(rank))
    dims[-2], dims[-1] = dims[-1], dims[-2]
    ctx.emit("identity", [ctx.tensor(x)], perm=L.permute_perm(ctx.perm(x), tuple(dims)))


@register("aten.movedim.int", "aten.movedim.intlist", "aten.moveaxis.int", "aten.moveaxis.intlist")
def convert_movedim(ctx, call):
    """``x.movedim(source, destination)``: each source dim lands at its destination, the rest keep their order."""
    x, source, destination = call.arg("self"), call.arg("source"), call.arg("destination")
    rank = ctx.meta(x).rank
    source = [source] if isinstance(source, int) else list(source)
    destination = [destination] if isinstance(destination, int) else list(destination)
    if len(source) != len(destination):
        call.fail("destination", f"has {len(destination)} dims but source has {len(source)}")
    for name, dims in (("source", source), ("destination", destination)):
        if any(not -rank <= d < rank for d in dims) or len({d % rank for d in dims}) != len(dims):
            call.fail(name, f"must be distinct dims of a {rank}-d tensor, got {dims}")
    order = [None] * rank
    for s, d in zip(source, destination):
        order[d % rank] = s % rank
    rest = iter(d for d in range(rank) if d not in {s % rank for s in source})
    order = tuple(next(rest) if o is None else o for o in order)
    ctx.emit("identity", [ctx.tensor(x)], perm=L.permute_perm(ctx.perm(x), order))


@register("aten.contiguous.default", "aten.clone.default")
def convert_copy(ctx, call):
    call.arg("memory_format")  # a memory-format request changes strides, never values
    ctx.alias(call.arg("self"))


@register("aten.alias.default", "aten.lift_fresh_copy.default", "aten.positive.default", "aten.resolve_conj.default",
          "aten.resolve_neg.default")  # no-ops on the real tensors Porter converts
def convert_noop(ctx, call):
    ctx.alias(call.arg("self"))


@register("aten.expand.default", "aten.broadcast_to.default")
def convert_expand(ctx, call):
    x, sizes = call.arg("self"), list(call.arg("size"))
    if call.has("implicit"):
        call.arg("implicit")
    perm = ctx.perm(x)
    lead = len(sizes) - len(perm)
    new_perm = tuple(range(lead)) + tuple(p + lead for p in perm)
    ctx.emit("expand", [ctx.tensor(x), ctx.value(sizes)], {"lead": lead, "perm": list(new_perm)}, perm=new_perm)


@kernel("broadcast_all", inputs=[Seq(TENSOR)])
def k_broadcast_all(xs):
    """``torch.broadcast_tensors``: torch-layout arrays, each brought to their common broadcast shape."""
    shape = mx.broadcast_shapes(*(tuple(x.shape) for x in xs))
    check_elements(list(shape), "broadcast_tensors")
    return [mx.broadcast_to(x, shape) for x in xs]


@register("aten.broadcast_tensors.default")
def convert_broadcast_tensors(ctx, call):
    from ..convert import Info

    tensors = list(call.arg("tensors"))
    specs = [ctx.tensor(t, L.identity(ctx.meta(t).rank)) for t in tensors]
    ctx.emit("broadcast_all", [specs], items=[Info(m, L.identity(m.rank)) for m in call.meta.items])


@register("aten.repeat.default")
def convert_repeat(ctx, call):
    x, repeats = call.arg("self"), list(call.arg("repeats"))
    perm = ctx.perm(x)
    lead = len(repeats) - len(perm)
    new_perm = tuple(range(lead)) + tuple(p + lead for p in perm)
    ctx.emit("repeat", [ctx.tensor(x), ctx.value(repeats)], {"lead": lead, "perm": list(new_perm)}, perm=new_perm)


def _common_perm(ctx, tensors):
    """The layout most inputs already have (ties: the first non-parameter tensor's)."""
    candidates = [t for t in tensors if isinstance(t, Ref) and not ctx.is_param(t)] or list(tensors)
    counts: dict = {}
    for t in candidates:
        counts[ctx.perm(t)] = counts.get(ctx.perm(t), 0) + 1
    return max(counts, key=lambda p: (counts[p], -[ctx.perm(t) for t in candidates].index(p)))


@register("aten.cat.default", "aten.concat.default")
def convert_cat(ctx, call):
    tensors, dim = call.arg("tensors"), call.arg("dim")
    rank = call.meta.rank
    tensors = [t for t in tensors if not (ctx.meta(t).rank == 1 and ctx.meta(t).shape == [0])]  # torch skips empty 1-d
    perm = _common_perm(ctx, tensors)
    specs = [ctx.tensor(t, perm) for t in tensors]
    ctx.emit("concat", [specs], {"axis": L.axis_of(perm, dim % rank)}, perm=perm)


@register("aten.stack.default")
def convert_stack(ctx, call):
    tensors, dim = call.arg("tensors"), call.arg("dim")
    rank = call.meta.rank
    dim %= rank
    perm = _common_perm(ctx, tensors)
    specs = [ctx.tensor(t, perm) for t in tensors]
    new_perm = L.insert_dim(perm, dim)
    ctx.emit("stack", [specs], {"axis": new_perm.index(dim)}, perm=new_perm)


def _emit_split(ctx, call, x, size, dim, mode):
    perm = ctx.perm(x)
    from ..convert import Info

    items = [Info(m, perm) for m in call.meta.items]
    ctx.emit("split", [ctx.tensor(x), ctx.value(size)], {"axis": L.axis_of(perm, dim), "mode": mode}, items=items)


@register("aten.split.Tensor")
def convert_split(ctx, call):
    _emit_split(ctx, call, call.arg("self"), call.arg("split_size"), call.arg("dim"), "size")


@register("aten.split_with_sizes.default", "aten.split.sizes")  # (aten.split.default is never recorded)
def convert_split_sizes(ctx, call):
    sizes = call.arg("split_sizes") if call.has("split_sizes") else call.arg("split_size")
    _emit_split(ctx, call, call.arg("self"), list(sizes), call.arg("dim"), "sizes")


@register("aten.tensor_split.sections", "aten.tensor_split.indices")
def convert_tensor_split(ctx, call):
    if call.has("sections"):
        _emit_split(ctx, call, call.arg("self"), call.arg("sections"), call.arg("dim"), "sections")
    else:
        _emit_split(ctx, call, call.arg("self"), list(call.arg("indices")), call.arg("dim"), "indices")


@register("aten.tensor_split.tensor_indices_or_sections")
def convert_tensor_split_tensor(ctx, call):
    """``tensor_split`` by an integer tensor: 1-d, the cut positions (a run-time input is read when the graph runs;
    its length, hence the number of pieces, is fixed by its shape); 0-d, the number of sections, which fixes the
    number of outputs: taken from a constant tensor of the forward, refused otherwise."""
    x, t, dim = call.arg("self"), call.arg("tensor_indices_or_sections"), call.arg("dim")
    meta = ctx.meta(t)
    if meta.dtype != "int64" or meta.rank > 1:
        call.fail("tensor_indices_or_sections", f"must be a 0-d or 1-d int64 tensor (torch's rule), got a {meta.rank}-d "
                                                f"{meta.dtype} one")
    if meta.rank == 1:
        return _emit_split(ctx, call, x, t, dim, "indices")
    stored = ctx.graph.param_values.get(t.name) if ctx.is_param(t) else None
    if stored is None or stored not in ctx.graph.not_in_state_dict:  # a buffer can be reloaded with another value
        call.fail("tensor_indices_or_sections", "a 0-d tensor fixes the number of outputs; it must be a constant "
                                                "tensor of the forward, not an input or a buffer")
    _emit_split(ctx, call, x, int(ctx.graph.params[stored].item()), dim, "sections")


@kernel("as_strided", inputs=[TENSOR], attrs={"size": Seq(Int(0, INT_LIMIT)), "stride": Seq(Int(0, INT_LIMIT)),
                                               "offset": Int(0, INT_LIMIT)})
def k_as_strided(x, *, size, stride, offset):
    """torch's ``as_strided`` over the storage ``x`` holds (``x`` given in its storage's dim order, so its flattened
    values are that storage): element ``i`` of the result is ``x.flatten()[offset + sum(i_d * stride_d)]``, a
    gather of positions (overlapping windows allowed)."""
    if len(size) != len(stride):
        raise ValueError(f"as_strided: mismatch in length of strides and shape ({len(stride)} vs {len(size)})")
    if any(int(v) < 0 for v in [*size, *stride]):
        raise ValueError(f"as_strided: sizes and strides must be non-negative, got {list(size)} and {list(stride)}")
    size, stride = [int(n) for n in size], [int(st) for st in stride]
    check_elements(size, "as_strided")
    if 0 in size:
        return mx.zeros(tuple(size), dtype=x.dtype)
    last = offset + sum((n - 1) * st for n, st in zip(size, stride))
    if last >= x.size:
        raise ValueError(f"as_strided: size {list(size)}, stride {list(stride)} and offset {offset} reach element "
                         f"{last} of an input of {x.size} elements")
    index = mx.array(offset, dtype=mx.int64)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        index = index + (mx.arange(n, dtype=mx.int64) * st).reshape(shape)
    return mx.take(x.reshape(-1), index)


@kernel("as_strided_sized", inputs=[TENSOR, SIZES, SIZES], attrs={"offset": Int(0, INT_LIMIT)})
def k_as_strided_sized(x, size, stride, *, offset):
    """``as_strided`` with sizes and strides read when the graph runs (symbolic in the capture: HF Longformer's
    chunks follow the sequence length): the same gather as ``as_strided``."""
    return k_as_strided(x, size=list(size), stride=list(stride), offset=offset)


@register("aten.as_strided.default", "aten.as_strided_copy.default")
def convert_as_strided(ctx, call):
    """On a model input or a stored tensor (contiguous in torch), or on an intermediate value the capture showed
    holding exactly its own elements in its storage (``ValueMeta.storage_order``: contiguous, or dense in another
    dim order, as HF Longformer's ``_chunk`` of a ``transpose(1, 2).reshape(...)`` that torch makes a view): the
    storage is then the value permuted to that order and flattened. Refused on any other intermediate, a view of a
    larger storage or at an offset, which the port does not track. Sizes and strides may be symbolic (read at run
    time); the storage offset must be a number."""
    x = call.arg("self")
    rank = ctx.meta(x).rank
    order = ctx.meta(x).storage_order
    if x.name in ctx.graph.inputs or ctx.is_param(x):
        order = list(range(rank))
    if order is None:
        call.fail("self", "as_strided reads the storage behind its input; the port supports it on a model input, "
                          "a stored tensor, or an intermediate value whose storage holds exactly its own elements, "
                          "not on a view of other storage (a slice, an expand, a view at an offset)")
    size, stride = list(call.arg("size")), list(call.arg("stride"))
    offset = (call.arg("storage_offset") if call.has("storage_offset") else None) or 0
    if not isinstance(offset, int) or isinstance(offset, bool):
        call.fail("storage_offset", "as_strided needs its storage offset known at conversion")
    if len(size) != len(stride):
        call.fail("stride", f"mismatch in length of strides and shape ({len(stride)} vs {len(size)})")
    numbers = [v for v in [*size, *stride, offset] if not isinstance(v, Ref)]
    if any(not isinstance(v, int) or isinstance(v, bool) for v in numbers):
        call.fail("size", f"as_strided takes integer sizes and strides, got {size} and {stride}")
    if any(v < 0 for v in numbers):
        call.fail("stride", f"as_strided takes non-negative sizes, strides and offset, got {[*size, *stride, offset]}")
    source = ctx.tensor(x, tuple(order))  # the storage, in order
    if len(numbers) == len(size) + len(stride) + 1:
        ctx.emit("as_strided", [source],
                 {"size": size, "stride": stride, "offset": offset}, perm=L.identity(len(size)))
    else:
        ctx.emit("as_strided_sized", [source, ctx.value(size), ctx.value(stride)],
                 {"offset": offset}, perm=L.identity(len(size)))


_SPLIT_DIMS = {"hsplit": (1, 1), "vsplit": (0, 2), "dsplit": (2, 3)}  # op -> (dim, least rank); hsplit of 1-d: dim 0


def _directional_split(op):
    def convert(ctx, call):
        x = call.arg("self")
        rank = ctx.meta(x).rank
        dim, least = _SPLIT_DIMS[op]
        if op == "hsplit" and rank == 1:
            dim = 0
        elif rank < least:
            call.fail("self", f"{op} needs at least {least} dims but the tensor has {rank}")
        if call.has("sections"):
            sections = call.arg("sections")
            size = ctx.meta(x).shape[dim]
            if not isinstance(sections, int) or sections <= 0 or not isinstance(size, int) or size % sections:
                call.fail("sections", f"must divide dim {dim} (size {size}) into equal parts, got {sections}")
            _emit_split(ctx, call, x, sections, dim, "sections")
        else:
            _emit_split(ctx, call, x, list(call.arg("indices")), dim, "indices")

    convert.__name__ = f"convert_{op}"
    return convert


for _op in _SPLIT_DIMS:
    register(f"aten.{_op}.int", f"aten.{_op}.array")(_directional_split(_op))


@register("aten.atleast_1d.default", "aten.atleast_2d.default", "aten.atleast_3d.default")
def convert_atleast(ctx, call):
    """``torch.atleast_nd``: 0-d -> all ones; 1-d ``(N)`` -> ``(1, N)`` / ``(1, N, 1)``; 2-d -> ``(M, N, 1)``."""
    x = call.arg("self")
    rank, want = ctx.meta(x).rank, int(call.op.split("atleast_")[1][0])
    new_dims = {(0, 1): [0], (0, 2): [0, 1], (0, 3): [0, 1, 2], (1, 2): [0], (1, 3): [0, 2], (2, 3): [2]}
    dims = new_dims.get((rank, want), [])
    if not dims:
        return ctx.alias(x)
    perm, spec, shape = ctx.perm(x), ctx.tensor(x), list(ctx.meta(x).shape)
    for i, dim in enumerate(dims):
        perm, shape = L.insert_dim(perm, dim), shape[:dim] + [1] + shape[dim:]
        last = i == len(dims) - 1
        ref = ctx.emit("unsqueeze", [spec], {"axis": perm.index(dim)}, perm=perm,
                       out=None if last else ctx.fresh(f"{call.name}_{i}"),
                       meta=None if last else ValueMeta("tensor", shape, ctx.meta(x).dtype))
        spec = {"ref": ref.name}


@register("aten.chunk.default", "aten.unsafe_chunk.default")
def convert_chunk(ctx, call):
    _emit_split(ctx, call, call.arg("self"), call.arg("chunks"), call.arg("dim"), "chunks")


@register("aten.unbind.int")
def convert_unbind(ctx, call):
    from ..convert import Info

    x, dim = call.arg("self"), call.arg("dim")
    perm = ctx.perm(x)
    dim %= len(perm)
    item_perm = L.remove_dims(perm, [dim])
    items = [Info(m, item_perm) for m in call.meta.items]
    ctx.emit("unbind", [ctx.tensor(x)], {"axis": perm.index(dim)}, items=items)


@register("aten.select.int")
def convert_select(ctx, call):
    x, dim = call.arg("self"), call.arg("dim")
    perm = ctx.perm(x)
    dim %= len(perm)
    ctx.emit("select", [ctx.tensor(x), ctx.value(call.arg("index"))], {"axis": perm.index(dim)},
             perm=L.remove_dims(perm, [dim]))


def slice_bounds(ctx, call) -> list:
    """The ``start``, ``end``, ``step`` inputs of a slice-like call (``slice``, ``slice_scatter``): torch records an
    open end as a huge int (``sys.maxsize``), kept as "to the end"; a step must be positive."""
    step = call.arg("step")
    if isinstance(step, int) and step <= 0:
        call.fail("step", "slice step must be positive")
    end = call.arg("end")
    if isinstance(end, int) and end >= 2**62:
        end = None
    return [ctx.value(call.arg("start")), ctx.value(end), ctx.value(step)]


@register("aten.slice.Tensor")
def convert_slice(ctx, call):
    x, dim = call.arg("self"), call.arg("dim")
    perm = ctx.perm(x)
    ctx.emit("slice", [ctx.tensor(x), *slice_bounds(ctx, call)], {"axis": L.axis_of(perm, dim)}, perm=perm)


@register("aten.narrow.default")
def convert_narrow(ctx, call):
    """``x.narrow(dim, start, length)``: ``length`` elements from ``start`` (negative counts from the end); the
    size checks torch makes are guards export records on the input sizes."""
    x, dim, start, length = call.arg("self"), call.arg("dim"), call.arg("start"), call.arg("length")
    if isinstance(length, int) and length < 0:
        call.fail("length", f"must be non-negative, got {length}")
    if isinstance(start, int) and isinstance(length, int):
        end = start + length
        end = None if start < 0 and end == 0 else end  # narrow(-3, 3) runs to the end
    elif isinstance(start, int) and start < 0:
        call.fail("start", "a negative start with a length known only at run time is not supported")
    else:
        end = ctx.emit("int_op", [ctx.value(start), ctx.value(length)], {"op": "add"}, meta=ValueMeta("int"),
                       out=ctx.fresh(f"{call.name}_end"))
    perm = ctx.perm(x)
    ctx.emit("slice", [ctx.tensor(x), ctx.value(start), ctx.value(end), ctx.value(1)],
             {"axis": L.axis_of(perm, dim)}, perm=perm)


@register("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def convert_squeeze(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    shape = ctx.meta(x).shape
    rank = len(perm)
    requested = list(range(rank)) if not call.has("dim") else [] if call.arg("dim") in ([], ()) \
        else _dims(call.arg("dim"), rank)  # squeeze(x, ()) squeezes nothing (a reduction's () is every dim)
    dims = sorted({d for d in requested if shape[d] == 1})
    if len(shape) - len(dims) != call.meta.rank:
        raise NotImplementedError(f"squeeze of a dynamic dim of {x.name}: the example cannot tell its size")
    ctx.emit("squeeze", [ctx.tensor(x)], {"axes": [perm.index(d) for d in dims]}, perm=L.remove_dims(perm, dims))


@register("aten.unsqueeze.default")
def convert_unsqueeze(ctx, call):
    x = call.arg("self")
    perm = ctx.perm(x)
    dim = call.arg("dim") % (len(perm) + 1)
    new_perm = L.insert_dim(perm, dim)
    ctx.emit("unsqueeze", [ctx.tensor(x)], {"axis": new_perm.index(dim)}, perm=new_perm)


@kernel("shape", inputs=[TENSOR], attrs={"perm": PERM})
def k_shape(x, *, perm):
    return [x.shape[perm.index(d)] for d in range(x.ndim)]


@register("aten.size.default")
def convert_shape(ctx, call):
    from ..convert import Info

    x = call.arg("self")
    items = [Info(ValueMeta("int")) for _ in range(ctx.meta(x).rank)]
    ctx.emit("shape", [ctx.tensor(x)], {"perm": list(ctx.perm(x))}, items=items)


def _sizes_of(ctx, call, other: Ref) -> list:
    """torch sizes of ``other``: ints where static, else a size node read at run time (stays symbolic)."""
    meta = ctx.meta(other)
    sizes = []
    for d, s in enumerate(meta.shape):
        if isinstance(s, int):
            sizes.append(s)
        else:
            sizes.append(ctx.emit("size", [ctx.tensor(other)], {"axis": ctx.perm(other).index(d)},
                                  out=ctx.fresh(f"{call.name}_size{d}"), meta=ValueMeta("int")))
    return sizes


@register("aten.reshape_as.default", "aten.view_as.default")
def convert_reshape_as(ctx, call):
    convert_view(ctx, call, call.arg("self"), _sizes_of(ctx, call, call.arg("other")), call.meta)


@register("aten.expand_as.default")
def convert_expand_as(ctx, call):
    x = call.arg("self")
    sizes = _sizes_of(ctx, call, call.arg("other"))
    perm = ctx.perm(x)
    lead = len(sizes) - len(perm)
    new_perm = tuple(range(lead)) + tuple(p + lead for p in perm)
    ctx.emit("expand", [ctx.tensor(x), ctx.value(sizes)], {"lead": lead, "perm": list(new_perm)}, perm=new_perm)
