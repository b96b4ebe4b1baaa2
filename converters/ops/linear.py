"""Linear algebra and attention: linear, addmm/addmv, mm/bmm/matmul/mv/dot, baddbmm, scaled_dot_product_attention.

``linear`` acts on the last torch dim only, so it runs in any layout that keeps that dim last in the array. The
matmul family reads operands whose last two dims are merely swapped (``k.transpose(-2, -1)``) without a copy.
"""

from __future__ import annotations

import math

import mlx.core as mx

from .. import layout as L
from . import _layers
from ..registry import kernel, register
from ..spec import GEOMETRY, SCALAR, TENSOR, Bool, Float, Int, Opt


@kernel("linear", inputs=[TENSOR, TENSOR, Opt(TENSOR)])
def k_linear(x, weight, bias=None):
    # porter.layers.Linear's own computation, so a Linear called as a layer of the tree gives the same bits
    return _layers.linear(x, weight, bias)


def _operand(x, swap):
    return x.swapaxes(-1, -2) if swap else x


@kernel("matmul", inputs=[TENSOR, TENSOR], attrs={"swap_a": Bool(), "swap_b": Bool()})
def k_matmul(a, b, *, swap_a=False, swap_b=False):
    return _layers.matmul(_operand(a, swap_a), _operand(b, swap_b))


@kernel("addmm", inputs=[SCALAR, TENSOR, TENSOR], attrs={"beta": Float(), "alpha": Float(), "swap_a": Bool(),
                                                        "swap_b": Bool()})
def k_addmm(c, a, b, *, beta=1, alpha=1, swap_a=False, swap_b=False):
    y = _layers.matmul(_operand(a, swap_a), _operand(b, swap_b))
    if alpha != 1:
        y = y * alpha
    if beta == 0:
        return y
    return y + (c if beta == 1 else c * beta)


@kernel("addbmm", inputs=[SCALAR, TENSOR, TENSOR], attrs={"beta": Float(), "alpha": Float()})
def k_addbmm(c, a, b, *, beta=1, alpha=1):
    """``beta * c + alpha * sum_i(a[i] @ b[i])``: ``a`` ``(B, N, M)``, ``b`` ``(B, M, P)``, ``c`` broadcast to
    ``(N, P)``; with ``beta == 0`` ``c`` is not read (NaN in it does not propagate), as torch's."""
    if a.ndim != 3 or b.ndim != 3:
        raise ValueError(f"addbmm: batch1 and batch2 must be 3-d but have shapes {tuple(a.shape)} and {tuple(b.shape)}")
    y = _layers.matmul(a, b).sum(axis=0)
    if alpha != 1:
        y = y * alpha
    if beta == 0:
        return y
    return y + (c if beta == 1 else c * beta)


@kernel("sdpa", inputs=[TENSOR, TENSOR, TENSOR, Opt(TENSOR)], attrs={"scale": Opt(Float()), "is_causal": Bool(),
                                                                      "gqa": Opt(Bool())})
def k_sdpa(q, k, v, mask=None, *, scale=None, is_causal=False, gqa=None):
    """``(..., H, L, E)`` query, ``(..., H_kv, S, E)`` key and value; with ``gqa`` each key/value head serves
    ``H / H_kv`` consecutive query heads (torch's ``enable_gqa``)."""
    return attention(q, k, v, mask, scale=scale, is_causal=is_causal, gqa=gqa)


