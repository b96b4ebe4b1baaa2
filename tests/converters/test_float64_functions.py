"""float64 ports keep float64 accuracy in the functions MLX computes in float32 precision for float64 arrays
(``layers/_float64.py``): sin, cos, exp-based activations (elu, celu, selu, log_sigmoid, softplus, mish,
glu), logsumexp, softmax, log_softmax, sinc; and ``nan_to_num``, which MLX refuses for float64 at evaluation. Torch
float64 is the oracle in each test, over a grid with the functions' hard points (zeros of sin/cos, large arguments,
signed zeros, +-inf, NaN); the bar, 1e-13 of the output's magnitude, is 4-6 orders below what MLX's own float64
functions give (checked: the control)."""

import math

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.converter_check import Fn, run_ported

import porter
from porter.layers import _native

REL = 1e-13
GRID = torch.tensor([*np.linspace(-30.0, 30.0, 601), 0.0, -0.0, math.pi, -math.pi, math.pi / 2, 3 * math.pi / 2,
                     1e5 + 0.25, -7e5, 1e-300, -1e-300, 700.0, -700.0], dtype=torch.float64)
SPECIAL = torch.tensor([math.inf, -math.inf, math.nan], dtype=torch.float64)


CASES = {
    "sin": torch.sin,
    "cos": torch.cos,
    "sinc": torch.sinc,
    "elu": F.elu,
    "celu": lambda x: F.celu(x, alpha=0.7),
    "selu": F.selu,
    "log_sigmoid": F.logsigmoid,
    "softplus": lambda x: F.softplus(x, beta=0.5, threshold=30.0),
    "mish": F.mish,
    "glu": lambda x: F.glu(x.reshape(2, -1), dim=0),
    "logsumexp": lambda x: torch.logsumexp(x.reshape(-1, 4), dim=1),
    "softmax": lambda x: torch.softmax(x.reshape(-1, 4), dim=1),
    "log_softmax": lambda x: torch.log_softmax(x.reshape(-1, 4), dim=1),
    "nan_to_num": lambda x: torch.nan_to_num(x * 1e308 * 10, nan=0.5),
}


def _check(out, ref):
    assert out.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    inf = np.isinf(ref)
    np.testing.assert_array_equal(out[inf], ref[inf])
    finite = np.isfinite(ref)
    scale = max(1.0, float(np.abs(ref[finite]).max()))
    err = float(np.abs(out[finite] - ref[finite]).max())
    assert err <= REL * scale, f"max error {err:.3g} against a scale of {scale:.3g}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_port_matches_torch_float64(name):
    fn = CASES[name]
    x = torch.cat([GRID, SPECIAL]) if name not in ("glu",) else GRID[:600]
    model = Fn(fn).eval()
    ported = porter.convert(model, (x,), io_layout="torch", dynamic="static")
    (out,) = run_ported(ported, (x,))
    _check(out, fn(x).numpy())


@pytest.mark.parametrize("name", ["sin", "cos", "elu", "log_sigmoid", "softplus", "softmax"])
def test_float64_gradients_match_torch(name):
    fn = CASES[name]
    x = GRID[:600].clone().requires_grad_(True)
    model = Fn(fn).eval()
    ported = porter.convert(model, (x.detach(),), io_layout="torch", dynamic="static")
    weights = torch.linspace(-1, 1, fn(x).numel(), dtype=torch.float64).reshape(fn(x).shape)
    (fn(x) * weights).sum().backward()
    xm = mx.array(x.detach().numpy(), dtype=mx.float64)
    wm = mx.array(weights.numpy(), dtype=mx.float64)
    grad = mx.grad(lambda a: (ported(a) * wm).sum())(xm)
    _check(np.array(grad), x.grad.numpy())


