"""Linear: torch's ``nn.Linear`` (``y = x @ weight.T + bias``), with native paths for one row and for a short K.

MLX's CPU matmul gives every shape to BLAS GEMM; for one row (a batch-1 classifier head) that costs 2-3x torch's
GEMV on large layers (AlexNet's 9216 -> 4096: 13.6 ms against torch's 5.5, one thread), because the weight is
streamed more than once. On the CPU with Porter's native kernels built, a float32 input with one row (any leading
shape whose product is 1) runs ``csrc/linear_kernels.h`` instead: each weight row read once, vectorized, split over
threads. Many rows with a short ``in_features`` (at most :data:`SMALL_K_MAX`: Swin's and ConvNeXt's first stage,
96 -> 288/384; or up to :data:`SMALL_K_LONG_MAX` into few outputs: their 384 -> 96) are output-bound GEMMs where
OpenBLAS runs 1.3-1.4x torch's time on AMD Zen 3: they run that file's register-tiled GEMM (bias in the tile, the
output written once; switch :data:`SMALL_K`). Other float32 products are one native node calling MLX's own BLAS
(:data:`BLAS_NODE`). Everything else (other dtypes, other devices, export) is MLX's ``addmm``, as ``mlx.nn.Linear``.
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from . import _blocked_sum, _grad_order, _native


# The short-K GEMM (csrc/linear_kernels.h small_k_linear) for float32: in_features <= SMALL_K_MAX with at least
# SMALL_K_MIN_ROWS rows, or in_features <= SMALL_K_LONG_MAX with few outputs (<= SMALL_K_LONG_OUT: the packed weight
# stays in L2) and at least SMALL_K_LONG_ROWS rows. Measured against OpenBLAS's sgemm + MLX's bias copy, 1 thread, AMD
# Zen 3 (docs/BENCHMARKS.md, perf12): 3136 x 96 -> 288/384 0.74-0.75x its time, 3136 x 64 -> 256 0.85, 12544 x 16 ->
# 96 0.52, 3136 x 384 -> 96 0.76; 784 x 128-192 -> 512-768 1.00-1.05, 197 x 768 -> 2304 1.49 (long K: BLAS's blocking
# wins). SMALL_K False: MLX's addmm everywhere (an A/B switch).
SMALL_K = True
SMALL_K_MAX = 128
SMALL_K_MIN_ROWS = 256
SMALL_K_LONG_MAX = 384
SMALL_K_LONG_OUT = 128
SMALL_K_LONG_ROWS = 2048


# Float32 products that no kernel above takes run as one native node calling the BLAS MLX calls (its cblas_sgemm:
# csrc/linear_ops.cpp kind kBlas) when this is on: MLX's matmul/addmm of an (..., K) input and a transposed weight is
# 3-5 graph nodes (flatten/reshape, transpose, matmul, unflatten), each ~10 us on the CPU stream, ~4 per 1x1 conv and
# linear in a batch-1 forward. Same GEMM call, same numbers. False: MLX's ops (an A/B switch).
BLAS_NODE = True


def _float32_product(x: mx.array, weight: mx.array, bias: Optional[mx.array]) -> bool:
    """``x (..., K)``, ``weight (O, ...)`` holding O * K elements, ``bias`` ``(O,)`` or None, all float32, non-empty."""
    return (x.dtype == mx.float32 and weight.dtype == mx.float32 and (bias is None or bias.dtype == mx.float32)
            and x.ndim >= 1 and x.shape[-1] > 0 and x.size > 0 and weight.ndim >= 2 and weight.shape[0] > 0
            and weight.size == weight.shape[0] * x.shape[-1])


def _small_k(x: mx.array, weight: mx.array, bias: Optional[mx.array]) -> bool:
    if not (SMALL_K and _float32_product(x, weight, bias)):
        return False
    k, rows, out = x.shape[-1], x.size // x.shape[-1], weight.shape[0]
    short = k <= SMALL_K_MAX and rows >= SMALL_K_MIN_ROWS
    narrow = k <= SMALL_K_LONG_MAX and out <= SMALL_K_LONG_OUT and rows >= SMALL_K_LONG_ROWS
    return (short or narrow) and _native.active("linear")


def small_k_product(x: mx.array, weight: mx.array, bias: Optional[mx.array] = None) -> Optional[mx.array]:
    """``x @ weight.T (+ bias)`` for ``x (..., K)`` and ``weight (O, ...)`` read as ``(O, K)`` (a 1x1 conv's
    ``(O, 1, 1, K)``) by the short-K GEMM when it applies (float32, native kernels, the sizes above), else ``None``
    (the caller's own product); output ``(..., O)``."""
    if not _small_k(x, weight, bias):
        return None
    return _native.kernels().small_k_linear(x, weight, bias)


def blas_product(x: mx.array, weight: mx.array, bias: Optional[mx.array] = None) -> Optional[mx.array]:
    """The same product as one native node over MLX's own BLAS (:data:`BLAS_NODE`; float32, native kernels, MLX's
    sgemm found, every size a BLAS int), else ``None``."""
    if not (BLAS_NODE and _float32_product(x, weight, bias) and x.size // x.shape[-1] < 2**31
            and max(x.shape[-1], weight.shape[0]) < 2**31 and _native.active("linear") and _native._fused_blas()):
        return None
    return _native.kernels().blas_linear(x, weight, bias)


def _one_row(x: mx.array, weight: mx.array, bias: Optional[mx.array]) -> bool:
    # not an empty product: with in_features 0 every (..., 0) input has "one row" of size 0, and the kernel left
    # the output unwritten (whatever the allocator held) where torch gives the bias
    return (x.dtype == mx.float32 and weight.dtype == mx.float32 and (bias is None or bias.dtype == mx.float32)
            and x.ndim >= 1 and x.size == x.shape[-1] > 0 and weight.ndim == 2 and weight.shape[0] > 0
            and _native.active("linear"))


def linear(x: mx.array, weight: mx.array, bias: Optional[mx.array] = None) -> mx.array:
    """``x @ weight.T + bias`` over the last axis of ``x``: torch's ``F.linear``.

    Args:
        x (mx.array): input ``(*, in_features)``.
        weight (mx.array): ``(out_features, in_features)``, torch's layout.
        bias (mx.array, optional): ``(out_features,)``. Default: ``None``.

    Returns ``(*, out_features)``. Example::

        y = linear(mx.ones((1, 9216)), mx.zeros((4096, 9216)))   # (1, 4096), native on the CPU
    """
    if weight.ndim != 2:
        raise ValueError(f"[linear] 'weight' must be (out_features, in_features) but got shape {tuple(weight.shape)}.")
    if x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"[linear] 'input' must end in in_features={weight.shape[1]} but got shape {tuple(x.shape)}.")
    if _one_row(x, weight, bias):
        return _native.kernels().small_linear(x, weight, bias)
    if bias is None:
        return _product(x, weight, None)
    # over many rows the bias gradient is a blocked sum (MLX's one accumulator per output errs ~1e-5 there)
    return _blocked_sum.bias_inside((*x.shape[:-1], weight.shape[0]), x.dtype, bias, lambda b: _product(x, weight, b))


