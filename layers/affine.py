"""Per-channel multiply-add over the last (channel) axis: eval batch norm's ``x * alpha + beta``, channels-last.

On the CPU with Porter's native kernels built (and not exporting), float16/bfloat16/float32 inputs take one
multi-threaded pass (``layers/csrc``) that reads ``alpha``/``beta`` as float32 and returns ``x``'s dtype. Elsewhere
the same numbers come from MLX ops: a 16-bit ``x`` is computed in float32 and rounded once (as the native pass and
torch's half-precision CPU kernels do); float64 (the kernel's parameters are float32) and other inputs run MLX's
broadcasting multiply and add.
"""

from __future__ import annotations

import mlx.core as mx

from . import _native

_NATIVE_DTYPES = (mx.float32, mx.float16, mx.bfloat16)


def channel_affine(x: mx.array, alpha: mx.array, beta: mx.array) -> mx.array:
    """``x * alpha + beta`` with ``alpha``/``beta`` of shape ``(C,)`` broadcast over the last axis of ``x``.

    Args:
        x (mx.array): ``(..., C)``, channels last (``(N, *spatial, C)`` for a batch norm).
        alpha (mx.array): ``(C,)`` per-channel scale.
        beta (mx.array): ``(C,)`` per-channel shift.

    Returns:
        mx.array: the shape of ``x``; ``x``'s dtype for 16/32-bit floats. Differentiable in all three.

    Example:
        >>> channel_affine(mx.ones((2, 4, 4, 3)), mx.array([1.0, 2.0, 3.0]), mx.zeros(3))[0, 0, 0]
        array([1, 2, 3], dtype=float32)
    """
    for name, value in (("x", x), ("alpha", alpha), ("beta", beta)):
        if not isinstance(value, mx.array):
            raise TypeError(f"[channel_affine] '{name}' must be an mx.array but got {type(value).__name__}")
    if x.dtype in _NATIVE_DTYPES and _native.active("batch norm (channel affine)"):
        return _native.channel_affine(x, alpha, beta)  # one multi-threaded pass (layers/csrc)
    if x.dtype in (mx.float16, mx.bfloat16):
        wide = x.astype(mx.float32) * alpha.astype(mx.float32) + beta.astype(mx.float32)
        return wide.astype(x.dtype)
    return x * alpha + beta
