"""Float32 statistics for 16-bit inputs, as torch's CPU half/bfloat16 kernels compute them.

torch computes normalisation statistics (batch/layer/group/instance norm), softmax and reductions of ``float16`` /
``bfloat16`` tensors in float32 and rounds the result once. MLX computes them in the input's dtype: the mean of
200,000 float16 values of about 0.5 is ``inf`` (the running sum passes float16's 65504), and a float16 LayerNorm of
activations with a large mean loses every digit to cancellation. :func:`in_float32` wraps such a function.
"""

from __future__ import annotations

import functools

import mlx.core as mx

HALF = (mx.float16, mx.bfloat16)

__all__ = ["HALF", "in_float32", "upcast"]


def upcast(value):
    """``value`` in float32 when it is a 16-bit float array (lists/tuples element-wise); anything else unchanged."""
    if isinstance(value, mx.array):
        return value.astype(mx.float32) if value.dtype in HALF else value
    if isinstance(value, (list, tuple)):
        return type(value)(upcast(v) for v in value)
    return value


def _downcast(value, dtype):
    if isinstance(value, mx.array):
        return value.astype(dtype) if value.dtype == mx.float32 else value
    if isinstance(value, (list, tuple)):
        return type(value)(_downcast(v, dtype) for v in value)
    return value


def in_float32(fn):
    """``fn`` computed in float32 when its first argument is a 16-bit float array: every 16-bit array argument is
    upcast, and float32 results are rounded back to the first argument's dtype once. Other calls are unchanged."""

    @functools.wraps(fn)
    def wrapper(x, *args, **kwargs):
        if not (isinstance(x, mx.array) and x.dtype in HALF):
            return fn(x, *args, **kwargs)
        result = fn(x.astype(mx.float32), *upcast(args), **{k: upcast(v) for k, v in kwargs.items()})
        return _downcast(result, x.dtype)

    return wrapper
