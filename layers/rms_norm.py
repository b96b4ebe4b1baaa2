"""RMSNorm with torch's semantics (``nn.RMSNorm`` / ``F.rms_norm``) over the trailing dims of the array.

``y = x * rsqrt(mean(x^2 over the normalised dims) + eps) * weight``. As torch computes it: float16/bfloat16 inputs
in float32, rounded to the input's dtype *before* the weight multiplies; ``eps=None`` means the compute dtype's
machine epsilon (float32's ``1.19e-7`` for float32 and half inputs). Layout: any; the normalised dims are the last
``len(normalized_shape)`` axes of the array (channels-last: ``RMSNorm(C)`` normalises each position's channels).
This is what the converter's ``rms_norm`` kernel and the layer a converted ``nn.RMSNorm`` becomes compute.
"""

from __future__ import annotations

import numbers
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from . import _blocked_sum

__all__ = ["RMSNorm", "rms_norm"]

_HALF = (mx.float16, mx.bfloat16)


def _shape(normalized_shape, what: str) -> tuple:
    try:
        shape = (normalized_shape,) if isinstance(normalized_shape, numbers.Integral) else tuple(normalized_shape)
    except TypeError:
        shape = ()
    if not shape or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d <= 0 for d in shape):
        raise ValueError(f"[{what}] 'normalized_shape' must be a positive int or a tuple of them but got "
                         f"{normalized_shape!r}")
    return tuple(int(d) for d in shape)


def _check_eps(eps, what: str):
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0):
        raise ValueError(f"[{what}] 'eps' must be a non-negative number or None but got {eps!r}")


def rms_norm(x: mx.array, normalized_shape, weight: Optional[mx.array] = None,
             eps: Optional[float] = None) -> mx.array:
    """torch's ``F.rms_norm`` over the trailing ``normalized_shape`` dims of ``x`` (which must end with them)."""
    shape = _shape(normalized_shape, "rms_norm")
    _check_eps(eps, "rms_norm")
    if tuple(x.shape[x.ndim - len(shape):]) != shape or x.ndim < len(shape):
        raise ValueError(f"[rms_norm] input of shape {tuple(x.shape)} does not end with normalized_shape {shape}")
    if weight is not None and tuple(weight.shape) != shape:
        raise ValueError(f"[rms_norm] 'weight' must have shape {shape} but got {tuple(weight.shape)}")
    xf = x.astype(mx.float32) if x.dtype in _HALF else x
    if eps is None:
        eps = float(mx.finfo(xf.dtype).eps)
    axes = list(range(x.ndim - len(shape), x.ndim))
    out = (xf * mx.rsqrt(mx.mean(xf * xf, axis=axes, keepdims=True) + eps)).astype(x.dtype)
    # the weight's gradient sums over every row: in blocks (MLX's one accumulator errs ~1e-5 over 64 Ki rows)
    return out if weight is None else _blocked_sum.affine(out, weight, None)


class RMSNorm(nn.RMSNorm):
    """torch's ``nn.RMSNorm`` over the trailing dims of the array; an :class:`mlx.nn.RMSNorm` (same ``weight`` name)
    with torch's options.

    Args:
        normalized_shape (int or tuple): the trailing dims normalised, as the array is laid out.
        eps (float, optional): added to the mean square; ``None`` (torch's default): the compute dtype's epsilon.
        elementwise_affine (bool, optional): a learnable ``weight`` of shape ``normalized_shape``. Default: ``True``.

    Shape: ``(*, *normalized_shape)`` -> same.

    Example:
        >>> norm = RMSNorm(64)
        >>> norm(mx.random.normal((2, 7, 64))).shape
        (2, 7, 64)
    """

    def __init__(self, normalized_shape, eps: Optional[float] = None, elementwise_affine: bool = True):
        shape = _shape(normalized_shape, "RMSNorm")
        _check_eps(eps, "RMSNorm")
        nn.Module.__init__(self)  # mlx.nn.RMSNorm's own __init__ takes one int and always has a weight
        if elementwise_affine:
            self.weight = mx.ones(shape)
        self.eps = eps
        self.normalized_shape = shape

    def _extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={'weight' in self}"

    def __call__(self, x: mx.array) -> mx.array:
        return rms_norm(x, self.normalized_shape, self.weight if "weight" in self else None, self.eps)
