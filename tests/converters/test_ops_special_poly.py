"""Orthogonal polynomials through the converter (``converters/ops/special_poly.py``) against torch on the same data:
every kind on a grid of ``x`` (torch's closed forms at |x| == 1, shifted 0 and 1, +-inf) and ``n`` (negative,
0 to 15 across torch's trigonometric bounds, fractional, NaN), as tensor/tensor, tensor/number and number/tensor,
float32 and float64, torch's result dtypes, and no gradient (torch has none)."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from porter.compare import assert_close
from porter.converters.ops import special_poly as ops
from tests.converter_check import check_converted

X = [-1.5, -1, -0.7, -0.2, 0, 0.25, 0.5, 0.9, 1, 1.2, 3.0, float("inf"), -float("inf")]
N = [-2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 2.7, -0.5, float("nan")]


class Poly(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = getattr(torch.special, fn)

    def forward(self, x, n):
        return self.fn(x, n), self.fn(x, 5), self.fn(x, 11), self.fn(0.5, n), self.fn(x[:1], n)


class AllPolys(nn.Module):
    """Every kind in its three spellings (tensor/tensor, tensor/number, number/tensor): the op-coverage exerciser."""

    def forward(self, x, n):
        return tuple(out for fn in ops.FUNCTIONS for out in Poly(fn)(x, n)[:4])


def _grid(dtype):
    x, n = torch.meshgrid(torch.tensor(X, dtype=dtype), torch.tensor(N, dtype=dtype), indexing="ij")
    return x, n


@pytest.mark.parametrize("fn", ops.FUNCTIONS)
def test_polynomials_match_torch(fn):
    x, n = _grid(torch.float32)
    # float32: the recurrences cancel (|P| << the terms near roots); the rest agrees to a few ulps
    check_converted(Poly(fn).eval(), (x, n), (x[2:7, :5].contiguous(), n[2:7, :5].contiguous()), rel=1e-4)


@pytest.mark.parametrize("fn", ops.FUNCTIONS)
def test_polynomials_float64(fn):
    """MLX 0.32's float64 sin/cos/arccos are float32-accurate (~1e-7 absolute): the Chebyshev kinds' trigonometric
    branch carries that error; the recurrences are float64."""
    x, n = _grid(torch.float64)
    rel = 1e-5 if "chebyshev" in fn else 1e-12
    check_converted(Poly(fn).eval(), (x, n), rel=rel)


def test_result_dtypes_are_torch():
    x = torch.randn(4)
    for n, expected in [(torch.tensor([1, 2, 3, 4]), torch.float32), (torch.tensor(3.0, dtype=torch.float64), torch.float32),
                        (torch.tensor([3.0], dtype=torch.float64), torch.float64)]:
        assert torch.special.legendre_polynomial_p(x, n).dtype == expected
        got = ops.k_orthogonal_polynomial(mx.array(x.numpy()), mx.array(n.numpy(), dtype=mx.float64 if n.dtype == torch.float64 else None), fn="legendre_polynomial_p")
        assert str(got.dtype).split(".")[-1] == str(expected).split(".")[-1]
        assert_close(np.array(got), torch.special.legendre_polynomial_p(x, n).numpy(), rtol=1e-5, what=str(n.dtype))
    ints = ops.k_orthogonal_polynomial(mx.array([1, 2, 3]), mx.array([2, 2, 2]), fn="hermite_polynomial_h")
    assert ints.dtype == mx.float32
    np.testing.assert_array_equal(np.array(ints), torch.special.hermite_polynomial_h(torch.tensor([1, 2, 3]), 2).numpy())


def test_no_gradient_as_in_torch():
    x = torch.randn(3, requires_grad=True)
    assert not torch.special.chebyshev_polynomial_t(x, 3).requires_grad
    g = mx.grad(lambda v: ops.k_orthogonal_polynomial(v, mx.array(3.0), fn="chebyshev_polynomial_t").sum())(
        mx.array(x.detach().numpy()))
    assert not np.array(g).any()


def test_degree_limit_is_named():
    with pytest.raises(ValueError, match="'n'"):
        ops.k_orthogonal_polynomial(mx.array([2.0]), mx.array([ops.MAX_DEGREE + 1.0]), fn="hermite_polynomial_he")


def test_nan_x_gives_nan():
    """torch 2.13's CPU kernels return an unrelated number for a NaN ``x`` in most kinds (the value computed for the
    element before it, or an uninitialized one: ``chebyshev_polynomial_u(tensor([2., nan]), 5)`` is ``[780, 780]``);
    the port gives NaN for every kind and every ``n >= 1``, and torch's 1 for ``n == 0`` and 0 for ``n < 0``."""
    x = mx.array([float("nan")] * 4)
    n = mx.array([-1.0, 0.0, 1.0, 7.0])
    for fn in ops.FUNCTIONS:
        got = np.array(ops.k_orthogonal_polynomial(x, n, fn=fn))
        assert got[0] == 0 and got[1] == 1 and np.isnan(got[2:]).all(), fn
