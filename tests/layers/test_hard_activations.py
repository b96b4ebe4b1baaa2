"""Hardswish / hardsigmoid (layers/activation.py; native kinds in csrc/activation_kernels.h) against torch on both
paths (`backend` fixture): values exactly (min/max/multiply/divide, no rounding freedom) over normals, the branch
points -3 and 3 and their neighbours, inf and NaN, in float32/float16/bfloat16/float64; gradients (torch 2.13's
branches at -3, 3 and NaN); second derivatives against torch's double backward; vmap; the modules and converters.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import Hardsigmoid, Hardswish
from porter.layers import functional as F

TF = torch.nn.functional
KINDS = {"hardswish": (F.hardswish, TF.hardswish, Hardswish), "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid, Hardsigmoid)}
DTYPES = {"float32": (mx.float32, torch.float32), "float16": (mx.float16, torch.float16),
          "bfloat16": (mx.bfloat16, torch.bfloat16), "float64": (mx.float64, torch.float64)}
SPECIAL = [-3.0, 3.0, -3.0001, -2.9999, 2.9999, 3.0001, 0.0, -0.0, 1.0, -1.0, 6.0, -6.0, 1e30, -1e30, np.inf, -np.inf,
           np.nan]


def sample(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.standard_normal(n - len(SPECIAL)) * 4, np.array(SPECIAL)])
    return rng.permutation(values)


def _np(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32) if a.dtype in (mx.float16, mx.bfloat16) else a).astype(np.float64)


def _torch_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


def _same(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert np.array_equal(np.isnan(actual), np.isnan(expected)), f"{what}: NaN positions differ from torch's"
    assert np.array_equal(actual, expected, equal_nan=True), \
        f"{what}: max abs diff {np.nanmax(np.abs(actual - expected))}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [17, 4099])  # one vector tail; several threads' chunks
def test_values_match_torch_exactly(kind, dtype, n, backend):
    fn, tfn, _ = KINDS[kind]
    mdt, tdt = DTYPES[dtype]
    xs = sample(n, seed=n)
    t = torch.tensor(xs, dtype=torch.float64).to(tdt)
    x = mx.array(t.to(torch.float64).numpy(), dtype=mx.float64).astype(mdt)
    y = fn(x)
    assert y.dtype == mdt and y.shape == (n,)
    _same(_np(y), _torch_np(tfn(t)), f"{kind} {dtype}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_gradient_matches_torch(kind, dtype, backend):
    fn, tfn, _ = KINDS[kind]
    mdt, tdt = DTYPES[dtype]
    xs = sample(300, seed=3)
    gs = np.random.default_rng(4).standard_normal(300)
    t = torch.tensor(xs, dtype=torch.float64).to(tdt).requires_grad_(True)
    tg = torch.tensor(gs, dtype=torch.float64).to(tdt)
    tfn(t).backward(tg)
    x = mx.array(t.detach().to(torch.float64).numpy(), dtype=mx.float64).astype(mdt)
    g = mx.array(tg.to(torch.float64).numpy(), dtype=mx.float64).astype(mdt)
    _, vjp = mx.vjp(fn, [x], [g])
    got, want = _np(vjp[0]), _torch_np(t.grad)
    if backend == "native":  # torch's own branches and arithmetic (NaN in -> NaN out for hardswish)
        _same(got, want, f"{kind} gradient {dtype}")
    else:  # MLX's autodiff of the formula: the same branches, the slope's rounding may differ by an ulp
        finite = np.isfinite(xs) & (np.abs(np.abs(xs) - 3) > 1e-3)
        # float64: torch's hardsigmoid slope is the float constant 1/6 (relative error ~1e-8)
        rtol = {"float32": 1e-6, "float64": 1e-7, "bfloat16": 1e-2}[dtype]
        np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("kind", KINDS)
def test_second_derivative_matches_torch(kind, backend):
    fn, tfn, _ = KINDS[kind]
    xs = np.array([-4.0, -2.5, -1.0, 0.0, 0.5, 2.5, 4.0, 1.7])
    t = torch.tensor(xs, requires_grad=True)
    (d1,) = torch.autograd.grad(tfn(t).sum(), t, create_graph=True)
    if kind == "hardsigmoid":  # torch has no double backward for it; piecewise linear: f'' = 0
        with pytest.raises(RuntimeError, match="not implemented"):
            torch.autograd.grad((d1 * 2).sum(), t)
        d2 = torch.zeros_like(t)
    else:
        (d2,) = torch.autograd.grad((d1 * torch.arange(1.0, 9.0, dtype=torch.float64)).sum(), t)
    weights = mx.array(np.arange(1.0, 9.0), dtype=mx.float64)
    first = mx.grad(lambda a: fn(a).sum())
    second = mx.grad(lambda a: (first(a) * weights).sum())(mx.array(xs, dtype=mx.float64))
    np.testing.assert_allclose(np.array(second), d2.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_vmap_views_and_module(kind, backend):
    fn, tfn, module = KINDS[kind]
    xs = sample(2 * 3 * 40, seed=7).astype(np.float32).reshape(2, 3, 40)
    x = mx.array(xs)
    want = _torch_np(tfn(torch.tensor(xs)))
    _same(_np(mx.vmap(fn, in_axes=1, out_axes=1)(x)), want, f"{kind} vmap")
    _same(_np(fn(x.transpose(2, 0, 1))), want.transpose(2, 0, 1), f"{kind} of a transposed view")
    _same(_np(module()(x)), want, f"{kind} module")


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_named(kind):
    fn = KINDS[kind][0]
    with pytest.raises(TypeError, match=f"\\[{kind}\\] 'x' must be an mx.array"):
        fn(np.zeros(3, np.float32))
