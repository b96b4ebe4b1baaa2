"""The error-function family in MLX ops: ``erf``, ``erfc``, ``erfcx``, ``log_ndtr``, ``ndtri``, ``erfinv``.

Elementwise, any shape, in the working dtype (``_special_series.working``). ``exp`` is Porter's
(``porter.layers.functional.exp``): MLX's own float32 ``exp`` gives inf from 88.3 on (torch: from 88.73) and 0
below -88 (no subnormals), and computes float64 in float32.

float64 arrays take ``layers/_erf64.py``'s float64-grade ``erf``, ``erfc`` and ``erfcx`` (and through them
``log_ndtr``, ``erfinv``'s Newton steps and ``ndtr``); the fits below are float32-grade.

* ``erf``: ``x P(x^2)`` for ``|x| <= 1`` (a degree-7 least-squares fit, relative error 4e-11), ``1 - erfc(|x|)``
  with the sign beyond; ``erfc = 1 - erf`` and ``erfcx = exp(x^2) (1 - erf)`` for ``|x| <= 1/2``, where the fit
  below is 5e-7 off. MLX's ``mx.erf`` is 0 below ``|x|`` ~ 1e-5 (``erf(1e-5)`` 2% low, ``erf(1e-10) = 0``), which
  the converter's ``erf`` took before, and it is ~1e-6 off elsewhere.

* ``erfc`` and ``erfcx`` (``exp(x^2) erfc(x)``) share one Chebyshev fit, ``erfc(z) = t exp(-z^2 + P(t))``,
  ``t = 1 / (1 + z/2)``, relative error below 1.2e-7 for every ``z >= 0`` (Numerical Recipes' ``erfcc``). For
  ``erfcx`` the ``exp(-z^2)`` cancels, so ``erfcx(z) = t exp(P(t))`` has no large exponent to round; for ``erfc``
  the ``exp(-z^2)`` is ``exp(-h^2) exp(-(z - h)(z + h))`` with ``h`` ``z`` rounded to 8 fraction bits, whose square
  is exact, so the tail (``erfc(9) = 4e-37``) keeps float32 accuracy where ``exp(-z*z)`` would lose ``z^2`` ulps.
  Beyond ``z > 50`` ``erfcx`` takes torch's continued fraction, and for ``x < 0`` torch's
  ``2 exp(x^2) - erfcx(-x)`` with its cut-offs (``x < -26.7``: inf; ``x < -6.1``: ``2 exp(x^2)``).
* ``log_ndtr``: torch's kernel: ``log(erfcx(-x/sqrt2) / 2) - x^2/2`` below ``x = -1``, ``log1p(-erfc(x/sqrt2)/2)``
  above (torch's decomposition switches at ``x = 1``; the kernel is what eager torch runs).
* ``ndtri``: Cephes' three rational approximations as torch runs them, in the working dtype.
* ``erfinv``: torch's rational first guess and its two Newton steps on ``erf``. ``erfinv`` is ill conditioned
  near +-1 (``d erfinv / dy = sqrt(pi)/2 exp(erfinv(y)^2)``): there a 1-ulp difference between MLX's and the C
  library's ``erf`` moves the result by the same relative amount as a 1-ulp change of the input does.
"""

from __future__ import annotations

import math

import mlx.core as mx

from ._layers import float64_erf as F64
from ._layers import exp
from ._special_series import polevl

_ERFC_FIT = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196,
             1.00002368, -1.26551223)
_ERFC_ZERO = {mx.float32: 16.0, mx.float64: 28.0}  # erfc is below the dtype's smallest subnormal beyond
_INV_SQRT_PI = 0.56418958354775628694807945156
_SQRT1_2 = 0.707106781186547524400844362104849039


def _fit(z):
    """``(t, P(t))`` of the fit at ``z >= 0``."""
    t = 1 / (1 + 0.5 * z)
    return t, polevl(t, _ERFC_FIT)


_ERF_NEAR = (-9.68974023742995e-06, 0.00011274737681837843, -0.0008485438888594377, 0.0052211386948014665,
             -0.026865475514708623, 0.1128378344388567, -0.37612638552827976, 1.1283791670801049)


def _erf_near(x):
    """``erf(x)`` for ``|x| <= 1``."""
    return x * polevl(x * x, _ERF_NEAR)


def erf(x):
    """The error function: odd, +-1 at +-inf."""
    if x.dtype == mx.float64:
        return F64.erf(x)
    far = 1 - erfc(mx.abs(x))
    return mx.where(mx.abs(x) <= 1, _erf_near(x), mx.where(x < 0, -far, far))


def erfc(x):
    """``1 - erf(x)`` without the cancellation of that formula (``erfc(5) = 1.5e-12``, where ``1 - erf(5)`` is 0
    in float32); 2 at -inf, 0 at +inf."""
    if x.dtype == mx.float64:
        return F64.erfc(x)
    z = mx.abs(x)
    t, p = _fit(z)
    cap = _ERFC_ZERO[x.dtype]
    h = mx.floor(mx.minimum(z, cap) * 256) / 256  # at most 13 significant bits: h * h is exact in either dtype
    tail = t * exp(-h * h) * exp(p - (z - h) * (z + h))
    tail = mx.where(z > cap, mx.zeros_like(z), tail)
    return mx.where(z <= 0.5, 1 - _erf_near(x), mx.where(x < 0, 2 - tail, tail))


