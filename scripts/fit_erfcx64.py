"""The float64 coefficients of ``layers/_erf64.py``, recomputed with mpmath (run by hand).

``erfcx(z) = exp(z^2) erfc(z)`` for ``z >= 1/2`` as Schonfelder's form (J. L. Schonfelder, "Chebyshev expansions for
the error and related functions", Math. Comp. 32, 1978): ``(1 + 2z) erfcx(z) = sum_j c_j T_j(u)`` with
``t = (z - K)/(z + K)`` and ``u`` the map of ``t in [t0, 1]`` onto ``[-1, 1]``; the ``c_j`` by Chebyshev
interpolation of mpmath's ``erfc`` (40 digits) at 60 nodes, truncated where every later one is below 1e-18.
``erf(x)`` for ``|x| <= 1/2``: the Maclaurin series ``2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1))``.

    .venv/bin/python scripts/fit_erfcx64.py
"""

import mpmath as mp

K, Z0, NODES, CUT = 3.75, 0.5, 60, 1e-18


def erfcx_coefficients():
    mp.mp.dps = 40
    t0 = (Z0 - K) / (Z0 + K)

    def f(u):
        t = (u * (1 - t0) + (1 + t0)) / 2
        if t == 1:
            return 2 / mp.sqrt(mp.pi)
        z = K * (1 + t) / (1 - t)
        return (1 + 2 * z) * mp.exp(z * z) * mp.erfc(z)

    nodes = [mp.cos(mp.pi * (k + 0.5) / NODES) for k in range(NODES)]
    values = [f(u) for u in nodes]
    c = [2 * mp.fsum(values[k] * mp.cos(mp.pi * j * (k + 0.5) / NODES) for k in range(NODES)) / NODES
         for j in range(NODES)]
    keep = max(j for j in range(NODES) if abs(c[j]) >= CUT) + 1
    return [float(x) for x in c[:keep]]


def erf_series(terms=16):
    mp.mp.dps = 40
    return [float(2 / mp.sqrt(mp.pi) * (-1) ** n / (mp.factorial(n) * (2 * n + 1))) for n in range(terms)]


if __name__ == "__main__":
    print("_ERFCX_CHEB =", tuple(reversed(erfcx_coefficients())), "# highest order first")
    print("_ERF_SERIES =", tuple(reversed(erf_series())), "# highest power of x^2 first")
