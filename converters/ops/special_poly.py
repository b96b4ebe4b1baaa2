"""Orthogonal polynomials: ``torch.special`` ``chebyshev_polynomial_t/u/v/w``, ``shifted_chebyshev_polynomial_t/u/v/w``,
``hermite_polynomial_h/he``, ``laguerre_polynomial_l`` and ``legendre_polynomial_p`` of ``(x, n)``.

Elementwise, any layout (the two operands aligned as binary ops are; either may be a Python number). Each follows
torch's CPU kernel (``aten/src/ATen/native/Math.h``): ``n`` is truncated to an integer (after both operands are
brought to the result dtype), ``n < 0`` gives 0, the values at ``|x| == 1`` (shifted: ``x == 0`` and ``x == 1``) are
torch's closed forms, the Chebyshev kinds use torch's trigonometric form for ``|x| < 1`` above its degree bound, and
everything else runs torch's three-term recurrence, here for all elements at once up to the largest ``n`` that needs
it (read with ``.item()``: these kernels cannot be exported as ``.mlxfn``; ``n`` above ``MAX_DEGREE`` raises).
Result dtype: torch's (integer operands give float32; a 0-dim tensor or a number does not widen the other operand).
torch has no gradient for them: the port's output carries none (``stop_gradient``).
"""

from __future__ import annotations

import mlx.core as mx

from ..registry import kernel, register
from ..spec import SCALAR, Enum
from ._layers import float64_math as _float64
from .elementwise import aligned_inputs

MAX_DEGREE = 100_000  # the recurrence is one graph step per degree


def _sin(v):
    return _float64.sin(v) if v.dtype == mx.float64 else mx.sin(v)  # MLX's float64 sin is float32-precise


def _cos(v):
    return _float64.cos(v) if v.dtype == mx.float64 else mx.cos(v)


def _t_trig(y, n, a):
    return _cos(n * a)


def _u_trig(y, n, a):
    s = _sin(a)
    return mx.where(s != 0, _sin((n + 1) * a) / s, (n + 1) * _cos((n + 1) * a) / y)


def _v_trig(y, n, a):
    odd = mx.where(n % 2 == 0, n + n + 1, -(n + n + 1))
    return mx.where(_sin(a / 2) != 1, _cos((n + 0.5) * a) / _cos(a / 2), odd)


def _w_trig(y, n, a, positive_one):
    parity = mx.where(n % 2 == 0, 1, -1).astype(y.dtype)
    limit = mx.where(y > 0, n + n + 1, parity) if positive_one else parity
    return mx.where(_cos(a / 2) != 1, _sin((n + 0.5) * a) / _sin(a / 2), limit)


def _ends(kind, y, n):
    """torch's values at ``y == 1`` and ``y == -1`` (``y`` = x, or 2x-1 for the shifted kinds)."""
    even = n % 2 == 0
    if kind == "t":
        return 1, mx.where(even, 1, -1)
    if kind == "u":
        return n + 1, mx.where(even, n + 1, -(n + 1))
    if kind == "v":
        return 1, mx.where(even, n + n + 1, -(n + n + 1))
    return n + n + 1, mx.where(even, 1, -1)  # w


_CHEB = {"t": (lambda y: y, 6, _t_trig), "u": (lambda y: y + y, 8, _u_trig),
         "v": (lambda y: y + y - 1, 8, _v_trig), "w": (lambda y: y + y + 1, 8, lambda y, n, a: _w_trig(y, n, a, True))}
# the shifted kinds' degree bounds and their W's limit, as torch writes them
_SHIFTED = {"t": 6, "u": 6, "v": 6, "w": 4}

FUNCTIONS = tuple([f"chebyshev_polynomial_{k}" for k in "tuvw"] + [f"shifted_chebyshev_polynomial_{k}" for k in "tuvw"]
                  + ["hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p"])


def _recurrence(first, step, y, n, needed):
    """``P_n`` of ``P_0 = 1``, ``P_1 = first``, ``P_m = step(m, P_{m-2}, P_{m-1})``, where ``needed``."""
    top = int(mx.max(mx.where(needed, n, 1)).item()) if n.size else 1
    if top > MAX_DEGREE:
        raise ValueError(f"orthogonal polynomial: the degree 'n' may be at most {MAX_DEGREE}, got {top}")
    one = mx.ones_like(y)
    p, q = one, first
    for m in range(2, top + 1):
        new = step(m, y, p, q)
        go = m <= n
        p, q = mx.where(go, q, p), mx.where(go, new, q)
    return mx.where(n == 0, one, q)


