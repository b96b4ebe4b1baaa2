"""float64 versions of the functions MLX computes in float32 precision even for float64 arrays.

MLX 0.32's CPU ``sin``, ``cos``, ``exp``, ``sigmoid``, ``logaddexp``, ``logsumexp`` and ``softmax`` of a float64
array return float64 with float32-level error (measured against libm / torch float64: sin 7e-5, cos 3e-4 relative
near their zeros, exp 7e-7, sigmoid 6e-7, logaddexp 8e-6); its ``tan``, ``sinh``, ``cosh``, ``tanh``, ``expm1``,
``log``, ``log1p``, ``sqrt``, ``arctan`` and ``power`` are float64-exact (0 to 1 ulp). A float64 port, which a user
asks for to get torch's float64 numbers, used MLX's and silently lost 9 digits (a converted ``torch.sin`` on
float64 was 3e-7 off). These are built from the exact ones and float64 arithmetic only, so they hold on every device
and without Porter's native kernels (the layers' MLX-ops path for float64 ``exp``/``sigmoid``/``silu``/``softmax``,
the converters' float64 kernels, the zoo through those layers); each takes and returns float64 arrays of any shape
(elementwise, or along ``axis``).

* :func:`sin`, :func:`cos`: fdlibm's scheme: ``x = k pi/2 + r`` with pi/2 split in three parts (Cody-Waite; the
  first two products exact for ``|k| < 2**20``, so ``|x|`` up to ~1.6e6 reduces to within an ulp of ``r``), then
  fdlibm's degree-13/14 kernels on ``|r| <= pi/4`` and the quadrant. Within 2 ulps of libm there; beyond, the error
  grows with ``|x|`` as the reduction's does (about ``|x| * 2**-70`` absolute). inf and NaN give NaN, ``-0.0`` keeps
  its sign in ``sin``.
* :func:`exp`: ``cosh(x) + sinh(|x|)`` (exact terms, no cancellation: both positive) for ``x >= 0``, its reciprocal's
  mirror for ``x < 0``: within 2 ulps; beyond ``|x| = 700`` times ``e^(|x| - 700)`` (or divided by it), so it
  overflows and underflows (through the subnormals, to ``x = -745``) where libm's does, with finite gradients.
* :func:`sigmoid`, :func:`softplus`, :func:`log_sigmoid`, :func:`logaddexp`, :func:`logsumexp`, :func:`softmax`, :func:`log_softmax`
  from :func:`exp`, ``log1p`` and the running maximum, in the forms that do not overflow.

Gradients are autodiff's of these expressions (the polynomial's derivative for ``sin``/``cos``), float64-accurate too.
"""

from __future__ import annotations

import mlx.core as mx

__all__ = ["sin", "cos", "exp", "sigmoid", "softplus", "log_sigmoid", "logaddexp", "logsumexp", "softmax", "log_softmax"]

_TWO_OVER_PI = 6.36619772367581382433e-01
_PIO2_1 = 1.57079632673412561417e+00  # the first 33 bits of pi/2
_PIO2_2 = 6.07710050630396597660e-11  # the next 33 bits
_PIO2_3 = 2.02226624871116645580e-21  # the rest
# fdlibm's __kernel_sin / __kernel_cos coefficients
_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
      2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
      -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


def _reduce(x):
    """``(r, quadrant)``: ``x = k pi/2 + r``, ``|r| <= ~pi/4``, quadrant ``k mod 4`` (float64, 0..3)."""
    k = mx.round(x * _TWO_OVER_PI)
    r = ((x - k * _PIO2_1) - k * _PIO2_2) - k * _PIO2_3
    return r, mx.remainder(k, 4)


def _kernel_sin(r):
    z = r * r
    s2, s3, s4, s5, s6 = _S[1:]
    tail = s2 + z * (s3 + z * (s4 + z * (s5 + z * s6)))
    return r + (r * z) * (_S[0] + z * tail)


def _kernel_cos(r):
    z = r * r
    c1, c2, c3, c4, c5, c6 = _C
    poly = z * (c1 + z * (c2 + z * (c3 + z * (c4 + z * (c5 + z * c6)))))
    return 1.0 - (0.5 * z - z * poly)


def _sin_cos(x, shift: int):
    r, quadrant = _reduce(x)
    q = mx.remainder(quadrant + shift, 4)
    s, c = _kernel_sin(r), _kernel_cos(r)
    value = mx.where((q == 0) | (q == 2), s, c)
    return mx.where(q >= 2, -value, value)


def sin(x):
    """``sin(x)`` of a float64 array to libm's accuracy (see the module docstring); ``sin(-0.0) = -0.0``."""
    return mx.where(x == 0, x, _sin_cos(x, 0))


def cos(x):
    """``cos(x)`` of a float64 array: ``sin`` a quadrant on (``cos(r + k pi/2) = sin(r + (k + 1) pi/2)``)."""
    return _sin_cos(x, 1)


def _abs(x):
    """``|x|`` whose derivative at 0 is 1 (MLX's ``abs`` has 0 there, which would zero e.g. ``exp``'s)."""
    return mx.where(x >= 0, x, -x)


