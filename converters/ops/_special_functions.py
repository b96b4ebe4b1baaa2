"""The table of special functions a converted graph runs (``special`` kernel, and ``erf``/``erfc``/``erfinv`` of the
``unary`` kernel), each with torch's derivative.

:func:`apply` computes ``FUNCTIONS[name]`` of an array of any dtype as torch does: float16, bfloat16, integers and
bool in float32 (the result rounded once to float16/bfloat16; integers give float32), float32 and float64 in
their own dtype. Its gradient is torch's formula (``tools/autograd/derivatives.yaml``), not the derivative of the
approximation: ``lgamma' = digamma``, ``digamma' = polygamma(1)``, ``polygamma(n)' = polygamma(n + 1)``,
``i0' = i1``, ``i0e' = i1e - sgn(x) i0e``, ``i1' = i0 - i1/x`` and ``i1e' = i0e - i1e (sgn(x) + 1/x)`` (both 1/2 at
|x| <= eps, as torch), ``erfcx' = 2x erfcx - 2/sqrt(pi)``, ``log_ndtr' = exp(-(log_ndtr + x^2/2)) / sqrt(2 pi)``,
``ndtri' = sqrt(2 pi) exp(ndtri^2 / 2)``, ``erfinv' = sqrt(pi)/2 exp(erfinv^2)``. Torch gives Bessel J/Y,
``spherical_bessel_j0`` and the ``modified_bessel_*`` functions no gradient: their outputs are constants for
autograd here too (``stop_gradient``). While exporting (``.mlxfn``), where a custom VJP cannot be serialized, the
forward runs alone.
"""

from __future__ import annotations

import math
from functools import lru_cache

import mlx.core as mx

from . import _layers as act
from . import _special_bessel as B
from . import _special_gamma as G
from . import _special_normal as N
from ._special_series import result_dtype, working

_SQRT_2PI = math.sqrt(2 * math.pi)
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _tiny_half(x, grad):
    """torch's ``i1``/``i1e`` backward: 1/2 where ``|x| <= eps`` of the dtype (the formula is 0/0 there)."""
    eps = float(mx.finfo(x.dtype).eps)
    return mx.where(mx.abs(x) > eps, grad, 0.5)


def _safe(x):
    eps = float(mx.finfo(x.dtype).eps)
    return mx.where(mx.abs(x) > eps, x, eps)


# name -> (forward, derivative(x, output) or None when torch gives no gradient)
FUNCTIONS = {
    "lgamma": (G.lgamma, lambda x, y: G.digamma(x)),
    "digamma": (G.digamma, lambda x, y: G.trigamma(x)),
    "i0": (B.i0, lambda x, y: B.i1(x)),
    "i0e": (B.i0e, lambda x, y: B.i1e(x) - mx.sign(x) * y),
    "i1": (B.i1, lambda x, y: _tiny_half(x, B.i0(_safe(x)) - y / _safe(x))),
    "i1e": (B.i1e, lambda x, y: _tiny_half(x, B.i0e(_safe(x)) - y * (mx.sign(_safe(x)) + 1 / _safe(x)))),
    "erf": (N.erf, lambda x, y: _TWO_OVER_SQRT_PI * act.exp(-x * x)),
    "erfc": (N.erfc, lambda x, y: -_TWO_OVER_SQRT_PI * act.exp(-x * x)),
    "erfcx": (N.erfcx, lambda x, y: 2 * x * y - _TWO_OVER_SQRT_PI),
    "erfinv": (N.erfinv, lambda x, y: 0.5 * math.sqrt(math.pi) * act.exp(y * y)),
    "log_ndtr": (N.log_ndtr, lambda x, y: act.exp(-(y + x * x / 2)) / _SQRT_2PI),
    "ndtri": (N.ndtri, lambda x, y: _SQRT_2PI * act.exp(y * y / 2)),
    "bessel_j0": (B.bessel_j0, None),
    "bessel_j1": (B.bessel_j1, None),
    "bessel_y0": (B.bessel_y0, None),
    "bessel_y1": (B.bessel_y1, None),
    "spherical_bessel_j0": (B.spherical_bessel_j0, None),
    "modified_bessel_i0": (B.i0, None),  # torch's modified_bessel_i0 is its i0, bit for bit, without a gradient
    "modified_bessel_i1": (B.modified_bessel_i1, None),
    "modified_bessel_k0": (B.modified_bessel_k0, None),
    "modified_bessel_k1": (B.modified_bessel_k1, None),
    "scaled_modified_bessel_k0": (lambda x: B.modified_bessel_k0(x, scaled=True), None),
    "scaled_modified_bessel_k1": (lambda x: B.modified_bessel_k1(x, scaled=True), None),
    "polygamma": (None, None),  # takes the order n: see _pair
}


def _pair(name: str, n):
    if name == "polygamma":
        return (lambda x: G.polygamma(n, x)), (lambda x, y: G.polygamma(n + 1, x))
    return FUNCTIONS[name]


def _forward(name, n, x):
    forward, _ = _pair(name, n)
    return forward(working(x)).astype(result_dtype(x))


@lru_cache(maxsize=None)
def _with_vjp(name: str, n):
    _, derivative = _pair(name, n)

    @mx.custom_function
    def special(x):
        return _forward(name, n, x)

    @special.vjp
    def special_vjp(x, cotangent, output):  # a single primal arrives as the array itself
        w = working(x)
        grad = derivative(w, working(output)).astype(w.dtype)
        return (cotangent.astype(w.dtype) * grad).astype(x.dtype)

    return special


def apply(name: str, x, n=None):
    """``FUNCTIONS[name](x)`` (``polygamma`` of order ``n``) in torch's dtypes, with torch's gradient."""
    if _pair(name, n)[1] is None:
        return mx.stop_gradient(_forward(name, n, x))
    if act.exporting():
        act.export_note(f"{name}'s torch gradient (mx.custom_function) -> its forward ops")
        return _forward(name, n, x)
    return _with_vjp(name, n)(x)


def zeta(x, q):
    """Hurwitz ``zeta(x, q)`` of two arrays (broadcast) in torch's dtypes; the gradient to ``q`` is torch's
    ``-x zeta(x + 1, q)``; torch has none for ``x``, which gets 0 here."""
    dtype = mx.result_type(x, q)
    out_dtype = dtype if mx.issubdtype(dtype, mx.floating) else mx.float32
    compute = mx.float64 if out_dtype == mx.float64 else mx.float32

    def forward(a, b):
        return G.accumulated_zeta(a.astype(compute), b.astype(compute)).astype(out_dtype)

    if act.exporting():
        act.export_note("zeta's torch gradient (mx.custom_function) -> its forward ops")
        return forward(x, q)
    return _zeta_function(forward)(x, q)


def _zeta_function(forward):
    @mx.custom_function
    def hurwitz(x, q):
        return forward(x, q)

    @hurwitz.vjp
    def hurwitz_vjp(primals, cotangent, output):
        x, q = primals
        dq = cotangent * (-x * forward(x + 1, q))
        return mx.zeros_like(x), _unbroadcast(dq, q).astype(q.dtype)

    return hurwitz


def _unbroadcast(grad, like):
    """``grad`` summed back to ``like``'s shape (the cotangent has the broadcast shape)."""
    extra = grad.ndim - like.ndim
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, (g, s) in enumerate(zip(grad.shape, like.shape)) if s == 1 and g != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad
