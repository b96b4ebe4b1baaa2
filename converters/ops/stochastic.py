"""Random training-mode ops a capture marks (``converters/capture_markers.py``): stochastic depth (torchvision's
``StochasticDepth``, timm's ``DropPath``), timm's ``DropBlock2d``, functional dropout and attention dropout whose
rate follows the module's training flag. Identity (the eval forward, exactly) unless the node's module trains; then
torch's training distribution (``converters/layer_dropout.py``).

The capture records them as ``porter.*`` marker ops in their eval form; their kernels take ``training=`` from the
runtime (the mode of the node's torch module, or of its nearest holder in the tree: ``registry.kernel(...,
training=True)``). A stochastic-depth module, and a parameter-free module whose forward is one functional dropout,
also get a layer at their torch path (``layer_map.py``).
"""

from __future__ import annotations

from ..layer_dropblock import drop_block
from ..layer_dropout import DEPTH_MODES, dropout, stochastic_depth
from ..registry import kernel, register
from ..spec import TENSOR, Bool, Enum, Float, Int, Ints, Opt, GEOMETRY, PROBABILITY, SpecError
from .. import layout as L
from .linear import attention

_RATE = PROBABILITY  # a file's rate outside [0, 1] is refused at load, as torch refuses it at construction


def _rate(call, name: str) -> float:
    p = call.arg(name)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        call.fail(name, "the drop probability must be a number in [0, 1]")
    return float(p)


@kernel("stochastic_depth", inputs=[TENSOR], attrs={"p": _RATE, "mode": Enum(*DEPTH_MODES), "scale": Bool(),
                                                    "axis": Int(0, GEOMETRY)}, training=True)
def k_stochastic_depth(x, *, p, mode, scale, axis, training=False):
    return stochastic_depth(x, p, mode, scale, axis, training)


@register("porter.drop_path.default")
def convert_drop_path(ctx, call):
    x = call.arg("x")
    perm = ctx.perm(x)
    if not perm:
        call.fail("x", "stochastic depth needs a batch dim (torch's dim 0)")
    attrs = {"p": _rate(call, "p"), "mode": "batch" if call.arg("batch") else "row", "scale": bool(call.arg("scale")),
             "axis": list(perm).index(0)}
    ctx.emit("stochastic_depth", [ctx.tensor(x)], attrs, perm=perm)


def _check_drop_block(inputs, attrs):
    if "axes" in attrs and attrs["axes"][0] == attrs["axes"][1]:
        raise SpecError(f"torch's H and W must be two different array axes but both are {attrs['axes'][0]}", ".axes")


# block_size past any map's side only costs a longer loop (the block is clipped to the map): bounded as a pool window
@kernel("drop_block", inputs=[TENSOR], attrs={"drop_prob": _RATE, "block_size": Int(1, GEOMETRY),
                                            "gamma_scale": Float(lo=0.0), "axes": Ints(2, 2, 0, GEOMETRY)},
        check=_check_drop_block, training=True)
def k_drop_block(x, *, drop_prob, block_size, gamma_scale, axes, training=False):
    return drop_block(x, drop_prob, block_size, gamma_scale, tuple(axes), training)


@register("porter.drop_block.default")
def convert_drop_block(ctx, call):
    x = call.arg("x")
    perm = ctx.perm(x)
    if ctx.meta(x).rank != 4:
        call.fail("x", "timm's DropBlock2d takes a 4-d (B, C, H, W) map")
    block = call.arg("block_size")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        call.fail("block_size", "must be a positive int")
    attrs = {"drop_prob": _rate(call, "drop_prob"), "block_size": block, "gamma_scale": float(call.arg("gamma_scale")),
             "axes": [list(perm).index(2), list(perm).index(3)]}  # where torch's H and W are in the array
    ctx.emit("drop_block", [ctx.tensor(x)], attrs, perm=perm)


@kernel("train_dropout", inputs=[TENSOR], attrs={"p": _RATE}, training=True)
def k_train_dropout(x, *, p, training=False):
    return dropout(x, p, training)


@register("porter.dropout.default")
def convert_train_dropout(ctx, call):
    x = call.arg("x")
    ctx.emit("train_dropout", [ctx.tensor(x)], {"p": _rate(call, "p")}, perm=ctx.perm(x))


@kernel("sdpa_dropout", inputs=[TENSOR, TENSOR, TENSOR, Opt(TENSOR)],
        attrs={"scale": Opt(Float()), "is_causal": Bool(), "gqa": Opt(Bool()), "dropout": _RATE}, training=True)
def k_sdpa_dropout(q, k, v, mask=None, *, scale=None, is_causal=False, gqa=None, dropout=0.0, training=False):
    """The runtime's ``sdpa`` with torch's attention dropout ``dropout`` in training mode."""
    return attention(q, k, v, mask, scale=scale, is_causal=is_causal, gqa=gqa, dropout=dropout if training else 0.0)


@register("porter.sdpa_dropout.default")
def convert_sdpa_dropout(ctx, call):
    q, k, v, mask = call.arg("query"), call.arg("key"), call.arg("value"), call.arg("attn_mask")
    inputs = [ctx.tensor(t, L.identity(ctx.meta(t).rank)) for t in (q, k, v)]
    if mask is not None:
        inputs.append(ctx.tensor(mask, L.identity(ctx.meta(mask).rank)))
    attrs = {"scale": call.arg("scale"), "is_causal": call.arg("is_causal"), "dropout": _rate(call, "dropout_p")}
    if call.arg("enable_gqa"):
        attrs["gqa"] = True
    ctx.emit("sdpa_dropout", inputs, attrs, perm=L.identity(call.meta.rank))