_LOG2E = 1.44269504088896338700e+00
_LN2_HI = 6.93147180369123816490e-01  # fdlibm's ln 2 in two parts: k * _LN2_HI is exact for |k| < 2**20
_LN2_LO = 1.90821492927058770002e-10
_EXP_OVERFLOW = 709.782712893384  # the largest x with a finite e^x
_EXP_UNDERFLOW = -746.0  # below, e^x is 0 (libm's smallest subnormal is e^-744.4)


def _grow(a):
    """``e^a`` for ``a >= 0``: ``cosh(a) + sinh(a)``, both terms positive (no cancellation)."""
    return mx.cosh(a) + mx.sinh(a)


def exp(x):
    """``exp(x)`` of a float64 array from MLX's exact ``cosh``/``sinh``: ``x = k ln 2 + r`` (Cody-Waite, ``|r| <=
    0.35``, up to 0.7 at the top), ``e^r`` as ``cosh + sinh`` of ``|r|`` (or its reciprocal), times ``2^k`` in two halves (exact, and
    rounded once into the subnormals as libm's). Within 2 ulps; inf from 709.78 (with an inf gradient, as torch's)
    and 0 below -745, through the subnormals. Every intermediate of value and gradient stays near 1: ``e^|x|`` and
    its reciprocal overflowed in the derivative past ``|x| = 355`` (gradient 0 there) and in value past 709.78 (a
    masked score's ``-1.8e308`` had a NaN gradient). Each branch reads 0 where the other is taken: MLX's ``where``
    gives its untaken input the cotangent times 0."""
    big = x > _EXP_OVERFLOW
    over = _grow(mx.where(big, x, 0.0))
    xs = mx.where(big, 0.0, mx.maximum(x, _EXP_UNDERFLOW))
    # k <= 1023: the gradient's 2^k (before e^r) stays finite wherever e^x is
    k = mx.stop_gradient(mx.minimum(mx.round(xs * _LOG2E), 1023.0))
    r = (xs - k * _LN2_HI) - k * _LN2_LO
    up = r >= 0
    er = mx.where(up, _grow(mx.where(up, r, 0.0)), 1.0 / _grow(mx.where(up, 0.0, -r)))
    half = mx.floor(k * 0.5)
    return mx.where(big, over, (er * mx.power(2.0, half)) * mx.power(2.0, k - half))


def _exp_minus_abs(x, exp_fn):
    """``e^-|x|`` (at most 1: never overflows) with :func:`_abs`'s derivative at 0 (MLX gives ``abs``/``maximum`` a
    zero derivative there: torch's sigmoid, softplus and log-sigmoid do not)."""
    return exp_fn(-_abs(x))


def sigmoid(x):
    """``1 / (1 + e^-x)`` without overflow: ``e^-|x|`` only."""
    e = _exp_minus_abs(x, exp)
    return mx.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softplus(x):
    """``log(1 + e^x)`` as ``x + log1p(e^-x)`` for ``x >= 0``, ``log1p(e^x)`` below (gradient ``sigmoid(x)``, 1/2 at
    0, finite everywhere)."""
    log_term = mx.log1p(_exp_minus_abs(x, exp))
    return mx.where(x >= 0, x + log_term, log_term)


def log_sigmoid(x, exp_fn=None):
    """``-softplus(-x)``: ``-log1p(e^-x)`` for ``x >= 0``, ``x - log1p(e^x)`` below; ``exp_fn`` the exponential to
    use (default :func:`exp`; the converters pass MLX's for float32/16-bit arrays)."""
    log_term = mx.log1p(_exp_minus_abs(x, exp_fn or exp))
    return mx.where(x >= 0, -log_term, x - log_term)


def logaddexp(a, b):
    """``log(e^a + e^b)`` as ``max + log1p(e^-|a - b|)`` with ``where`` (gradient 1/2 each at ``a == b``, as torch);
    two equal infinities give that infinity (as torch)."""
    first = a >= b
    out = mx.where(first, a, b) + mx.log1p(exp(mx.where(first, b - a, a - b)))
    return mx.where(mx.isinf(a) & (a == b), a, out)


def logsumexp(x, axis, keepdims: bool = False):
    """``log(sum(e^x))`` along ``axis`` (an int or a list of ints), shifted by the maximum; an all ``-inf`` slice
    gives ``-inf`` and a slice holding ``+inf`` gives ``+inf``, as torch."""
    m = mx.stop_gradient(mx.max(x, axis=axis, keepdims=True))  # the result does not depend on the shift
    shift = mx.where(mx.isinf(m), 0.0, m)
    out = mx.log(mx.sum(exp(x - shift), axis=axis, keepdims=True)) + shift
    return out if keepdims else mx.squeeze(out, axis=axis)


def softmax(x, axis):
    """``e^(x - max) / sum`` along ``axis``."""
    e = exp(x - mx.stop_gradient(mx.max(x, axis=axis, keepdims=True)))
    return e / mx.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis):
    """``x - logsumexp(x)`` along ``axis``."""
    return x - logsumexp(x, axis, keepdims=True)