def attention(q, k, v, mask=None, *, scale=None, is_causal=False, gqa=None, dropout: float = 0.0):
    """:func:`k_sdpa`'s computation; ``dropout`` > 0 drops attention weights after the softmax as torch's math
    path does in training (``dropout_p``: each kept with probability ``1 - p``, scaled by ``1 / (1 - p)``)."""
    if gqa and k.shape[-3] != q.shape[-3]:
        if k.shape[-3] != v.shape[-3] or q.shape[-3] % k.shape[-3]:
            raise ValueError(f"sdpa: with enable_gqa the query's {q.shape[-3]} heads must be a multiple of the key's "
                             f"{k.shape[-3]} and value's {v.shape[-3]}")
        groups = q.shape[-3] // k.shape[-3]
        k, v = mx.repeat(k, groups, axis=-3), mx.repeat(v, groups, axis=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = _layers.matmul(q * scale, k.swapaxes(-1, -2))
    if is_causal:
        lq, lk = scores.shape[-2], scores.shape[-1]
        causal = mx.tril(mx.ones((lq, lk), dtype=mx.bool_))
        scores = mx.where(causal, scores, -mx.inf)
    if mask is not None:
        scores = mx.where(mask, scores, -mx.inf) if mask.dtype == mx.bool_ else scores + mask
    probs = _layers.softmax(scores, -1)  # one native pass on the CPU (MLX's runs libm per element, one thread)
    if mask is not None:
        # torch's safe softmax: a query whose every key is masked out attends to nothing (zeros, not NaN)
        probs = mx.where(mx.all(scores == -mx.inf, axis=-1, keepdims=True), mx.zeros_like(probs), probs)
    if dropout > 0.0:
        from ..layer_dropout import dropout as drop

        probs = drop(probs, dropout, True)
    return _layers.matmul(probs, v)


def _matmul_operand(ctx, x):
    """(spec, swapped): an operand in torch's layout, or with only its last two dims swapped."""
    perm = ctx.perm(x)
    rank = len(perm)
    if rank >= 2 and perm[:-2] == L.identity(rank - 2) and perm[-2:] == (rank - 1, rank - 2):
        return ctx.tensor(x), True
    return ctx.tensor(x, L.identity(rank)), False


@register("aten.linear.default")
def convert_linear(ctx, call):
    x = call.arg("input")
    perm = ctx.perm(x)
    rank = len(perm)
    if rank == 0 or perm[-1] != rank - 1:
        perm = L.identity(rank)
    bias = call.arg("bias")
    inputs = [ctx.tensor(x, perm), ctx.tensor(call.arg("weight"))]
    if bias is not None:
        inputs.append(ctx.tensor(bias))
    ctx.emit("linear", inputs, perm=perm)


@register("aten.mm.default", "aten.bmm.default", "aten.matmul.default", "aten.mv.default", "aten.dot.default",
          "aten.vdot.default")  # vdot conjugates its first operand: a no-op on the real dtypes Porter converts
def convert_matmul(ctx, call):
    a = call.arg("self")
    b = call.arg(next(n for n in ("mat2", "other", "vec", "tensor") if call.has(n)))
    (sa, swap_a), (sb, swap_b) = _matmul_operand(ctx, a), _matmul_operand(ctx, b)
    ctx.emit("matmul", [sa, sb], {"swap_a": swap_a, "swap_b": swap_b}, perm=L.identity(call.meta.rank))


@register("aten.addmm.default", "aten.baddbmm.default", "aten.addmv.default")
def convert_addmm(ctx, call):
    a = call.arg(next(n for n in ("mat1", "batch1", "mat") if call.has(n)))
    b = call.arg(next(n for n in ("mat2", "batch2", "vec") if call.has(n)))
    c = call.arg("self")
    (sa, swap_a), (sb, swap_b) = _matmul_operand(ctx, a), _matmul_operand(ctx, b)
    rank = call.meta.rank
    sc = ctx.tensor(c, L.identity(ctx.meta(c).rank))
    ctx.emit("addmm", [sc, sa, sb], {"beta": call.arg("beta"), "alpha": call.arg("alpha"), "swap_a": swap_a,
                                     "swap_b": swap_b}, perm=L.identity(rank))


@register("aten.scaled_dot_product_attention.default")
def convert_sdpa(ctx, call):
    if call.arg("dropout_p") not in (0, 0.0):
        call.fail("dropout_p", "attention dropout is random; convert in eval mode or pass dropout_p=0")
    q, k, v, mask = call.arg("query"), call.arg("key"), call.arg("value"), call.arg("attn_mask")
    inputs = [ctx.tensor(t, L.identity(ctx.meta(t).rank)) for t in (q, k, v)]
    if mask is not None:
        inputs.append(ctx.tensor(mask, L.identity(ctx.meta(mask).rank)))
    attrs = {"scale": call.arg("scale"), "is_causal": call.arg("is_causal")}
    if call.arg("enable_gqa"):
        attrs["gqa"] = True  # only then: an artifact without it loads in a Porter that predates the attribute
    ctx.emit("sdpa", inputs, attrs, perm=L.identity(call.meta.rank))


@register("aten.addbmm.default")  # addbmm_ is recorded as addbmm (functionalized)
def convert_addbmm(ctx, call):
    a, b, c = call.arg("batch1"), call.arg("batch2"), call.arg("self")
    specs = [ctx.tensor(t, L.identity(ctx.meta(t).rank)) for t in (c, a, b)]
    ctx.emit("addbmm", specs, {"beta": call.arg("beta"), "alpha": call.arg("alpha")}, perm=L.identity(2))


@kernel("native_mha", inputs=[TENSOR] * 7, attrs={"num_head": Int(1, GEOMETRY), "need_weights": Bool(),
                                              "average": Bool()})
def k_native_mha(q, k, v, qkv_weight, qkv_bias, proj_weight, proj_bias, *, num_head, need_weights, average):
    """nn.MultiheadAttention's fused inference path (TorchScript in eval): batch-first ``(B, L, E)`` inputs."""
    e = q.shape[-1]
    w_q, w_k, w_v = qkv_weight[:e], qkv_weight[e:2 * e], qkv_weight[2 * e:]
    b_q, b_k, b_v = qkv_bias[:e], qkv_bias[e:2 * e], qkv_bias[2 * e:]

    def heads(x, w, b):
        y = x @ w.T + b
        return y.reshape(y.shape[0], y.shape[1], num_head, e // num_head).transpose(0, 2, 1, 3)

    qh, kh, vh = heads(q, w_q, b_q), heads(k, w_k, b_k), heads(v, w_v, b_v)
    scores = _layers.matmul(qh * (1.0 / math.sqrt(e // num_head)), kh.swapaxes(-1, -2))
    attn = _layers.softmax(scores, -1)
    out = _layers.matmul(attn, vh).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    out = out @ proj_weight.T + proj_bias
    if not need_weights:
        return [out, None]
    return [out, attn.mean(axis=1) if average else attn]


@register("aten._native_multi_head_attention.default")
def convert_native_mha(ctx, call):
    from ..convert import Info

    if call.arg("mask") is not None:
        call.fail("mask", "attention masks on the fused path are not supported yet")
    call.arg("mask_type")
    call.arg("embed_dim")
    tensors = [call.arg(n) for n in ("query", "key", "value", "qkv_weight", "qkv_bias", "proj_weight", "proj_bias")]
    inputs = [ctx.tensor(t, L.identity(ctx.meta(t).rank)) for t in tensors]
    need = call.arg("need_weights")
    items = [Info(call.meta.items[0], L.identity(call.meta.items[0].rank)),
             Info(call.meta.items[1], L.identity(call.meta.items[1].rank) if call.meta.items[1].kind == "tensor"
                  else None)]
    ctx.emit("native_mha", inputs, {"num_head": call.arg("num_head"), "need_weights": need,
                                    "average": call.arg("average_attn_weights")}, items=items)
