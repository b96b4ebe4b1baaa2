"""Convolutions: conv1d/2d/3d (int, tuple, 'same' and 'valid' padding), convolution/_convolution (TorchScript),
conv_transpose1d/2d/3d, mapped to Porter's ``porter.layers.functional`` conv functions (channels-last).

Weight transforms are chosen here by op type: conv ``(C_out, C_in/g, *k) -> (C_out, *k, C_in/g)``, conv-transpose
``(C_in, C_out/g, *k)`` regrouped to ``(C_out, *k, C_in/g)``.
"""

from __future__ import annotations

from .. import layout as L
from .. import transforms
from ..ir import Ref
from ..registry import kernel, register
from ..spec import GEOMETRY, INT_OR_REF, TENSOR, Bool, Enum, Int, Ints, Obj, OneOf, Opt, PERM
from . import _layers

_GEOM = Ints(1, 3, 0, GEOMETRY)
_POSITIVE = Ints(1, 3, 1, GEOMETRY)
CONV_ATTRS = {"nd": Int(1, 3), "stride": _POSITIVE, "dilation": _POSITIVE, "groups": Int(1, GEOMETRY),
              "padding": OneOf(_GEOM, Int(0, GEOMETRY), Enum("same", "valid")), "unbatched": Bool()}
# the recorded attributes of each weight transform (also checked for the params of a loaded artifact)
TRANSFORM_ATTRS = {"identity": Obj({}), "conv_weight": Obj({}), "permute": Obj({"perm": PERM}, ["perm"]),
                   "conv_transpose_weight": Obj({"groups": Int(1, GEOMETRY)}, ["groups"])}


def spatial_layout(rank: int, nd: int, op: str) -> tuple:
    """Channels-last layout of a conv/pool input: batched ``(N, C, *S)`` or unbatched ``(C, *S)``."""
    if rank == nd + 2:
        return L.channels_last(rank)
    if rank == nd + 1:
        return L.channels_last_unbatched(rank)
    raise ValueError(f"[{op}] expected a {nd + 1}-d or {nd + 2}-d input but got {rank} dims")


def batched(fn):
    """Run ``fn`` on an unbatched channels-last input by adding a batch axis of one."""

    def run(x, *args, unbatched=False, **kwargs):
        if not unbatched:
            return fn(x, *args, **kwargs)
        out = fn(x[None], *args, **kwargs)
        return tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]

    return run


@kernel("conv", inputs=[TENSOR, TENSOR, Opt(TENSOR)], attrs=CONV_ATTRS)
def k_conv(x, weight, bias=None, *, nd, stride, padding, dilation, groups, unbatched=False):
    conv = _layers.fn(f"conv{nd}d")
    return batched(conv)(x, weight, bias, stride, padding, dilation, groups, unbatched=unbatched)


@kernel("conv_transpose", inputs=[TENSOR, TENSOR, Opt(TENSOR)],
        attrs={**CONV_ATTRS, "output_padding": _GEOM})
def k_conv_transpose(x, weight, bias=None, *, nd, stride, padding, output_padding, groups, dilation,
                     unbatched=False):
    conv = _layers.fn(f"conv_transpose{nd}d")
    return batched(conv)(x, weight, bias, stride, padding, output_padding, groups, dilation, unbatched=unbatched)


# A group count the capture kept symbolic (StyleGAN2's grouped-conv trick, ``groups=batch``) is an input read at run
# time; the conv-transpose weight, whose regrouping needs that count, comes in torch's layout and is regrouped then.
RUNTIME_GROUPS_ATTRS = {k: v for k, v in CONV_ATTRS.items() if k != "groups"}


def _runtime_groups(groups, op: str) -> int:
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"[{op}] 'groups' must be a positive int at run time but got {groups!r}")
    return groups


@kernel("conv_runtime_groups", inputs=[TENSOR, TENSOR, INT_OR_REF, Opt(TENSOR)], attrs=RUNTIME_GROUPS_ATTRS)
def k_conv_runtime_groups(x, weight, groups, bias=None, *, nd, stride, padding, dilation, unbatched=False):
    groups = _runtime_groups(groups, f"conv{nd}d")
    return k_conv(x, weight, bias, nd=nd, stride=stride, padding=padding, dilation=dilation, groups=groups,
                  unbatched=unbatched)


@kernel("conv_transpose_runtime_groups", inputs=[TENSOR, TENSOR, INT_OR_REF, Opt(TENSOR)],
        attrs={**RUNTIME_GROUPS_ATTRS, "output_padding": _GEOM})
def k_conv_transpose_runtime_groups(x, weight, groups, bias=None, *, nd, stride, padding, output_padding, dilation,
                                    unbatched=False):
    """``weight`` in torch's layout ``(C_in, C_out/groups, *k)``."""
    op = f"conv_transpose{nd}d"
    groups = _runtime_groups(groups, op)
    if weight.shape[0] % groups:
        raise ValueError(f"[{op}] weight's {weight.shape[0]} input channels are not divisible by 'groups'={groups}")
    forward, _ = transforms.get("conv_transpose_weight")
    return k_conv_transpose(x, forward(weight, groups=groups), bias, nd=nd, stride=stride, padding=padding,
                            output_padding=output_padding, groups=groups, dilation=dilation, unbatched=unbatched)


