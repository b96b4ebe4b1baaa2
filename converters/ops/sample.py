"""Spatial sampling: ``F.grid_sample`` (2-d, bilinear or nearest; zeros, border or reflection padding) and
``F.affine_grid`` (2-d), ATen's grid_sampler / affine_grid_generator.

Layouts: the image is channels-last (N, H, W, C) inside the port (the output (N, Ho, Wo, C) too); the grid is
torch's (N, Ho, Wo, 2) with x (width) first, in [-1, 1]. Coordinates follow torch's GridSampler rules: unnormalise
by ``align_corners``, then clip (border) or reflect (reflection) them, then sample: bilinear weights over the four
neighbours, each neighbour outside the image contributing zero; nearest rounds half to even (``nearbyint``). A NaN
coordinate, as in torch: NaN (bilinear) or zero (nearest) under zeros padding, coordinate 0 under border and
reflection. Gradients flow to the image and to the grid.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import SIZES, TENSOR, Bool, Enum

INTERPOLATION = ("bilinear", "nearest")  # torch's codes 0, 1 (2, bicubic, is refused)
PADDING = ("zeros", "border", "reflection")  # torch's codes 0, 1, 2


def _unnormalise(coord, size: int, align_corners: bool):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, twice_low: int, twice_high: int):
    """torch's reflect_coordinates: fold ``coord`` into [twice_low / 2, twice_high / 2]."""
    if twice_low == twice_high:
        return mx.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    coord = mx.abs(coord - low)
    extra = mx.remainder(coord, span)
    flips = mx.floor(coord / span)
    return mx.where(mx.remainder(flips, 2) == 0, extra + low, span - extra + low)


def _source(coord, size: int, padding: str, align_corners: bool):
    coord = _unnormalise(coord, size, align_corners)
    if padding == "zeros":
        return coord
    if padding == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
    # torch's clip sends a NaN coordinate to 0 under border and reflection padding
    return mx.where(mx.isnan(coord), mx.zeros_like(coord), mx.clip(coord, 0, size - 1))


def _gather(flat, iy, ix, height: int, width: int):
    """Pixels (N, P, C) of ``flat`` (N, H * W, C) at integer (iy, ix) (N, P) float arrays, and whether each is
    inside the image (out-of-range or NaN: index 0, to be weighted out)."""
    inside = (ix >= 0) & (ix <= width - 1) & (iy >= 0) & (iy <= height - 1)
    index = mx.where(inside, iy * width + ix, 0).astype(mx.int32)
    return mx.take_along_axis(flat, mx.stop_gradient(index)[..., None], axis=1), inside


@kernel("grid_sample", inputs=[TENSOR, TENSOR],
        attrs={"mode": Enum(*INTERPOLATION), "padding": Enum(*PADDING), "align_corners": Bool()})
def k_grid_sample(x, grid, *, mode, padding, align_corners):
    if x.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != x.shape[0]:
        raise ValueError(f"grid_sample: expected an (N, H, W, C) image and an (N, Ho, Wo, 2) grid, got "
                         f"{tuple(x.shape)} and {tuple(grid.shape)}")
    n, height, width, channels = x.shape
    out_h, out_w = grid.shape[1], grid.shape[2]
    grid = grid.astype(x.dtype).reshape(n, out_h * out_w, 2)
    gx = _source(grid[..., 0], width, padding, align_corners)
    gy = _source(grid[..., 1], height, padding, align_corners)
    flat = x.reshape(n, height * width, channels)
    if mode == "nearest":
        value, inside = _gather(flat, mx.round(gy), mx.round(gx), height, width)
        out = mx.where(inside[..., None], value, mx.zeros_like(value))
    else:
        x0, y0 = mx.floor(gx), mx.floor(gy)
        x1, y1 = x0 + 1, y0 + 1
        out = None
        for yy, xx, w in ((y0, x0, (x1 - gx) * (y1 - gy)), (y0, x1, (gx - x0) * (y1 - gy)),
                          (y1, x0, (x1 - gx) * (gy - y0)), (y1, x1, (gx - x0) * (gy - y0))):
            value, inside = _gather(flat, yy, xx, height, width)
            term = value * mx.where(inside, w, mx.zeros_like(w))[..., None]
            out = term if out is None else out + term
        if padding == "zeros":  # torch's bilinear weights of a NaN coordinate are NaN: so is the sample
            lost = mx.isnan(gx) | mx.isnan(gy)
            out = mx.where(lost[..., None], mx.array(float("nan"), dtype=out.dtype), out)
    return out.reshape(n, out_h, out_w, channels)


@kernel("affine_grid", inputs=[TENSOR, SIZES], attrs={"align_corners": Bool()})
def k_affine_grid(theta, size, *, align_corners):
    """The (N, H, W, 2) sampling grid of 2-d affine matrices ``theta`` (N, 2, 3) for an output of ``size``
    (N, C, H, W): ``[x, y, 1] @ theta^T`` over torch's base grid."""
    size = [int(s) for s in size]
    if len(size) != 4 or theta.ndim != 3 or tuple(theta.shape[1:]) != (2, 3) or theta.shape[0] != size[0]:
        raise ValueError(f"affine_grid: expected theta (N, 2, 3) and a size (N, C, H, W), got {tuple(theta.shape)} "
                         f"and {size}")
    height, width = size[2], size[3]

    def steps(count):
        if count <= 1:
            return mx.zeros((max(count, 0),), dtype=theta.dtype)
        line = mx.linspace(-1, 1, count).astype(theta.dtype)
        return line if align_corners else line * ((count - 1) / count)

    xs = mx.broadcast_to(steps(width)[None, :], (height, width))
    ys = mx.broadcast_to(steps(height)[:, None], (height, width))
    base = mx.stack([xs, ys, mx.ones_like(xs)], axis=-1).reshape(1, height * width, 3)
    grid = base @ mx.swapaxes(theta, 1, 2)  # (N, H * W, 2)
    return grid.reshape(size[0], height, width, 2)


@register("aten.grid_sampler.default", "aten.grid_sampler_2d.default")
def convert_grid_sampler(ctx, call):
    x, grid = call.arg("input"), call.arg("grid")
    if ctx.meta(x).rank != 4:
        call.fail("input", "only 2-d grid_sample (a 4-d input) is supported")
    mode, padding = call.arg("interpolation_mode"), call.arg("padding_mode")
    if mode not in (0, 1):
        call.fail("interpolation_mode", "only bilinear (0) and nearest (1) are supported")
    if padding not in (0, 1, 2):
        call.fail("padding_mode", "expected zeros (0), border (1) or reflection (2)")
    perm = L.channels_last(4)
    ctx.emit("grid_sample", [ctx.tensor(x, perm), ctx.tensor(grid, L.identity(4))],
             {"mode": INTERPOLATION[mode], "padding": PADDING[padding], "align_corners": bool(call.arg("align_corners"))},
             perm=perm)


@register("aten.affine_grid_generator.default")
def convert_affine_grid(ctx, call):
    theta = call.arg("theta")
    size = call.arg("size")
    if len(size) != 4:
        call.fail("size", "only 2-d affine grids (a 4-d size) are supported")
    ctx.emit("affine_grid", [ctx.tensor(theta, L.identity(3)), ctx.value(list(size))],
             {"align_corners": bool(call.arg("align_corners"))}, perm=L.identity(4))
