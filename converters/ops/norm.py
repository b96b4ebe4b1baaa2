"""Normalisation: batch_norm (eval), layer_norm, rms_norm, group_norm, instance_norm, L2 normalisation
(``porter.l2_normalize``, the node ``converters/ir_fusion.py`` makes of ``F.normalize``'s ops).

batch_norm normalises per channel and runs in any layout (the channel axis is found through the layout);
layer_norm needs its normalised dims last in the array (true after ConvNeXt's permute to channels-last, which the
layout pass turns into no transpose at all); group_norm runs channels-last.
"""

from __future__ import annotations

import math

import mlx.core as mx

from .. import layout as L
from ..ir import Ref
from ..registry import kernel, register
from ..spec import AXIS, MAX_LEN, TENSOR, Enum, Float, Int, Opt, Seq
from ._layers import HALF, batch_norm_train, channel_affine, group_norm, l2_normalize, layer_norm, rms_norm, upcast

_EPS = Float()
# torch 2.13's batch_norm: "eps must be non-negative", "eps must be positive during training" (batch statistics);
# through rsqrt(var + eps) a negative eps gave NaN or, past the variance, finite wrong values
_EVAL_EPS, _BATCH_EPS = Float(lo=0.0), Float(lo=0.0, above=True)


def _channel_shape(ndim, axis, c):
    shape = [1] * ndim
    shape[axis] = c
    return shape


@kernel("batch_norm", inputs=[TENSOR, Opt(TENSOR), Opt(TENSOR), TENSOR, TENSOR],
        attrs={"axis": AXIS, "eps": _EVAL_EPS})
def k_batch_norm(x, weight, bias, mean, var, *, axis, eps):
    # torch's CPU eval kernel: per-channel alpha = weight / sqrt(var + eps), beta = bias - mean * alpha, then one
    # multiply-add over the activation (two passes over it here instead of three for (x - mean) * scale + bias)
    shape = _channel_shape(x.ndim, axis, x.shape[axis])
    weight, bias, mean, var = upcast([weight, bias, mean, var])  # alpha/beta in float32 (torch's half kernels)
    alpha = mx.rsqrt(var + eps)
    if weight is not None:
        alpha = alpha * weight
    beta = -mean * alpha if bias is None else bias - mean * alpha
    if axis == x.ndim - 1:
        # channels-last: one multi-threaded native pass on CPU for 16/32-bit floats (porter.layers.channel_affine)
        return channel_affine(x, alpha, beta)
    if x.dtype in HALF:  # computed in float32, rounded once
        return (x.astype(mx.float32) * alpha.reshape(shape) + beta.reshape(shape)).astype(x.dtype)
    return x * alpha.reshape(shape) + beta.reshape(shape)


@kernel("layer_norm", inputs=[TENSOR, Opt(TENSOR), Opt(TENSOR)], attrs={"k": Int(0, MAX_LEN), "eps": _EPS})
def k_layer_norm(x, weight, bias, *, k, eps):
    """The last ``k`` dims normalised: ``porter.layers.functional.layer_norm`` (native kernel on the CPU)."""
    return layer_norm(x, tuple(x.shape[x.ndim - k:]), weight, bias, eps)


@kernel("group_norm", inputs=[TENSOR, Opt(TENSOR), Opt(TENSOR)], attrs={"groups": Opt(Int(1, 1 << 24)),
                                                                        "eps": _EPS})
def k_group_norm(x, weight, bias, *, groups=None, eps):
    """Channels-last ``(N, *S, C)``: statistics per (sample, group) over the spatial dims and the group's channels
    (``porter.layers.functional.group_norm``; native kernel on the CPU). ``groups=None``: one group per channel
    (instance norm over a channel count known only at run time)."""
    return group_norm(x, x.shape[-1] if groups is None else groups, weight, bias, eps)


@kernel("batch_norm_batch_stats", inputs=[TENSOR, Opt(TENSOR), Opt(TENSOR)], attrs={"axis": AXIS, "eps": _BATCH_EPS})
def k_batch_norm_batch_stats(x, weight, bias, *, axis, eps):
    """Batch norm with the batch's statistics (biased variance) over every axis but ``axis``, in float32 at least
    for half inputs, as torch's ``BatchNorm(track_running_stats=False)`` computes in both modes."""
    axes = tuple(i for i in range(x.ndim) if i != axis)
    count = 1
    for i in axes:
        count *= x.shape[i]
    if count == 1:  # torch's check in training-mode batch norm
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)}")
    # porter.layers' batch-statistics normalization: torch's backward formula as its VJP, saving only the input
    # (through MLX's ops the backward kept ~4 whole-input arrays); channels last for it, moved back after
    last = x.ndim - 1
    xs = x if axis == last else mx.moveaxis(x, axis, last)
    if weight is None and bias is None:
        y = batch_norm_train(xs, None, None, eps)[0]
    else:
        channels = x.shape[axis]
        weight = weight if weight is not None else mx.ones((channels,), dtype=bias.dtype)
        bias = bias if bias is not None else mx.zeros((channels,), dtype=weight.dtype)
        y = batch_norm_train(xs, weight, bias, eps)[0]
    return (y if axis == last else mx.moveaxis(y, last, axis)).astype(x.dtype)


