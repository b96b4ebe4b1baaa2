"""MLX's LAPACK-backed linear algebra with torch's gradients (``mx.custom_function``), for ``ops/linalg.py``.

MLX 0.32 runs ``mx.linalg`` on the CPU stream only and has no VJP for its factorizations (``[Primitive::vjp] Not
implemented for Inverse/Cholesky/SVD/Eigh/LUF``). Every function here passes ``stream=mx.cpu`` (so a port on a GPU
default device still computes these ops, on the CPU) and carries the gradient torch's autograd gives
(``torch/csrc/autograd/FunctionsManual.cpp``):

* ``inv``: ``gA = -Y^T G Y^T`` with ``Y = A^-1``;
* ``solve`` (``AX = B``): ``gB = A^-T G``, ``gA = -gB X^T``;
* ``solve_triangular``: the same, ``gA`` kept to ``A``'s triangle (strict when unitriangular);
* ``cholesky`` (lower ``L``): ``gA = L^-T Phi(L^T G) L^-1``, ``Phi`` the lower triangle with the diagonal halved,
  symmetrized;
* ``cholesky_solve`` (``X = (L L^T)^-1 B``): ``gB = (L L^T)^-1 G``, ``gL = -(gB X^T + X gB^T) L`` (torch's formula,
  not projected to the triangle);
* ``det``: ``gA = g det(A) A^-T``; ``slogdet``: ``gA = g_logabsdet A^-T`` (the sign has no gradient);
* ``svdvals``: ``gA = U diag(g) V^T``; ``eigvalsh``: ``gA = V diag(g) V^T``.

Every array is ``(*, n, n)`` (or ``(*, m, n)`` for ``svdvals``, ``(*, n, k)`` right-hand sides), batch dims already
broadcast by the caller (``mx.broadcast_to`` carries its own gradient). Inside a VJP the factorizations run again
without gradients, so second derivatives are not available.
"""

from __future__ import annotations

import mlx.core as mx

CPU = mx.cpu


def mT(x):
    return mx.swapaxes(x, -1, -2)


def tri_solve(a, b, upper: bool):
    return mx.linalg.solve_triangular(a, b, upper=upper, stream=CPU)


def _inv_t(a):
    return mT(mx.linalg.inv(a, stream=CPU))


# ---------------------------------------------------------------------------------------------------- inverse, solve
@mx.custom_function
def inv(a):
    return mx.linalg.inv(a, stream=CPU)


@inv.vjp
def _inv_vjp(a, g, y):
    yt = mT(y)
    return -(yt @ g @ yt)


@mx.custom_function
def solve(a, b):
    return mx.linalg.solve(a, b, stream=CPU)


@solve.vjp
def _solve_vjp(primals, g, x):
    a, _ = primals
    gb = mx.linalg.solve(mT(a), g, stream=CPU)
    return -(gb @ mT(x)), gb


def solve_triangular(a, b, upper: bool, unitriangular: bool, differentiable: bool = True):
    """``X`` with ``A X = B`` for triangular ``A`` (the other triangle never read; a unit diagonal when
    ``unitriangular``); ``differentiable=False``: no custom gradient (export mode)."""
    n = a.shape[-1]
    keep = mx.triu(mx.ones((n, n), dtype=mx.bool_), 1 if unitriangular else 0)
    if not upper:
        keep = mT(keep)

    def triangle(a):
        t = mx.where(keep, a, mx.zeros_like(a))
        return t + mx.eye(n, dtype=a.dtype) if unitriangular else t

    def plain(a, b):
        return tri_solve(triangle(a), b, upper)

    if not differentiable:
        return plain(a, b)
    forward = mx.custom_function(plain)

    @forward.vjp
    def backward(primals, g, x):
        a, _ = primals
        gb = tri_solve(mT(triangle(a)), g, not upper)
        ga = -(gb @ mT(x))
        return mx.where(keep, ga, mx.zeros_like(ga)), gb

    return forward(a, b)


# ---------------------------------------------------------------------------------------------------- Cholesky
def _failed_to_nan(l):
    """LAPACK's ``potrf`` stops at the first non-positive pivot, which it leaves on the diagonal (MLX does not
    report it): such a matrix has no Cholesky factor, and the port gives NaN for all of it where torch raises."""
    d = mx.diagonal(l, axis1=-2, axis2=-1)
    bad = mx.any(mx.logical_not(d > 0), axis=-1)[..., None, None]
    return mx.where(bad, mx.array(float("nan"), dtype=l.dtype), l)


@mx.custom_function
def cholesky(a):
    """Lower factor ``L`` of ``A = L L^T``, read from ``A``'s lower triangle."""
    return _failed_to_nan(mx.linalg.cholesky(a, upper=False, stream=CPU))


