"""Resampling and padding: upsample nearest / nearest-exact / (bi,tri)linear / bicubic (F.interpolate) and
pad/constant_pad_nd/reflection/replication pads.

Interpolation follows torch's source-index rules (``area_pixel_compute_source_index``): with ``scale_factor`` given
the scale used for coordinates is ``1/scale_factor``, otherwise ``in/out``; index tables are computed per dim in
float32 as torch does for float32 input, then applied channels-last with gathers (no loop over positions); linear
modes are ``porter.layers.functional.interpolate_linear`` (2-d: one native pass on the CPU).
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from .. import layout as L
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import AXES, SIZES, TENSOR, Bool, Enum, Float, Int, Opt, Seq
from . import _layers


def _output_sizes(spatial, output_size, scale_factors):
    if output_size is not None:
        return [int(s) for s in output_size]
    return [int(math.floor(float(l) * float(s))) for l, s in zip(spatial, scale_factors)]


def _scale(in_size, out_size, scale_factor, align_corners, dtype=np.float32):
    """The source step of one dim in torch's opmath type: float32, or float64 for a float64 input (``dtype``)."""
    if align_corners:
        return dtype((in_size - 1) / (out_size - 1)) if out_size > 1 else dtype(0)
    if scale_factor is not None and scale_factor > 0:
        return dtype(1.0 / scale_factor)
    return dtype(in_size / out_size)


@kernel("upsample", inputs=[TENSOR, Opt(SIZES)], attrs={
    "mode": Enum("nearest", "nearest_exact", "linear", "cubic"), "nd": Int(1, 3), "scale_factors": Opt(Seq(Opt(Float()), 1, 3)),
    "align_corners": Opt(Bool())})
def k_upsample(x, output_size, *, mode, nd, scale_factors=None, align_corners=False):
    """``x`` is channels-last ``(N, *S, C)``; ``mode`` is "nearest", "nearest_exact", "linear" or "cubic"
    (separable over the nd dims)."""
    spatial = x.shape[1:1 + nd]
    outs = _output_sizes(spatial, output_size, scale_factors)
    check_elements([x.shape[0], *outs, x.shape[-1]], "upsample")
    if mode == "linear":  # porter.layers: torch's taps; 2-d one native pass on CPU
        return _layers.interpolate_linear(x, outs, align_corners=bool(align_corners), scale_factors=scale_factors)
    for i in range(nd):
        L_in, L_out = spatial[i], outs[i]
        sf = scale_factors[i] if scale_factors else None
        axis = 1 + i
        dst = np.arange(L_out, dtype=np.float32)  # the nearest modes' index arithmetic: float32, as torch's
        if mode == "nearest":
            scale = _scale(L_in, L_out, sf, False)
            src = np.minimum(np.floor(dst * scale).astype(np.int64), L_in - 1)
            x = mx.take(x, mx.array(src.astype(np.int32)), axis=axis)
            continue
        if mode == "nearest_exact":
            scale = _scale(L_in, L_out, sf, False)
            src = np.minimum(np.floor((dst + np.float32(0.5)) * scale).astype(np.int64), L_in - 1)
            x = mx.take(x, mx.array(src.astype(np.int32)), axis=axis)
            continue
        wide = np.float64 if x.dtype == mx.float64 else np.float32  # torch's opmath_t: float64 stays float64
        x = _cubic(x, axis, L_in, np.arange(L_out, dtype=wide), _scale(L_in, L_out, sf, align_corners, wide),
                   align_corners)  # mode "cubic"
    return x


A_CUBIC = np.float32(-0.75)  # torch's cubic convolution coefficient


def _cubic_weights(t):
    """torch's four cubic-convolution weights for fractional offsets ``t`` (float32, or float64), taps -1, 0, 1, 2."""
    a = t.dtype.type(A_CUBIC)

    def near(v):  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    one = t.dtype.type(1)
    return [far(t + one), near(t), near(one - t), far(t.dtype.type(2) - t)]


def _cubic(x, axis, L_in, dst, scale, align_corners):
    """Bicubic along one axis, as torch's upsample_bicubic2d: source index without clamping, taps clamped. ``dst``
    and ``scale`` are float32, or float64 for a float64 ``x`` (step, offsets and weights then in float64)."""
    half = dst.dtype.type(0.5)
    src = dst * scale if align_corners else scale * (dst + half) - half
    base = np.floor(src)
    t = (src - base).astype(dst.dtype)
    base = base.astype(np.int64)
    shape = [1] * x.ndim
    shape[axis] = len(dst)
    out = None
    for k, w in enumerate(_cubic_weights(t)):
        index = np.clip(base - 1 + k, 0, L_in - 1).astype(np.int32)
        wk = mx.array(w, dtype=mx.float64) if w.dtype == np.float64 else mx.array(w.astype(np.float32))
        term = mx.take(x, mx.array(index), axis=axis) * wk.reshape(shape).astype(x.dtype)
        out = term if out is None else out + term
    return out


