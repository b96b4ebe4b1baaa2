"""The float64 error functions: ``erf``, ``erfc`` and ``erfcx`` of non-negative arguments to ~1e-16 relative.

The float32 forms in ``_special_normal`` use float32-grade fits (relative error 1e-7 to 5e-9), which a float64 port
must not inherit: a converted ``torch.erf`` on float64 was 6e-9 off torch, ``erfc`` 5e-6 in its far tail. Elementwise,
any shape, float64 in and out; ``exp`` is Porter's, float64-exact.

* ``erf(x)`` for ``|x| <= 1/2``: its Maclaurin series ``2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1))`` to
  ``n = 15`` (the next term is below 1e-22 there), Horner in ``x^2``.
* ``erfcx(z) = exp(z^2) erfc(z)`` for ``z >= 1/2``: Schonfelder's form (Math. Comp. 32, 1978),
  ``(1 + 2z) erfcx(z) = sum_j c_j T_j(u)``, ``t = (z - K)/(z + K)`` (``K = 3.75``) mapped from ``[t0, 1]`` onto
  ``u in [-1, 1]``; the 24 ``c_j`` are Chebyshev interpolants of mpmath's 40-digit ``erfc`` (every dropped one
  below 1e-18), recomputed by ``scripts/fit_erfcx64.py``. The sum is bounded (``2/sqrt(pi)`` at infinity), so
  there is no cancellation and no overflow; Clenshaw's recurrence evaluates it.
* ``erfc(z) = erfcx(z) exp(-z^2)`` with ``exp(-z^2)`` as ``exp(-h^2) exp(-(z - h)(z + h))``, ``h`` ``z`` rounded to
  8 fraction bits (``h^2`` exact): ``exp(-z*z)`` would lose ``z^2`` ulps to the rounding of ``z*z``.
"""

from __future__ import annotations

import mlx.core as mx

from ._float64 import exp
from ._series import chbevl, polevl

_ERFCX_CHEB = (1.80896684155156e-17, -2.184987852077837e-17, -5.415558885519265e-16, 1.16900844678344e-15,
               1.6260780477370666e-14, -6.436254591098305e-14, -4.4406526024697593e-13, 3.3790897880065392e-12,
               7.129201208528782e-12, -1.5752684361293953e-10, 3.472219662543287e-10, 5.162357979173961e-09,
               -4.563538388649772e-08, 6.060729559673993e-08, 1.8855545928961658e-06, -2.2031234655936487e-05,
               0.00014982479112138583, -0.0007508778230431327, 0.0029421334073096387, -0.009002331393380924,
               0.019905393893364876, -0.019898431610118512, -0.07449995301009735, 2.419107068372876)
_ERF_SERIES = (-2.7835162072109215e-14, 4.4632242632864775e-13, -6.7113668551641105e-12, 9.422759064650411e-11,
               -1.2290555301717928e-09, 1.4807192815879218e-08, -1.6365844691234924e-07, 1.6462114365889248e-06,
               -1.492565035840625e-05, 0.00012055332981789664, -0.0008548327023450853, 0.005223977625442188,
               -0.026866170645131252, 0.11283791670955126, -0.37612638903183754, 1.1283791670955126)
_K = 3.75
_T0 = (0.5 - _K) / (0.5 + _K)
_ZERO_BEYOND = 28.0  # erfc(27.3) is below float64's smallest subnormal


def erf_near(x):
    """``erf(x)`` for ``|x| <= 1/2``."""
    return x * polevl(x * x, _ERF_SERIES)


def erfcx_far(z):
    """``erfcx(z)`` for ``z >= 1/2`` (inf gives 0)."""
    zc = mx.minimum(z, 1e300)  # (z - K)/(z + K) is inf/inf at inf; t is 1 long before
    t = (zc - _K) / (zc + _K)
    u = (2 * t - (1 + _T0)) / (1 - _T0)
    return 0.5 * chbevl(2 * u, _ERFCX_CHEB) / (z + 0.5)


def erfcx_positive(z):
    """``erfcx(z)`` for ``z >= 0``."""
    near = exp(z * z) * (1 - erf_near(mx.minimum(z, 0.5)))
    return mx.where(z <= 0.5, near, erfcx_far(mx.maximum(z, 0.5)))


def erfc_positive(z):
    """``erfc(z)`` for ``z > 1/2``: 0 beyond 28."""
    zc = mx.minimum(z, _ZERO_BEYOND)
    h = mx.floor(zc * 256) / 256  # at most 13 significant bits: h * h is exact
    tail = erfcx_far(mx.maximum(zc, 0.5)) * exp(-h * h) * exp(-(zc - h) * (zc + h))
    return mx.where(z > _ZERO_BEYOND, mx.zeros_like(z), tail)


def erf(x):
    """The error function of a float64 array: odd, +-1 at +-inf."""
    z = mx.abs(x)
    far = 1 - erfc_positive(mx.maximum(z, 0.5))
    return mx.where(z <= 0.5, erf_near(mx.clip(x, -0.5, 0.5)), mx.where(x < 0, -far, far))


def erfc(x):
    """``1 - erf(x)`` of a float64 array, without that formula's cancellation: 2 at -inf, 0 at +inf."""
    z = mx.abs(x)
    tail = erfc_positive(mx.maximum(z, 0.5))
    return mx.where(z <= 0.5, 1 - erf_near(mx.clip(x, -0.5, 0.5)), mx.where(x < 0, 2 - tail, tail))
