"""FractionalMaxPool2d / FractionalMaxPool3d, exact to torch given the same random samples, channels-last.

Each ``(n, c)`` plane draws one sample ``u`` per spatial dim, in torch's ``(N, C, 2|3)`` format: for 2d ``[..., 0]``
drives W and ``[..., 1]`` drives H; for 3d the order is T, H, W (docs/SEMANTICS.md §6). Window starts per dim:

    alpha = T(L - k) / T(O - 1);  start[i] = int((T(i) + u) * alpha) - int(u * alpha);  start[O-1] = L - k

computed in the input dtype ``T`` with a rounding after every operation (float16/bfloat16 included), as torch does.
Windows are ``k`` wide, never padded. Max, ties, NaN, indices and gradients follow the shared window-max engine.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from . import _native
from ._utils import ShapeOnly, check_float_pool_input, plan_cache
from ._window_max import SeparableWindows, fusable, plane_strides, window_max

_DIM_WORDS = {2: ["height", "width"], 3: ["time", "height", "width"]}


# ---------------------------------------------------------------------------------------------------- windows
def interval_starts(u: mx.array, length: int, out: int, kernel: int) -> mx.array:
    """Torch's window starts on one dim for samples ``u`` (any shape, input dtype): int32, shape ``u.shape + (out,)``."""
    if out == 0:
        return mx.zeros(u.shape + (0,), dtype=mx.int32)
    last = mx.full(u.shape + (1,), length - kernel, dtype=mx.int32)  # the last window always ends at the input's end
    if out == 1:
        return last
    dtype = u.dtype
    # every operation below runs in the input dtype, so each one rounds there (as torch's scalar_t arithmetic)
    alpha = mx.array(length - kernel, dtype=dtype) / mx.array(out - 1, dtype=dtype)
    i = mx.arange(out - 1).astype(dtype)
    u = u[..., None]
    starts = ((i + u) * alpha).astype(mx.int32) - (u * alpha).astype(mx.int32)  # astype truncates toward zero
    return mx.concatenate([starts, last], axis=-1)


class FractionalWindows(SeparableWindows):
    """Per-plane windows ``[start, start + k)``, reduced one dim at a time with per-plane gathers."""

    def __init__(self, plane, kernel, out, starts):
        # starts[dim]: int32 (N, C, O_dim), already clamped into the input
        self.plane, self.out_spatial, self.kernel = tuple(plane), tuple(out), tuple(kernel)
        nd = len(plane)
        self.index = []
        for dim, start in enumerate(starts):
            n, c, o = start.shape
            shape = [n] + [1] * nd + [c]
            shape[1 + dim] = o
            self.index.append(mx.moveaxis(start, 1, -1).reshape(shape))  # (N, 1.., O_dim, ..1, C)

    def take(self, a, dim, j):
        return mx.take_along_axis(a, self.index[dim] + j, axis=1 + dim)

    def start(self, dim, dtype):
        return self.index[dim].astype(dtype)

    def compute(self, x, kind):
        if kind == "indices" and not fusable(self, x):
            return self._small_indices(x)
        return super().compute(x, kind)

    def _small_indices(self, x):
        """Max and argmax of small inputs over one gathered ``(N, *out, K, C)`` window array: ~20 MLX ops instead
        of the separable engine's ~160, whose per-op cost dominates at small sizes. Ties: ``mx.argmax``'s first
        maximum in row-major window order (torch's scan); a NaN window takes its last NaN."""
        nd = len(self.plane)
        n, c = x.shape[0], x.shape[-1]
        a = x
        for dim in range(nd):
            k, o = self.kernel[dim], self.out_spatial[dim]
            shape = list(self.index[dim].shape)
            taps = self.index[dim][(slice(None),) * (1 + dim) + (None,)] + _tap_column(k, nd, dim)
            shape[1 + dim] = k * o
            a = mx.take_along_axis(a, taps.reshape(shape), axis=1 + dim)  # axis 1 + dim: (K_dim * O_dim)
        a = a.reshape(n, *[v for k, o in zip(self.kernel, self.out_spatial) for v in (k, o)], c)
        order = [0] + [2 + 2 * d for d in range(nd)] + [1 + 2 * d for d in range(nd)] + [1 + 2 * nd]
        count = math.prod(self.kernel)
        windows = a.transpose(order).reshape(n, *self.out_spatial, count, c)
        best = windows.max(axis=-2)
        tap = mx.argmax(windows, axis=-2)  # the first maximum
        if mx.issubdtype(x.dtype, mx.floating):
            last_nan = (count - 1) - mx.argmax(mx.isnan(windows)[..., ::-1, :], axis=-2)
            tap = mx.where(mx.isnan(best), last_nan, tap)
        return best, self.first_index(mx.int32) + mx.take(_window_offsets(self.plane, self.kernel), tap)

    def first_index(self, dtype):
        """Flat index of every window's first element, ``(N, *out, C)`` (the empty-kernel case reports it)."""
        strides = plane_strides(self.plane)
        return sum(self.start(dim, dtype) * strides[dim] for dim in range(len(self.plane)))