def _product(x: mx.array, weight: mx.array, bias: Optional[mx.array]) -> mx.array:
    """``x @ weight.T (+ bias)``: the short-K GEMM, the BLAS node, else MLX's matmul/addmm."""
    if _small_k(x, weight, bias):
        return _native.kernels().small_k_linear(x, weight, bias)
    y = blas_product(x, weight, bias)
    if y is not None:
        return y
    if bias is not None and x.shape[-1] == 0:  # MLX's addmm cannot reshape a 3-d or wider product of in_features 0
        return x @ weight.T + bias
    return x @ weight.T if bias is None else mx.addmm(bias, x, weight.T)


class Linear(nn.Linear):
    """``mlx.nn.Linear`` (same parameters ``weight`` ``(out_features, in_features)`` and ``bias``, same
    quantization) computed by :func:`linear`: input ``(*, in_features)``, output ``(*, out_features)``.

    Args:
        input_dims (int): in_features.
        output_dims (int): out_features.
        bias (bool, optional): add a learnable bias. Default: ``True``.

    Example::

        layer = Linear(9216, 4096)
        y = layer(mx.ones((1, 9216)))   # (1, 4096)
    """

    def __call__(self, x: mx.array) -> mx.array:
        return linear(*_grad_order.weights_first(self, x, self["weight"], self["bias"] if "bias" in self else None))
