"""Pseudo-inverse, QR, LU and the matrix exponential on MLX with torch's gradients (``mx.custom_function``), for
``ops/linalg_more.py``.

MLX 0.32 has no VJP for ``QRF``/``SVD``/``LUF``; each function here runs them on the CPU stream and carries the
gradient torch's autograd gives (``torch/csrc/autograd/FunctionsManual.cpp``):

* ``pinv``: ``pinv_backward`` (the ``m <= n`` / ``m > n`` forms, valid where the rank does not change);
* ``qr`` (``A = Q R``, ``m >= n``): ``gA = (gQ + Q copyltu(M)) R^-T``, ``M = R gR^T - gQ^T Q``; for ``m < n`` the
  split ``A = [X | Y]``, ``X = Q U``, ``R = [U | Q^T Y]`` (torch's ``linalg_qr_backward``);
* ``lu_factor`` (square): ``gA = P L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T`` (``linalg_lu_backward``), ``gL``
  and ``gU`` read from the packed ``gLU``;
* ``matrix_exp``: ``gA = exp([[A^T, G], [0, A^T]])[:n, n:]`` (``backward_analytic_function_of_a_matrix``).

Every array is ``(*, m, n)``, batch dims first. Second derivatives are not available.
"""

from __future__ import annotations


import mlx.core as mx

from ._linalg_grads import CPU, mT, tri_solve


# ---------------------------------------------------------------------------------------------------- pinv
def pinv_plain(a, atol, rtol, hermitian: bool):
    """torch's ``linalg_pinv``: singular values (``hermitian``: |eigenvalues|) above ``max(atol, rtol * s_max)``
    inverted, the others dropped. ``atol``/``rtol`` broadcast against the batch shape."""
    if hermitian:
        w, v = mx.linalg.eigh(a, stream=CPU)
        big = mx.max(mx.abs(w), axis=-1, keepdims=True)
        tol = mx.maximum(atol[..., None], rtol[..., None] * big)
        inv = mx.where(mx.abs(w) > tol, 1 / w, mx.zeros_like(w))
        return (v * inv[..., None, :]) @ mT(v)
    u, s, vt = mx.linalg.svd(a, compute_uv=True, stream=CPU)
    k = s.shape[-1]
    u, vt = u[..., :, :k], vt[..., :k, :]
    tol = mx.maximum(atol[..., None], rtol[..., None] * s[..., :1])
    inv = mx.where(s > tol, 1 / s, mx.zeros_like(s))
    return (mT(vt) * inv[..., None, :]) @ mT(u)


def pinv(a, atol, rtol, hermitian: bool, differentiable: bool = True):
    if not differentiable:
        return pinv_plain(a, atol, rtol, hermitian)
    forward = mx.custom_function(lambda a: pinv_plain(a, atol, rtol, hermitian))

    @forward.vjp
    def backward(a, g, p):
        m, n = a.shape[-2:]
        ph, gh = mT(p), mT(g)
        if m <= n:
            k = gh @ p
            kph = k @ ph
            return -mT(p @ k) + kph - (a @ p) @ kph + (ph @ p) @ (gh - k @ a)
        k = p @ gh
        phk = ph @ k
        return -mT(k @ p) + (gh - a @ k) @ p @ ph + phk - phk @ p @ a

    return forward(a)


# ---------------------------------------------------------------------------------------------------- QR
def _qr_tall_vjp(q, r, gq, gr):
    """``gA`` for ``A = Q R`` with ``m >= n`` (``R`` square, invertible)."""
    m = r @ mT(gr) - mT(gq) @ q
    copyltu = mx.tril(m) + mT(mx.tril(m, -1))
    b = gq + q @ copyltu  # gA R^T = b  <=>  R gA^T = b^T
    return mT(tri_solve(r, mT(b), upper=True))


def qr_reduced(a, differentiable: bool = True):
    """``(Q, R)`` of the reduced QR: LAPACK's Householder (``geqrf``/``orgqr``), torch's signs."""

    def plain(a):
        return tuple(mx.linalg.qr(a, stream=CPU))

    if not differentiable:
        return plain(a)
    forward = mx.custom_function(plain)

    @forward.vjp
    def backward(a, grads, outputs):
        gq, gr = grads
        q, r = outputs
        m, n = a.shape[-2:]
        if m >= n:
            return _qr_tall_vjp(q, r, gq, gr)
        u, v = r[..., :, :m], r[..., :, m:]
        y = a[..., :, m:]
        gv = gr[..., :, m:]
        gx = _qr_tall_vjp(q, u, gq + y @ mT(gv), gr[..., :, :m])
        return mx.concatenate([gx, q @ gv], axis=-1)

    return forward(a)


def qr_complete_tall_plain(a):
    """``(Q (*, m, m), R (*, m, n))`` of a tall ``A`` (``m > n``): the QR of the square ``[A | 0]``. Its extra zero
    columns give LAPACK's ``dlarfg`` zero vectors, so ``tau = 0`` (an identity reflector) for each, and ``orgqr``
    builds ``H_1 ... H_n`` applied to the identity: torch's complete ``Q``."""
    m, n = a.shape[-2:]
    pad = mx.zeros((*a.shape[:-1], m - n), dtype=a.dtype)
    q, r = mx.linalg.qr(mx.concatenate([a, pad], axis=-1), stream=CPU)
    return q, r[..., :, :n]


qr_complete_tall = mx.custom_function(qr_complete_tall_plain)


@qr_complete_tall.vjp
def _qr_complete_tall_vjp(a, grads, outputs):
    raise ValueError("qr: the QR decomposition is not differentiable when mode='complete' and nrows > ncols "
                     "(torch raises the same)")