@lru_cache(maxsize=64)
def _tap_column(k: int, nd: int, dim: int) -> mx.array:
    """``0..k-1`` shaped to add a tap axis in front of axis ``1 + dim`` of a ``(N, *spatial, C)`` start array."""
    shape = [1] * (nd + 3)
    shape[1 + dim] = k
    return mx.arange(k, dtype=mx.int32).reshape(shape)


@lru_cache(maxsize=64)
def _window_offsets(plane: tuple, kernel: tuple) -> mx.array:
    """Flat plane offset of every tap of a window from its first element, in row-major window order."""
    offsets = np.zeros(1, dtype=np.int64)
    for k, stride in zip(kernel, plane_strides(plane)):
        offsets = (offsets[:, None] + np.arange(k)[None, :] * stride).reshape(-1)
    return mx.array(offsets.astype(np.int32))


# ---------------------------------------------------------------------------------------------------- checks
def _tuple_arg(value, nd: int, name: str, fn: str, layer: str) -> tuple:
    items = tuple(value) if isinstance(value, (list, tuple)) else (value,) * nd
    if len(items) == 1:
        items = items * nd
    if len(items) != nd:
        raise ValueError(f"[{layer}] {fn}: {name} must either be a single Int or tuple of Ints (got {value!r})")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise TypeError(f"[{layer}] '{name}' must be an int or a tuple of ints, but got {value!r}")
    return tuple(int(v) for v in items)


def _ratio_tuple(ratio, nd: int, layer: str) -> tuple:
    items = tuple(ratio) if isinstance(ratio, (list, tuple)) else (ratio,) * nd
    if len(items) != nd:
        raise ValueError(f"[{layer}] 'output_ratio' must be a float or a tuple of {nd} floats, but got {ratio!r}")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Real):
            raise TypeError(f"[{layer}] 'output_ratio' must be a float or a tuple of floats, but got {ratio!r}")
    return tuple(float(r) for r in items)