@register("aten.batch_norm.default", "aten._native_batch_norm_legit_no_training.default", channels_last=True)
def convert_batch_norm(ctx, call):
    training = False
    if call.has("training"):
        training = bool(call.arg("training"))
        call.arg("cudnn_enabled")
    call.arg("momentum")  # only updates running statistics in training mode
    x = call.arg("input")
    perm = ctx.perm(x)
    rank = len(perm)
    if rank > 1 and perm.index(1) != rank - 1:  # channels last, so the module maps to porter.layers.BatchNorm
        perm = L.identity(rank) if rank == 2 else L.channels_last(rank)
    mean, var = call.arg("running_mean"), call.arg("running_var")
    if training and mean is None and var is None:
        # no running statistics (BatchNorm(track_running_stats=False)): batch statistics in eval and training alike
        if rank < 2:
            call.fail("input", "batch norm with batch statistics needs (N, C, ...) input")
        inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("weight")), ctx.tensor(call.arg("bias"))]
        return ctx.emit("batch_norm_batch_stats", inputs, {"axis": perm.index(1), "eps": call.arg("eps")}, perm=perm)
    if training:
        call.fail("training", "training-mode batch norm with running statistics updates them; convert in eval mode")
    if mean is None or var is None:
        call.fail("running_mean", "batch norm without running statistics normalises with batch statistics")
    inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("weight")), ctx.tensor(call.arg("bias")), ctx.tensor(mean),
              ctx.tensor(var)]
    axis = perm.index(1) if rank > 1 else 0
    out = ctx.emit("batch_norm", inputs, {"axis": axis, "eps": call.arg("eps")}, perm=perm,
                   meta=call.meta.items[0] if call.meta.kind == "list" else call.meta,
                   out=None if call.meta.kind != "list" else ctx.fresh(call.name))
    if call.meta.kind == "list":  # the decomposed form returns (out, save_mean, save_invstd); only out is used
        from ..convert import Info

        ctx.emit("pack", [[{"ref": out.name}]], items=[Info(call.meta.items[0], perm)])


@kernel("pack", inputs=[Seq(Opt(TENSOR))])
def k_pack(values):
    return list(values)


@kernel("norm_stats", inputs=[TENSOR], attrs={"mode": Enum("layer", "group"), "size": Int(1, MAX_LEN), "eps": _EPS})
def k_norm_stats(x, *, mode, size, eps):
    """``[mean, rstd]`` of ``native_layer_norm`` / ``native_group_norm``, ``x`` in torch's layout. ``layer``: over the
    last ``size`` dims, shaped ``x.shape[:-size] + (1,) * size``; ``group``: ``(N, C, ...)`` in ``size`` groups,
    shaped ``(N, size)``. ``rstd = 1 / sqrt(biased variance + eps)``, computed in float32 for half inputs and returned
    in the input's dtype (torch's CPU kernels' dtype for them)."""
    work = upcast(x)
    if mode == "layer":
        axes = tuple(range(x.ndim - size, x.ndim))
    else:
        if x.ndim < 2 or x.shape[1] % size:
            raise ValueError(f"native_group_norm: {size} groups do not divide the channels of {tuple(x.shape)}")
        work = work.reshape(x.shape[0], size, -1)
        axes = (2,)
    mean = mx.mean(work, axis=axes, keepdims=mode == "layer")
    var = mx.var(work, axis=axes, keepdims=mode == "layer")
    out = x.dtype
    stats = [mean.astype(out), mx.rsqrt(var + eps).astype(out)]
    # torch's layer norm statistics carry no gradient (output_differentiability); its group norm's do
    return [mx.stop_gradient(s) for s in stats] if mode == "layer" else stats


