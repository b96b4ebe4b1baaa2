"""Antialiased resizing: ``F.interpolate(..., mode="bilinear" | "bicubic", antialias=True)`` (ATen's
``_upsample_bilinear2d_aa`` / ``_upsample_bicubic2d_aa``), as torch computes it for float inputs.

Separable, the width first, then the height. For each output index ``i`` along a dim of ``n`` inputs, with
``scale`` the source step (``in / out``, or ``1 / scale_factor``, or ``(in - 1) / (out - 1)`` with
``align_corners``): the filter's support is ``r * scale`` when downsampling (``r`` = 1 for the triangle filter,
2 for the cubic one with ``a = -0.5``, PIL's), ``r`` otherwise; the taps run from ``max(int(c - support + 0.5), 0)``
to ``min(int(c + support + 0.5), n)`` around the centre ``c = scale * (i + 0.5)``, each weighted by
``filter((j - c + 0.5) / max(scale, 1))``, normalised to sum to one. Layout: channels-last ``(N, H, W, C)``. Taps
are gathered and a zero weight never multiplies (an infinity stays in the outputs whose window holds it, as in
torch's loop over the window).
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from .. import layout as L
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import SIZES, TENSOR, Bool, Enum, Float, Opt, Seq
from .resample import _output_sizes, _scale

_RADIUS = {"linear": 1.0, "cubic": 2.0}


def _filter(mode, x):
    x = np.abs(x)
    if mode == "linear":
        return np.where(x < 1, 1 - x, 0.0)
    a = -0.5
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def _taps(mode, n_in: int, n_out: int, scale: float):
    """``(index, weight)``, each ``(n_out, K)``: the window of every output and its normalised float64 weights (0
    past its end, where the index repeats a valid one)."""
    scale = float(scale)
    support = _RADIUS[mode] * scale if scale >= 1.0 else _RADIUS[mode]
    width = int(math.ceil(support)) * 2 + 1
    center = scale * (np.arange(n_out, dtype=np.float64) + 0.5)
    low = np.maximum((center - support + 0.5).astype(np.int64), 0)  # int(): toward zero, as torch's cast
    high = np.minimum((center + support + 0.5).astype(np.int64), n_in)
    count = np.clip(high - low, 0, width)
    j = np.arange(width)[None, :]
    index = low[:, None] + j
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    weight = _filter(mode, (index - center[:, None] + 0.5) * invscale)
    weight = np.where(j < count[:, None], weight, 0.0)
    total = weight.sum(axis=1, keepdims=True)
    weight = np.where(total != 0, weight / np.where(total != 0, total, 1), 0.0)
    return np.clip(index, 0, max(n_in - 1, 0)).astype(np.int32), weight


def _resize_axis(x, axis: int, mode: str, n_out: int, scale):
    index, weight = _taps(mode, x.shape[axis], n_out, scale)
    # the step and the weights in the input's precision, as torch's (opmath_t): float64 keeps them float64 (in
    # float32 they moved a float64 resize by 1e-7), every other dtype takes them rounded to float32
    wdtype = mx.float64 if x.dtype == mx.float64 else mx.float32
    if wdtype == mx.float32:
        weight = weight.astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = n_out
    out = None
    for k in range(index.shape[1]):
        w = weight[:, k]
        if not w.any():
            continue
        wk = mx.array(w, dtype=wdtype).reshape(shape).astype(x.dtype)
        term = mx.where(wk != 0, mx.take(x, mx.array(index[:, k]), axis=axis) * wk, mx.zeros_like(wk))
        out = term if out is None else out + term
    if out is None:
        shape = list(x.shape)
        shape[axis] = n_out
        return mx.zeros(shape, dtype=x.dtype)
    return out


@kernel("upsample_aa", inputs=[TENSOR, Opt(SIZES)], attrs={
    "mode": Enum("linear", "cubic"), "scale_factors": Opt(Seq(Opt(Float()), 2, 2)), "align_corners": Bool()})
def k_upsample_aa(x, output_size, *, mode, scale_factors=None, align_corners=False):
    """``x`` channels-last ``(N, H, W, C)``."""
    if x.ndim != 4:
        raise ValueError(f"antialiased resize: expected an (N, H, W, C) input, got shape {tuple(x.shape)}")
    spatial = x.shape[1:3]
    outs = _output_sizes(spatial, output_size, scale_factors)
    check_elements([x.shape[0], *outs, x.shape[-1]], "antialiased resize")
    for i in (1, 0):  # width, then height
        sf = scale_factors[i] if scale_factors else None
        step = _scale(spatial[i], outs[i], sf, align_corners, np.float64 if x.dtype == mx.float64 else np.float32)
        x = _resize_axis(x, 1 + i, mode, outs[i], step)
    return x


def _antialiased(mode):
    def convert_upsample_aa(ctx, call):
        x = call.arg("self")
        if ctx.meta(x).rank != 4:
            call.fail("self", "expected a 4-d input")
        perm = L.channels_last(4)
        scales = [call.arg("scales_h"), call.arg("scales_w")]
        if any(s is not None for s in scales) and None in scales:
            call.fail(("scales_h", "scales_w")[scales.index(None)], "a scale must be given for every dim or none")
        attrs = {"mode": mode, "align_corners": bool(call.arg("align_corners")),
                 "scale_factors": scales if scales[0] is not None else None}
        ctx.emit("upsample_aa", [ctx.tensor(x, perm), ctx.value(call.arg("output_size"))], attrs, perm=perm)

    convert_upsample_aa.__name__ = f"convert_upsample_{mode}_aa"
    return convert_upsample_aa


register("aten._upsample_bilinear2d_aa.default", channels_last=True)(_antialiased("linear"))
register("aten._upsample_bicubic2d_aa.default", channels_last=True)(_antialiased("cubic"))