def _check_samples(samples, x: mx.array, nd: int, layer: str) -> mx.array:
    if not isinstance(samples, mx.array):
        raise TypeError(f"[{layer}] 'random_samples' must be an mx.array, but got {type(samples).__name__}")
    if samples.dtype != x.dtype:
        raise ValueError(f"[{layer}] Expect _random_samples to have the same dtype as input (got {samples.dtype} "
                         f"for input {x.dtype})")
    if samples.ndim != 3:
        raise ValueError(f"[{layer}] Expect _random_samples to have 3 dimensions, got {samples.ndim}")
    if samples.shape[0] < x.shape[0]:
        raise ValueError(f"[{layer}] Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != x.shape[-1]:
        raise ValueError(f"[{layer}] Expect _random_samples.size(1) equals to input channel size.")
    if samples.shape[2] != nd:
        raise ValueError(f"[{layer}] Expect _random_samples.size(2) equals to {nd}; got {samples.shape[2]}.")
    return samples[: x.shape[0]]


@plan_cache
def _plan(nd, kernel_size, output_size, output_ratio, layer, shape, dtype) -> tuple:
    """The checks that need no data, in torch's order, once per signature: ``(kernel, out, batched)``. Torch checks
    the window sizes (its meta function) before the samples (its kernel)."""
    fn = f"fractional_max_pool{nd}d"
    if output_size is None and output_ratio is None:
        raise ValueError(f"[{layer}] {fn} requires specifying either an output_size or an output_ratio")
    kernel = _tuple_arg(kernel_size, nd, "kernel_size", fn, layer)
    if output_size is None:
        if nd == 2 and not isinstance(output_ratio, (list, tuple)):
            # torch's functional 2d calls len() on the ratio before pairing it (its module pairs first)
            raise TypeError(f"[{layer}] object of type '{type(output_ratio).__name__}' has no len() "
                            f"(torch's {fn} needs a tuple output_ratio; the module accepts a float)")
        ratio = _ratio_tuple(output_ratio, nd, layer)
        if len(shape) >= nd:
            output_size = [int(length * r) for length, r in zip(shape[len(shape) - 1 - nd : len(shape) - 1], ratio)]
    out = _tuple_arg(output_size, nd, "output_size", fn, layer)

    where = f"{fn}()" if nd == 2 else "fractional_max_pool3d_out()"  # torch's 3d kernel names itself so
    _, batched = check_float_pool_input(ShapeOnly(shape, dtype), nd, layer, where, fn, "but got")
    full = shape if batched else (1,) + tuple(shape)
    plane = tuple(full[1 : 1 + nd])
    # torch's order of the size checks: 2d height, width; 3d time, width, height. 3d's check is strict.
    order = [0, 1] if nd == 2 else [0, 2, 1]
    for dim in order:
        too_large = out[dim] + kernel[dim] - 1 > plane[dim] if nd == 2 else out[dim] + kernel[dim] - 1 >= plane[dim]
        if too_large:
            word = _DIM_WORDS[nd][dim]
            raise ValueError(f"[{layer}] {where}: pool {word} {kernel[dim]} too large relative to input {word} "
                             f"{plane[dim]}")
    if any(o < 0 for o in out):
        raise ValueError(f"[{layer}] Trying to create tensor with negative dimension {min(out)}: "
                         f"{[full[0], full[-1], *out]} (torch layout)")
    return kernel, out, batched


def fractional_max_pool(
    x: mx.array,
    nd: int,
    kernel_size,
    output_size=None,
    output_ratio=None,
    return_indices: bool = False,
    random_samples=None,
    *,
    layer: str,
):
    """N-d fractional max pooling (nd = 2 or 3) on channels-last ``(N, *spatial, C)`` or ``(*spatial, C)``."""
    if not isinstance(x, mx.array):
        fn = f"fractional_max_pool{nd}d"
        if output_size is None and output_ratio is None:
            raise ValueError(f"[{layer}] {fn} requires specifying either an output_size or an output_ratio")
        _tuple_arg(kernel_size, nd, "kernel_size", fn, layer)
        raise TypeError(f"[{layer}] expected an mx.array input, but got {type(x).__name__}")
    kernel, out, batched = _plan(nd, kernel_size, output_size, output_ratio, layer, tuple(x.shape), x.dtype)
    xb = x if batched else x[None]
    plane = tuple(xb.shape[1 : 1 + nd])

    if random_samples is None:
        samples = mx.random.uniform(shape=(xb.shape[0], xb.shape[-1], nd), dtype=xb.dtype)
    else:
        samples = _check_samples(random_samples, xb, nd, layer)

    # sample columns per dim: 2d stores [W, H], 3d stores [T, H, W]
    columns = [1, 0] if nd == 2 else [0, 1, 2]
    if (xb.size > 0 and all(out) and all(k > 0 for k in kernel) and math.prod(plane) < 2**31
            and _native.active("fractional max pool")):
        # one pass that also computes the intervals from the samples (layers/csrc)
        result = _native.fractional_max(xb, samples, kernel, out, columns, return_indices)
        if batched:
            return result
        return tuple(r[0] for r in result) if return_indices else result[0]
    starts = [interval_starts(samples[:, :, columns[dim]], plane[dim], out[dim], kernel[dim]) for dim in range(nd)]
    if any(k <= 0 for k in kernel):
        result = _empty_kernel(xb, FractionalWindows(plane, kernel, out, starts), return_indices)
    else:
        # samples outside [0, 1) make torch read out of bounds; keep the gathers inside the input instead
        starts = [mx.clip(s, 0, length - k) for s, length, k in zip(starts, plane, kernel)]
        result = window_max(xb, FractionalWindows(plane, kernel, out, starts), return_indices)
    if batched:
        return result
    return tuple(r[0] for r in result) if return_indices else result[0]


def _empty_kernel(x, spec: FractionalWindows, return_indices: bool):
    """Torch's functional (and 2d module) accept ``kernel_size <= 0``: every window is empty, the value is -inf and
    the index the window's start. No gradient flows."""
    shape = (x.shape[0],) + spec.out_spatial + (x.shape[-1],)
    values = mx.full(shape, float("-inf"), dtype=x.dtype)
    if not return_indices:
        return values
    return values, mx.broadcast_to(spec.first_index(mx.int32), shape).astype(mx.int64)


# ---------------------------------------------------------------------------------------------------- functional
def fractional_max_pool2d(
    input, kernel_size, output_size=None, output_ratio=None, return_indices=False, random_samples=None
):
    """Fractional 2-d max pooling over ``(N, H, W, C)`` or ``(H, W, C)``; see :class:`FractionalMaxPool2d`.

    ``random_samples``: torch's ``_random_samples``, ``(N, C, 2)`` in the input dtype (``[..., 0]`` drives W).
    """
    return fractional_max_pool(
        input, 2, kernel_size, output_size, output_ratio, return_indices, random_samples, layer="fractional_max_pool2d"
    )


def fractional_max_pool3d(
    input, kernel_size, output_size=None, output_ratio=None, return_indices=False, random_samples=None
):
    """Fractional 3-d max pooling over ``(N, D, H, W, C)`` or ``(D, H, W, C)``; see :class:`FractionalMaxPool3d`.

    ``random_samples``: torch's ``_random_samples``, ``(N, C, 3)`` in the input dtype (order T, H, W).
    """
    return fractional_max_pool(
        input, 3, kernel_size, output_size, output_ratio, return_indices, random_samples, layer="fractional_max_pool3d"
    )


# ---------------------------------------------------------------------------------------------------- modules
class _FractionalMaxPoolNd(nn.Module):
    nd = 0

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False, _random_samples=None):
        super().__init__()
        name = type(self).__name__
        self.kernel_size = _tuple_arg(kernel_size, self.nd, "kernel_size", name, name)
        if self.nd == 3 and any(k <= 0 for k in self.kernel_size):
            raise ValueError(f"[{name}] kernel_size must be greater than 0, but got {kernel_size}")
        if output_size is None and output_ratio is None:
            raise ValueError(f"[{name}] {name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError(f"[{name}] only one of output_size and output_ratio may be specified")
        self.output_size = None if output_size is None else _tuple_arg(output_size, self.nd, "output_size", name, name)
        self.output_ratio = None
        if output_ratio is not None:
            self.output_ratio = _ratio_tuple(output_ratio, self.nd, name)
            if not all(0 < r < 1 for r in self.output_ratio):
                raise ValueError(f"[{name}] output_ratio must be between 0 and 1 (got {output_ratio})")
        self.return_indices = bool(return_indices)
        self._random_samples = _random_samples

    def _extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, output_size={self.output_size}, "
                f"output_ratio={self.output_ratio}, return_indices={self.return_indices}")

    def __call__(self, x: mx.array, random_samples=None):
        samples = self._random_samples if random_samples is None else random_samples
        return fractional_max_pool(
            x, self.nd, self.kernel_size, self.output_size, self.output_ratio, self.return_indices, samples,
            layer=type(self).__name__,
        )


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """Torch's ``nn.FractionalMaxPool2d`` on channels-last input.

    Args:
        kernel_size (int or tuple): window size ``(kH, kW)``.
        output_size (int or tuple, optional): ``(H_out, W_out)``. Give this or ``output_ratio``.
        output_ratio (float or tuple, optional): ``H_out = int(H * r)``, in ``(0, 1)``.
        return_indices (bool, optional): also return int64 flat indices ``h*W + w`` per plane. Default: ``False``.
        _random_samples (mx.array, optional): fixed samples ``(N, C, 2)`` (``[..., 0]`` drives W), as torch's.

    ``__call__(x, random_samples=None)``: per-call samples override the module's; without either, samples come from
    ``mlx.random``. Shape: ``(N, H, W, C)`` or ``(H, W, C)`` -> ``(N, H_out, W_out, C)`` or unbatched.

    Example:
        >>> pool = FractionalMaxPool2d(2, output_size=(5, 4))
        >>> pool(mx.random.normal((2, 10, 9, 3))).shape
        (2, 5, 4, 3)
    """

    nd = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """Torch's ``nn.FractionalMaxPool3d`` on channels-last input.

    Args:
        kernel_size (int or tuple): window size ``(kT, kH, kW)``, each > 0.
        output_size (int or tuple, optional): ``(T_out, H_out, W_out)``. Give this or ``output_ratio``.
        output_ratio (float or tuple, optional): ``T_out = int(T * r)``, in ``(0, 1)``.
        return_indices (bool, optional): also return int64 flat indices ``(t*H + h)*W + w``. Default: ``False``.
        _random_samples (mx.array, optional): fixed samples ``(N, C, 3)`` (order T, H, W), as torch's.

    ``__call__(x, random_samples=None)`` as in :class:`FractionalMaxPool2d`.
    Shape: ``(N, D, H, W, C)`` or ``(D, H, W, C)`` -> ``(N, D_out, H_out, W_out, C)`` or unbatched.

    Example:
        >>> pool = FractionalMaxPool3d(2, output_ratio=0.5)
        >>> pool(mx.random.normal((1, 8, 8, 8, 3))).shape
        (1, 4, 4, 4, 3)
    """

    nd = 3
