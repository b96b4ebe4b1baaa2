"""Max unpooling (MaxUnpool1d/2d/3d and max_unpool1d/2d/3d), exact to torch, channels-last.

``indices`` are torch's: int64 flat positions inside each (n, c) plane of the OUTPUT (``h*W + w``,
``(t*H + h)*W + w``), laid out channels-last like the input, so indices from torch's ``max_pool(return_indices=True)``
and from Porter's max pools are interchangeable. Every input value is written to its position (docs/SEMANTICS.md
§8.2); the rest is zero. Duplicated indices resolve deterministically to the last writer in row-major order of
the input plane. The gradient is a gather at the indices: every duplicate receives the full output gradient, as in
torch's autograd.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from . import _blocks, _export, _native
from ._utils import as_batched, format_shape, ntuple


def unpool_output_size(in_spatial: Sequence[int], k, s, p, output_size, layer: str) -> tuple[int, ...]:
    """Torch's ``_unpool_output_size``: the default ``(L - 1) * s + k - 2p``, or a checked ``output_size``.

    ``output_size`` has ``nd`` entries or ``nd + 2`` in torch's layout ``(N, C, *spatial)`` whose first two are
    dropped (as torch does, so a torch ``x.size()`` works; a channels-last MLX ``x.shape`` must be sliced first).
    """
    nd = len(k)
    default = [(n - 1) * si + ki - 2 * pi for n, ki, si, pi in zip(in_spatial, k, s, p)]
    if output_size is None:
        sizes = default
    else:
        if not isinstance(output_size, (list, tuple)):
            raise TypeError(
                f"[{layer}] 'output_size' must be a sequence of {nd} or {nd + 2} ints, but got {output_size!r}"
            )
        sizes = list(output_size)
        if len(sizes) == nd + 2:
            sizes = sizes[2:]
        if len(sizes) != nd:
            raise ValueError(
                f"[{layer}] 'output_size': output_size should be a sequence containing {nd} or {nd + 2} elements, "
                f"but it has a length of '{len(sizes)}'"
            )
        for item in sizes:
            if isinstance(item, bool) or not isinstance(item, numbers.Integral):
                raise TypeError(f"[{layer}] 'output_size' must contain ints, but got {output_size!r}")
        shown = output_size[2:] if len(output_size) == nd + 2 else output_size
        for d in range(nd):
            low, high = default[d] - s[d], default[d] + s[d]
            if not low < sizes[d] < high:
                raise ValueError(
                    f"[{layer}] 'output_size': invalid output_size \"{shown}\" (dim {d} must be between {low} and "
                    f"{high})"
                )
        sizes = [int(v) for v in sizes]
    for d, v in enumerate(sizes):
        if v < 0:
            raise ValueError(
                f"[{layer}] 'output_size': max_unpooling: output_size must contain non-negative spatial dimensions, "
                f"but got output_size[{d}]={v}"
            )
    return tuple(sizes)


def _check_indices(x: mx.array, indices: mx.array, nd: int, layer: str) -> None:
    if not isinstance(indices, mx.array):
        raise TypeError(f"[{layer}] 'indices' must be an mx.array, but got {type(indices).__name__}")
    if indices.dtype != mx.int64:
        raise TypeError(f"[{layer}] 'indices': elements in indices should be type int64 but got: {indices.dtype}")
    if tuple(indices.shape) != tuple(x.shape):
        raise ValueError(
            f"[{layer}] 'indices': Expected shape of indices to be same as that of the input tensor "
            f"({list(x.shape)}) but got indices tensor with shape: {list(indices.shape)}"
        )


def _raise_invalid_index(flat_idx: mx.array, size: int, out_spatial: tuple, nd: int, layer: str) -> None:
    """Report the bad index torch's single-threaded scan reports: the last invalid one in (n, c, position) order."""
    planes = np.moveaxis(np.array(flat_idx), -1, 1).reshape(-1)  # (N, P, C) -> (N, C, P): torch's scan order
    bad = np.flatnonzero((planes < 0) | (planes >= size))
    shown = out_spatial + (1,) if nd == 1 else out_spatial  # torch runs 1d as 2d with a trailing W of 1
    raise ValueError(
        f"[{layer}] 'indices': Found an invalid max index: {int(planes[bad[-1]])} "
        f"(output volumes are of size {format_shape(shown)})"
    )


