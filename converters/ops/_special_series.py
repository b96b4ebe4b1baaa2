"""Building blocks of the special functions (``_special_gamma``, ``_special_bessel``, ``_special_normal``): polynomial
and Chebyshev evaluation, the working dtype, ``sin(pi x)`` without the rounding of ``pi * x``. MLX ops only, any
shape, elementwise.

Coefficients are Python floats: MLX rounds a Python scalar to the array's dtype, so a float32 evaluation uses the
float32-rounded coefficients, as torch's kernels do with their ``static const T`` tables.
"""

from __future__ import annotations

import math

import mlx.core as mx

from ._layers import chbevl, polevl  # noqa: F401  (Porter's layers hold them: the float64 erf there uses them)

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


def is_integer(x):
    """True where ``x`` is a whole number (infinities included, NaN excluded)."""
    return mx.floor(x) == x


# sin(pi u) / u and cos(pi u) in u^2 to |u| <= 1/4 (Taylor, last terms 1e-19 and 2e-18), highest power first
_SINPI = (-2.2948428997269856e-08, 7.952054001475508e-07, -2.1915353447830204e-05, 0.00046630280576761234,
          -0.007370430945714348, 0.08214588661112819, -0.5992645293207919, 2.550164039877345, -5.167712780049969,
          3.141592653589793)
_COSPI = (-1.387895246221376e-07, 4.303069587032944e-06, -0.00010463810492484565, 0.001929574309403922,
          -0.02580689139001405, 0.23533063035889312, -1.3352627688545893, 4.058712126416768, -4.934802200544679,
          1.0)


def _sin_cos_pi(a):
    """``(sin(pi a), cos(pi a))`` for ``0 <= a <= 1/2``: MLX's float64 ``sin``/``cos`` compute in float32, so
    float64 takes Taylor polynomials on ``[0, 1/4]`` (beyond, ``1/2 - a``, exact, with sine and cosine swapped);
    float32 takes MLX's, accurate there."""
    if a.dtype != mx.float64:
        return mx.sin(PI * a), mx.sin(PI * (0.5 - a))  # 1/2 - a is exact: the cosine keeps its relative accuracy
    far = a > 0.25
    u = mx.where(far, 0.5 - a, a)
    uu = u * u
    sin_u, cos_u = u * polevl(uu, _SINPI), polevl(uu, _COSPI)
    return mx.where(far, cos_u, sin_u), mx.where(far, sin_u, cos_u)


def sin_cos_pi(t):
    """``(sin(pi t), cos(pi t))`` for any finite ``t``: ``t`` reduced to ``r`` in ``[-1/2, 1/2]`` exactly, the
    parity of the removed integer flipping both signs."""
    n = mx.round(t)
    r = t - n
    sin_a, cos_a = _sin_cos_pi(mx.abs(r))
    sign = mx.where(mx.remainder(n, 2) == 1, -1.0, 1.0).astype(t.dtype)
    return sign * mx.where(r < 0, -sin_a, sin_a), sign * cos_a


def sinpi_abs(x):
    """``|sin(pi x)|`` accurate to a few ulps for any finite ``x``: the argument is reduced to ``|r| <= 1/2`` exactly
    (``x - round(x)``) before the multiplication by pi, so large ``x`` keep their accuracy."""
    return _sin_cos_pi(mx.abs(x - mx.round(x)))[0]


def cotpi(x):
    """``cot(pi x)`` accurate to a few ulps, also near its zeros: ``x`` reduced to ``r`` in ``[-1/2, 1/2]`` exactly,
    then ``sign(r) cos(pi |r|) / sin(pi |r|)``."""
    r = x - mx.round(x)
    sin_a, cos_a = _sin_cos_pi(mx.abs(r))
    return mx.where(r < 0, -1.0, 1.0).astype(x.dtype) * cos_a / sin_a
