"""AdaptiveMaxPool1d / 2d / 3d, exact to torch (values, indices, gradients), channels-last.

Torch's adaptive windows (docs/SEMANTICS.md §5): on each dim, output ``o`` of ``O`` pools input ``[o*L // O,
ceil((o+1)*L / O))``. Windows overlap and vary in length when ``O`` does not divide ``L`` (the "stride = L // O"
shortcut is wrong then), and repeat elements when ``O > L``. Max, ties, NaN, indices and gradient follow the shared
window-max engine.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ._utils import ShapeOnly, adaptive_tables, adaptive_windows, check_float_pool_input, plan_cache
from ._window_max import SeparableWindows, WindowSpec, fusable, fused, plane_strides, window_max
from .max_pool import SlidingWindows


class AdaptiveWindows(SeparableWindows):
    """Adaptive windows of varying length. Each dim gathers ``K = max window length`` taps; a shorter window repeats
    its last element. A repeat never changes the max, comes after the original (so a tie keeps the original) and has
    the original's coordinate (so a "last NaN" that lands on it reports the right index)."""

    def __init__(self, plane, out):
        self.plane, self.out_spatial = tuple(plane), tuple(out)
        self.coords, self.gathers, kernel = [], [], []
        for length, o in zip(plane, out):
            starts, ends = (np.array(v, dtype=np.int64) for v in adaptive_windows(length, o))
            k = int((ends - starts).max(initial=1))  # initial: a zero-size output has no window
            taps = np.minimum(starts[:, None] + np.arange(k)[None, :], ends[:, None] - 1)  # (O, K)
            self.coords.append(taps)
            self.gathers.append(mx.array(taps.T.reshape(-1).astype(np.int32)))  # tap-major: (K * O,)
            kernel.append(k)
        self.kernel = tuple(kernel)
        self.compile_key = ("adaptive", self.plane, self.out_spatial)

    def native_tables(self):
        firsts, ends, _ = adaptive_tables(self.plane, self.out_spatial)
        return firsts, ends, (1,) * len(self.plane)

    def _gather(self, a, dim):
        """``(..., K, O, ...)``: every tap of every window along ``dim`` in one gather (array indexing runs several
        times faster than ``mx.take`` on a middle axis on MLX's CPU backend)."""
        gathered = a[(slice(None),) * (1 + dim) + (self.gathers[dim],)]
        shape = list(a.shape)
        shape[1 + dim : 2 + dim] = [self.kernel[dim], self.out_spatial[dim]]
        return gathered.reshape(shape)

    def taps_along(self, a, dim):
        gathered = self._gather(a, dim)
        return [gathered[(slice(None),) * (1 + dim) + (j,)] for j in range(self.kernel[dim])]

    def compute(self, x, kind):
        if kind == "indices":
            if not fusable(self, x):
                return self._small_indices(x)
            return super().compute(x, kind)

        def values(a):
            for dim in reversed(range(len(self.plane))):
                a = self._gather(a, dim).max(axis=1 + dim)  # mx.max propagates NaN, as torch
            return a

        fn = fused(self, x, "values", lambda: values)
        return (fn or values)(x)

    def _small_indices(self, x):
        """Max and argmax of small inputs over one gathered ``(N, *out, K, C)`` window array (``K`` the product of
        the per-dim tap counts): ~20 MLX ops instead of the separable engine's ~200, whose per-op cost dominates
        below the fusing size. Row-major tap order is torch's scan order, repeats included (see the class note)."""
        nd = len(self.plane)
        n, c = x.shape[0], x.shape[-1]
        a = x
        for dim in reversed(range(nd)):  # last dim first, so the earlier axes keep their positions
            a = self._gather(a, dim)  # axis 1 + dim becomes (K_dim, O_dim)
        # (N, K1, O1, K2, O2, ..., C) -> (N, O1, O2, ..., K1, K2, ..., C)
        order = [0] + [2 + 2 * d for d in range(nd)] + [1 + 2 * d for d in range(nd)] + [1 + 2 * nd]
        count = math.prod(self.kernel)
        windows = a.transpose(order).reshape(n, *self.out_spatial, count, c)
        best = windows.max(axis=-2)
        tap = mx.argmax(windows, axis=-2)  # the first maximum
        last_nan = (count - 1) - mx.argmax(mx.isnan(windows)[..., ::-1, :], axis=-2)
        tap = mx.where(mx.isnan(best), last_nan, tap)
        base, table = _adaptive_index_table(self.plane, self.out_spatial)
        return best, mx.take(table, base + tap.astype(mx.int32))

    def coord(self, dim, j, dtype):
        shape = [1] * (len(self.plane) + 2)
        shape[1 + dim] = -1
        return mx.array(self.coords[dim][:, j]).reshape(shape).astype(dtype)