def _erfcx_positive(z):
    if z.dtype == mx.float64:
        return F64.erfcx_positive(z)
    t, p = _fit(mx.minimum(z, 50.0))
    near = mx.where(z <= 0.5, exp(z * z) * (1 - _erf_near(z)), t * exp(p))
    zz = z * z
    fraction = _INV_SQRT_PI * (zz * (zz + 4.5) + 2) / (z * (zz * (zz + 5) + 3.75))
    far = mx.where(z > 5e7, _INV_SQRT_PI / z, fraction)
    return mx.where(z > 50, far, near)


def erfcx(x):
    """``exp(x^2) erfc(x)``: ``1/(sqrt(pi) x)`` for large x, inf from ``x < -26.7``."""
    positive = _erfcx_positive(mx.abs(x))
    twice = 2 * exp(x * x)
    negative = mx.where(x < -6.1, twice, twice - positive)
    negative = mx.where(x < -26.7, mx.array(math.inf, x.dtype), negative)
    return mx.where(x >= 0, positive, mx.where(mx.isnan(x), x, negative))


def log_ndtr(x):
    """``log(Phi(x))`` of the standard normal CDF, accurate in both tails."""
    t = x * _SQRT1_2
    lower = mx.log(erfcx(-t) / 2) - t * t
    upper = mx.log1p(-erfc(t) / 2)
    return mx.where(x < -1, lower, upper)


_NDTRI_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1,
             1.39312609387279679503e1, -1.23916583867381258016e0)
_NDTRI_Q0 = (1.00000000000000000000e0, 1.95448858338141759834e0, 4.67627912898881538453e0,
             8.63602421390890590575e1, -2.25462687854119370527e2, 2.00260212380060660359e2,
             -8.20372256168333339912e1, 1.59056225126211695515e1, -1.18331621121330003142e0)
_NDTRI_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1,
             4.40805073893200834700e1, 1.46849561928858024014e1, 2.18663306850790267539e0,
             -1.40256079171354495875e-1, -3.50424626827848203418e-2, -8.57456785154685413611e-4)
_NDTRI_Q1 = (1.00000000000000000000e0, 1.57799883256466749731e1, 4.53907635128879210584e1,
             4.13172038254672030440e1, 1.50425385692907503408e1, 2.50464946208309415979e0,
             -1.42182922854787788574e-1, -3.80806407691578277194e-2, -9.33259480895457427372e-4)
_NDTRI_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0,
             1.33303460815807542389e0, 2.01485389549179081538e-1, 1.23716634817820021358e-2,
             3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9)
_NDTRI_Q2 = (1.00000000000000000000e0, 6.02427039364742014255e0, 3.67983563856160859403e0,
             1.37702099489081330271e0, 2.16236993594496635890e-1, 1.34204006088543189037e-2,
             3.28014464682127739104e-4, 2.89247864745380683936e-6, 6.79019408009981274425e-9)
_EXP_M2 = 0.13533528323661269189  # exp(-2)
_S2PI = 2.50662827463100050242e0


def ndtri(p):
    """The standard normal quantile ``Phi^-1(p)``: -inf at 0, inf at 1, NaN outside ``[0, 1]``."""
    flip = p > (1 - mx.array(_EXP_M2, p.dtype))  # torch compares with one - 0.135... rounded in its dtype
    y = mx.where(flip, 1 - p, p)
    centre = y - 0.5
    c2 = centre * centre
    middle = (centre + centre * (c2 * polevl(c2, _NDTRI_P0) / polevl(c2, _NDTRI_Q0))) * _S2PI
    safe = mx.minimum(y, _EXP_M2)  # the tail formulas' domain, where they are taken
    x = mx.sqrt(-2.0 * mx.log(safe))
    x0 = x - mx.log(x) / x
    z = 1 / x
    x1 = mx.where(x < 8, z * polevl(z, _NDTRI_P1) / polevl(z, _NDTRI_Q1),
                  z * polevl(z, _NDTRI_P2) / polevl(z, _NDTRI_Q2))
    tail = x0 - x1
    out = mx.where(y > _EXP_M2, middle, mx.where(flip, tail, -tail))
    inf = mx.array(math.inf, p.dtype)
    out = mx.where((p < 0) | (p > 1), mx.array(math.nan, p.dtype), out)
    return mx.where(p == 0, -inf, mx.where(p == 1, inf, out))


_ERFINV_A = (-0.140543331, 0.914624893, -1.645349621, 0.886226899)
_ERFINV_B = (0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0)
_ERFINV_C = (1.641345311, 3.429567803, -1.624906493, -1.970840454)
_ERFINV_D = (1.637067800, 3.543889200, 1.0)
_TWO_OVER_SQRT_PI = 2 * _INV_SQRT_PI


def erfinv(y):
    """``erf^-1(y)``: +-inf at +-1, NaN outside ``[-1, 1]``."""
    a = mx.abs(y)
    z = y * y
    central = y * polevl(z, _ERFINV_A) / (polevl(z, _ERFINV_B))
    w = mx.sqrt(-mx.log((1.0 - a) / 2.0))
    signed = mx.where(y < 0, -polevl(w, _ERFINV_C), polevl(w, _ERFINV_C))
    x = mx.where(a <= 0.7, central, signed / polevl(w, _ERFINV_D))
    for _ in range(2):
        x = x - (erf(x) - y) / (_TWO_OVER_SQRT_PI * exp(-x * x))
    x = mx.where(a == 1, mx.where(y < 0, -math.inf, math.inf).astype(y.dtype), x)
    return mx.where(a > 1, mx.array(math.nan, y.dtype), x)
