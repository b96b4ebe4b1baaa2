"""Pooling: max/avg/adaptive/fractional pools (1-3d), max pool with indices and max unpool, mapped to Porter's
``porter.layers.functional`` (channels-last). Indices are flat per-plane positions, the same in every layout.
"""

from __future__ import annotations

from .. import layout as L
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import GEOMETRY, SIZES, TENSOR, Bool, Enum, Int, Ints, OneOf, Opt, SpecError
from .conv import batched, spatial_layout
from . import _layers

_SIZE = OneOf(Int(0, GEOMETRY), Ints(1, 3, 0, GEOMETRY))
_COMMON = {"fn", "unbatched", "values_only"}
# the attrs each pool function takes, by family (anything else is refused before the graph runs)
_POOL_ATTRS = {
    "max": _COMMON | {"kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"},
    "avg": _COMMON | {"kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"},
    "adaptive_avg": _COMMON,
    "adaptive_max": _COMMON | {"return_indices"},
}


def _check_pool(inputs, attrs):
    family = next(f for f, names in _layers.POOLS.items() if attrs["fn"] in names)
    extra = sorted(set(attrs) - _POOL_ATTRS[family])
    if extra:
        raise SpecError(f"{attrs['fn']} takes no attribute(s) {extra}", "")
    wanted = 1 if family.startswith("adaptive") else 0
    if len(inputs) != 1 + wanted:
        raise SpecError(f"{attrs['fn']} takes {1 + wanted} input(s) but the node gives {len(inputs)}", "")


@kernel("pool", inputs=[TENSOR], more=SIZES, check=_check_pool, attrs={
    "fn": Enum(*sum(_layers.POOLS.values(), ())), "unbatched": Bool(), "values_only": Bool(),
    "kernel_size": _SIZE, "stride": Opt(_SIZE), "padding": _SIZE, "dilation": _SIZE, "ceil_mode": Bool(),
    "return_indices": Bool(), "count_include_pad": Bool(), "divisor_override": Opt(Int(-GEOMETRY, GEOMETRY))})
def k_pool(x, *args, fn, unbatched=False, values_only=False, **kwargs):
    """``values_only``: a tuple-returning op whose indices nobody reads; computed without them."""
    if args:  # an adaptive pool's output size, read at run time: bounded before any window table is built
        _check_size(x, args[0], fn)
    out = batched(_layers.fn(fn))(x, *args, unbatched=unbatched, **kwargs)
    return [out, None] if values_only else out


def _check_size(x, size, what):
    sizes = [size] if isinstance(size, int) else [s for s in (size or []) if s is not None]
    check_elements([x.shape[0], x.shape[-1], *[int(s) for s in sizes]], what)


def _indices_needed(ctx, call) -> bool:
    used = ctx.used_items(call.name)
    return "all" in used or 1 in used


@kernel("max_unpool", inputs=[TENSOR, TENSOR, SIZES], attrs={
    "nd": Int(1, 3), "stride": Opt(Ints(0, 3, 0, GEOMETRY)), "padding": Opt(Ints(0, 3, 0, GEOMETRY)),
    "unbatched": Bool()})
def k_max_unpool(x, indices, output_size, *, nd, stride=None, padding=None, unbatched=False):
    # aten.max_unpool carries only output_size; Porter's max_unpool takes torch's module arguments, whose one
    # effect given output_size is the range check. A kernel making the default size equal output_size passes it.
    spatial = x.shape[-nd - 1:-1]
    _check_size(x, output_size, f"max_unpool{nd}d")
    stride = list(stride) if stride else [1] * nd
    padding = list(padding) if padding else [0] * nd
    kernel_size = [int(o) - (l - 1) * s + 2 * p for o, l, s, p in zip(output_size, spatial, stride, padding)]
    fn = _layers.fn(f"max_unpool{nd}d")
    return batched(fn)(x, indices, kernel_size, stride, padding, [int(o) for o in output_size],
                       unbatched=unbatched)


def _stride(call):
    stride = call.arg("stride")
    return None if stride in ([], None) else stride


def _pool_prologue(ctx, call, nd):
    x = call.arg("self")
    rank = ctx.meta(x).rank
    perm = spatial_layout(rank, nd, call.op)
    return x, perm, rank == nd + 1


def _max_pool(nd, with_indices):
    def convert_max_pool(ctx, call):
        x, perm, unbatched = _pool_prologue(ctx, call, nd)
        attrs = {"fn": f"max_pool{nd}d", "unbatched": unbatched, "kernel_size": call.arg("kernel_size"),
                 "stride": _stride(call), "padding": call.arg("padding"), "dilation": call.arg("dilation"),
                 "ceil_mode": call.arg("ceil_mode"), "return_indices": with_indices}
        if with_indices:
            from ..convert import Info

            if not _indices_needed(ctx, call):
                attrs.update(return_indices=False, values_only=True)
            items = [Info(m, perm) for m in call.meta.items]
            return ctx.emit("pool", [ctx.tensor(x, perm)], attrs, items=items)
        ctx.emit("pool", [ctx.tensor(x, perm)], attrs, perm=perm)

    convert_max_pool.__name__ = f"convert_max_pool{nd}d"
    return convert_max_pool