# ---------------------------------------------------------------------------------------------------- LU
def permutation(pivots, m: int):
    """The row order ``perm`` (``(P^T A)[i] = A[perm[i]]``) of LAPACK's sequential swaps ``i <-> pivots[i]``
    (0-based, ``(*, k)``)."""
    pivots = mx.stop_gradient(pivots)  # indices: no gradient (MLX's gather refuses one)
    idx = mx.arange(m, dtype=mx.int32)
    perm = mx.broadcast_to(idx, (*pivots.shape[:-1], m))
    for i in range(pivots.shape[-1]):
        p = pivots[..., i:i + 1].astype(mx.int32)
        here = perm[..., i:i + 1]
        there = mx.take_along_axis(perm, p, axis=-1)
        perm = mx.where(idx == i, there, mx.where(idx == p, here, perm))
    return perm


def permutation_matrix(perm, dtype):
    """``P`` with ``A = P L U``: ``P[perm[i], i] = 1``."""
    m = perm.shape[-1]
    return (perm[..., None, :] == mx.arange(m, dtype=perm.dtype)[:, None]).astype(dtype)


def unpack(lu, k: int):
    """``L`` (``(*, m, k)``, unit lower) and ``U`` (``(*, k, n)``) from the packed factor."""
    m, n = lu.shape[-2:]
    lower = mx.tril(lu[..., :, :k], -1) + mx.eye(m, k, dtype=lu.dtype)
    return lower, mx.triu(lu[..., :k, :])


def lu_factor(a, differentiable: bool = True):
    """``(LU, pivots)``: partial pivoting, pivots 0-based ``uint32`` (MLX's)."""

    def plain(a):
        return tuple(mx.linalg.lu_factor(a, stream=CPU))

    if not differentiable:
        return plain(a)
    forward = mx.custom_function(plain)

    @forward.vjp
    def backward(a, grads, outputs):
        m, n = a.shape[-2:]
        if m != n:
            raise ValueError(f"lu_factor: the gradient of the LU factorization of a non-square matrix {(m, n)} is "
                             "not implemented in Porter")
        glu = grads[0]
        lu, pivots = outputs
        lower, upper = unpack(lu, n)
        inner = mx.tril(mT(lower) @ mx.tril(glu, -1), -1) + mx.triu(mx.triu(glu) @ mT(upper))
        x = tri_solve(mT(lower), inner, upper=True)  # L^-T inner
        x = mT(tri_solve(upper, mT(x), upper=True))  # (L^-T inner) U^-T
        perm = permutation(pivots, m)
        # gA = P x: row perm[i] of gA is row i of x
        inv = mx.argsort(perm, axis=-1)
        return mx.take_along_axis(x, inv[..., :, None], axis=-2), mx.zeros_like(pivots)

    return forward(a)


# ---------------------------------------------------------------------------------------------------- matrix exp
# torch's ``mexp``: Taylor polynomials of degree 1, 2, 4, 8, 12, 18 (Bader, Blanes, Casas 2019), the degree chosen by
# the 1-norm against these bounds, scaling and squaring beyond the last.
_THETA = {mx.float32: (1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02, 5.800524627688768e-01,
                       1.461661507209034e+00, 3.010066362817634e+00),
          mx.float64: (2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04, 4.991228871115323e-02,
                       2.996158913811580e-01, 1.090863719290036e+00)}


def _taylor18(a):
    """torch's ``compute_T18`` (5 products) on ``a``."""
    b = [[0., -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045807712443e-04, 0.],
         [0., 3.97849749499645077844e-01, 1.36783778460411719922e+00, 4.98289622525382669416e-01,
          -6.37898194594723280150e-04],
         [-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
          -6.98210122488052056106e-03, 3.34975017086070470649e-05],
         [-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
          2.95552570429315521194e-02, -1.39180257516060693404e-05],
         [0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02, -1.40086798182036094347e-05]]
    n = a.shape[-1]
    eye = mx.eye(n, dtype=a.dtype)
    a2 = a @ a
    a3 = a2 @ a
    a6 = a3 @ a3
    pw = [eye, a, a2, a3, a6]

    def comb(row):
        return sum(b[row][k] * pw[k] for k in range(5) if b[row][k] != 0.0)

    a9 = comb(0) @ comb(4) + comb(3)
    return comb(1) + (comb(2) + a9) @ a9


def matrix_exp_plain(a):
    """``exp(A)`` for ``(*, n, n)``: each matrix scaled by ``2^-s`` until its 1-norm is under the degree-18 bound,
    the Taylor polynomial, then squared ``s`` times (matrices with a smaller ``s`` skip the extra squarings)."""
    theta = _THETA[mx.float64 if a.dtype == mx.float64 else mx.float32][-1]
    norm = mx.max(mx.sum(mx.abs(a), axis=-2), axis=-1)
    s = mx.maximum(mx.ceil(mx.log2(norm / theta)), 0)
    s = mx.where(mx.isfinite(s), s, mx.zeros_like(s))  # inf/NaN input: no scaling, the NaN spreads as in torch
    scaled = a * mx.power(2.0, -s).astype(a.dtype)[..., None, None]
    e = _taylor18(scaled)
    most = int(mx.max(s).item()) if s.size else 0
    for i in range(most):
        e = mx.where((s > i)[..., None, None], e @ e, e)
    return e


@mx.custom_function
def matrix_exp(a):
    return matrix_exp_plain(a)


@matrix_exp.vjp
def _matrix_exp_vjp(a, g, e):
    n = a.shape[-1]
    at = mT(a)
    top = mx.concatenate([at, g], axis=-1)
    bottom = mx.concatenate([mx.zeros_like(at), at], axis=-1)
    return matrix_exp_plain(mx.concatenate([top, bottom], axis=-2))[..., :n, n:]



