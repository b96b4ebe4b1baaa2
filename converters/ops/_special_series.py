"""Building blocks of the special functions (``_special_gamma``, ``_special_bessel``, ``_special_normal``): polynomial
and Chebyshev evaluation, the working dtype, ``sin(pi x)`` without the rounding of ``pi * x``. MLX ops only, any
shape, elementwise.

Coefficients are Python floats: MLX rounds a Python scalar to the array's dtype, so a float32 evaluation uses the
float32-rounded coefficients, as torch's kernels do with their ``static const T`` tables.
"""

from __future__ import annotations

import math

import mlx.core as mx

PI = math.pi


def working(x):
    """``x`` in the dtype the functions compute in: float64 stays float64, float32 stays float32, and float16,
    bfloat16, integers and bool compute in float32 (torch upcasts half inputs, and promotes integers to the default
    float32)."""
    return x if x.dtype in (mx.float32, mx.float64) else x.astype(mx.float32)


def result_dtype(x):
    """torch's result dtype of a float-valued unary op of ``x``: a floating input keeps its dtype, integers and bool
    give float32."""
    return x.dtype if mx.issubdtype(x.dtype, mx.floating) else mx.float32


def polevl(x, coeffs):
    """``coeffs[0] x^N + ... + coeffs[N]`` by Horner's rule (Cephes' ``polevl``; highest power first)."""
    out = coeffs[0] * x + coeffs[1]  # from the array itself, not its shape: traceable without shapes
    for c in coeffs[2:]:
        out = out * x + c
    return out


def chbevl(x, coeffs):
    """Sum of the Chebyshev series ``coeffs`` at ``x`` (Cephes' ``chbevl``: Clenshaw's recurrence, highest order
    first, the first coefficient halved by the final ``0.5 * (b0 - b2)``)."""
    b1 = mx.zeros_like(x)
    b0 = b1 + coeffs[0]
    b2 = b1
    for c in coeffs[1:]:
        b2 = b1
        b1 = b0
        b0 = x * b1 - b2 + c
    return 0.5 * (b0 - b2)


def is_integer(x):
    """True where ``x`` is a whole number (infinities included, NaN excluded)."""
    return mx.floor(x) == x


def sinpi_abs(x):
    """``|sin(pi x)|`` accurate to a few ulps for any finite ``x``: the argument is reduced to ``|r| <= 1/2`` exactly
    (``x - round(x)``) before the multiplication by pi, so large ``x`` keep their accuracy."""
    r = x - mx.round(x)
    return mx.abs(mx.sin(PI * r))


def cotpi(x):
    """``cot(pi x)`` accurate to a few ulps, also near its zeros: ``x`` reduced to ``r`` in ``[-1/2, 1/2]`` exactly,
    then ``sign(r) sin(pi (1/2 - |r|)) / sin(pi |r|)`` (``1/2 - |r|`` is exact, so the cosine keeps its relative
    accuracy where it is small)."""
    r = x - mx.round(x)
    a = mx.abs(r)
    return mx.where(r < 0, -1.0, 1.0).astype(x.dtype) * mx.sin(PI * (0.5 - a)) / mx.sin(PI * a)