def _sequential_scatter() -> bool:
    """MLX's CPU scatter applies updates one after another in row-major order of the updates, so a plain scatter
    already keeps the last writer of each (n, c) plane; GPU scatters race, and need :func:`_last_writer_dest`."""
    return mx.default_device().type == mx.DeviceType.cpu


def _last_writer_dest(index: mx.array, size: int) -> mx.array:
    """Send every write except the last one (largest input position) aimed at a slot to the dummy slot ``size``."""
    n, positions, c = index.shape
    position = mx.broadcast_to(mx.arange(positions, dtype=mx.int32)[None, :, None], index.shape)
    rows = mx.arange(n, dtype=mx.int32)[:, None, None]
    cols = mx.arange(c, dtype=mx.int32)[None, None, :]
    winner = mx.full((n, size, c), -1, dtype=mx.int32).at[rows, index, cols].maximum(position)
    return mx.where(mx.take_along_axis(winner, index, axis=1) == position, index, size)


def _scatter(size: int, spare: int):
    """Plane scatter ``out[n, dest, c] = values`` with the gradient of a gather at the original indices.

    ``spare`` extra slots (dropped afterwards) receive the redirected duplicates of :func:`_last_writer_dest`.
    """

    @mx.custom_function
    def scatter(values, dest, index):
        n, _, c = values.shape
        out = mx.put_along_axis(mx.zeros((n, size + spare, c), dtype=values.dtype), dest, values, axis=1)
        return out[:, :size] if spare else out

    @scatter.vjp
    def scatter_vjp(primals, cotangent, output):
        values, dest, index = primals
        # torch's backward gathers at every index, duplicates included (each gets the full gradient)
        return mx.take_along_axis(cotangent, index, axis=1), mx.zeros_like(dest), mx.zeros_like(index)

    return scatter


def _export_scatter(values: mx.array, index: mx.array, size: int) -> mx.array:
    """The plane scatter as serializable ops, for export mode: an exported function can neither stop to check the
    indices on the host (the range check, the block test) nor carry a custom VJP. The last writer of each slot wins,
    on any device (as :func:`_last_writer_dest`); an out-of-range index writes nowhere instead of raising."""
    _export.note("max unpool's index check, block test and custom VJP -> one scatter; out-of-range indices write "
                 "nowhere")
    n, positions, c = index.shape
    valid = index.view(mx.uint64) < size  # viewed as unsigned, a negative index is huge
    safe = mx.where(valid, index, 0)
    position = mx.where(valid, mx.arange(positions, dtype=mx.int32)[None, :, None], -1)
    rows = mx.arange(n, dtype=mx.int32)[:, None, None]
    cols = mx.arange(c, dtype=mx.int32)[None, None, :]
    winner = mx.full((n, size, c), -1, dtype=mx.int32).at[rows, safe, cols].maximum(position)
    dest = mx.where(valid & (mx.take_along_axis(winner, safe, axis=1) == position), safe, size)
    out = mx.put_along_axis(mx.zeros((n, size + 1, c), dtype=values.dtype), dest, values, axis=1)
    return out[:, :size]


def _masked_broadcast(block: tuple, out_spatial: tuple):
    """:func:`_blocks.place` with the gradient of torch's unpool: a gather at the indices."""

    @mx.custom_function
    def broadcast(values, mask, index):
        return _blocks.place(values, mask, block, out_spatial)

    @broadcast.vjp
    def broadcast_vjp(primals, cotangent, output):
        values, mask, index = primals
        n, c = values.shape[0], values.shape[-1]
        flat = cotangent.reshape(n, -1, c)
        grad = mx.take_along_axis(flat, index.reshape(n, -1, c), axis=1).reshape(values.shape)
        return grad, mx.zeros_like(mask), mx.zeros_like(index)

    return broadcast