@cholesky.vjp
def _cholesky_vjp(a, g, l):
    phi = mx.tril(mT(l) @ g)
    phi = 0.5 * (phi + mT(mx.tril(phi, -1)))
    ga = tri_solve(mT(l), phi, upper=True)  # L^-T phi
    return mT(tri_solve(mT(l), mT(ga), upper=True))  # (L^-T phi) L^-1 = (L^-T (L^-T phi)^T)^T


@mx.custom_function
def cholesky_solve(b, l):
    """``X`` with ``L L^T X = B``; ``l`` the lower factor."""
    return tri_solve(mT(l), tri_solve(l, b, upper=False), upper=True)


@cholesky_solve.vjp
def _cholesky_solve_vjp(primals, g, x):
    _, l = primals
    gb = tri_solve(mT(l), tri_solve(l, g, upper=False), upper=True)
    common = gb @ mT(x)
    common = common + mT(common)
    return gb, -(common @ l)


# ---------------------------------------------------------------------------------------------------- determinants
def _det(a):
    """The product of the LU factor's diagonal, negated per row swap (MLX 0.32's own ``det`` and its float64
    ``exp`` of ``slogdet`` both lose precision in float64: ~1e-7 relative)."""
    lu, pivots = mx.linalg.lu_factor(a, stream=CPU)
    swaps = mx.sum(pivots != mx.arange(a.shape[-1], dtype=pivots.dtype), axis=-1)
    sign = 1 - 2 * (swaps % 2).astype(a.dtype)
    return sign * mx.prod(mx.diagonal(lu, axis1=-2, axis2=-1), axis=-1)


@mx.custom_function
def det(a):
    return _det(a)


@det.vjp
def _det_vjp(a, g, d):
    return (g * d)[..., None, None] * _inv_t(a)


@mx.custom_function
def slogdet(a):
    sign, logabs = mx.linalg.slogdet(a, stream=CPU)
    return sign, logabs


@slogdet.vjp
def _slogdet_vjp(a, g, outputs):
    return g[1][..., None, None] * _inv_t(a)


# ---------------------------------------------------------------------------------------------------- spectra
@mx.custom_function
def svdvals(a):
    return mx.linalg.svd(a, compute_uv=False, stream=CPU)


@svdvals.vjp
def _svdvals_vjp(a, g, s):
    u, _, vt = mx.linalg.svd(a, compute_uv=True, stream=CPU)
    k = s.shape[-1]
    return (u[..., :, :k] * g[..., None, :]) @ vt[..., :k, :]


def eigvalsh(a, uplo: str, differentiable: bool = True):
    """Eigenvalues (ascending) of the symmetric matrix held in ``a``'s ``uplo`` triangle."""

    def plain(a):
        return mx.linalg.eigvalsh(a, UPLO=uplo, stream=CPU)

    if not differentiable:
        return plain(a)
    forward = mx.custom_function(plain)

    @forward.vjp
    def backward(a, g, w):
        _, v = mx.linalg.eigh(a, UPLO=uplo, stream=CPU)
        return (v * g[..., None, :]) @ mT(v)

    return forward(a)


# ---------------------------------------------------------------------------------------------------- export mode
# MLX cannot serialize an ``mx.custom_function`` nor its LU factorization (``LUF``, behind ``solve``, ``det``,
# ``slogdet``): while exporting (no gradients there) the plain forwards run, ``solve`` as ``inv(A) @ B``; ``det`` and
# ``slogdet`` have no serializable form and are refused by name.


def _no_export(name):
    def refuse(*arrays):
        raise ValueError(f"{name}: MLX 0.32 cannot serialize the LU factorization it needs, so a port using it "
                         "cannot be exported as .mlxfn (it runs as a port: porter.load)")

    return refuse


PLAIN = {
    "inv": lambda a: mx.linalg.inv(a, stream=CPU),
    "solve": lambda a, b: mx.linalg.inv(a, stream=CPU) @ b,
    "cholesky": lambda a: _failed_to_nan(mx.linalg.cholesky(a, upper=False, stream=CPU)),
    "cholesky_solve": lambda b, l: tri_solve(mT(l), tri_solve(l, b, upper=False), upper=True),
    "det": _no_export("det"),
    "slogdet": _no_export("slogdet"),
    "svdvals": lambda a: mx.linalg.svd(a, compute_uv=False, stream=CPU),
}
DIFFERENTIABLE = {"inv": inv, "solve": solve, "cholesky": cholesky, "cholesky_solve": cholesky_solve, "det": det,
                  "slogdet": slogdet, "svdvals": svdvals}
