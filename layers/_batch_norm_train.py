"""Batch normalization with the batch's statistics, with torch's backward formula as its VJP (issue 15: memory).

``(N, *spatial, C)`` or ``(N, C)`` channels-last input, statistics over every axis but the last. Differentiated
through MLX's ops, the normalization saved four whole-input arrays for the backward (``x - mean`` for the variance
and again for the output, the normalized input, and the input); R3D-18's training step at batch 8 held ~3 GB of
them. The VJP here keeps only the input (and the output the caller keeps anyway), and recomputes the normalized
input in the backward, as torch's ``native_batch_norm_backward`` does:
``dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))``, ``dw = sum(dy * xhat)``, ``db = sum(dy)``.

With Porter's native kernels on the CPU, one primitive (``batch_norm_train`` in ``csrc/norm_ops.cpp``): GroupNorm's
kernel with one group per channel over ``x`` viewed as ``(1, positions, C)``, writing the mean and variance too;
its gradient is the native ``norm_grad`` (the same formula, threaded, statistics recomputed from the input; second
derivatives and jvp in MLX ops). Through MLX's ops the forward was ~6 single-threaded passes and the backward ~8,
each holding a whole-input temporary.
"""

from __future__ import annotations

import functools

import mlx.core as mx

from . import _export, _native
from ._blocked_sum import blocked_sum
from ._precision import upcast


def batch_norm_train(x: mx.array, weight, bias, eps: float):
    """``(y, mean, var)``: ``x`` normalized with its batch mean and biased variance (float32 at least), then
    ``weight * . + bias`` when ``weight`` is not None; ``y`` float32 (the caller rounds it to ``x``'s dtype; the native
    path returns it rounded already). ``mean`` and ``var`` (shape ``(C,)``) are for the running statistics: both
    paths take their cotangents as zero, so the caller must not differentiate through them (it updates buffers with
    ``mx.stop_gradient`` of them)."""
    if _export.active():  # a custom VJP cannot be serialized; the same forward in plain ops
        return _forward(x, weight, bias, eps)
    if x.size and _native.active("batch norm (batch statistics)"):
        return _native_forward(x, weight, bias, eps)
    if weight is None:
        return _function(float(eps), False)(x)
    return _function(float(eps), True)(x, weight, bias)


def _native_forward(x, weight, bias, eps):
    """``(y, mean, var)`` by the native kernel; ``y`` in ``x``'s dtype (computed in float32 at least, rounded once)."""
    c = x.shape[-1]
    y, mean, var = _native.kernels().batch_norm_train(x.reshape(1, -1, c), weight, bias, float(eps))
    return y.reshape(x.shape), mean.reshape(c), var.reshape(c)


def _forward(x, weight, bias, eps):
    axes = tuple(range(x.ndim - 1))
    xs = upcast(x)
    count = x.size // x.shape[-1]  # the statistics over N x spatial in blocks (MLX's one accumulator errs ~1e-5)
    mean = blocked_sum(xs, axes) / count
    var = blocked_sum(mx.square(xs - mean), axes) / count
    y = (xs - mean) * mx.rsqrt(var + eps)
    if weight is not None:
        y = upcast(weight) * y + upcast(bias)
    return y, mean, var


@functools.lru_cache(maxsize=None)
def _function(eps: float, affine: bool):
    if affine:
        @mx.custom_function
        def normalize(x, weight, bias):
            return _forward(x, weight, bias, eps)
    else:
        @mx.custom_function
        def normalize(x):
            return _forward(x, None, None, eps)

    @normalize.vjp
    def normalize_vjp(primals, cotangents, outputs):
        x = primals[0] if affine else primals  # MLX hands a one-input function's primal alone
        dy = upcast(cotangents[0])
        _, mean, var = outputs
        axes = tuple(range(x.ndim - 1))
        invstd = mx.rsqrt(var + eps)
        xhat = (upcast(x) - mean) * invstd
        sum_dy = blocked_sum(dy, axes)
        sum_dy_xhat = blocked_sum(dy * xhat, axes)
        count = x.size // x.shape[-1]
        scale = invstd if not affine else upcast(primals[1]) * invstd
        dx = (scale * (dy - sum_dy / count - xhat * (sum_dy_xhat / count))).astype(x.dtype)
        if not affine:
            return dx
        return dx, sum_dy_xhat.astype(primals[1].dtype), sum_dy.astype(primals[2].dtype)

    return normalize
