"""Special functions through the converter (``converters/ops/special.py``), torch as the oracle in each test:
lgamma, digamma, polygamma, mvlgamma, i0/i0e/i1/i1e, erf/erfc/erfcx/erfinv, ndtr/log_ndtr/ndtri, zeta, Bessel J0/J1,
spherical J0, and torch's decompositions that reach them (xlogy, xlog1py, entr, sinc, logit).

Values: one dense grid over every regime (poles, reflection, the asymptotic ranges, tiny and huge magnitudes,
+-0, +-inf, NaN); NaN and infinities must sit exactly where torch puts them, finite values within a bound in ulps
of torch's result plus the same number of ulps of the input's rounding (``|x f'(x)|``, so a value next to a zero
of the function is held to what float32 can say about it). Also float64, float16/bfloat16 and integer inputs,
gradients against torch autograd, both TorchScript frontends, and a model taking ``torch.distributions``
log-probs in its forward, converted end to end at two input sizes.
"""

import math

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from tests.converter_check import check_converted, run_ported

S = torch.special
INF, NAN = float("inf"), float("nan")


def _grid(dtype=torch.float32):
    edges = torch.tensor([0.0, -0.0, 1.0, 2.0, 3.0, -1.0, -2.0, -2.5, 0.5, 1.5, 2.5, 8.0, 10.0, 5.0, 50.0, -6.1, -26.7,
                          88.7, -88.7, 1e17, 3e38, -3e38, 1e-30, -1e-30, 1e-6, INF, -INF, NAN])
    parts = [torch.linspace(-30, 30, 6001), torch.linspace(-1, 3, 2001), torch.logspace(-38, 38, 761),
             -torch.logspace(-38, 2, 401), torch.linspace(0, 1, 1001), 1 - torch.logspace(-7, 0, 201),
             torch.linspace(-100, 100, 2001), edges]
    return torch.cat(parts).to(dtype)


def _polygamma(n):
    return lambda x: torch.polygamma(n, x)


