"""matmul: torch's ``matmul`` of operands with batch dims, ``(..., M, K) @ (..., K, N) -> (..., M, N)``.

MLX's CPU matmul calls BLAS once per batch entry on its stream's one thread: attention's per-head products (Swin-T's
64 windows x 3 heads of 49 x 32 x 49, ViT-B's 12 heads of 197 x 64 x 197 per image) run single-threaded, or wake
the BLAS's threads for microseconds of work per entry (ViT-B's scores at batch 8: 78 ms against torch's 3.9 ms on 2
threads). On the CPU with Porter's native kernels built, float32 products with at least two batch entries run as one
native node (``csrc/matmul_ops.cpp``) that splits the entries over Porter's threads, each GEMM the BLAS MLX calls;
an operand whose matrices are transposed views (``k.swapaxes(-1, -2)``) or broadcast over the batch is read in place.
Everything else (other dtypes, 1-d operands, one entry, empty products, other devices, export) is MLX's ``@``.
"""

from __future__ import annotations

import mlx.core as mx

from . import _native
from ._utils import broadcast_size

# False: MLX's ``@`` everywhere (an A/B switch).
BATCHED_NODE = True


def _native_product(a: mx.array, b: mx.array) -> bool:
    return (BATCHED_NODE and a.dtype == mx.float32 and b.dtype == mx.float32 and a.ndim >= 2 and b.ndim >= 2
            and max(a.ndim, b.ndim) >= 3 and a.shape[-1] == b.shape[-2] and a.size > 0 and b.size > 0
            and broadcast_size(a.shape[:-2], b.shape[:-2]) >= 2 and max(a.shape[-2], a.shape[-1], b.shape[-1]) < 2**31
            and _native.active("batched matmul") and _native._fused_blas())


def matmul(a: mx.array, b: mx.array) -> mx.array:
    """``a @ b`` with torch's ``matmul`` broadcasting over the batch dims.

    Args:
        a (mx.array): ``(..., M, K)`` (or 1-d ``(K,)``, MLX's ``@``).
        b (mx.array): ``(..., K, N)`` (or 1-d ``(K,)``).

    Returns ``(..., M, N)``, the batch dims broadcast. Example::

        scores = matmul(q, k.swapaxes(-1, -2))   # (B, H, L, S), one native node on the CPU
    """
    if _native_product(a, b):
        return _native.kernels().batched_matmul(a, b)
    return a @ b