def _check_transform(inputs, attrs):
    TRANSFORM_ATTRS[attrs["name"]].check(attrs.get("attrs", {}), None)


@kernel("weight_transform", inputs=[TENSOR], attrs={"name": Enum(*TRANSFORM_ATTRS), "attrs": Obj({"perm": PERM,
        "groups": Int(1, GEOMETRY)})}, check=_check_transform)
def k_weight_transform(w, *, name, attrs):
    forward, _ = transforms.get(name)
    return forward(w, **attrs)


def _weight(ctx, w, name, **attrs):
    if ctx.is_param(w):
        return ctx.param(w, name, **attrs)
    # a weight computed in the forward: transform it at run time, same transform
    out = ctx.fresh(f"{w.name}_{name}")
    ref = ctx.emit("weight_transform", [ctx.tensor(w, L.identity(ctx.meta(w).rank))],
                   {"name": name, "attrs": attrs}, out=out, perm=None, meta=ctx.meta(w))
    return {"ref": ref.name}


def _conv_common(ctx, call, nd, transposed):
    x, w, b = call.arg("input"), call.arg("weight"), call.arg("bias")
    rank = ctx.meta(x).rank
    perm = spatial_layout(rank, nd, call.op)
    groups = call.arg("groups")
    if isinstance(groups, Ref):  # read at run time: the *_runtime_groups kernels
        weight = ctx.tensor(w, L.identity(ctx.meta(w).rank)) if transposed else _weight(ctx, w, "conv_weight")
        inputs = [ctx.tensor(x, perm), weight, ctx.value(groups)]
    elif transposed:
        inputs = [ctx.tensor(x, perm), _weight(ctx, w, "conv_transpose_weight", groups=groups)]
    else:
        inputs = [ctx.tensor(x, perm), _weight(ctx, w, "conv_weight")]
    if b is not None:
        inputs.append(ctx.tensor(b))
    return inputs, perm, groups, rank == nd + 1


def _emit(ctx, kind, inputs, attrs, perm):
    """``kind`` ("conv" or "conv_transpose"), or its runtime-groups form when ``groups`` is symbolic."""
    if isinstance(attrs["groups"], Ref):
        attrs = {k: v for k, v in attrs.items() if k != "groups"}
        return ctx.emit(f"{kind}_runtime_groups", inputs, attrs, perm=perm)
    return ctx.emit(kind, inputs, attrs, perm=perm)


def _conv(nd):
    def convert_conv(ctx, call):
        inputs, perm, groups, unbatched = _conv_common(ctx, call, nd, False)
        attrs = {"nd": nd, "stride": call.arg("stride"), "padding": call.arg("padding"),
                 "dilation": call.arg("dilation"), "groups": groups, "unbatched": unbatched}
        _emit(ctx, "conv", inputs, attrs, perm)

    convert_conv.__name__ = f"convert_conv{nd}d"
    return convert_conv


def _conv_transpose(nd):
    def convert_conv_transpose(ctx, call):
        inputs, perm, groups, unbatched = _conv_common(ctx, call, nd, True)
        attrs = {"nd": nd, "stride": call.arg("stride"), "padding": call.arg("padding"),
                 "output_padding": call.arg("output_padding"), "groups": groups, "dilation": call.arg("dilation"),
                 "unbatched": unbatched}
        _emit(ctx, "conv_transpose", inputs, attrs, perm)

    convert_conv_transpose.__name__ = f"convert_conv_transpose{nd}d"
    return convert_conv_transpose


for _nd in (1, 2, 3):
    register(f"aten.conv{_nd}d.default", f"aten.conv{_nd}d.padding", channels_last=True)(_conv(_nd))
    # torch 2.13 spells them conv_transpose1d.default, conv_transpose2d.input, conv_transpose3d.input
    register(f"aten.conv_transpose{_nd}d.{'default' if _nd == 1 else 'input'}", channels_last=True)(
        _conv_transpose(_nd))


@register("aten.convolution.default", "aten._convolution.default", "aten._convolution.deprecated",
          channels_last=True)
def convert_convolution(ctx, call):
    """The generic form (TorchScript and some exports): dispatch on ``transposed`` and the weight's rank."""
    for flag in ("benchmark", "deterministic", "cudnn_enabled", "allow_tf32"):
        if call.has(flag):
            call.arg(flag)  # backend hints: no effect on values
    nd = ctx.meta(call.arg("weight")).rank - 2
    transposed = call.arg("transposed")
    if transposed:
        inputs, perm, groups, unbatched = _conv_common(ctx, call, nd, True)
        attrs = {"nd": nd, "stride": call.arg("stride"), "padding": call.arg("padding"),
                 "output_padding": call.arg("output_padding"), "groups": groups, "dilation": call.arg("dilation"),
                 "unbatched": unbatched}
        return _emit(ctx, "conv_transpose", inputs, attrs, perm)
    output_padding = call.arg("output_padding")
    if any(output_padding or []):
        call.fail("output_padding", "output_padding only applies to transposed convolutions")
    inputs, perm, groups, unbatched = _conv_common(ctx, call, nd, False)
    attrs = {"nd": nd, "stride": call.arg("stride"), "padding": call.arg("padding"),
             "dilation": call.arg("dilation"), "groups": groups, "unbatched": unbatched}
    _emit(ctx, "conv", inputs, attrs, perm)