@pytest.mark.parametrize("native", [True, False], ids=["native", "mlx_ops"])
def test_float64_exp_over_its_whole_range(native):
    """``exp`` and its gradient elementwise to a few ulps of torch's from the subnormals (below -708) to the overflow
    (709.78), inf/0/NaN at the ends, and no NaN gradient at a masked score (HF BERT's ``finfo(float64).min``): the
    MLX-ops form's former ``1 / (cosh + sinh)`` had a zero gradient past -355 and a NaN one at ``-1.8e308``."""
    x = torch.cat([torch.linspace(-746.0, -690.0, 4001, dtype=torch.float64),
                   torch.linspace(-400.0, 400.0, 8001, dtype=torch.float64),
                   torch.linspace(690.0, 709.78, 2001, dtype=torch.float64),
                   torch.tensor([torch.finfo(torch.float64).min, -math.inf, math.inf, 1e308, 709.79],
                                dtype=torch.float64)]).requires_grad_(True)
    model = Fn(torch.exp).eval()
    ported = porter.convert(model, (x.detach(),), io_layout="torch", dynamic="static")
    torch.exp(x).sum().backward()
    want = x.grad.numpy()  # exp's gradient is exp: one reference for both
    xm = mx.array(x.detach().numpy(), dtype=mx.float64)
    with _native.use_native(native):
        results = np.array(ported(xm)), np.array(mx.grad(lambda a: ported(a).sum())(xm))
    for got in results:
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        finite = np.isfinite(want)
        normal = finite & (want >= np.finfo(np.float64).tiny)
        assert np.all(np.abs(got[normal] - want[normal]) <= 4 * np.spacing(want[normal]))
        assert np.all(np.abs(got[finite & ~normal] - want[finite & ~normal]) <= 2 * np.spacing(0.0))


@pytest.mark.parametrize("native", [True, False], ids=["native", "mlx_ops"])
def test_float64_softmax_gradient_at_a_masked_score(native):
    """A float64 attention score masked with ``finfo(float64).min`` (HF BERT's additive mask): torch's gradient, not
    NaN."""
    mask = torch.tensor([0.0, torch.finfo(torch.float64).min, 0.0, 0.0], dtype=torch.float64)
    x = torch.linspace(-1.0, 2.0, 8, dtype=torch.float64).reshape(2, 4).requires_grad_(True)
    weights = torch.linspace(-1, 1, 8, dtype=torch.float64).reshape(2, 4)
    model = Fn(lambda t: torch.softmax(t + mask, dim=-1)).eval()
    ported = porter.convert(model, (x.detach(),), io_layout="torch", dynamic="static")
    (model(x) * weights).sum().backward()
    wm = mx.array(weights.numpy(), dtype=mx.float64)
    with _native.use_native(native):
        grad = mx.grad(lambda a: (ported(a) * wm).sum())(mx.array(x.detach().numpy(), dtype=mx.float64))
    _check(np.array(grad), x.grad.numpy())


def test_control_mlx_float64_functions_miss_the_bar():
    """Why ``_float64.py`` exists: MLX's own float64 sin/cos/exp/logsumexp are far outside this file's bar (if a
    future MLX computes them in float64, this fails and the replacements can go)."""
    x = GRID[:601]
    xm = mx.array(x.numpy(), dtype=mx.float64)
    for mlx_fn, torch_fn in ((mx.sin, torch.sin), (mx.cos, torch.cos), (mx.exp, torch.exp)):
        ref = torch_fn(x).numpy()
        err = float(np.abs(np.array(mlx_fn(xm)) - ref).max()) / max(1.0, float(np.abs(ref).max()))
        assert err > 1e3 * REL, (mlx_fn, err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("module", [torch.nn.LogSigmoid(), torch.nn.Softplus(beta=2.0)])
def test_gradient_at_zero_is_torchs(module, dtype):
    """At exactly 0 torch's log-sigmoid and softplus have derivative 1/2; the port's log-sigmoid (written with
    ``minimum``/``abs``, whose MLX derivative is 0 there) gave 0 in every dtype."""
    x = torch.tensor([0.0, -0.0, 1.5, -2.0], dtype=dtype, requires_grad=True)
    ported = porter.convert(module, (x.detach(),), io_layout="torch", dynamic="static")
    module(x).sum().backward()
    grad = mx.grad(lambda a: ported(a).sum())(mx.array(x.detach().numpy()))
    np.testing.assert_allclose(np.array(grad), x.grad.numpy(), rtol=1e-6, atol=0)


FILL = 1.2345678901234567  # not a float32 number


@pytest.mark.parametrize("name, fn", [
    ("index_fill", lambda x: x.index_fill(0, torch.tensor([1, 3]), FILL)),
    ("scatter_value", lambda x: x.scatter(0, torch.tensor([[1, 0, 2]]), FILL)),
    ("isin_scalar", lambda x: torch.isin(x, 0.1)),
])
def test_float64_scalars_stay_float64(name, fn):
    """A Python float given to a float64 op is used as the float64 number it is (it went through MLX's float32
    default: an index_fill / scatter fill 1e-8 off, ``isin(x, 0.1)`` false for x == 0.1)."""
    x = torch.randn(4, 3, dtype=torch.float64)
    x[0, 0], x[2, 1] = 0.1, FILL
    ported = porter.convert(Fn(fn).eval(), (x,), io_layout="torch", dynamic="static")
    (out,) = run_ported(ported, (x,))
    np.testing.assert_array_equal(out, fn(x).numpy())