# name -> (torch function, input restriction, ulps). The restrictions are Porter's documented limits: zeta's direct
# sum reaches q > -16.
OPS = {
    "lgamma": (torch.lgamma, None, 12),
    "digamma": (torch.digamma, None, 4),
    "polygamma1": (_polygamma(1), None, 4),  # at negative integers: see test_trigamma_at_negative_integers
    "polygamma2": (_polygamma(2), (-15.5, 3e38), 4),
    "polygamma5": (_polygamma(5), (-15.5, 3e38), 4),
    "i0": (S.i0, None, 8),  # near 0 both sum 30 float32 Chebyshev terms at y = -2: each 3-4 ulps from the truth
    "i0e": (S.i0e, None, 8),
    "i1": (S.i1, None, 8),
    "i1e": (S.i1e, None, 8),
    "erf": (torch.erf, None, 2),
    "erfc": (torch.erfc, None, 4),
    "erfcx": (S.erfcx, None, 12),  # torch's own erfcx is 4e-7 off near 0 (Porter's is closer to the true value)
    "erfinv": (torch.erfinv, None, 3),
    "ndtr": (S.ndtr, None, 4),  # torch's (1 + erf) / 2: one ulp of erf near -1 is 3e-8 absolute (_FLOOR)
    "log_ndtr": (S.log_ndtr, None, 6),
    "ndtri": (S.ndtri, None, 6),
    "zeta3": (lambda q: S.zeta(3.0, q), (-15.5, 3e38), 4),
    "bessel_j0": (S.bessel_j0, (-1e5, 1e5), 8),  # MLX's cos/sin lose ulps beyond |x| ~ 1e6
    "bessel_j1": (S.bessel_j1, (-1e5, 1e5), 8),
    "bessel_y0": (S.bessel_y0, (-1e5, 1e5), 8),
    "bessel_y1": (S.bessel_y1, (-1e5, 1e5), 8),
    "spherical_bessel_j0": (S.spherical_bessel_j0, None, 4),
    "modified_bessel_i0": (S.modified_bessel_i0, None, 8),
    "modified_bessel_i1": (S.modified_bessel_i1, None, 8),
    "modified_bessel_k0": (S.modified_bessel_k0, None, 8),
    "modified_bessel_k1": (S.modified_bessel_k1, None, 8),
    "scaled_modified_bessel_k0": (S.scaled_modified_bessel_k0, None, 8),
    "scaled_modified_bessel_k1": (S.scaled_modified_bessel_k1, None, 8),
}
_FLOOR = {"ndtr": 2.0 ** -24}  # an absolute allowance where torch's own formula is absolutely conditioned
_NO_GRAD = {  # torch gives these no autograd: their derivatives, in torch's own functions, for the bound only
    "modified_bessel_i0": S.i1,
    "modified_bessel_i1": lambda x: S.i0(x) - S.i1(x) / x,
    "modified_bessel_k0": lambda x: -S.modified_bessel_k1(x),
    "modified_bessel_k1": lambda x: -S.modified_bessel_k0(x) - S.modified_bessel_k1(x) / x,
    "scaled_modified_bessel_k0": lambda x: S.scaled_modified_bessel_k0(x) - S.scaled_modified_bessel_k1(x),
    "scaled_modified_bessel_k1": lambda x: (S.scaled_modified_bessel_k1(x) * (1 - 1 / x)
                                            - S.scaled_modified_bessel_k0(x)),
    "bessel_j0": lambda x: -S.bessel_j1(x),
    "bessel_j1": lambda x: S.bessel_j0(x) - S.bessel_j1(x) / x,
    "bessel_y0": lambda x: -S.bessel_y1(x),
    "bessel_y1": lambda x: S.bessel_y0(x) - S.bessel_y1(x) / x,
    "spherical_bessel_j0": lambda x: (torch.cos(x) - S.spherical_bessel_j0(x)) / x,
}


class Apply(nn.Module):
    def __init__(self, names):
        super().__init__()
        self.names = names
        self.eval()

    def forward(self, x):
        return tuple(OPS[n][0](_restrict(x, OPS[n][1])) for n in self.names)


def _restrict(x, bounds):
    return x if bounds is None else x.clamp(*bounds)


def _derivative(name, x):
    x = x.detach().double()
    if name in _NO_GRAD:
        return _NO_GRAD[name](x)
    x.requires_grad_()
    (g,) = torch.autograd.grad(OPS[name][0](_restrict(x, OPS[name][1])).sum(), x)
    return g


