"""Linear resampling (torch's ``F.interpolate`` with ``mode="linear"/"bilinear"/"trilinear"``), channels-last.

Layout: ``x`` is ``(N, *S, C)`` with 1 to 3 spatial dims ``S``; the result is ``(N, *size, C)``. The taps follow
torch's ``upsample_linear``/``bilinear2d``/``trilinear3d`` CPU kernels: per dim, the coordinate scale
(``area_pixel_compute_scale``: ``(in - 1) / (out - 1)`` with ``align_corners``, else ``1 / scale_factor`` when a
scale is given, else ``in / out``) and source position are computed in float32 (float64 for float64 input), an
unchanged size reads each position with weights (1, 0), and every output is a weighted sum of its two taps per dim, the last dim innermost:
``(x[h0, w0] lw0 + x[h0, w1] lw1) lh0 + (x[h1, w0] lw0 + x[h1, w1] lw1) lh1``. A tap with weight 0 is still
multiplied, so an inf or NaN reaches exactly the outputs torch's reaches. 16-bit inputs are computed in float32 and
rounded once (torch's CPU kernels do the same).

On the CPU with the native kernels built, the 2-d case of 16/32-bit floats is one multi-threaded pass
(``csrc/resample_kernels.h``) and so is its gradient (a gather over the taps that read each input row); elsewhere
the dims are resampled one after another with gathers and multiply-adds (two gathers and three elementwise passes
per dim), with the same arithmetic.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from . import _native
from ._precision import HALF

__all__ = ["interpolate_linear", "linear_taps"]


def linear_taps(in_size: int, out_size: int, scale_factor=None, align_corners: bool = False, dtype=np.float32):
    """torch's two taps per output along one dim: ``(i0, i1, l1)`` (int64, int64, ``dtype``), output ``o`` reads
    ``i0[o]`` with weight ``1 - l1[o]`` and ``i1[o]`` with ``l1[o]``; ``dtype`` is torch's opmath type (float32
    for 16/32-bit input, float64 for float64)."""
    f = np.dtype(dtype).type
    dst = np.arange(out_size, dtype=dtype)
    if in_size == out_size:  # torch copies (even with align_corners or a scale factor)
        index = np.arange(out_size, dtype=np.int64)
        return index, index, np.zeros(out_size, dtype=dtype)
    if align_corners:
        scale = f(in_size - 1) / f(out_size - 1) if out_size > 1 else f(0)
        src = dst * scale
    else:
        if scale_factor is not None and scale_factor > 0:
            scale = f(1.0 / scale_factor)
        else:
            scale = f(in_size) / f(out_size)
        src = np.maximum(scale * (dst + f(0.5)) - f(0.5), f(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    l1 = np.clip(src - i0.astype(dtype), f(0), f(1)).astype(dtype)
    return i0, i1, l1


def _check(x, size, scale_factors):
    if not isinstance(x, mx.array):
        raise TypeError(f"[interpolate_linear] 'x' must be an mx.array but got {type(x).__name__}")
    if not 3 <= x.ndim <= 5:
        raise ValueError(f"[interpolate_linear] 'x' must be channels-last (N, *spatial, C) with 1 to 3 spatial dims "
                         f"but got shape {x.shape}")
    if not mx.issubdtype(x.dtype, mx.floating):
        raise TypeError(f"[interpolate_linear] 'x' must be a floating-point array but got {x.dtype}")
    nd = x.ndim - 2
    size = [int(s) for s in size]
    if len(size) != nd or min(size) < 1:
        raise ValueError(f"[interpolate_linear] 'size' must be {nd} positive ints for a {nd}-d input but got {size}")
    if min(x.shape[1:-1]) < 1:
        raise ValueError(f"[interpolate_linear] 'x' must have non-empty spatial dims but got shape {x.shape}")
    if scale_factors is not None:
        scale_factors = list(scale_factors)
        if len(scale_factors) != nd:
            raise ValueError(f"[interpolate_linear] 'scale_factors' must have {nd} entries but got {scale_factors}")
    return size, scale_factors


def _weights(values: np.ndarray, dtype) -> mx.array:
    return mx.array(values, dtype=mx.float64) if dtype == mx.float64 else mx.array(values.astype(np.float32))


def interpolate_linear(x: mx.array, size, *, align_corners: bool = False, scale_factors=None) -> mx.array:
    """``F.interpolate(x, size, mode="(bi|tri)linear", align_corners=...)`` of channels-last ``x`` ``(N, *S, C)``.

    Args:
        x (mx.array): ``(N, *S, C)``, 1 to 3 spatial dims, floating point.
        size (sequence of int): output spatial size, one positive int per spatial dim.
        align_corners (bool, optional): torch's ``align_corners``. Default: ``False``.
        scale_factors (sequence of float or None, optional): the scale factors torch was given (they set the
            coordinate scale when ``align_corners`` is False; ``None`` entries or ``None``: ``in / out``).
    """
    size, scale_factors = _check(x, size, scale_factors)
    opmath = np.float64 if x.dtype == mx.float64 else np.float32
    taps = [linear_taps(x.shape[1 + i], size[i], scale_factors[i] if scale_factors else None, bool(align_corners),
                        opmath) for i in range(len(size))]
    if len(size) == 2 and x.dtype != mx.float64 and _native.active("bilinear2d"):
        (h0, h1, hl), (w0, w1, wl) = taps
        return _native.bilinear2d(x, h0.tolist(), h1.tolist(), hl.tolist(), w0.tolist(), w1.tolist(), wl.tolist())
    dtype = x.dtype
    y = x.astype(mx.float32) if dtype in HALF else x
    for i in reversed(range(len(size))):  # the last dim innermost, as torch
        i0, i1, l1 = taps[i]
        axis = 1 + i
        shape = [1] * y.ndim
        shape[axis] = size[i]
        w1 = _weights(l1, y.dtype).reshape(shape)
        w0 = _weights((opmath(1) - l1).astype(opmath), y.dtype).reshape(shape)
        y = mx.take(y, mx.array(i0.astype(np.int32)), axis=axis) * w0 + \
            mx.take(y, mx.array(i1.astype(np.int32)), axis=axis) * w1
    return y.astype(dtype) if dtype in HALF else y
