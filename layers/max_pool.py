"""MaxPool1d / MaxPool2d / MaxPool3d, exact to torch (values, indices, gradients), channels-last.

One generic N-d implementation (:func:`max_pool`) behind thin public classes and functionals. The windows are torch's
(docs/SEMANTICS.md §1-3): padding acts as -inf (the dtype's minimum for integers), dilation, ceil mode with the rule
that drops a last window starting in the right padding, first maximum on ties, last NaN when a window holds NaN, and
indices that are flat offsets in each ``(n, c)`` plane (``h*W + w``), so they are interchangeable with torch's.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from . import _blocks, _export
from ._utils import ShapeOnly, format_shape, ntuple, plan_cache, pool_output_size
from ._window_max import (
    SeparableWindows, first_max_tap, flat_grid, fusable, fused_max, lowest, plane_strides, window_max,
)

_TORCH_DTYPE_NAME = {mx.int64: "Long", mx.int32: "Int", mx.int16: "Short", mx.int8: "Char", mx.uint8: "Byte"}


def _trunc_div(a: int, b: int) -> int:
    """C integer division (toward zero), as ATen's checks compute it."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


# ---------------------------------------------------------------------------------------------------- windows
class SlidingWindows(SeparableWindows):
    """Torch's max-pool windows on each spatial dim: taps ``o*s - p + j*d`` for ``j < k``, padding reads as lowest."""

    def __init__(self, plane, kernel, stride, padding, dilation, out, dtype):
        self.plane, self.out_spatial = tuple(plane), tuple(out)
        self.kernel, self.stride, self.padding, self.dilation = kernel, stride, padding, dilation
        self.pad_value = lowest(dtype)
        # the right padding also covers ceil-mode windows that run past L + p
        self.pad_hi = tuple(
            max(0, (o - 1) * s + d * (k - 1) + 1 - (length + p))
            for length, k, s, p, d, o in zip(plane, kernel, stride, padding, dilation, out)
        )
        self.padded = any(padding) or any(self.pad_hi)
        self.compile_key = ("sliding", self.plane, kernel, stride, padding, dilation, self.out_spatial)

    def _padded(self, x):
        if not self.padded:
            return x
        return mx.pad(x, [(0, 0)] + list(zip(self.padding, self.pad_hi)) + [(0, 0)], constant_values=self.pad_value)

    def taps(self, x):
        x = self._padded(x)
        per_dim = []
        for k, s, d, o in zip(self.kernel, self.stride, self.dilation, self.out_spatial):
            per_dim.append([slice(j * d, j * d + (o - 1) * s + 1, s) for j in range(k)])
        return [x[(slice(None),) + combo] for combo in itertools.product(*per_dim)]

    def compute(self, x, kind):
        small = all(d == 1 for d in self.dilation) and not fusable(self, x)
        if kind == "indices":
            if small:
                # the max, then the index in a few passes over one window view (gradient_index): below the fusing
                # size, fewer and cheaper MLX ops than a window copy with two argmax reductions
                best = self.compute(x, "values")
                return best, self.gradient_index(x, best)
            # one dim at a time: 3+3+3 taps for a 3x3x3 window instead of 27 (the index pass costs per tap)
            return super().compute(x, kind)
        if small:
            # small inputs skip mx.compile: one strided window view and one max reduction (mlx.nn's approach) beat
            # a chain of separate maximum ops there. Only without dilation: MLX's reduction of a view whose kernel
            # step exceeds its output step (dilation > stride) reads wrong memory (seen on mlx 0.32).
            nd = len(self.plane)
            return self._window_view(x).max(axis=tuple(range(1 + nd, 1 + 2 * nd)))
        return fused_max(self, x)  # one fused maximum over all taps

    # separable reduction (indices): strided slices of the padded input, taps ``d`` apart
    def prepare(self, x):
        return self._padded(x)

    def take(self, a, dim, j):
        d, s, o = self.dilation[dim], self.stride[dim], self.out_spatial[dim]
        return a[(slice(None),) * (1 + dim) + (slice(j * d, j * d + (o - 1) * s + 1, s),)]

    def start(self, dim, dtype):
        shape = [1] * (len(self.plane) + 2)
        shape[1 + dim] = -1
        return mx.array(self._starts(dim).astype(np.int64)).reshape(shape).astype(dtype)

    def step(self, dim):
        return self.dilation[dim]

    def extra_inputs(self, dtype):
        if not self.padded:
            return ()
        return (_first_grid(self.plane, self.kernel, self.stride, self.padding, self.dilation, self.out_spatial,
                            dtype),)

    def fixup(self, best, index, *extra):
        if not self.padded:
            return index
        # the max is the padding value: torch never moved past the window's first real tap
        return mx.where(best == self.pad_value, extra[0], index)

    def _window_view(self, x):
        """``(N, *out, *kernel, C)`` view of the padded input: output dims step by the stride, kernel dims by 1."""
        # MLX's as_strided needs a row-contiguous input (a sliced or transposed view raises at eval time)
        x = _export.contiguous(self._padded(x))
        n, *spatial, c = x.shape
        rows = [c * math.prod(spatial[i + 1 :]) for i in range(len(spatial))]
        shape = (n, *self.out_spatial, *self.kernel, c)
        strides = (math.prod(spatial) * c, *[r * s for r, s in zip(rows, self.stride)], *rows, 1)
        return mx.as_strided(x, shape, strides)

    def _starts(self, dim: int) -> np.ndarray:
        return np.arange(self.out_spatial[dim]) * self.stride[dim] - self.padding[dim]

    def _first(self, dim: int) -> np.ndarray:
        # torch starts its scan at the first in-range tap (``while first < 0: first += d``), even if that overshoots
        start, d = self._starts(dim), self.dilation[dim]
        return np.where(start < 0, start + (-start + d - 1) // d * d, start)

    def gradient(self, x, grad, index, best=None):
        if index is None:
            index = self.gradient_index(x, best)
        if not self._tiles() or not _blocks.covers(self.out_spatial, self.kernel, self.plane) \
                or not _blocks.supported(grad.dtype):
            return super().gradient(x, grad, index)
        # windows tile the input (kernel == stride, no padding/dilation): every index lies in its own window, so
        # the gradient is a masked broadcast instead of a scatter-add (~2x faster on MLX CPU); no overlaps to add
        mask = _blocks.block_mask(index, self.kernel, self.plane)
        return _blocks.place(grad, mask, self.kernel, self.plane)

    def gradient_index(self, x, best):
        """Without dilation: :func:`first_max_tap` over one strided window view (a handful of passes, where the
        separable engine makes ~100 unfused ones inside the VJP), then the small-input index tables."""
        if best is None or any(d != 1 for d in self.dilation):
            return self.compute(x, "indices")[1]
        nd = len(self.plane)
        n, c = x.shape[0], x.shape[-1]
        target = best.reshape(n, *self.out_spatial, *([1] * nd), c)
        tap = first_max_tap(self._window_view(x), target, tuple(range(1 + nd, 1 + 2 * nd)), self.kernel)
        starts, offsets = _small_index_tables(self.plane, self.kernel, self.stride, self.padding, self.out_spatial)
        index = starts + mx.take(offsets, tap)
        return self.fixup(best, index, *self.extra_inputs(mx.int32))

    def native_tables(self):
        return _sliding_tables(self.plane, self.kernel, self.stride, self.padding, self.dilation, self.out_spatial)

    def _tiles(self) -> bool:
        return self.kernel == self.stride and not self.padded and all(d == 1 for d in self.dilation)

    def valid_mask(self):
        masks, any_empty = [], False
        for dim, length in enumerate(self.plane):
            first = self._first(dim)
            last = self._starts(dim) + (self.kernel[dim] - 1) * self.dilation[dim]
            ok = (first <= last) & (first < length)
            any_empty |= not ok.all()
            masks.append(mx.array(ok).reshape([1] * (1 + dim) + [-1] + [1] * (len(self.plane) - dim)))
        if not any_empty:
            return None
        mask = masks[0]
        for m in masks[1:]:
            mask = mask & m
        return mask


@lru_cache(maxsize=256)
def _sliding_tables(plane, kernel, stride, padding, dilation, out) -> tuple:
    """Torch's scan per dim: from the first in-range tap (``while first < 0: first += d``) to the window's last tap
    clipped to the input; a window lying wholly in the padding has ``first >= end`` (no tap)."""
    firsts, ends = [], []
    for length, k, s, p, d, o in zip(plane, kernel, stride, padding, dilation, out):
        start = np.arange(o, dtype=np.int64) * s - p
        first = np.where(start < 0, start + (-start + d - 1) // d * d, start)
        firsts.append(tuple(int(v) for v in first))
        ends.append(tuple(int(v) for v in np.minimum(start + (k - 1) * d + 1, length)))
    return tuple(firsts), tuple(ends), tuple(dilation)


@lru_cache(maxsize=128)
def _first_grid(plane, kernel, stride, padding, dilation, out, dtype):
    """Flat index of each window's first real tap (cached: a per-call constant would cost a conversion op)."""
    spec = SlidingWindows(plane, kernel, stride, padding, dilation, out, mx.float32)
    return flat_grid([spec._first(dim) for dim in range(len(plane))], plane, dtype)


@lru_cache(maxsize=128)
def _small_index_tables(plane, kernel, stride, padding, out):
    """Flat index of each window's (possibly padded) first position, ``(1, *out, 1)`` int32, and the flat offset of
    every tap of an undilated window in row-major kernel order, ``(K,)`` int32."""
    starts = flat_grid([np.arange(o) * s - p for o, s, p in zip(out, stride, padding)], plane, mx.int32)
    offsets = np.zeros(1, dtype=np.int64)
    for k, step in zip(kernel, plane_strides(plane)):
        offsets = (offsets[:, None] + np.arange(k)[None, :] * step).reshape(-1)
    return starts, mx.array(offsets.astype(np.int32))


# ---------------------------------------------------------------------------------------------------- checks
def _check_args_2d_style(nd, kernel, stride, padding, dilation, layer):
    """Torch's parameter checks for max_pool2d/3d (and max_pool1d with indices), in torch's order."""
    for k, s, p, d in zip(kernel, stride, padding, dilation):
        if s == 0:
            raise ValueError(f"[{layer}] stride should not be zero")
        if p < 0:
            raise ValueError(f"[{layer}] pad must be non-negative, but got pad: {p}")
        if p > _trunc_div((k - 1) * d + 1, 2):
            raise ValueError(
                f"[{layer}] pad should be at most half of effective kernel size, but got pad={p}, kernel_size={k} "
                f"and dilation={d}"
            )
    if any(k <= 0 for k in kernel):
        raise ValueError(f"[{layer}] kernel size should be greater than zero, but got {_named(nd, 'k', kernel)}")
    if any(s <= 0 for s in stride):
        raise ValueError(f"[{layer}] stride should be greater than zero, but got {_named(nd, 'd', stride)}")
    if any(d <= 0 for d in dilation):
        raise ValueError(f"[{layer}] dilation should be greater than zero, but got {_named(nd, 'dilation', dilation)}")


def _named(nd, prefix, values):
    """Torch's ``kH: 3 kW: 3`` spelling; 1d runs through torch's 2d kernel, which reports a unit H first."""
    if nd == 1:
        return f"{prefix}H: 1 {prefix}W: {values[0]}"
    names = {2: ["H", "W"], 3: ["T", "H", "W"]}[nd]
    return " ".join(f"{prefix}{n}: {v}" for n, v in zip(names, values))


def _check_half_kernel(nd, kernel, padding, layer):
    if any(p > k // 2 for k, p in zip(kernel, padding)):
        if nd == 3:
            detail = f"kT: {kernel[0]} kW: {kernel[2]} kH: {kernel[1]} padT: {padding[0]} padW: {padding[2]} padH: {padding[1]}"
        else:
            kh, kw = (1, kernel[0]) if nd == 1 else kernel
            ph, pw = (0, padding[0]) if nd == 1 else padding
            detail = f"padW = {pw}, padH = {ph}, kW = {kw}, kH = {kh}"
        raise ValueError(f"[{layer}] pad should be smaller than or equal to half of kernel size, but got {detail}")


def _check_args_1d_value(kernel, stride, padding, dilation, layer):
    """The value-only max_pool1d's own checks (torch runs them instead of the 2d ones)."""
    (k,), (s,), (p,), (d,) = kernel, stride, padding, dilation
    if k <= 0:
        raise ValueError(f"[{layer}] max_pool1d() kernel_size must be greater than zero, but got {k}")
    if s <= 0:
        raise ValueError(f"[{layer}] max_pool1d() stride must be greater than zero, but got {s}")
    if p < 0:
        raise ValueError(f"[{layer}] max_pool1d() padding must be non-negative, but got {p}")
    if p > k // 2:
        raise ValueError(
            f"[{layer}] max_pool1d() padding should be at most half of kernel size, but got padding={p} and "
            f"kernel_size={k}"
        )
    if d <= 0:
        raise ValueError(f"[{layer}] max_pool1d() dilation must be greater than zero, but got {d}")


def _normalize(nd, kernel_size, stride, padding, dilation, layer):
    kernel = ntuple(kernel_size, nd, "kernel_size", layer)
    stride = kernel if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) else stride
    stride = ntuple(stride, nd, "stride", layer)
    return kernel, stride, ntuple(padding, nd, "padding", layer), ntuple(dilation, nd, "dilation", layer)


def check_max_pool_args(nd, kernel_size, stride, padding, dilation, return_indices, layer):
    """Normalise and validate the input-independent arguments; returns ``(kernel, stride, padding, dilation)``."""
    kernel, stride, padding, dilation = _normalize(nd, kernel_size, stride, padding, dilation, layer)
    if nd == 1 and not return_indices:
        _check_args_1d_value(kernel, stride, padding, dilation, layer)
    else:
        _check_args_2d_style(nd, kernel, stride, padding, dilation, layer)
        _check_half_kernel(nd, kernel, padding, layer)
    return kernel, stride, padding, dilation


def _check_input(x, nd, layer, return_indices):
    if not isinstance(x, (mx.array, ShapeOnly)):
        raise TypeError(f"[{layer}] expected an mx.array input, but got {type(x).__name__}")
    if x.ndim not in (nd + 1, nd + 2):
        if nd == 1:
            msg = "max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for input"
            raise ValueError(f"[{layer}] {msg}, but got shape {tuple(x.shape)} (channels-last (L, C) or (N, L, C))")
        ranks = f"{nd + 1}D or {nd + 2}D"
        raise ValueError(
            f"[{layer}] non-empty {ranks} (batch mode) tensor expected for input, but got shape {tuple(x.shape)} "
            f"(channels-last: spatial dims then C, with an optional leading N)"
        )
    non_batch = x.shape[1:] if x.ndim == nd + 2 else x.shape
    if 0 in non_batch:
        raise ValueError(
            f"[{layer}] Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with optional 0 dim batch size for "
            f"input, but got shape {tuple(x.shape)} (a zero-sized channel or spatial dim)"
        )
    if x.dtype == mx.bool_ or x.dtype == mx.uint32 or x.dtype == mx.uint16 or x.dtype == mx.uint64:
        raise TypeError(f"[{layer}] max pooling is not implemented for dtype {x.dtype}")
    if nd == 1 and not return_indices and not mx.issubdtype(x.dtype, mx.floating):
        # torch's value-only max_pool1d kernel is floating-only (its indices path accepts integers)
        name = _TORCH_DTYPE_NAME.get(x.dtype, str(x.dtype))
        raise TypeError(f"[{layer}] \"max_pool1d_impl\" not implemented for '{name}'")


# ---------------------------------------------------------------------------------------------------- generic op
def max_pool(
    x: mx.array,
    nd: int,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    layer: str = "MaxPool2d",
):
    """N-d max pooling on channels-last ``x``: ``(N, *spatial, C)`` or unbatched ``(*spatial, C)``.

    Returns the pooled array, or ``(values, indices)`` with int64 flat per-plane indices when ``return_indices``.
    Gradients match torch's (all of an output's gradient goes to its index). ``layer`` names the caller in errors.
    """
    if not isinstance(x, mx.array):
        check_max_pool_args(nd, kernel_size, stride, padding, dilation, return_indices, layer)
        _check_input(x, nd, layer, return_indices)  # raises the TypeError
    args = (nd, kernel_size, stride, padding, dilation, bool(ceil_mode), bool(return_indices), layer,
            tuple(x.shape), x.dtype)
    spec = _plan(*args)  # the checks and windows depend only on these: worked out once per configuration
    batched = x.ndim == nd + 2
    xb = x if batched else x[None]
    result = window_max(xb, spec, return_indices)
    if batched:
        return result
    return tuple(r[0] for r in result) if return_indices else result[0]


@plan_cache
def _plan(nd, kernel_size, stride, padding, dilation, ceil_mode, return_indices, layer, shape, dtype):
    """Every check of :func:`max_pool` that does not read the data, and the windows; raises as torch does."""
    kernel, stride, padding, dilation = check_max_pool_args(
        nd, kernel_size, stride, padding, dilation, return_indices, layer
    )
    _check_input(ShapeOnly(shape, dtype), nd, layer, return_indices)
    plane = tuple(shape[-1 - nd : -1])
    out = tuple(pool_output_size(*args, ceil_mode) for args in zip(plane, kernel, stride, padding, dilation))
    if any(o < 1 for o in out):
        if nd == 1 and not return_indices:
            raise ValueError(f"[{layer}] max_pool1d() Invalid computed output size: {out[0]}")
        channels = shape[-1]
        in_shape, out_shape = (channels,) + plane, (channels,) + out
        if nd == 1:  # torch runs 1d through its 2d kernel and reports 2d shapes
            in_shape, out_shape = (channels, 1) + plane, (channels, 1) + out
        raise ValueError(
            f"[{layer}] Given input size: ({format_shape(in_shape)}). Calculated output size: "
            f"({format_shape(out_shape)}). Output size is too small"
        )
    return SlidingWindows(plane, kernel, stride, padding, dilation, out, dtype)


# ---------------------------------------------------------------------------------------------------- functional
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-d max pooling over ``(N, L, C)`` or ``(L, C)``; see :class:`MaxPool1d`."""
    return max_pool(input, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices, layer="max_pool1d")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """2-d max pooling over ``(N, H, W, C)`` or ``(H, W, C)``; see :class:`MaxPool2d`."""
    return max_pool(input, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices, layer="max_pool2d")


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """3-d max pooling over ``(N, D, H, W, C)`` or ``(D, H, W, C)``; see :class:`MaxPool3d`."""
    return max_pool(input, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices, layer="max_pool3d")


# ---------------------------------------------------------------------------------------------------- modules
class _MaxPoolNd(nn.Module):
    nd = 0

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        name = type(self).__name__
        # validate once, here; the call only checks what depends on the input
        self.kernel_size, self.stride, self.padding, self.dilation = check_max_pool_args(
            self.nd, kernel_size, stride, padding, dilation, return_indices, name
        )
        self.return_indices = bool(return_indices)
        self.ceil_mode = bool(ceil_mode)

    def _extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}, return_indices={self.return_indices}"
        )

    def __call__(self, x: mx.array):
        return max_pool(
            x, self.nd, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
            self.return_indices, layer=type(self).__name__,
        )


class MaxPool1d(_MaxPoolNd):
    """Torch's ``nn.MaxPool1d`` on channels-last input.

    Args:
        kernel_size (int or tuple): window size.
        stride (int or tuple, optional): window step. Default: ``kernel_size``.
        padding (int or tuple, optional): implicit -inf padding on both sides, at most half the kernel. Default: ``0``.
        dilation (int or tuple, optional): spacing between window taps. Default: ``1``.
        return_indices (bool, optional): also return int64 flat indices (torch's format). Default: ``False``.
        ceil_mode (bool, optional): round the output size up (torch's drop rule applies). Default: ``False``.

    Shape: ``(N, L, C)`` or ``(L, C)`` -> ``(N, L_out, C)`` or ``(L_out, C)``.

    Example:
        >>> pool = MaxPool1d(3, stride=2, padding=1)
        >>> pool(mx.random.normal((2, 10, 4))).shape
        (2, 5, 4)
    """

    nd = 1


class MaxPool2d(_MaxPoolNd):
    """Torch's ``nn.MaxPool2d`` on channels-last input.

    Args:
        kernel_size (int or tuple): window size.
        stride (int or tuple, optional): window step. Default: ``kernel_size``.
        padding (int or tuple, optional): implicit -inf padding on both sides, at most half the kernel. Default: ``0``.
        dilation (int or tuple, optional): spacing between window taps. Default: ``1``.
        return_indices (bool, optional): also return int64 flat indices ``h*W + w`` per plane. Default: ``False``.
        ceil_mode (bool, optional): round the output size up (torch's drop rule applies). Default: ``False``.

    Shape: ``(N, H, W, C)`` or ``(H, W, C)`` -> ``(N, H_out, W_out, C)`` or ``(H_out, W_out, C)``.

    Example:
        >>> pool = MaxPool2d(3, stride=2, padding=1)
        >>> pool(mx.random.normal((8, 112, 112, 64))).shape
        (8, 56, 56, 64)
    """

    nd = 2


class MaxPool3d(_MaxPoolNd):
    """Torch's ``nn.MaxPool3d`` on channels-last input.

    Args:
        kernel_size (int or tuple): window size.
        stride (int or tuple, optional): window step. Default: ``kernel_size``.
        padding (int or tuple, optional): implicit -inf padding on both sides, at most half the kernel. Default: ``0``.
        dilation (int or tuple, optional): spacing between window taps. Default: ``1``.
        return_indices (bool, optional): also return int64 flat indices ``(t*H + h)*W + w`` per plane.
            Default: ``False``.
        ceil_mode (bool, optional): round the output size up (torch's drop rule applies). Default: ``False``.

    Shape: ``(N, D, H, W, C)`` or ``(D, H, W, C)`` -> ``(N, D_out, H_out, W_out, C)`` or unbatched.

    Example:
        >>> pool = MaxPool3d(2)
        >>> pool(mx.random.normal((1, 8, 8, 8, 3))).shape
        (1, 4, 4, 4, 3)
    """

    nd = 3