def assert_ulps(got, want, x, deriv, ulps, what, unit=2.0 ** -24, floor=0.0):
    """NaN and +-inf exactly where ``want`` has them; finite values within ``ulps * (spacing(want) + |x f'(x)| u)``
    (``u`` the unit roundoff of the format the function is accurate to)."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got64), np.isnan(want64), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.isposinf(got64), np.isposinf(want64), err_msg=f"{what}: +inf positions")
    np.testing.assert_array_equal(np.isneginf(got64), np.isneginf(want64), err_msg=f"{what}: -inf positions")
    finite = np.isfinite(want64)
    slack = np.nan_to_num(np.abs(x.astype(np.float64) * deriv), nan=0.0, posinf=0.0)
    if want.dtype == np.float32:
        spacing = np.spacing(np.abs(want)).astype(np.float64)
    elif unit == 2.0 ** -53:
        spacing = np.spacing(np.abs(want64))
    else:  # float64 held to float32's ulp
        spacing = np.abs(want64) * 2.0 ** -23
    allowed = ulps * (spacing + slack * unit) + floor
    err = np.abs(got64 - want64)
    bad = finite & ~(err <= allowed)
    if bad.any():
        i = np.flatnonzero(bad)[np.argmax((err / allowed)[bad])]
        raise AssertionError(f"{what}: {bad.sum()} values beyond {ulps} ulps; worst at x={x[i]!r}: porter "
                             f"{got64[i]!r}, torch {want64[i]!r} ({err[i] / allowed[i] * ulps:.1f} ulps)")


@pytest.fixture(scope="module")
def ported_float32():
    x = _grid()
    return porter.convert(Apply(list(OPS)), (x,), io_layout="torch"), x


@pytest.mark.parametrize("name", list(OPS))
def test_each_op_matches_torch_over_its_whole_domain(ported_float32, name):
    ported, x = ported_float32
    got = run_ported(ported, (x,))[list(OPS).index(name)]
    want = OPS[name][0](_restrict(x, OPS[name][1]))
    assert got.dtype == np.float32
    deriv = _derivative(name, x).numpy()
    keep = ~_NEGATIVE_INTEGERS(x).numpy() if name == "polygamma1" else slice(None)
    assert_ulps(got[keep], want.numpy()[keep], _restrict(x, OPS[name][1]).numpy()[keep], deriv[keep], OPS[name][2],
                name, floor=_FLOOR.get(name, 0.0))


def _NEGATIVE_INTEGERS(x):
    return (x < 0) & (x == x.floor()) & torch.isfinite(x)


def test_trigamma_at_negative_integers():
    """A pole, where torch's trigamma returns ``pi^2 / sin^2(float(pi) x)``: large and finite, since
    ``float(pi) x`` is not a multiple of pi. Porter computes the same expression; ``sin`` of that argument is a
    tiny difference that MLX's and the C library's sines round apart by ~1e-6 relative."""
    x = torch.arange(-120.0, 0.0)
    ported = porter.convert(Apply(["polygamma1"]), (x,), io_layout="torch")
    (got,) = run_ported(ported, (x,))
    want = torch.polygamma(1, x).numpy()
    assert np.all(np.isfinite(got)) and np.all(got > 1e10)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_poles_and_special_values_are_torchs():
    x = torch.tensor([0.0, -0.0, -1.0, -2.0, -3.0, -1e30, INF, -INF, NAN])
    model = Apply(["lgamma", "digamma", "i0", "i1", "erfcx", "ndtri", "erfinv", "bessel_j0"])
    ported = porter.convert(model, (x,), io_layout="torch")
    for name, got, want in zip(model.names, run_ported(ported, (x,)), model(x)):
        np.testing.assert_allclose(got, want.numpy(), rtol=4e-7, atol=0, err_msg=name)  # NaN/inf: exactly


def test_lgamma_and_digamma_at_known_values():
    """Beside torch: lgamma(1) = lgamma(2) = 0 exactly, digamma(+0) = -inf and digamma(-0) = +inf."""
    x = torch.tensor([1.0, 2.0, 0.0, -0.0, 0.5])
    ported = porter.convert(Apply(["lgamma", "digamma"]), (x,), io_layout="torch")
    lg, dg = run_ported(ported, (x,))
    assert lg[0] == 0 and lg[1] == 0 and lg[4] == pytest.approx(0.5 * math.log(math.pi), rel=1e-7)
    assert dg[2] == -INF and dg[3] == INF


_FLOOR64 = {"ndtr": 2.0 ** -53}  # torch's (1 + erf) / 2, absolutely conditioned near -1 (as _FLOOR in float32)


def _float64_grid():
    """The float32 grid in float64, and points only float64 can hold: ``erfinv`` within 1e-16 of +-1, ``erf`` near
    its float32 fit's seams (+-1/2, +-1), ``erfc``'s tail to its last subnormals."""
    extra = torch.cat([1 - torch.logspace(-16, -1, 151, dtype=torch.float64), torch.logspace(-300, -1, 300, dtype=torch.float64),
                       torch.linspace(0.49, 1.01, 521, dtype=torch.float64), torch.linspace(20, 27.5, 751, dtype=torch.float64)])
    return torch.cat([_grid(torch.float64), extra, -extra])


def test_float64_inputs():
    """float64 computes in float64 with float64 tables and algorithms (the erf family too: ``layers/_erf64.py``),
    avoiding MLX's float64 ``sin``/``cos``/``exp`` (computed in float32): within 16 float64 ulps, plus the ulps the
    input's own rounding moves the function by (``|x f'(x)|``: ``erfinv`` near +-1)."""
    names = [n for n in OPS if n not in ("polygamma5",)]
    x = _float64_grid()
    model = Apply(names)
    ported = porter.convert(model, (x,), io_layout="torch")
    for name, got, want in zip(names, run_ported(ported, (x,)), model(x)):
        assert got.dtype == np.float64, name
        deriv = _derivative(name, x).numpy()
        keep = ~_NEGATIVE_INTEGERS(x).numpy() if name == "polygamma1" else slice(None)
        if name.startswith("bessel_"):  # the phase x / pi - 1/4 carries x's rounding times |x|: 6e-12 at 1e5
            keep = (x.abs() <= 1e3).numpy()
        args = (got[keep], want.numpy()[keep], _restrict(x, OPS[name][1]).numpy()[keep], deriv[keep])
        assert_ulps(*args, 16, name, unit=2.0 ** -53, floor=max(_FLOOR64.get(name, 0.0), 1e-300))  # subnormals: absolutely


class ErfFamily(nn.Module):
    def forward(self, x, u):
        return (torch.erf(x), torch.erfc(x), S.erfcx(x), S.log_ndtr(x), S.ndtr(x), torch.erfinv(u))


def test_float64_erf_family_gradients_are_float64_accurate():
    """torch's derivatives (``2/sqrt(pi) exp(-x^2)``, ``sqrt(pi)/2 exp(erfinv^2)``, ...) from the float64 forwards:
    1e-13 relative, where the float32-grade fits were 1e-8 off through ``erfinv``'s and ``log_ndtr``'s outputs."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(40, generator=g, dtype=torch.float64) * 3, torch.tensor([0.3, -0.7, 1.2, 5.5, -9.0, 26.0],
                                                                                          dtype=torch.float64)])
    # |u| < 0.99: nearer +-1 erfinv's own conditioning (a 1-ulp erf difference moves it by eps sqrt(pi)/2 exp(x^2))
    # shows in its derivative exp(erfinv^2) beyond 1e-13 (held in ulps of that bound by test_float64_inputs)
    u = torch.cat([torch.rand(40, generator=g, dtype=torch.float64) * 1.98 - 0.99,
                   torch.tensor([0.98, -0.95, 0.5, 0.0, 1e-200, -0.7], dtype=torch.float64)])
    model = ErfFamily()
    ported = porter.convert(model, (x, u), io_layout="torch")
    leaves = [x.clone().requires_grad_(), u.clone().requires_grad_()]
    outs = model(*leaves)
    arrays = [mx.array(t.numpy(), dtype=mx.float64) for t in (x, u)]
    for i, out in enumerate(outs):
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
        want = torch.autograd.grad((out * w).sum(), leaves, allow_unused=True)
        mw = mx.array(w.numpy(), dtype=mx.float64)
        got = mx.grad(lambda a, b: (ported(a, b)[i] * mw).sum(), argnums=(0, 1))(*arrays)
        for k, (gk, e) in enumerate(zip(got, want)):
            assert gk.dtype == mx.float64
            e = np.zeros(gk.shape) if e is None else e.numpy()
            # atol: erfcx' = 2x erfcx - 2/sqrt(pi) cancels to 1e-4 at x = 26 (torch's formula: 1e-16 absolute)
            np.testing.assert_allclose(np.array(gk), e, rtol=1e-13, atol=1e-15, err_msg=f"output {i}, input {k}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_compute_in_float32_and_round_once(dtype):
    names = ["lgamma", "digamma", "polygamma1", "i0", "i0e", "i1", "i1e", "erf", "erfc", "erfinv"]
    # torch has no half erfcx, log_ndtr, ndtri or Bessel J on the CPU
    x = torch.cat([torch.linspace(-8, 8, 801), torch.tensor([0.0, -1.0, 0.25, INF, -INF, NAN])]).to(dtype)
    model = Apply(names)
    ported = porter.convert(model, (x,), io_layout="torch")
    rounded = [r.to(dtype).float().numpy() for r in model(x.float())]  # torch in float32, rounded once
    for name, got, want, once in zip(names, run_ported(ported, (x,)), model(x), rounded):
        want = want.float().numpy()
        got = np.asarray(got, dtype=np.float32)
        want = np.where(got == once, once, want)  # torch's half erf is 0 at 1.8e-7 (its float32 erf is not)
        # both round a float32 result: at most one step of the half format apart
        step = np.maximum(_half_step(got, dtype), _half_step(want, dtype))
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=name)
        assert np.all(np.abs(got - want)[finite] <= step[finite]), name


