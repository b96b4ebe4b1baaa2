"""Polynomial and Chebyshev series evaluation in MLX ops (Cephes' ``polevl`` and ``chbevl``), any shape,
elementwise: the float64 error functions here (``_erf64.py``) and the converters' special functions use them.

Coefficients are Python floats: MLX rounds a Python scalar to the array's dtype, so a float32 evaluation uses the
float32-rounded coefficients, as torch's kernels do with their ``static const T`` tables.
"""

from __future__ import annotations

import mlx.core as mx

__all__ = ["polevl", "chbevl"]


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
