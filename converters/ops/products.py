"""Products and distances that reduce over one dim: ``cosine_similarity``, ``bilinear`` (``nn.Bilinear``),
``cdist`` and ``dist``.

``cosine_similarity`` broadcasts its operands, then follows torch's formula: each operand divided by its own 2-norm
along ``dim`` clamped below at ``eps``, multiplied, summed over ``dim``. ``bilinear`` is
``y[..., o] = sum_ij x1[..., i] * weight[o, i, j] * x2[..., j] + bias[o]`` with torch's ``(out, in1, in2)`` weight.
``cdist`` is the p-norm of every row difference (computed from the differences, not torch's matmul shortcut for
large p=2 inputs, so it is at least as accurate); ``dist`` the p-norm of ``a - b`` over every element. They run in
torch's layout on the last dims they read; the rest of the layout is kept where it can be.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .. import layout as L
from ..ir import Ref
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import AXIS, TENSOR, Float, Opt
from .misc import k_vector_norm


@kernel("cosine_similarity", inputs=[TENSOR, TENSOR], attrs={"axis": AXIS, "eps": Float()})
def k_cosine_similarity(a, b, *, axis, eps):
    a, b = mx.broadcast_arrays(a, b)

    def unit(v):
        return v / mx.maximum(mx.sqrt(mx.sum(v * v, axis=axis, keepdims=True)), eps)

    return mx.sum(unit(a) * unit(b), axis=axis)


@kernel("bilinear", inputs=[TENSOR, TENSOR, TENSOR, Opt(TENSOR)])
def k_bilinear(x1, x2, weight, bias=None):
    lead = x1.shape[:-1]
    a, b = x1.reshape(-1, x1.shape[-1]), x2.reshape(-1, x2.shape[-1])
    # (N, in1) @ (in1, out * in2) -> (N, out, in2), then summed against x2 over in2
    t = (a @ weight.transpose(1, 0, 2).reshape(weight.shape[1], -1)).reshape(a.shape[0], weight.shape[0], -1)
    y = mx.sum(t * b[:, None, :], axis=-1)
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, weight.shape[0])


@register("aten.cosine_similarity.default")
def convert_cosine_similarity(ctx, call):
    a, b = call.arg("x1"), call.arg("x2")
    ranks = (ctx.meta(a).rank, ctx.meta(b).rank)
    rank = max(ranks)
    if ranks[0] == ranks[1] and ctx.perm(a) == ctx.perm(b):
        perm = ctx.perm(a)  # one layout: broadcast and reduce in it
        specs = [ctx.tensor(a, perm), ctx.tensor(b, perm)]
    else:  # broadcast in torch's layout
        perm = L.identity(rank)
        specs = [ctx.tensor(a, L.identity(ranks[0])), ctx.tensor(b, L.identity(ranks[1]))]
    dim = call.arg("dim") % max(rank, 1)
    ctx.emit("cosine_similarity", specs, {"axis": perm.index(dim), "eps": call.arg("eps")},
             perm=L.remove_dims(perm, [dim]))


@register("aten.bilinear.default")
def convert_bilinear(ctx, call):
    x1, x2 = call.arg("input1"), call.arg("input2")
    ident = [L.identity(ctx.meta(v).rank) for v in (x1, x2)]
    bias = call.arg("bias")
    inputs = [ctx.tensor(x1, ident[0]), ctx.tensor(x2, ident[1]), ctx.tensor(call.arg("weight"))]
    if bias is not None:
        inputs.append(ctx.tensor(bias))
    ctx.emit("bilinear", inputs, perm=L.identity(call.meta.rank))


def _p(call, name="p"):
    p = call.arg(name)
    if isinstance(p, Ref) or not isinstance(p, (int, float)) or p < 0:
        call.fail(name, "must be a non-negative number")
    return float(p)


@kernel("cdist", inputs=[TENSOR, TENSOR], attrs={"p": Float(allow_inf=True)})
def k_cdist(a, b, *, p):
    """``(*, P, M)`` and ``(*, R, M)`` -> ``(*, P, R)``: the p-norm of each pair of rows' difference."""
    if p < 0:
        raise ValueError(f"cdist: p must be non-negative, got {p}")
    check_elements([*a.shape[:-1], b.shape[-2], a.shape[-1]], "cdist")
    return k_vector_norm(a[..., :, None, :] - b[..., None, :, :], ord=p, axes=[-1], keepdims=False)


@register("aten._cdist_forward.default")
def convert_cdist(ctx, call):
    a, b = call.arg("x1"), call.arg("x2")
    call.arg("compute_mode")  # the matmul shortcut only changes rounding; differences are computed directly
    ident = [L.identity(ctx.meta(v).rank) for v in (a, b)]
    ctx.emit("cdist", [ctx.tensor(a, ident[0]), ctx.tensor(b, ident[1])], {"p": _p(call)},
             perm=L.identity(call.meta.rank))


@kernel("pdist", inputs=[TENSOR], attrs={"p": Float(allow_inf=True)})
def k_pdist(x, *, p):
    """``(N, M)`` -> ``(N (N - 1) / 2,)``: the p-norm of ``x[i] - x[j]`` for every ``i < j``, row by row."""
    if x.ndim != 2:
        raise ValueError(f"pdist: the input must be 2-d but has shape {tuple(x.shape)}")
    n = x.shape[0]
    check_elements([n * (n - 1) // 2, x.shape[1]], "pdist")
    i, j = np.triu_indices(n, 1)
    return k_vector_norm(x[mx.array(i)] - x[mx.array(j)], ord=p, axes=[-1], keepdims=False)


@register("aten._pdist_forward.default")
def convert_pdist(ctx, call):
    x = call.arg("self")
    ctx.emit("pdist", [ctx.tensor(x, L.identity(ctx.meta(x).rank))], {"p": _p(call)}, perm=L.identity(1))


@register("aten.dist.default")
def convert_dist(ctx, call):
    a, b = call.arg("self"), call.arg("other")
    ranks = (ctx.meta(a).rank, ctx.meta(b).rank)
    diff = ctx.emit("binary", [ctx.tensor(a, L.identity(ranks[0])), ctx.tensor(b, L.identity(ranks[1]))],
                    {"fn": "sub"}, perm=L.identity(max(ranks)), out=ctx.fresh(f"{call.name}_diff"))
    ctx.emit("vector_norm", [{"ref": diff.name}], {"ord": _p(call), "axes": list(range(max(ranks))),
                                                   "keepdims": False}, perm=())
