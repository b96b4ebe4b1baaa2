"""add, subtract, multiply, divide: MLX's, with large float32 operands split over threads.

MLX's CPU binary ops are vectorized but run on the stream's one thread: residual adds of large activations
(ResNet-50's bottleneck ends at batch 8, DeepLabV3's 65x65x2048 maps), Swin's attention-bias and mask adds over
(windows, heads, 49, 49). On the CPU with Porter's native kernels built, float32 operands whose broadcast output has
at least :data:`MIN_ELEMENTS` elements run as one native node (``csrc/binary_ops.cpp``) over Porter's threads,
numpy broadcasting read through stride-0 dims (no broadcast copy), the output in an operand's buffer when nothing else
holds it. Same IEEE operation per element: the same bits as MLX's. Everything else is MLX's op.
"""

from __future__ import annotations

import mlx.core as mx

from . import _native
from ._utils import broadcast_size

# Outputs smaller than this stay on MLX's op (below it the pool is not woken anyway). 0 disables the native path.
MIN_ELEMENTS = 1 << 15

_OPS = {"add": (0, mx.add), "subtract": (1, mx.subtract), "multiply": (2, mx.multiply), "divide": (3, mx.divide)}


def _binary(name: str, a, b):
    code, mlx_op = _OPS[name]
    if (MIN_ELEMENTS and isinstance(a, mx.array) and isinstance(b, mx.array) and a.dtype == mx.float32
            and b.dtype == mx.float32 and broadcast_size(a.shape, b.shape) >= MIN_ELEMENTS
            and _native.active("binary")):
        return _native.kernels().binary(a, b, code)
    return mlx_op(a, b)


def add(a, b):
    """``a + b`` with numpy broadcasting (arrays or numbers, MLX's promotion)."""
    return _binary("add", a, b)


def subtract(a, b):
    """``a - b`` with numpy broadcasting."""
    return _binary("subtract", a, b)


def multiply(a, b):
    """``a * b`` with numpy broadcasting."""
    return _binary("multiply", a, b)


def divide(a, b):
    """``a / b`` with numpy broadcasting (true division)."""
    return _binary("divide", a, b)