@lru_cache(maxsize=128)
def _adaptive_index_table(plane: tuple, out: tuple) -> tuple[mx.array, mx.array]:
    """Flat plane index of tap ``t`` of output ``o``, as a flat table read at ``base[o] + t``: ``base`` is
    ``(1, *out, 1)`` int32 (``o_flat * K``), the table ``(prod(out) * K,)`` int32."""
    spec = AdaptiveWindows(plane, out)
    flat = np.zeros([1] * (2 * len(plane)), dtype=np.int64)
    for dim, (taps, stride) in enumerate(zip(spec.coords, plane_strides(plane))):
        shape = [1] * (2 * len(plane))
        shape[dim], shape[len(plane) + dim] = taps.shape
        flat = flat + taps.reshape(shape) * stride  # axes (O1, O2, ..., K1, K2, ...)
    count = math.prod(spec.kernel)
    base = (np.arange(math.prod(out)) * count).reshape(1, *out, 1)
    return mx.array(base.astype(np.int32)), mx.array(flat.reshape(-1).astype(np.int32))


@lru_cache(maxsize=256)
def adaptive_windows_spec(plane, out) -> WindowSpec:
    """Sliding windows when every dim divides evenly (then adaptive == kernel = stride = L // O), else gathers.
    Cached: a spec holds constant index arrays, which cost MLX ops to build on every call."""
    if all(o > 0 and length % o == 0 for length, o in zip(plane, out)):
        k = tuple(length // o for length, o in zip(plane, out))
        nd = len(plane)
        return SlidingWindows(plane, k, k, (0,) * nd, (1,) * nd, out, mx.float32)
    return AdaptiveWindows(plane, out)


# ---------------------------------------------------------------------------------------------------- checks
def _normalize_output_size(output_size, nd: int, layer: str) -> tuple:
    fn = f"adaptive_max_pool{nd}d"
    if nd == 1:
        if isinstance(output_size, (list, tuple)):
            if len(output_size) != 1:
                raise ValueError(
                    f"[{layer}] {fn}() argument 'output_size' should contain one int (got {len(output_size)})"
                )
            output_size = output_size[0]
        if output_size is None or isinstance(output_size, bool) or not isinstance(output_size, numbers.Integral):
            raise TypeError(
                f"[{layer}] {fn}(): argument 'output_size' must be tuple of ints, not {type(output_size).__name__}"
            )
        return (int(output_size),)
    if output_size is None:
        raise TypeError(f"[{layer}] 'output_size' must be an int or a tuple of {nd} ints or None entries, not None")
    sizes = tuple(output_size) if isinstance(output_size, (list, tuple)) else (output_size,) * nd
    if len(sizes) != nd:
        raise ValueError(f"[{layer}] {fn}(): internal error: output_size.size() must be {nd} (got {sizes!r})")
    for item in sizes:
        if item is not None and (isinstance(item, bool) or not isinstance(item, numbers.Integral)):
            raise TypeError(
                f"[{layer}] {fn}(): argument 'output_size' must be tuple of ints, but found element of type "
                f"{type(item).__name__}"
            )
    return tuple(None if s is None else int(s) for s in sizes)


@plan_cache
def _plan(nd: int, output_size, shape: tuple, dtype, layer: str) -> tuple:
    """The argument and input checks (torch's order and messages), once per signature: ``(batched, plane, out)``."""
    sizes = _normalize_output_size(output_size, nd, layer)
    fn = f"adaptive_max_pool{nd}d"
    _, batched = check_float_pool_input(ShapeOnly(shape, dtype), nd, layer, f"{fn}()", fn, "but input has sizes")
    full = shape if batched else (1,) + tuple(shape)
    plane = tuple(full[1 : 1 + nd])
    out = tuple(length if s is None else s for s, length in zip(sizes, plane))
    if any(o < 0 for o in out):
        bad = next(o for o in out if o < 0)
        torch_shape = [full[0], full[-1], *out] if batched else [full[-1], *out]
        raise ValueError(f"[{layer}] Trying to create tensor with negative dimension {bad}: {torch_shape} (torch layout)")
    return batched, plane, out


def adaptive_max_pool(x: mx.array, nd: int, output_size, return_indices: bool = False, *, layer: str):
    """N-d adaptive max pooling on channels-last ``(N, *spatial, C)`` or unbatched ``(*spatial, C)``.

    ``output_size`` entries may be ``None`` (keep that input size; 2d/3d). Returns values, or ``(values, indices)``
    with torch's int64 flat per-plane indices.
    """
    if not isinstance(x, mx.array):
        _normalize_output_size(output_size, nd, layer)
        raise TypeError(f"[{layer}] expected an mx.array input, but got {type(x).__name__}")
    batched, plane, out = _plan(nd, output_size, tuple(x.shape), x.dtype, layer)
    xb = x if batched else x[None]
    result = window_max(xb, adaptive_windows_spec(plane, out), return_indices)
    if batched:
        return result
    return tuple(r[0] for r in result) if return_indices else result[0]


# ---------------------------------------------------------------------------------------------------- functional
def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Adaptive 1-d max pooling over ``(N, L, C)`` or ``(L, C)``; see :class:`AdaptiveMaxPool1d`."""
    return adaptive_max_pool(input, 1, output_size, return_indices, layer="adaptive_max_pool1d")


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Adaptive 2-d max pooling over ``(N, H, W, C)`` or ``(H, W, C)``; see :class:`AdaptiveMaxPool2d`."""
    return adaptive_max_pool(input, 2, output_size, return_indices, layer="adaptive_max_pool2d")


def adaptive_max_pool3d(input, output_size, return_indices=False):
    """Adaptive 3-d max pooling over ``(N, D, H, W, C)`` or ``(D, H, W, C)``; see :class:`AdaptiveMaxPool3d`."""
    return adaptive_max_pool(input, 3, output_size, return_indices, layer="adaptive_max_pool3d")


# ---------------------------------------------------------------------------------------------------- modules
class _AdaptiveMaxPoolNd(nn.Module):
    nd = 0

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = _normalize_output_size(output_size, self.nd, type(self).__name__)
        self.return_indices = bool(return_indices)

    def _extra_repr(self) -> str:
        return f"output_size={self.output_size}, return_indices={self.return_indices}"

    def __call__(self, x: mx.array):
        return adaptive_max_pool(x, self.nd, self.output_size, self.return_indices, layer=type(self).__name__)


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """Torch's ``nn.AdaptiveMaxPool1d`` on channels-last input.

    Args:
        output_size (int): output length ``L_out`` (0 gives an empty output).
        return_indices (bool, optional): also return int64 flat indices (torch's format). Default: ``False``.

    Shape: ``(N, L, C)`` or ``(L, C)`` -> ``(N, L_out, C)`` or ``(L_out, C)``.

    Example:
        >>> AdaptiveMaxPool1d(4)(mx.random.normal((2, 10, 3))).shape
        (2, 4, 3)
    """

    nd = 1


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """Torch's ``nn.AdaptiveMaxPool2d`` on channels-last input.

    Args:
        output_size (int or tuple): ``(H_out, W_out)``; a ``None`` entry keeps that input size.
        return_indices (bool, optional): also return int64 flat indices ``h*W + w`` per plane. Default: ``False``.

    Shape: ``(N, H, W, C)`` or ``(H, W, C)`` -> ``(N, H_out, W_out, C)`` or ``(H_out, W_out, C)``.

    Example:
        >>> AdaptiveMaxPool2d((3, None))(mx.random.normal((2, 10, 7, 3))).shape
        (2, 3, 7, 3)
    """

    nd = 2


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """Torch's ``nn.AdaptiveMaxPool3d`` on channels-last input.

    Args:
        output_size (int or tuple): ``(D_out, H_out, W_out)``; a ``None`` entry keeps that input size.
        return_indices (bool, optional): also return int64 flat indices ``(t*H + h)*W + w`` per plane.
            Default: ``False``.

    Shape: ``(N, D, H, W, C)`` or ``(D, H, W, C)`` -> ``(N, D_out, H_out, W_out, C)`` or unbatched.

    Example:
        >>> AdaptiveMaxPool3d(2)(mx.random.normal((1, 5, 6, 7, 3))).shape
        (1, 2, 2, 2, 3)
    """

    nd = 3