def _half_step(v, dtype):
    """The spacing of the float16/bfloat16 format at ``v`` (float32 values), subnormals included."""
    v = np.nan_to_num(np.abs(v), posinf=0.0)
    if dtype == torch.float16:
        return np.spacing(v.astype(np.float16)).astype(np.float32)
    return np.spacing(v) * 2.0 ** 16


def test_half_output_dtypes():
    x = torch.linspace(0.5, 4, 8).to(torch.bfloat16)
    model = Apply(["lgamma", "i0e", "erfinv"])
    ported = porter.convert(model, (x,), io_layout="torch")
    out = ported(mx.array(x.float().numpy()).astype(mx.bfloat16))
    assert all(o.dtype == mx.bfloat16 for o in out)


def test_integer_inputs_give_float32():
    class Ints(nn.Module):
        def forward(self, k):
            return torch.lgamma(k), torch.digamma(k), S.i0(k), S.erfcx(k), torch.erf(k)

    k = torch.arange(-3, 9)
    ported = porter.convert(Ints(), (k,), io_layout="torch")
    for got, want in zip(run_ported(ported, (k,)), Ints()(k)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want.numpy(), rtol=2e-6)


# ---------------------------------------------------------------------------------------------------- composites
class Composites(nn.Module):
    """Ops torch decomposes into the ones above (or into log/where): mvlgamma/multigammaln, aliases, xlogy & co."""

    def forward(self, x, p):
        return (torch.mvlgamma(p + 2, 3), S.multigammaln(p + 1.5, 2), S.gammaln(p), S.psi(x), S.polygamma(0, p),
                S.xlogy(x, p), torch.xlogy(2.0, p), S.xlog1py(x, p), S.entr(x), torch.sinc(x), S.expit(x),
                torch.logit(torch.sigmoid(x), eps=1e-6), S.exp2(x), S.zeta(p + 1, p), S.zeta(x.abs() + 1.5, 2.0))