def _with_stats(ctx, call, x, out, mode, size):
    """Pack ``(out, mean, rstd)`` for a ``native_*_norm`` node whose statistics are read."""
    from ..convert import Info

    identity = L.identity(ctx.meta(x).rank)
    mean_meta, rstd_meta = call.meta.items[1], call.meta.items[2]
    stats = ctx.emit("norm_stats", [ctx.tensor(x, identity)],
                     {"mode": mode, "size": size, "eps": call.arg("eps")},
                     items=[Info(mean_meta, L.identity(mean_meta.rank)), Info(rstd_meta, L.identity(rstd_meta.rank))],
                     out=ctx.fresh(call.name))
    refs = []
    for i, meta in ((0, mean_meta), (1, rstd_meta)):
        refs.append(ctx.emit("getitem", [{"ref": stats.name}], {"index": i}, perm=L.identity(meta.rank), meta=meta,
                             out=ctx.fresh(call.name)))
    items = [ctx.info(out), Info(mean_meta, L.identity(mean_meta.rank)), Info(rstd_meta, L.identity(rstd_meta.rank))]
    ctx.emit("pack", [[{"ref": r.name} for r in (out, *refs)]], items=items)


@register("aten.layer_norm.default", "aten.native_layer_norm.default")
def convert_layer_norm(ctx, call):
    x = call.arg("input")
    if call.has("cudnn_enable"):
        call.arg("cudnn_enable")
    shape = call.arg("normalized_shape")
    k = len(shape)
    perm = ctx.perm(x)
    rank = len(perm)
    if perm[rank - k:] != tuple(range(rank - k, rank)):
        perm = L.identity(rank)
    inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("weight")), ctx.tensor(call.arg("bias"))]
    if call.meta.kind != "list":
        return ctx.emit("layer_norm", inputs, {"k": k, "eps": call.arg("eps")}, perm=perm)
    # native_layer_norm returns (out, mean, rstd); decomposed inference graphs read only out
    from ..convert import Info

    out = ctx.emit("layer_norm", inputs, {"k": k, "eps": call.arg("eps")}, perm=perm, meta=call.meta.items[0],
                   out=ctx.fresh(call.name))
    if ctx.used_items(call.name) - {0}:
        return _with_stats(ctx, call, x, out, "layer", k)
    ctx.emit("pack", [[{"ref": out.name}]], items=[Info(call.meta.items[0], perm)])


@kernel("rms_norm", inputs=[TENSOR, Opt(TENSOR)], attrs={"k": Int(1, MAX_LEN), "eps": Opt(_EPS)})
def k_rms_norm(x, weight, *, k, eps):
    """The last ``k`` dims normalised: ``porter.layers.functional.rms_norm`` (torch's float32 compute for half
    inputs, ``eps=None``: the compute dtype's epsilon)."""
    return rms_norm(x, tuple(x.shape[x.ndim - k:]), weight, eps)


@register("aten.rms_norm.default")
def convert_rms_norm(ctx, call):
    x = call.arg("input")
    k = len(call.arg("normalized_shape"))
    perm = ctx.perm(x)
    rank = len(perm)
    if perm[rank - k:] != tuple(range(rank - k, rank)):
        perm = L.identity(rank)  # the normalised dims must be the array's last ones
    ctx.emit("rms_norm", [ctx.tensor(x, perm), ctx.tensor(call.arg("weight"))], {"k": k, "eps": call.arg("eps")},
             perm=perm)


@register("aten.group_norm.default", channels_last=True)
def convert_group_norm(ctx, call):
    x = call.arg("input")
    call.arg("cudnn_enabled")
    rank = ctx.meta(x).rank
    if rank < 2:
        call.fail("input", "group_norm needs (N, C, ...) input")
    perm = L.channels_last(rank)
    inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("weight")), ctx.tensor(call.arg("bias"))]
    ctx.emit("group_norm", inputs, {"groups": call.arg("num_groups"), "eps": call.arg("eps")}, perm=perm)


