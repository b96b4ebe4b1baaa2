"""Linear: torch's ``nn.Linear`` (``y = x @ weight.T + bias``), with a native path for a single input row.

MLX's CPU matmul gives every shape to BLAS GEMM; for one row (a batch-1 classifier head) that costs 2-3x torch's
GEMV on large layers (AlexNet's 9216 -> 4096: 13.6 ms against torch's 5.5, one thread), because the weight is
streamed more than once. On the CPU with Porter's native kernels built, a float32 input with one row (any leading
shape whose product is 1) runs ``csrc/linear_kernels.h`` instead: each weight row read once, vectorized, split over
threads. Everything else (more rows, other dtypes, other devices, export) is MLX's ``addmm``, as ``mlx.nn.Linear``.
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from . import _native


def _one_row(x: mx.array, weight: mx.array, bias: Optional[mx.array]) -> bool:
    return (x.dtype == mx.float32 and weight.dtype == mx.float32 and (bias is None or bias.dtype == mx.float32)
            and x.ndim >= 1 and x.size == x.shape[-1] and weight.ndim == 2 and _native.active("linear"))


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
        y = _native.kernels().small_linear(x.reshape(1, x.shape[-1]), weight, bias)
        return y.reshape(*x.shape[:-1], weight.shape[0])
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
        return linear(x, self["weight"], self["bias"] if "bias" in self else None)