def _composite_inputs(seed, *shape):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * 3
    x.view(-1)[:4] = torch.tensor([0.0, -2.0, 1.0, NAN])
    return x, x.abs() + 0.05


def test_composites_at_two_sizes():
    check_converted(Composites(), _composite_inputs(0, 3, 40), _composite_inputs(1, 2, 7), rel=2e-6)


# ---------------------------------------------------------------------------------------------------- gradients
class Differentiable(nn.Module):
    def forward(self, x, p, u):
        return (torch.lgamma(x), torch.digamma(p), torch.polygamma(1, x), torch.polygamma(3, p), S.i0(x), S.i0e(x),
                S.i1(x), S.i1e(x), S.erfcx(x), S.log_ndtr(x), S.ndtri(u), torch.erfinv(2 * u - 1), torch.erf(x),
                torch.erfc(x), S.zeta(3.0, p), torch.mvlgamma(p + 2, 2))


def _grad_inputs(seed, n=30):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, n, generator=g) * 3
    x.view(-1)[:3] = torch.tensor([0.0, -1e-9, 1e-3])  # i1/i1e's derivative at |x| <= eps is torch's 1/2
    p = torch.rand(2, n, generator=g) * 6 + 0.05
    u = torch.rand(2, n, generator=g) * 0.98 + 0.01
    return x, p, u