@register("aten.native_group_norm.default", channels_last=True)
def convert_native_group_norm(ctx, call):
    """Core ATen's group norm (an ExportedProgram after ``run_decompositions()``, a ``.pt2`` saved from one):
    ``(out, mean, rstd)`` of ``input`` viewed as ``(N, C, HxW)``; decomposed inference graphs read only ``out``, a
    model reading the statistics gets them from ``norm_stats``."""
    x = call.arg("input")
    shape = ctx.meta(x).shape
    if len(shape) < 2:
        call.fail("input", "native_group_norm needs (N, C, ...) input")
    sizes = {"N": shape[0], "C": shape[1], "HxW": math.prod(shape[2:]) if all(isinstance(s, int) for s in shape[2:])
             else None}
    for name, expected in sizes.items():
        given = call.arg(name)  # the input's own sizes (symbolic where the input's are): checked where known
        if isinstance(given, int) and isinstance(expected, int) and given != expected:
            call.fail(name, f"{name}={given} does not match the input's shape {list(shape)}")
    from ..convert import Info

    perm = L.channels_last(len(shape))
    inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("weight")), ctx.tensor(call.arg("bias"))]
    out = ctx.emit("group_norm", inputs, {"groups": call.arg("group"), "eps": call.arg("eps")}, perm=perm,
                   meta=call.meta.items[0], out=ctx.fresh(call.name))
    if ctx.used_items(call.name) - {0}:
        return _with_stats(ctx, call, x, out, "group", call.arg("group"))
    ctx.emit("pack", [[{"ref": out.name}]], items=[Info(call.meta.items[0], perm)])


@register("aten.instance_norm.default", channels_last=True)
def convert_instance_norm(ctx, call):
    """Instance norm with input statistics = group norm with one group per channel; with running statistics
    (``track_running_stats=True`` in eval: ``use_input_stats=False``) it normalises per channel by the stored
    mean and variance, i.e. eval batch norm."""
    x = call.arg("input")
    call.arg("momentum")  # only updates running statistics in training mode
    call.arg("cudnn_enabled")
    mean, var = call.arg("running_mean"), call.arg("running_var")
    rank = ctx.meta(x).rank
    perm = L.channels_last(rank)
    if not call.arg("use_input_stats"):
        if mean is None or var is None:
            call.fail("use_input_stats", "instance norm without input statistics needs running_mean and running_var")
        inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("weight")), ctx.tensor(call.arg("bias")),
                  ctx.tensor(mean), ctx.tensor(var)]
        ctx.emit("batch_norm", inputs, {"axis": rank - 1, "eps": call.arg("eps")}, perm=perm)
        return
    channels = ctx.meta(x).shape[1]  # a symbol when no weight fixes it (F.instance_norm without affine)
    inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("weight")), ctx.tensor(call.arg("bias"))]
    ctx.emit("group_norm", inputs, {"groups": channels if isinstance(channels, int) else None,
                                    "eps": call.arg("eps")}, perm=perm)


@register("aten._weight_norm.default")
def convert_weight_norm(ctx, call):
    """``v * (g / ||v||)`` (``torch.nn.utils.weight_norm`` and its parametrization form), the norm over every dim
    but ``dim``; torch's ``dim=-1`` means the norm of the whole tensor, not of the last dim. Built from the
    vector_norm and binary kernels, in torch's layout (the result feeds a conv's run-time weight transform)."""
    v, g, dim = call.arg("v"), call.arg("g"), call.arg("dim")
    rank = ctx.meta(v).rank
    if isinstance(dim, Ref) or not -rank <= dim < max(rank, 1):
        call.fail("dim", f"must be a constant dim of the {rank}-d weight")
    kept = [] if dim == -1 else [dim % rank]
    axes = [a for a in range(rank) if a not in kept]
    ident = L.identity(rank)
    norm = ctx.emit("vector_norm", [ctx.tensor(v, ident)], {"ord": 2.0, "axes": axes, "keepdims": True},
                    perm=ident, out=ctx.fresh(f"{call.name}_norm"))
    scale = ctx.emit("binary", [ctx.tensor(g, L.identity(ctx.meta(g).rank)), {"ref": norm.name}], {"fn": "div"},
                     perm=ident, out=ctx.fresh(f"{call.name}_scale"))
    ctx.emit("binary", [ctx.tensor(v, ident), {"ref": scale.name}], {"fn": "mul"}, perm=ident)


@kernel("l2_normalize", inputs=[TENSOR], attrs={"axis": AXIS, "eps": _EPS})
def k_l2_normalize(x, *, axis, eps):
    """``F.normalize(x, p=2)`` along ``axis``: one native pass over a last axis (``porter.layers.normalize``)."""
    return l2_normalize(x, axis, eps)


@register("porter.l2_normalize.default")
def convert_l2_normalize(ctx, call):
    """The node ``ir_fusion.py`` makes of a captured ``F.normalize`` (``self``, torch ``dim``, ``eps``): the dim
    through x's layout, so a channels-last tensor normalised over its channels runs the last-axis kernel."""
    x = call.arg("self")
    perm = ctx.perm(x)
    ctx.emit("l2_normalize", [ctx.tensor(x)], {"axis": L.axis_of(perm, call.arg("dim")), "eps": call.arg("eps")},
             perm=perm)
