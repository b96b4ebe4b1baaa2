"""The gamma family in MLX ops: ``lgamma``, ``digamma``, ``trigamma``, ``polygamma``, Hurwitz ``zeta``.

Elementwise, any shape; inputs are in ``working`` dtype (float32 or float64, ``_special_series.working``). How each
is computed, and why it matches torch's CPU kernels (``aten/src/ATen/native/Math.h``; ``lgamma`` is the C library's):

* ``lgamma``: the argument is brought into ``[1.5, 2.5)`` by at most two steps up (``x < 1.5``) or six steps down
  (``2.5 <= x < 8``), where ``lgamma(2 + t) = t P(t)`` (float32: a degree-9 least-squares fit of relative error
  3e-10; float64: the Taylor series ``c_k = (-1)^k (zeta(k) - 1) / k`` to degree 25, 2e-16); ``x >= 8`` takes
  Stirling's series. The shifts' logs are of exact values (``t``, ``x - 1`` are exact), so the zeros at 1 and 2 keep
  their relative accuracy. Negative ``x``: ``lgamma(x) = log(pi) - log|sin(pi x)| - log|x| - lgamma(-x)``, with the
  sine's argument reduced exactly. Poles (0 and negative integers, -inf) give +inf, as torch.
* ``digamma`` and ``trigamma``: torch's recurrences and asymptotic series (Cephes ``psi``), step for step in the
  working dtype; digamma's reflection term ``pi / tan(pi x)``, which torch computes in double, is a cotangent with
  its argument reduced exactly (``_special_series.cotpi``), so it keeps float32 accuracy as torch's does.
* ``polygamma(n >= 2)``: ``(-1)^(n+1) n! zeta(n + 1, x)``, as torch, with zeta summed in float64 on the CPU
  (``accumulated_zeta``; torch's CPU kernel sums float32 in double).
* ``zeta(x, q)``: Cephes' Hurwitz zeta as torch runs it: a direct sum until ``q + i > 9`` (at least 9 terms), then
  Euler-Maclaurin with up to 12 Bernoulli terms, both stopping where torch stops (its ``MACHEP`` tests), here
  as masks over a fixed number of steps. Negative non-integer ``q`` needs ``9 - q`` direct terms: they are summed
  for ``q > -ZETA_NEGATIVE_SPAN``; below that the result is NaN (documented: torch gives a number there).
"""

from __future__ import annotations

import math

import mlx.core as mx

from ._layers import exp
from ._special_series import PI, cotpi, is_integer, polevl, sinpi_abs

LOG_PI = math.log(math.pi)
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

# lgamma(2 + t) / t on [-1/2, 1/2], highest power first
_LGAMMA2_F32 = (0.00012073366275083256, -0.000253787725198934, 0.000502431705765831, -0.0011858746873588258,
                0.0028915616435233066, -0.007386171873154341, 0.020580746225422282, -0.06735228158570361,
                0.32246703446812447, 0.42278433500133894)
_LGAMMA2_F64 = (5.731367241678862e-10, -1.1921401405860912e-09, 2.4836745438024785e-09, -5.183475041970047e-09,
                1.0838659214896955e-08, -2.2711094608943164e-08, 4.7698101693639804e-08, -1.0043224823968099e-07,
                2.1207184805554665e-07, -4.492469198764566e-07, 9.55141213040742e-07, -2.039215753801366e-06,
                4.374866789907488e-06, -9.439488275268397e-06, 2.050721277567069e-05, -4.492623673813314e-05,
                9.945751278180853e-05, -0.00022315475845357939, 0.0005096695247430425, -0.001192753911703261,
                0.0028905103307415234, -0.007385551028673986, 0.020580808427784546, -0.0673523010531981,
                0.3224670334241132, 0.42278433509846713)