def _assert_each_output_grads(ported, model, inputs, rtol=2e-5, atol=1e-6):
    """For each output separately: d<out, w>/d(inputs) of the port against torch autograd, element by element
    within ``rtol`` (plus ``atol`` for values near 0; inf/NaN where torch has them), so a huge derivative near a
    pole does not hide an error elsewhere."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    outs = model(*leaves)
    arrays = [mx.array(t.detach().numpy()) for t in inputs]
    for i, out in enumerate(outs):
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(i))
        want = torch.autograd.grad((out * w).sum(), leaves, retain_graph=True, allow_unused=True)
        mw = mx.array(w.numpy())
        got = mx.grad(lambda *xs: (ported(*xs)[i] * mw).sum(), argnums=tuple(range(len(arrays))))(*arrays)
        for k, (g, e) in enumerate(zip(got, want)):
            e = np.zeros(g.shape, np.float32) if e is None else e.numpy()
            np.testing.assert_allclose(np.array(g), e, rtol=rtol, atol=atol,
                                       err_msg=f"output {i}, gradient to input {k}")


def test_gradients_are_torchs_formulas():
    model = Differentiable()
    inputs = _grad_inputs(0)
    ported = porter.convert(model, inputs, io_layout="torch")
    _assert_each_output_grads(ported, model, inputs)
    _assert_each_output_grads(ported, model, _grad_inputs(1, 9))


def test_bessel_outputs_carry_no_gradient_as_in_torch():
    """Torch's Bessel J/Y, spherical J0 and modified I/K outputs have no grad_fn: constants for autograd."""

    class Bessels(nn.Module):
        def forward(self, x):
            p = x.abs() + 0.5
            return (S.bessel_j0(x) + S.bessel_j1(x) + S.spherical_bessel_j0(x) + S.bessel_y0(p) + S.bessel_y1(p)
                    + S.modified_bessel_i0(x) + S.modified_bessel_i1(x) + S.modified_bessel_k0(p)
                    + S.scaled_modified_bessel_k1(p) + x * 2)

    x = torch.randn(7)
    assert Bessels()(x.requires_grad_()).grad_fn is not None  # from x * 2 alone:
    (want,) = torch.autograd.grad(Bessels()(x).sum(), x)
    np.testing.assert_array_equal(want.numpy(), np.full(7, 2.0, np.float32))
    x = x.detach()
    ported = porter.convert(Bessels(), (x,), io_layout="torch")
    g = mx.grad(lambda a: ported(a).sum())(mx.array(x.numpy()))
    np.testing.assert_array_equal(np.array(g), np.full(7, 2.0, np.float32))


# ---------------------------------------------------------------------------------------------------- frontends
class Scriptable(nn.Module):
    def forward(self, x, p):
        return (torch.lgamma(x), torch.digamma(x), torch.polygamma(2, p), torch.special.i0(x), torch.special.i1e(x),
                torch.special.erfcx(x), torch.special.ndtr(x), torch.special.log_ndtr(x),
                torch.special.ndtri(torch.sigmoid(x)), torch.special.zeta(p + 1.0, p), torch.special.bessel_j0(x),
                torch.erfinv(torch.tanh(x)), torch.mvlgamma(p + 2.0, 2),
                p.clone().lgamma_(), p.clone().digamma_(), x.clone().i0_(), p.clone().polygamma_(2))  # in place


