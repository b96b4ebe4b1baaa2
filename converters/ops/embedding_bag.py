"""``nn.EmbeddingBag`` / ``F.embedding_bag``: sums, means or maxima of embedding rows over bags of indices.

Layout: ``indices`` 1-d ``(n,)`` and ``offsets`` 1-d ``(B,)`` (bag ``b`` is ``indices[offsets[b]:offsets[b+1]]``,
the last bag runs to the end; with ``include_last_offset`` there are ``B - 1`` bags and the last offset is the end).
A 2-d input ``(B, L)`` reaches the op as fixed-length bags (torch builds the offsets in the graph). Output
``(B, D)``. As torch: indices equal to ``padding_idx`` are skipped (not counted by ``mean``), an empty bag gives
zeros, ``per_sample_weights`` scale the rows (``sum`` only). Indices and offsets come from the caller and are
checked on the host as torch checks them (a row index out of range, ``offsets[0] != 0``, decreasing offsets, an
offset past the end: each an error) before anything is gathered. Only the first output (the bags) is converted;
torch's bookkeeping outputs (``offset2bag``, ``bag_size``, ``max_indices``) are refused when read.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import TENSOR, Bool, Enum, Float, Int, Opt
from ._layers import export_note, exporting
from .misc import checked_indices

_MODES = ("sum", "mean", "max")


def _checked_offsets(offsets, n: int, include_last: bool) -> None:
    if offsets.ndim != 1:
        raise ValueError(f"embedding_bag: offsets must be 1-d, got shape {tuple(offsets.shape)}")
    if offsets.size == 0 or exporting():
        if offsets.size and exporting():
            export_note("embedding_bag's host-side offsets check -> offsets are used as given")
        return
    values = offsets.tolist()
    if values[0] != 0:
        raise ValueError(f"embedding_bag: offsets[0] must be 0, got {values[0]}")
    if any(b < a for a, b in zip(values, values[1:])):
        raise ValueError("embedding_bag: offsets must be non-decreasing")
    if values[-1] > n:
        raise ValueError(f"embedding_bag: offsets[-1] ({values[-1]}) is past the end of the {n} indices")


@kernel("embedding_bag", inputs=[TENSOR, TENSOR, TENSOR, Opt(TENSOR)],
        attrs={"mode": Enum(*_MODES), "include_last": Bool(), "padding_idx": Int()})
def k_embedding_bag(weight, indices, offsets, per_sample, *, mode, include_last, padding_idx):
    n = indices.size
    index = checked_indices(indices.reshape(-1), weight.shape[0], "embedding_bag", narrow=True)
    _checked_offsets(offsets, n, include_last)
    bags = max(offsets.size - (1 if include_last else 0), 0)
    dim = weight.shape[1]
    if bags == 0:
        return mx.zeros((0, dim), dtype=weight.dtype)
    starts = offsets[:bags].astype(mx.int32)
    # bag id of every position: +1 at each bag's start (empty bags stack up), running sum - 1
    marks = mx.zeros((n + 1,), dtype=mx.int32).at[starts].add(mx.ones_like(starts))
    bag = mx.cumsum(marks[:n], axis=0) - 1
    valid = index != padding_idx if padding_idx >= 0 else mx.ones((n,), dtype=mx.bool_)
    if include_last:
        valid = valid & (mx.arange(n) < offsets[bags])
    bag = mx.where(valid, bag, 0)
    rows = mx.take(weight, index, axis=0)
    if per_sample is not None:
        if mode != "sum":
            raise ValueError("embedding_bag: per_sample_weights are only supported with mode='sum'")
        rows = rows * per_sample.reshape(-1, 1).astype(rows.dtype)
    keep = valid[:, None]
    if mode == "max":
        low = mx.array(-mx.inf, rows.dtype)
        out = mx.full((bags, dim), -mx.inf, dtype=rows.dtype).at[bag].maximum(mx.where(keep, rows, low))
        return mx.where(out == low, mx.zeros_like(out), out)  # an empty bag gives zeros
    out = mx.zeros((bags, dim), dtype=rows.dtype).at[bag].add(mx.where(keep, rows, 0))
    if mode == "mean":
        count = mx.zeros((bags,), dtype=rows.dtype).at[bag].add(valid.astype(rows.dtype))
        out = out / mx.maximum(count, 1)[:, None]
    return out


@register("aten.embedding_bag.padding_idx")
def convert_embedding_bag(ctx, call):
    from ..convert import Info

    if call.arg("scale_grad_by_freq") or call.arg("sparse"):
        call.fail("scale_grad_by_freq" if call.arg("scale_grad_by_freq") else "sparse",
                  "gradient options of embedding_bag are not supported")
    if ctx.used_items(call.name) - {0}:
        call.fail("mode", "only the bags (the first output) are supported, not offset2bag/bag_size/max_indices")
    mode = call.arg("mode")
    if mode not in (0, 1, 2):
        call.fail("mode", "must be 0 (sum), 1 (mean) or 2 (max)")
    padding = call.arg("padding_idx") if call.has("padding_idx") else None
    weight, indices, offsets = call.arg("weight"), call.arg("indices"), call.arg("offsets")
    per_sample = call.arg("per_sample_weights")

    def spec(v):
        return ctx.tensor(v, L.identity(ctx.meta(v).rank))

    inputs = [spec(weight), spec(indices), spec(offsets), spec(per_sample) if per_sample is not None else None]
    attrs = {"mode": _MODES[mode], "include_last": bool(call.arg("include_last_offset")),
             "padding_idx": -1 if padding is None else int(padding)}
    out = ctx.emit("embedding_bag", inputs, attrs, perm=(0, 1), meta=call.meta.items[0], out=ctx.fresh(call.name))
    ctx.emit("pack", [[{"ref": out.name}]], items=[Info(call.meta.items[0], (0, 1))])


@kernel("embedding_renorm", inputs=[TENSOR, TENSOR], attrs={"max_norm": Float(), "norm_type": Float()})
def k_embedding_renorm(weight, indices, *, max_norm, norm_type):
    """``weight`` with every row that ``indices`` names and whose ``norm_type``-norm exceeds ``max_norm`` scaled
    to ``max_norm / (norm + 1e-7)`` (torch's ``embedding_renorm_``, as ``nn.Embedding(max_norm=...)`` runs it
    before the lookup); a repeated index scales its row once."""
    if weight.ndim != 2:
        raise ValueError(f"embedding_renorm: weight must be 2-d, got {weight.ndim} dims")
    rows = checked_indices(indices.reshape(-1), weight.shape[0], "embedding_renorm").astype(mx.int32)
    rows = mx.where(rows < 0, rows + weight.shape[0], rows)
    picked = mx.take(weight, rows, axis=0).astype(mx.float32)
    if norm_type == float("inf"):
        norms = mx.max(mx.abs(picked), axis=-1)
    else:
        norms = mx.power(mx.sum(mx.power(mx.abs(picked), norm_type), axis=-1), 1.0 / norm_type)
    factor = mx.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    scale = mx.ones((weight.shape[0],), dtype=mx.float32)
    scale[rows] = factor
    return (weight.astype(mx.float32) * scale[:, None]).astype(weight.dtype)


@register("aten.embedding_renorm_.default")
def convert_embedding_renorm(ctx, call):
    """``nn.Embedding(max_norm=...)``: the capture writes the renormalised weight back into the parameter
    (``capture_regions``), so the lookup after it reads the scaled rows with the weight's own gradient."""
    weight, indices = call.arg("self"), call.arg("indices")
    max_norm, norm_type = call.arg("max_norm"), call.arg("norm_type")
    if not isinstance(max_norm, (int, float)) or not isinstance(norm_type, (int, float)) or not norm_type > 0:
        call.fail("norm_type", "max_norm and a positive norm_type must be constants")
    ctx.emit("embedding_renorm", [ctx.tensor(weight, L.identity(2)), ctx.tensor(indices, L.identity(ctx.meta(indices).rank))],
             {"max_norm": float(max_norm), "norm_type": float(norm_type)}, perm=L.identity(2))