# Stirling's series sum_k B_2k / (2k (2k - 1)) z^k, z = 1 / x^2, highest power first (then times 1 / x)
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798, -174611 / 330)
_STIRLING = tuple(b / (2 * k * (2 * k - 1)) for k, b in enumerate(_BERNOULLI, 1))[::-1]
_STIRLING_TERMS = {mx.float32: 4, mx.float64: 10}
_DOWN_STEPS = 6  # 2.5 <= x < 8 -> [1.5, 2.5)


def _lgamma_positive(a):
    """``lgamma(a)`` for ``a > 0`` (other values: whatever the formulas give; the caller masks them)."""
    coeffs = _LGAMMA2_F64 if a.dtype == mx.float64 else _LGAMMA2_F32
    low, mid = a < 0.5, a < 1.5
    steps = mx.clip(mx.floor(a - 1.5), 0, _DOWN_STEPS)  # down-steps for 2.5 <= a < 8
    t = mx.where(low, a, mx.where(mid, a - 1, a - (2 + steps)))  # exact: lgamma(2 + t) is the value reached
    near_two = t * polevl(t, coeffs)
    product = mx.ones_like(a)
    for j in range(1, _DOWN_STEPS + 1):
        product = product * mx.where(j <= steps, a - j, 1.0)
    shifted = mx.where(low, near_two - mx.log(a) - mx.log1p(a),
                       mx.where(mid, near_two - mx.log1p(a - 1), near_two + mx.log(product)))
    big = mx.maximum(a, 8.0)
    z = 1 / (big * big)
    series = polevl(z, _STIRLING[-_STIRLING_TERMS[a.dtype]:]) / big
    stirling = (big - 0.5) * (mx.log(big) - 1) + (HALF_LOG_2PI - 0.5) + series
    return mx.where(a >= 8, stirling, shifted)


def lgamma(x):
    """``log |Gamma(x)|``: +inf at 0, the negative integers and +-inf; NaN stays NaN."""
    a = mx.abs(x)
    positive = _lgamma_positive(a)
    reflected = LOG_PI - mx.log(sinpi_abs(a)) - mx.log(a) - positive
    out = mx.where(x > 0, positive, reflected)
    pole = (x <= 0) & is_integer(x)
    return mx.where(pole, mx.array(math.inf, x.dtype), out)


_PSI_10 = 2.25175258906672110764
_PSI_SERIES = (8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3,
               -4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
               8.33333333333333333333e-2)


def _digamma_from_one(x):
    """torch's ``calc_digamma`` for ``x >= 1`` (after its reflection): up to 10 steps of ``-1/x`` to reach
    ``x >= 10``, then ``log x - 1/(2x) - z P(z)``, ``z = 1/x^2`` (0 from 1e17 on); exactly 10 gives ``PSI_10``."""
    result = mx.zeros_like(x)
    for _ in range(10):
        below = x < 10
        result = result - mx.where(below, 1 / x, 0.0)
        x = mx.where(below, x + 1, x)
    z = 1 / (x * x)
    tail = mx.where(x < 1e17, z * polevl(z, _PSI_SERIES), 0.0)
    return mx.where(x == 10, result + _PSI_10, result + mx.log(x) - 0.5 / x - tail)


def digamma(x):
    """``psi(x) = d/dx lgamma(x)``: ``-inf`` at +0 and ``+inf`` at -0 (``copysign(inf, -x)``), NaN at the negative
    integers and -inf, +inf at +inf."""
    negative = x < 0
    base = _digamma_from_one(mx.where(negative, 1 - x, x))  # 1 - x as torch rounds it
    out = mx.where(negative, base - PI * cotpi(x), base)
    zero_sign = mx.where(mx.reciprocal(x) < 0, math.inf, -math.inf).astype(x.dtype)
    out = mx.where(x == 0, zero_sign, out)
    return mx.where(negative & is_integer(x), mx.array(math.nan, x.dtype), out)