def max_unpool(x: mx.array, indices: mx.array, nd: int, kernel_size, stride=None, padding=0,
               output_size: Optional[Sequence[int]] = None, *, layer: Optional[str] = None) -> mx.array:
    """Generic N-d max unpool on ``(N, *spatial, C)`` or ``(*spatial, C)`` input with torch's flat plane indices.

    The range check of ``indices`` needs its answer on the host: one compare-and-reduce pass over the indices and a
    synchronisation per call (about 2 ms of a 40 ms unpool of (8, 56, 56, 64) on this machine). An out-of-range
    index raises instead of writing out of bounds. When kernel == stride without padding, indices that each lie in
    their own window's block (what such a max pool returns) are written by a masked broadcast instead of a scatter
    (about 2x faster on MLX CPU); the block test costs the same one synchronisation and replaces the range check.
    """
    layer = layer or f"max_unpool{nd}d"
    k = ntuple(kernel_size, nd, "kernel_size", layer)
    s = k if stride is None else ntuple(stride, nd, "stride", layer)
    p = ntuple(padding, nd, "padding", layer)
    xb, batched = as_batched(x, nd, layer)
    out_spatial = unpool_output_size(tuple(xb.shape[1 : 1 + nd]), k, s, p, output_size, layer)
    _check_indices(x, indices, nd, layer)
    if not mx.issubdtype(xb.dtype, mx.floating):
        raise TypeError(f"[{layer}] 'input': \"max_unpooling{max(nd, 2)}d\" not implemented for '{xb.dtype}'")
    if xb.shape[-1] == 0 or any(n == 0 for n in xb.shape[1 : 1 + nd]):
        raise ValueError(
            f"[{layer}] 'input': Expected input to have non-zero size for non-batch dimensions, but got "
            f"{list(x.shape)}"
        )
    n, c = xb.shape[0], xb.shape[-1]
    size = math.prod(out_spatial)
    if size == 0 or n == 0:
        out = mx.zeros((n, *out_spatial, c), dtype=xb.dtype)
        return out if batched else out[0]
    index_b = indices if batched else indices[None]
    in_spatial = tuple(xb.shape[1 : 1 + nd])
    if _native.active("max unpool (plane scatter)"):
        # one pass that also counts out-of-range indices (skipped), checked after it ran: one synchronisation
        out, bad = _native.unpool(xb, index_b, out_spatial)
        if bad.item():
            _raise_invalid_index(index_b.reshape(n, -1, c), size, out_spatial, nd, layer)
        return out if batched else out[0]
    if _export.active():
        out = _export_scatter(xb.reshape(n, -1, c), index_b.reshape(n, -1, c), size).reshape(n, *out_spatial, c)
        return out if batched else out[0]
    if k == s and not any(p) and _blocks.covers(in_spatial, s, out_spatial) and _blocks.supported(xb.dtype):
        # the layout of a kernel == stride pool: if every index lies in its own block (one synchronisation, which
        # also stands in for the range check), a masked broadcast replaces the scatter; other indices fall through
        mask = _blocks.block_mask(index_b, s, out_spatial)
        if mx.sum(mask).item() == index_b.size:
            out = _masked_broadcast(s, out_spatial)(xb, mask, index_b)
            return out if batched else out[0]
    values = xb.reshape(n, -1, c)
    index = index_b.reshape(n, -1, c)
    # one pass: viewed as unsigned, a negative index is huge, so a single compare catches both ends
    if mx.any(index.view(mx.uint64) >= size).item():
        _raise_invalid_index(index, size, out_spatial, nd, layer)
    sequential = _sequential_scatter()
    dest = index if sequential else _last_writer_dest(index, size)
    out = _scatter(size, 0 if sequential else 1)(values, dest, index).reshape(n, *out_spatial, c)
    return out if batched else out[0]


def max_unpool1d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Max unpool on ``(N, L, C)`` or ``(L, C)``; torch's ``max_unpool1d``."""
    return max_unpool(x, indices, 1, kernel_size, stride, padding, output_size, layer="max_unpool1d")


