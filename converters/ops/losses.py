"""Losses whose torch decomposition is not torch's kernel: converted directly. Torch layout throughout.

``multilabel_margin_loss(x, y, reduction)``: ``x`` is ``(C,)`` or ``(N, C)`` scores (0-d: ``(1,)``, as torch), ``y`` the same shape of int
class labels, each row's labels ending at its first ``-1``. Per sample ``sum_{j < end} sum_{i not a label}
max(0, 1 - (x[y_j] - x[i])) / C``; reduction 0 none, 1 mean, 2 sum. torch 2.13's decomposition of
``multilabel_margin_loss_forward`` also sums over the label slots after the first ``-1`` (reading label 0 there):
4x larger losses than the kernel on short label lists, so the op is not left to it.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import TENSOR, Int
from .misc import checked_indices

_REDUCTIONS = (0, 1, 2)  # torch's Reduction enum: none, mean, sum


@kernel("multilabel_margin_loss", inputs=[TENSOR, TENSOR], attrs={"reduction": Int(0, 2)})
def k_multilabel_margin_loss(x, y, *, reduction):
    if x.ndim == 0 and y.ndim == 0:  # torch: one sample of one class (a 1-d input's 0-d loss)
        x, y = x.reshape(1), y.reshape(1)
    if x.ndim not in (1, 2) or y.shape != x.shape or x.shape[-1] == 0:
        raise ValueError(f"multilabel_margin_loss: scores of shape {x.shape} and labels of shape {y.shape}; "
                         "expected the same (), (C,) or (N, C) shape with C > 0")
    scores, labels = x.reshape(-1, x.shape[-1]), y.reshape(-1, x.shape[-1])
    classes = scores.shape[1]
    idx = mx.arange(classes)
    end = mx.min(mx.where(labels == -1, idx, classes), axis=-1, keepdims=True)
    valid = idx < end  # (N, C): label slots before the first -1
    picked_labels = checked_indices(mx.where(valid, labels, 0), classes, "multilabel_margin_loss target")
    picked = mx.take_along_axis(scores, picked_labels, axis=-1)  # (N, j): x[y_j]
    is_label = mx.any(idx == mx.where(valid, labels, -1)[..., None], axis=1)  # (N, i)
    margin = mx.maximum(1.0 - picked[..., None] + scores[:, None, :], 0) / classes  # (N, j, i)
    margin = mx.where(valid[..., None] & ~is_label[:, None, :], margin, mx.zeros((), margin.dtype))
    per_sample = margin.sum(axis=(1, 2)).astype(x.dtype)
    if reduction == 1:
        return per_sample.mean()
    if reduction == 2:
        return per_sample.sum()
    return per_sample.reshape(x.shape[:-1])


@register("aten.multilabel_margin_loss.default")
def convert_multilabel_margin_loss(ctx, call):
    x, y = call.arg("self"), call.arg("target")
    reduction = call.arg("reduction") if call.has("reduction") else 1
    if reduction not in _REDUCTIONS:
        call.fail("reduction", f"expected one of {_REDUCTIONS} (none, mean, sum)")
    ctx.emit("multilabel_margin_loss", [ctx.tensor(x, L.identity(ctx.meta(x).rank)),
                                        ctx.tensor(y, L.identity(ctx.meta(y).rank))],
             {"reduction": reduction}, perm=L.identity(call.meta.rank))