_MODES = {"nearest": "nearest", "bilinear": "linear", "linear": "linear", "trilinear": "linear", "bicubic": "cubic",
          "nearest_exact": "nearest_exact"}


def _upsample(nd, mode, vec):
    def convert_upsample(ctx, call):
        x = call.arg("input") if vec else call.arg("self")
        rank = ctx.meta(x).rank
        if rank != nd + 2:
            call.fail("input", f"expected a {nd + 2}-d input")
        perm = L.channels_last(rank)
        attrs = {"mode": _MODES[mode], "nd": nd}
        if mode not in ("nearest", "nearest_exact"):
            attrs["align_corners"] = call.arg("align_corners")
        if vec:
            size = call.arg("output_size")
            scales = call.arg("scale_factors")
            attrs["scale_factors"] = list(scales) if scales is not None else None
        else:
            size = call.arg("output_size")
            names = {1: ["scales"], 2: ["scales_h", "scales_w"], 3: ["scales_d", "scales_h", "scales_w"]}[nd]
            scales = [call.arg(n) for n in names]
            attrs["scale_factors"] = scales if any(s is not None for s in scales) else None
            if attrs["scale_factors"] is not None and None in scales:
                call.fail(names[scales.index(None)], "a scale must be given for every dim or none")
        ctx.emit("upsample", [ctx.tensor(x, perm), ctx.value(size)], attrs, perm=perm)

    convert_upsample.__name__ = f"convert_upsample_{mode}{nd}d"
    return convert_upsample


for _nd, _modes in ((1, ("nearest", "linear")), (2, ("nearest", "bilinear")), (3, ("nearest", "trilinear"))):
    for _mode in _modes:
        _base = f"aten.upsample_{_mode}{_nd}d"
        register(f"{_base}.vec", channels_last=True)(_upsample(_nd, _mode, True))
        register(f"{_base}.default", channels_last=True)(_upsample(_nd, _mode, False))
    _base = f"aten._upsample_nearest_exact{_nd}d"
    register(f"{_base}.vec", channels_last=True)(_upsample(_nd, "nearest_exact", True))
    register(f"{_base}.default", channels_last=True)(_upsample(_nd, "nearest_exact", False))
register("aten.upsample_bicubic2d.vec", channels_last=True)(_upsample(2, "bicubic", True))
register("aten.upsample_bicubic2d.default", channels_last=True)(_upsample(2, "bicubic", False))


# ---------------------------------------------------------------------------------------------------- padding
@kernel("pad", inputs=[TENSOR, SIZES], attrs={
    "mode": Enum("constant", "reflect", "replicate", "circular"), "value": Opt(Float(allow_inf=True, allow_nan=True)),
    "axes": AXES})
def k_pad(x, pad, *, mode, value, axes):
    """torch ``F.pad`` on an array in any layout: ``pad`` is torch's flat (lo, hi) list from the last torch dim,
    ``axes[i]`` the array axis of the i-th padded dim. Porter's ``pad`` counts pairs over the spatial axes of a
    channels-last array (or over the trailing axes with ``channels_last=False``); other layouts move the padded
    axes last for the call."""
    pad = [int(p) for p in pad]
    if len(pad) != 2 * len(axes):
        raise ValueError(f"pad: {len(pad)} padding sizes for {len(axes)} axes")
    shape = list(x.shape)
    for i, a in enumerate(axes):
        shape[a] += pad[2 * i] + pad[2 * i + 1]
    check_elements(shape, "pad")
    pad_fn = _layers.fn("pad")
    n = len(axes)
    if axes == [x.ndim - 2 - i for i in range(n)]:
        return pad_fn(x, pad, mode, value)
    if axes == [x.ndim - 1 - i for i in range(n)]:
        return pad_fn(x, pad, mode, value, channels_last=False)
    order = [a for a in range(x.ndim) if a not in axes] + list(reversed(axes))
    y = pad_fn(x.transpose(order), pad, mode, value, channels_last=False)
    return y.transpose([order.index(a) for a in range(x.ndim)])


def _pad(mode_fixed=None):
    def convert_pad(ctx, call):
        x = call.arg("self")
        pad = call.arg("pad") if call.has("pad") else call.arg("padding")
        mode = mode_fixed or (call.arg("mode") if call.has("mode") else "constant")
        value = call.arg("value") if call.has("value") else None
        perm = ctx.perm(x)
        rank = len(perm)
        axes = [perm.index(rank - 1 - i) for i in range(len(pad) // 2)]
        ctx.emit("pad", [ctx.tensor(x), ctx.value(list(pad))], {"mode": mode, "value": value, "axes": axes},
                 perm=perm)

    return convert_pad


register("aten.constant_pad_nd.default")(_pad("constant"))
register("aten.pad.default")(_pad())
for _nd in (1, 2, 3):
    register(f"aten.reflection_pad{_nd}d.default")(_pad("reflect"))
    register(f"aten.replication_pad{_nd}d.default")(_pad("replicate"))
    # (no aten.circular_padNd in torch 2.13: F.pad(mode="circular") is recorded as aten.pad)