@pytest.mark.parametrize("how", ["script", "trace"])
def test_torchscript_frontends(how):
    model = Scriptable()
    example = _composite_inputs(0, 2, 20)
    frozen = torch.jit.script(model) if how == "script" else torch.jit.trace(model, example)
    ported = porter.convert(frozen, example, io_layout="torch")
    x, p = _composite_inputs(3, 2, 20)
    for i, (got, want) in enumerate(zip(run_ported(ported, (x, p)), model(x, p))):
        np.testing.assert_allclose(got, want.numpy(), rtol=2e-6, atol=1e-30, err_msg=f"output {i}")


# ---------------------------------------------------------------------------------------------------- distributions
class LogProbs(nn.Module):
    """Log-likelihood heads of count and proportion models (scVI-style NB/Poisson, Beta-VAE, StudentT, Dirichlet),
    von Mises, and a normal CDF/quantile, computed by torch.distributions inside the forward."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(6, 12)

    def forward(self, h, counts, x01, z):
        a, b = self.head(h).chunk(2, dim=-1)
        conc, rate = F.softplus(a) + 0.1, F.softplus(b) + 0.1
        D = torch.distributions
        return (D.Gamma(conc, rate, validate_args=False).log_prob(counts + 0.5),
                D.Beta(conc, rate, validate_args=False).log_prob(x01),
                D.StudentT(conc * 3, a, rate, validate_args=False).log_prob(z),
                D.Dirichlet(conc, validate_args=False).log_prob(x01 / x01.sum(-1, keepdim=True)),
                D.Poisson(rate, validate_args=False).log_prob(counts),
                D.NegativeBinomial(conc, logits=b, validate_args=False).log_prob(counts),
                D.VonMises(a, conc, validate_args=False).log_prob(z),
                D.Normal(a, rate, validate_args=False).cdf(z), D.Normal(a, rate, validate_args=False).icdf(x01),
                F.poisson_nll_loss(a, counts, log_input=True, full=True, reduction="none"))


def _distribution_inputs(seed, n):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 6, generator=g), torch.randint(0, 20, (n, 6), generator=g).float(),
            torch.rand(n, 6, generator=g) * 0.98 + 0.01, torch.randn(n, 6, generator=g) * 2)


def test_distribution_log_probs_convert_end_to_end_at_two_sizes():
    """StudentT builds an inner Chi2 without passing ``validate_args``: with torch's default (validation on) its
    argument check is Python control flow on tensor values, which torch.export cannot capture, so validation is
    switched off by default for the conversion, as a user must."""
    torch.manual_seed(0)
    default = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        check_converted(LogProbs().eval(), _distribution_inputs(0, 5), _distribution_inputs(1, 11), rel=5e-6)
    finally:
        torch.distributions.Distribution.set_default_validate_args(default)


# ---------------------------------------------------------------------------------------------------- artifacts
def test_a_special_node_read_from_a_file_is_checked():
    """An artifact's ``special`` node: the order ``n`` comes with polygamma and only with it, within bounds."""
    from porter.converters.registry import get_kernel_spec
    from porter.converters.spec import SpecError

    spec = get_kernel_spec("special")
    spec.check([], {"fn": "polygamma", "n": 2})
    spec.check([], {"fn": "lgamma"})
    for attrs in ({"fn": "polygamma"}, {"fn": "lgamma", "n": 1}):
        with pytest.raises(SpecError, match="'n'"):
            spec.check([], attrs)
    with pytest.raises(SpecError):
        spec.attrs["n"].check(10 ** 9, None)
    with pytest.raises(SpecError):
        spec.attrs["fn"].check("__import__", None)


def test_polygamma_with_a_negative_order_is_refused():
    class Negative(nn.Module):
        def forward(self, x):
            return torch.polygamma(-1, x)

    with pytest.raises(Exception, match="negative"):
        porter.convert(Negative(), (torch.rand(4) + 0.5,), io_layout="torch")
