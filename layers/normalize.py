"""L2 normalisation along one axis with torch's semantics (``F.normalize(x, p=2, dim, eps)``).

:func:`l2_normalize` is ``x / max(||x||_2, eps)`` along ``axis``, rounding where torch's ops round: the norm is
summed in float32 (float64 for float64) and stored in x's dtype, the clamp to ``eps`` is stored in x's dtype (so a
zero float16 row is ``0 / 0`` = NaN, as torch's: 1e-12 is 0 in float16), and ``x / c`` is computed in float32 and
rounded once. A NaN anywhere in a row makes the row NaN; an inf makes the norm inf (the row is then 0, and NaN where
the inf was), as torch's.

On the CPU with Porter's native kernels built, a float32/float16/bfloat16 normalisation over the last axis is one
multi-threaded pass (``csrc/normalize_kernels.h``) and so is its gradient (torch's autograd formula for the ops
F.normalize is made of: the clamp's gradient is 0 below ``eps``, the norm's is 0 at a zero norm); any other axis,
float64 and other devices compute the same with MLX ops. The converter's ``l2_normalize`` kernel calls it for every
``F.normalize`` (and ``x / x.norm(dim, keepdim=True)``) a captured graph records (``converters/ir_fusion.py``).
"""

from __future__ import annotations

import math
import numbers

import mlx.core as mx

from . import _native

__all__ = ["l2_normalize"]

_NATIVE_DTYPES = frozenset((mx.float32, mx.float16, mx.bfloat16))
_FLOATS = _NATIVE_DTYPES | {mx.float64}


def l2_normalize(x: mx.array, axis: int = -1, eps: float = 1e-12) -> mx.array:
    """``x / max(||x||_2, eps)`` along ``axis`` (torch's ``F.normalize`` with ``p=2``).

    Args:
        x (mx.array): floating point, any shape with at least one dim (layout-free: ``axis`` is an array axis).
        axis (int, optional): the axis to normalise along. Default: ``-1``.
        eps (float, optional): the smallest divisor, a finite float >= 0. Default: ``1e-12``.

    Returns:
        mx.array: x's shape and dtype.

    Example:
        >>> q = mx.random.normal((1, 3, 49, 32))
        >>> l2_normalize(q).shape
        (1, 3, 49, 32)
    """
    if not isinstance(x, mx.array):
        raise TypeError(f"[l2_normalize] 'x' must be an mx.array but got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"[l2_normalize] 'x' must be floating point but got {x.dtype}")
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"[l2_normalize] 'axis' must be an int but got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"[l2_normalize] 'axis' must be in [{-x.ndim}, {x.ndim - 1}] for a {x.ndim}-d input but "
                         f"got {axis}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0 or math.isinf(eps):
        raise ValueError(f"[l2_normalize] 'eps' must be a finite float >= 0 but got {eps!r}")
    eps = float(eps)
    last = axis % x.ndim == x.ndim - 1
    if last and x.dtype in _NATIVE_DTYPES and x.size and _native.active("l2_normalize"):
        return _native.l2_normalize(x, eps)
    return _reference(x, axis, eps)


def _reference(x: mx.array, axis: int, eps: float) -> mx.array:
    """The same in MLX ops: float32 for 16-bit inputs, rounded to x's dtype where torch stores a value."""
    wide = mx.float64 if x.dtype == mx.float64 else mx.float32
    a = x.astype(wide)
    squares = mx.sum(a * a, axis=axis, keepdims=True)
    # a zero row's norm through a where: sqrt's gradient there would be 0 / 0 (torch's norm backward gives 0)
    zero = squares == 0  # (a NaN sum is not zero: it stays NaN)
    norm = mx.where(zero, 0, mx.sqrt(mx.where(zero, 1, squares))).astype(x.dtype)
    clamped = mx.where(mx.isnan(norm), norm, mx.maximum(norm, mx.array(eps, wide).astype(x.dtype)))
    return (a / clamped.astype(wide)).astype(x.dtype)