def _avg_pool(nd):
    def convert_avg_pool(ctx, call):
        x, perm, unbatched = _pool_prologue(ctx, call, nd)
        attrs = {"fn": f"avg_pool{nd}d", "unbatched": unbatched, "kernel_size": call.arg("kernel_size"),
                 "stride": _stride(call), "padding": call.arg("padding"), "ceil_mode": call.arg("ceil_mode"),
                 "count_include_pad": call.arg("count_include_pad")}
        if call.has("divisor_override"):
            divisor = call.arg("divisor_override")
            if divisor is not None:
                attrs["divisor_override"] = divisor
        ctx.emit("pool", [ctx.tensor(x, perm)], attrs, perm=perm)

    convert_avg_pool.__name__ = f"convert_avg_pool{nd}d"
    return convert_avg_pool


def _adaptive(nd, kind):
    def convert_adaptive(ctx, call):
        x, perm, unbatched = _pool_prologue(ctx, call, nd)
        attrs = {"fn": f"adaptive_{kind}_pool{nd}d", "unbatched": unbatched}
        size = ctx.value(call.arg("output_size"))
        if kind == "max":
            from ..convert import Info

            attrs["return_indices"] = True
            if not _indices_needed(ctx, call):
                attrs.update(return_indices=False, values_only=True)
            items = [Info(m, perm) for m in call.meta.items]
            return ctx.emit("pool", [ctx.tensor(x, perm), size], attrs, items=items)
        ctx.emit("pool", [ctx.tensor(x, perm), size], attrs, perm=perm)

    convert_adaptive.__name__ = f"convert_adaptive_{kind}_pool{nd}d"
    return convert_adaptive


def _max_unpool(nd):
    def convert_max_unpool(ctx, call):
        x, perm, unbatched = _pool_prologue(ctx, call, nd)
        attrs = {"nd": nd, "unbatched": unbatched}
        if call.has("stride"):
            attrs["stride"] = call.arg("stride")
            attrs["padding"] = call.arg("padding")
        inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("indices"), perm), ctx.value(call.arg("output_size"))]
        ctx.emit("max_unpool", inputs, attrs, perm=perm)

    convert_max_unpool.__name__ = f"convert_max_unpool{nd}d"
    return convert_max_unpool


def _fractional(nd):
    def convert_fractional(ctx, call):
        from ..convert import Info

        x, perm, unbatched = _pool_prologue(ctx, call, nd)
        samples = call.arg("random_samples")
        attrs = {"fn": f"fractional_max_pool{nd}d", "unbatched": unbatched, "kernel_size": call.arg("kernel_size"),
                 "output_size": call.arg("output_size"), "return_indices": True}
        samples_spec = ctx.tensor(samples, L.identity(ctx.meta(samples).rank))
        items = [Info(m, perm) for m in call.meta.items]
        ctx.emit("fractional_pool", [ctx.tensor(x, perm), samples_spec], attrs, items=items)

    convert_fractional.__name__ = f"convert_fractional_max_pool{nd}d"
    return convert_fractional


@kernel("fractional_pool", inputs=[TENSOR, TENSOR], attrs={
    "fn": Enum(*_layers.FRACTIONAL), "kernel_size": _SIZE, "output_size": Opt(_SIZE), "return_indices": Bool(),
    "unbatched": Bool()})
def k_fractional_pool(x, samples, *, fn, kernel_size, output_size, return_indices, unbatched=False):
    # positional: (input, kernel_size, output_size, output_ratio, return_indices, random_samples)
    _check_size(x, output_size, fn)
    return batched(_layers.fn(fn))(x, kernel_size, output_size, None, return_indices, samples, unbatched=unbatched)


for _nd in (1, 2, 3):
    register(f"aten.max_pool{_nd}d.default", channels_last=True)(_max_pool(_nd, False))
    register(f"aten.max_pool{_nd}d_with_indices.default", channels_last=True)(_max_pool(_nd, True))
    register(f"aten.avg_pool{_nd}d.default", channels_last=True)(_avg_pool(_nd))
    register(f"aten.adaptive_avg_pool{_nd}d.default", channels_last=True)(_adaptive(_nd, "avg"))
    register(f"aten.adaptive_max_pool{_nd}d.default", channels_last=True)(_adaptive(_nd, "max"))
for _nd in (2, 3):
    register(f"aten.max_unpool{_nd}d.default", channels_last=True)(_max_unpool(_nd))
    register(f"aten.fractional_max_pool{_nd}d.default", channels_last=True)(_fractional(_nd))
