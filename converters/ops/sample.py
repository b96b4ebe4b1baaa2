"""Spatial sampling: ``F.grid_sample`` (2-d and 3-d; bilinear/trilinear or nearest, and bicubic in 2-d; zeros,
border or reflection padding) and ``F.affine_grid`` (2-d and 3-d), ATen's grid_sampler / affine_grid_generator.

Layouts: the image is channels-last (N, H, W, C) / (N, D, H, W, C) inside the port (the output too); the grid is
torch's (N, Ho, Wo, 2) / (N, Do, Ho, Wo, 3) with x (width) first, then y (height)[, z (depth)], in [-1, 1].
Coordinates follow torch's GridSampler rules: unnormalise by ``align_corners``, then clip (border) or reflect
(reflection) them, then sample: (tri)linear weights over the four / eight neighbours, each neighbour outside the
image contributing zero; nearest rounds half to even (``nearbyint``). A NaN coordinate, as in torch's kernels: 2-d,
NaN (bilinear) or zero (nearest) under zeros padding, coordinate 0 under border and reflection; 3-d, zero under zeros
padding, coordinate ``size - 1`` under border and reflection. Bicubic (2-d only, as torch): cubic convolution
with A = -0.75 over the 4 x 4 pixels around the unnormalised (unclipped) point; the padding mode maps each of the 16
integer taps (clipped or reflected, then clipped), and a tap outside the image reads zero. Gradients flow to the image
and to the grid.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..registry import kernel, register
from ..spec import SIZES, TENSOR, Bool, Enum

INTERPOLATION = ("bilinear", "nearest", "bicubic")  # torch's codes 0, 1, 2
CUBIC_A = -0.75  # torch's cubic convolution coefficient (as in upsample_bicubic2d)
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


def _source(coord, size: int, padding: str, align_corners: bool, nan_to: int = 0):
    coord = _unnormalise(coord, size, align_corners)
    if padding == "zeros":
        return coord
    # torch's clip sends a NaN coordinate to 0 (2-d kernel) or to size - 1 (3-d kernel) under border and reflection
    # (reflecting keeps a NaN a NaN)
    return mx.where(mx.isnan(coord), mx.full(coord.shape, nan_to, coord.dtype),
                    _tap(coord, size, padding, align_corners))


def _tap(coord, size: int, padding: str, align_corners: bool):
    """torch's compute_coordinates (an unnormalised coordinate; for bicubic, each integer tap): as is (zeros),
    clipped (border), or reflected then clipped (reflection)."""
    if padding == "zeros":
        return coord
    if padding == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
    return mx.clip(coord, 0, size - 1)


def _cubic_weights(t):
    """torch's get_cubic_upsample_coefficients: the weights of the taps at -1, 0, +1, +2 for a fraction ``t``."""
    a = CUBIC_A

    def near(v):  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic(flat, gx, gy, sizes, padding: str, align_corners: bool):
    """Samples (N, P, C) of ``flat`` (N, H * W, C) at unnormalised coordinates ``gx``, ``gy`` (N, P): each row of four
    taps interpolated along x, then the four rows along y (torch's order)."""
    h, w = sizes
    fx, fy = mx.floor(gx), mx.floor(gy)
    wx, wy = _cubic_weights(gx - fx), _cubic_weights(gy - fy)
    out = None
    for i in range(4):
        row = None
        cy = _tap(fy + (i - 1), h, padding, align_corners)
        for j in range(4):
            cx = _tap(fx + (j - 1), w, padding, align_corners)
            value, inside = _gather(flat, [cy, cx], sizes)
            term = mx.where(inside[..., None], value, mx.zeros_like(value)) * wx[j][..., None]
            row = term if row is None else row + term
        term = row * wy[i][..., None]
        out = term if out is None else out + term
    return out


def _gather(flat, coords, sizes):
    """Pixels (N, P, C) of ``flat`` (N, prod(sizes), C) at integer-valued float coordinates ``coords`` (one (N, P)
    array per spatial axis, outermost first), and whether each is inside the image (out-of-range or NaN: index 0,
    to be weighted out)."""
    inside, index = None, None
    for c, size in zip(coords, sizes):
        ok = (c >= 0) & (c <= size - 1)
        inside = ok if inside is None else inside & ok
        index = c if index is None else index * size + c
    index = mx.where(inside, index, 0).astype(mx.int32)
    return mx.take_along_axis(flat, mx.stop_gradient(index)[..., None], axis=1), inside


@kernel("grid_sample", inputs=[TENSOR, TENSOR],
        attrs={"mode": Enum(*INTERPOLATION), "padding": Enum(*PADDING), "align_corners": Bool()})
def k_grid_sample(x, grid, *, mode, padding, align_corners):
    """``x`` (N, *S, C) with 2 or 3 spatial dims, ``grid`` (N, *So, len(S)) with the innermost axis's coordinate
    first (x, y[, z]) -> (N, *So, C)."""
    nd = x.ndim - 2
    if nd not in (2, 3) or grid.ndim != x.ndim or grid.shape[-1] != nd or grid.shape[0] != x.shape[0]:
        raise ValueError(f"grid_sample: expected an (N, *S, C) image with 2 or 3 spatial dims and an (N, *So, "
                         f"{max(nd, 2)}) grid, got {tuple(x.shape)} and {tuple(grid.shape)}")
    n, sizes, channels = x.shape[0], list(x.shape[1:-1]), x.shape[-1]
    out_sizes = list(grid.shape[1:-1])
    points = 1
    for s in out_sizes:
        points *= s
    grid = grid.astype(x.dtype).reshape(n, points, nd)
    flat = x.reshape(n, -1, channels)
    if mode == "bicubic":
        if nd != 2:
            raise ValueError(f"grid_sample: bicubic interpolation takes a 2-d image (N, H, W, C), got {tuple(x.shape)}")
        gx, gy = (_unnormalise(grid[..., k], sizes[1 - k], align_corners) for k in range(2))
        return _bicubic(flat, gx, gy, sizes, padding, align_corners).reshape(n, *out_sizes, channels)
    # grid component k addresses spatial axis nd - 1 - k (x: the innermost, width)
    g = [_source(grid[..., nd - 1 - a], sizes[a], padding, align_corners, 0 if nd == 2 else sizes[a] - 1)
         for a in range(nd)]
    if mode == "nearest":
        value, inside = _gather(flat, [mx.round(c) for c in g], sizes)
        out = mx.where(inside[..., None], value, mx.zeros_like(value))
    else:
        low = [mx.floor(c) for c in g]
        out = None
        for corner in range(1 << nd):
            # torch's corner weights multiply the innermost axis's factor first: (x) * (y) [* (z)]
            coords, weight = [], None
            for a in range(nd):
                high = (corner >> (nd - 1 - a)) & 1
                coords.append(low[a] + high)
            for a in reversed(range(nd)):
                high = (corner >> (nd - 1 - a)) & 1
                factor = (g[a] - low[a]) if high else (low[a] + 1 - g[a])
                weight = factor if weight is None else weight * factor
            value, inside = _gather(flat, coords, sizes)
            term = value * mx.where(inside, weight, mx.zeros_like(weight))[..., None]
            out = term if out is None else out + term
        if padding == "zeros" and nd == 2:  # torch's 2-d weights of a NaN coordinate are NaN: so is the sample
            # (its 3-d kernel finds every corner out of bounds: the sample is 0, as the weighting above gives)
            lost = None
            for c in g:
                lost = mx.isnan(c) if lost is None else lost | mx.isnan(c)
            out = mx.where(lost[..., None], mx.array(float("nan"), dtype=out.dtype), out)
    return out.reshape(n, *out_sizes, channels)


@kernel("affine_grid", inputs=[TENSOR, SIZES], attrs={"align_corners": Bool()})
def k_affine_grid(theta, size, *, align_corners):
    """The (N, *S, nd) sampling grid of affine matrices ``theta`` (N, nd, nd + 1) for an output of ``size``
    (N, C, *S), nd = 2 or 3: ``[x, y(, z), 1] @ theta^T`` over torch's base grid."""
    size = [int(s) for s in size]
    nd = len(size) - 2
    if nd not in (2, 3) or theta.ndim != 3 or tuple(theta.shape[1:]) != (nd, nd + 1) or theta.shape[0] != size[0]:
        raise ValueError(f"affine_grid: expected theta (N, 2, 3) with a size (N, C, H, W), or (N, 3, 4) with "
                         f"(N, C, D, H, W), got {tuple(theta.shape)} and {size}")
    spatial = size[2:]

    def steps(count):
        if count <= 1:
            return mx.zeros((max(count, 0),), dtype=theta.dtype)
        line = mx.linspace(-1, 1, count).astype(theta.dtype)
        return line if align_corners else line * ((count - 1) / count)

    axes = []  # x (innermost), y, z: each broadcast over the spatial grid
    for a in reversed(range(nd)):
        shape = [1] * nd
        shape[a] = spatial[a]
        axes.append(mx.broadcast_to(steps(spatial[a]).reshape(shape), spatial))
    base = mx.stack([*axes, mx.ones(spatial, dtype=theta.dtype)], axis=-1).reshape(1, -1, nd + 1)
    grid = base @ mx.swapaxes(theta, 1, 2)  # (N, prod(S), nd)
    return grid.reshape(size[0], *spatial, nd)


@register("aten.grid_sampler.default", "aten.grid_sampler_2d.default", "aten.grid_sampler_3d.default")
def convert_grid_sampler(ctx, call):
    x, grid = call.arg("input"), call.arg("grid")
    rank = ctx.meta(x).rank
    if rank not in (4, 5):
        call.fail("input", "grid_sample needs a 4-d (N, C, H, W) or 5-d (N, C, D, H, W) input")
    mode, padding = call.arg("interpolation_mode"), call.arg("padding_mode")
    if mode not in (0, 1, 2):
        call.fail("interpolation_mode", "expected bilinear (0), nearest (1) or bicubic (2)")
    if mode == 2 and rank != 4:
        call.fail("interpolation_mode", "bicubic grid_sample takes a 4-d (N, C, H, W) input only, as torch")
    if padding not in (0, 1, 2):
        call.fail("padding_mode", "expected zeros (0), border (1) or reflection (2)")
    perm = L.channels_last(rank)
    ctx.emit("grid_sample", [ctx.tensor(x, perm), ctx.tensor(grid, L.identity(rank))],
             {"mode": INTERPOLATION[mode], "padding": PADDING[padding], "align_corners": bool(call.arg("align_corners"))},
             perm=perm)


@register("aten.affine_grid_generator.default")
def convert_affine_grid(ctx, call):
    theta = call.arg("theta")
    size = call.arg("size")
    if len(size) not in (4, 5):
        call.fail("size", "affine grids are 2-d (a 4-d size) or 3-d (a 5-d size)")
    ctx.emit("affine_grid", [ctx.tensor(theta, L.identity(3)), ctx.value(list(size))],
             {"align_corners": bool(call.arg("align_corners"))}, perm=L.identity(len(size)))