def trigamma(x):
    """``polygamma(1, x)``, torch's ``trigamma``: for ``x < 1/2`` the reflection ``pi^2 / sin^2(pi x)`` with
    ``pi * x`` rounded as torch rounds it, then six steps of ``1/x^2`` and the asymptotic series."""
    reflect = x < 0.5
    # float32: sin of pi * x rounded to float32, as torch's sinf; float64: sin(pi x) exactly (torch's double
    # rounding of pi * x is ~1e-16 relative; MLX's float64 sin computes in float32)
    s = sinpi_abs(x) if x.dtype == mx.float64 else mx.sin(PI * x)
    result = mx.where(reflect, -(PI * PI) / (s * s), 0.0).astype(x.dtype)
    x = mx.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return mx.where(reflect, -result, result)


def polygamma(n: int, x):
    """The ``n``-th derivative of ``digamma`` (``n >= 0``)."""
    if n == 0:
        return digamma(x)
    if n == 1:
        return trigamma(x)
    factorial = exp(lgamma(mx.array(n + 1.0, x.dtype)))  # torch: exp(lgamma(n + 1)) in the input's precision
    return (1.0 if n % 2 else -1.0) * factorial * accumulated_zeta(mx.array(n + 1.0, x.dtype), x)


def accumulated_zeta(x, q):
    """``zeta(x, q)`` summed as torch's CPU kernel sums it: float32 in float64 (its ``acc_type``) where MLX has
    float64 (the CPU), rounded once; in float32 elsewhere (Apple GPUs have no float64), where negative ``q`` loses
    digits to the alternating terms and ``q^-x`` below 1e-38 underflows."""
    dtype = mx.result_type(x, q)
    if dtype == mx.float32 and mx.default_device() == mx.cpu:
        return zeta(x.astype(mx.float64), q.astype(mx.float64)).astype(mx.float32)
    return zeta(x, q)


_MACHEP = 1.11022302462515654042e-16
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)
ZETA_NEGATIVE_SPAN = 16  # q > -16: enough direct terms are summed


def zeta(x, q):
    """Hurwitz ``zeta(x, q) = sum_k (q + k)^-x``: +inf at ``x == 1`` and at ``q`` a non-positive integer, NaN for
    ``x < 1``, for ``q < 0`` with ``x`` not an integer, and for ``q <= -ZETA_NEGATIVE_SPAN``."""
    x, q = mx.broadcast_arrays(x, q)
    s = mx.power(q, -x)
    a, b = q, mx.zeros_like(s)
    done = mx.zeros_like(s) != 0
    running = ~done
    for i in range(9 + ZETA_NEGATIVE_SPAN):
        running = running & ~done if i < 9 else running & ~done & (a <= 9)  # torch: while i < 9 || a <= 9
        a = mx.where(running, a + 1, a)
        b = mx.where(running, mx.power(a, -x), b)
        s = mx.where(running, s + b, s)
        done = done | (running & (-_MACHEP * s < b) & (b < _MACHEP * s))
    w = a
    tail = s + b * w / (x - 1) - 0.5 * b
    coef, k = mx.ones_like(s), mx.zeros_like(s)
    settled = done
    for c in _ZETA_A:
        coef = coef * (x + k)
        b = b / w
        t = coef * b / c
        tail = mx.where(settled, tail, tail + t)
        settled = settled | (mx.abs(t / tail) < _MACHEP)
        k = k + 1
        coef = coef * (x + k)
        b = b / w
        k = k + 1
    out = mx.where(done, s, tail)
    nan, inf = mx.array(math.nan, s.dtype), mx.array(math.inf, s.dtype)
    out = mx.where((q <= 0) & ~is_integer(x), nan, out)
    out = mx.where(~done & (a <= 9), nan, out)  # q too negative: the direct sum did not reach q + i > 9
    out = mx.where((q <= 0) & is_integer(q), inf, out)
    out = mx.where(x < 1, nan, out)
    return mx.where(x == 1, inf, out)