def _evaluate(fn, x, n):
    zero = mx.zeros_like(x)
    if fn.startswith("chebyshev") or fn.startswith("shifted"):
        kind = fn[-1]
        shifted = fn.startswith("shifted")
        y = x + x - 1 if shifted else x
        first, bound, trig = _CHEB[kind]
        if shifted:
            bound = _SHIFTED[kind]
        hi, lo = _ends(kind, y, n)
        at_hi, at_lo = (x == 1, x == 0) if shifted else (x == 1, x == -1)
        use_trig = (n > bound) & (mx.abs(y) < 1)
        needed = (n >= 2) & ~at_hi & ~at_lo & ~use_trig
        value = _recurrence(first(y), lambda m, y, p, q: (y + y) * q - p, y, n, needed)
        value = mx.where(use_trig, trig(y, n, mx.arccos(mx.clip(y, -1, 1))), value)
        value = mx.where(at_lo, lo, mx.where(at_hi, hi, value))
    elif fn == "hermite_polynomial_h":
        value = _recurrence(x + x, lambda m, y, p, q: (y + y) * q - (2 * (m - 1)) * p, x, n, n >= 2)
    elif fn == "hermite_polynomial_he":
        value = _recurrence(x, lambda m, y, p, q: y * q - (m - 1) * p, x, n, n >= 2)
    elif fn == "laguerre_polynomial_l":
        value = _recurrence(1 - x, lambda m, y, p, q: ((2 * (m - 1) + (1 - y)) * q - (m - 1) * p) / m, x, n,
                            (n >= 2) & (x != 0))
        value = mx.where(x == 0, 1, value)
    else:  # legendre_polynomial_p
        at_one = mx.abs(x) == 1
        value = _recurrence(x, lambda m, y, p, q: ((2 * m - 1) * y * q - (m - 1) * p) / m, x, n, (n >= 2) & ~at_one)
        value = mx.where(at_one, mx.where((x > 0) | (n % 2 == 0), 1, -1), value)
    return mx.where(n < 0, zero, value.astype(x.dtype))


def _result_dtype(x, n):
    """torch's: integer operands give float32; a 0-dim tensor or a number does not widen a sized operand."""
    floats = [a for a in (x, n) if isinstance(a, mx.array) and mx.issubdtype(a.dtype, mx.floating)]
    if not floats:
        return mx.float32
    sized = [a for a in floats if a.ndim > 0] or floats
    dtype = sized[0].dtype
    for a in sized[1:]:
        dtype = (mx.zeros((), dtype) + mx.zeros((), a.dtype)).dtype
    return dtype


@kernel("orthogonal_polynomial", inputs=[SCALAR, SCALAR], attrs={"fn": Enum(*FUNCTIONS)})
def k_orthogonal_polynomial(x, n, *, fn):
    dtype = _result_dtype(x, n)
    x, n = mx.array(x).astype(dtype), mx.array(n).astype(dtype)
    x, n = mx.broadcast_arrays(x, n)
    # torch's int64 cast truncates; a non-finite degree becomes INT64_MIN on x86 (cvttsd2si), a negative n: 0
    n = mx.where(mx.isfinite(n), mx.where(n < 0, mx.ceil(n), mx.floor(n)), mx.full(n.shape, -1, n.dtype))
    return mx.stop_gradient(_evaluate(fn, x, n))


def _converter(fn):
    def convert(ctx, call):
        specs, perm = aligned_inputs(ctx, call, [call.arg("x"), call.arg("n")])
        ctx.emit("orthogonal_polynomial", specs, {"fn": fn}, perm=perm)

    convert.__name__ = f"convert_{fn}"
    return convert


for _fn in FUNCTIONS:
    register(f"aten.special_{_fn}.default", f"aten.special_{_fn}.x_scalar", f"aten.special_{_fn}.n_scalar")(
        _converter(_fn))