def max_unpool2d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Max unpool on ``(N, H, W, C)`` or ``(H, W, C)``; torch's ``max_unpool2d``."""
    return max_unpool(x, indices, 2, kernel_size, stride, padding, output_size, layer="max_unpool2d")


def max_unpool3d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Max unpool on ``(N, D, H, W, C)`` or ``(D, H, W, C)``; torch's ``max_unpool3d``."""
    return max_unpool(x, indices, 3, kernel_size, stride, padding, output_size, layer="max_unpool3d")


class _MaxUnpoolNd(nn.Module):
    nd = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        name = type(self).__name__
        ntuple(kernel_size, self.nd, "kernel_size", name)
        if stride is not None:
            ntuple(stride, self.nd, "stride", name)
        ntuple(padding, self.nd, "padding", name)
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def __call__(self, x: mx.array, indices: mx.array, output_size=None) -> mx.array:
        return max_unpool(x, indices, self.nd, self.kernel_size, self.stride, self.padding, output_size,
                          layer=type(self).__name__)

    def _extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """Torch's ``nn.MaxUnpool1d`` on channels-last input: a partial inverse of ``MaxPool1d``.

    Args:
        kernel_size (int or tuple): the pool's window length.
        stride (int or tuple, optional): the pool's stride. Default: ``kernel_size``.
        padding (int or tuple, optional): the pool's padding. Default: ``0``.

    Call: ``(x, indices, output_size=None)``; ``indices`` int64 of ``x``'s shape, flat positions in each plane;
    ``output_size`` ``(L_out,)`` or torch's ``(N, C, L_out)``.
    Default length ``(L - 1) * stride + kernel - 2 * padding``.
    Shape: input ``(N, L, C)`` or ``(L, C)``; output ``(N, L_out, C)`` or ``(L_out, C)``.

    Example:
        >>> MaxUnpool1d(2)(mx.ones((1, 3, 2)), mx.zeros((1, 3, 2), dtype=mx.int64) + 4).shape
        (1, 6, 2)
    """

    nd = 1


class MaxUnpool2d(_MaxUnpoolNd):
    """Torch's ``nn.MaxUnpool2d`` on channels-last input: a partial inverse of ``MaxPool2d``.

    Args:
        kernel_size (int or tuple): the pool's window ``(kH, kW)``.
        stride (int or tuple, optional): the pool's stride. Default: ``kernel_size``.
        padding (int or tuple, optional): the pool's padding. Default: ``0``.

    Call: ``(x, indices, output_size=None)``; ``indices`` int64 of ``x``'s shape holding ``h * W_out + w``;
    ``output_size`` ``(H_out, W_out)`` or torch's ``(N, C, H_out, W_out)``.
    Shape: input ``(N, H, W, C)`` or ``(H, W, C)``; output ``(N, H_out, W_out, C)`` or ``(H_out, W_out, C)``.

    Example:
        >>> idx = mx.array([[[[0], [3]], [[10], [19]]]], dtype=mx.int64)  # (N, H, W, C) = (1, 2, 2, 1)
        >>> MaxUnpool2d(2)(mx.ones((1, 2, 2, 1)), idx, output_size=(5, 5)).shape
        (1, 5, 5, 1)
    """

    nd = 2


class MaxUnpool3d(_MaxUnpoolNd):
    """Torch's ``nn.MaxUnpool3d`` on channels-last input: a partial inverse of ``MaxPool3d``.

    Args:
        kernel_size (int or tuple): the pool's window ``(kD, kH, kW)``.
        stride (int or tuple, optional): the pool's stride. Default: ``kernel_size``.
        padding (int or tuple, optional): the pool's padding. Default: ``0``.

    Call: ``(x, indices, output_size=None)``; ``indices`` int64 holding ``(t * H_out + h) * W_out + w``.
    Shape: input ``(N, D, H, W, C)`` or ``(D, H, W, C)``; output ``(N, D_out, H_out, W_out, C)``.

    Example:
        >>> MaxUnpool3d(2)(mx.ones((1, 1, 1, 1, 2)), mx.zeros((1, 1, 1, 1, 2), dtype=mx.int64)).shape
        (1, 2, 2, 2, 2)
    """

    nd = 3
