"""pinv, qr, LU and matrix_exp through the converter (``converters/ops/linalg_more.py``): values against torch on the
same data at two sizes and batch shapes, float64, gradients to the inputs against torch's autograd, and the cases a
port cannot do as torch does (complete Q of a tall matrix, pivot=False, singular LU, half precision). QR and LU are
LAPACK's on both sides: Q, R, LU and the 1-based int32 pivots are compared directly, signs included."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from porter.compare import assert_close
from porter.converters.ops import linalg_more as ops
from tests.converter_check import assert_matches, check_converted
from tests.converters.test_ops_linalg import _input_grads

torch.manual_seed(0)


class Factors(nn.Module):
    """Every op of the family on matrices built from ``x`` (``(*, n, n + 2)``)."""

    def forward(self, x):
        n = x.shape[-2]
        a = x[..., :n]
        b = x[..., n:]
        lu, piv = torch.linalg.lu_factor(a)
        lu_ex, piv_ex, info = torch.linalg.lu_factor_ex(x)
        p, lower, upper = torch.linalg.lu(x.mT)
        q, r = torch.linalg.qr(x)
        qt, rt = torch.linalg.qr(x.mT)
        sym = a + a.mT
        return (torch.linalg.pinv(x), torch.linalg.pinv(x.mT, rtol=0.1), torch.linalg.pinv(sym, hermitian=True),
                torch.linalg.pinv(x, atol=0.5), torch.pinverse(a, rcond=1e-3),
                torch.linalg.pinv(a, 0.1 * b[..., 0, 0].abs()),  # a tensor rcond, one per matrix
                torch.linalg.pinv(sym, atol=0.3, hermitian=True),
                lu, piv, lu_ex, piv_ex, info, p, lower, upper, q, r, qt, rt, torch.linalg.qr(x, mode="r")[1],
                *torch.linalg.qr(x, mode="complete"), *torch.linalg.qr(x.mT, mode="complete"),
                torch.linalg.lu_solve(lu, piv, b), torch.linalg.lu_solve(lu, piv, b, adjoint=True),
                torch.linalg.lu_solve(lu, piv, b.mT, left=False), torch.linalg.lu_solve(lu, piv, b.mT, left=False,
                                                                                        adjoint=True),
                torch.lu_solve(b, lu, piv), *torch.lu_unpack(lu_ex, piv_ex),
                torch.linalg.matrix_exp(a), torch.matrix_exp(3 * a), torch.linalg.matrix_exp(0.01 * a))


def test_factors_match_torch_at_two_sizes():
    check_converted(Factors().eval(), torch.randn(2, 3, 4, 6), torch.randn(3, 1, 5, 7))


def test_factors_float64():
    check_converted(Factors().eval(), torch.randn(2, 4, 6, dtype=torch.float64),
                    torch.randn(3, 3, 5, dtype=torch.float64), rel=1e-10)


def test_pivots_are_torch_int32_one_based():
    x = torch.randn(3, 5, 7)
    ported = porter.convert(Factors().eval(), x, io_layout="torch")
    out = ported(mx.array(x.numpy()))
    lu, piv = torch.linalg.lu_factor(x[..., :5])
    assert out[8].dtype == mx.int32
    np.testing.assert_array_equal(np.array(out[8]), piv.numpy())


class Differentiable(nn.Module):
    """The outputs torch differentiates: pinv, reduced QR (tall and wide), square LU, lu_solve, matrix_exp."""

    def forward(self, x):
        n = x.shape[-2]
        a = x[..., :n] + 3 * torch.eye(n, dtype=x.dtype)
        lu, piv = torch.linalg.lu_factor(a)
        p, lower, upper = torch.linalg.lu(a)
        return (torch.linalg.pinv(x), torch.linalg.pinv(x.mT), torch.linalg.pinv(a + a.mT, hermitian=True),
                *torch.linalg.qr(x), *torch.linalg.qr(x.mT), lu, lower, upper,
                torch.linalg.lu_solve(lu, piv, x[..., n:]), torch.linalg.lu_solve(lu, piv, x[..., n:], adjoint=True),
                torch.linalg.matrix_exp(a * 0.5), torch.linalg.matrix_exp(2 * a))


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 2e-3), (torch.float64, 1e-8)])
def test_gradients_match_torch_autograd(dtype, rtol):
    model = Differentiable().eval()
    x = torch.randn(2, 4, 6, dtype=dtype)
    ported = porter.convert(model, x, io_layout="torch")
    _input_grads(ported, model, x, rtol)
    _input_grads(ported, model, torch.randn(3, 5, 7, dtype=dtype), rtol)


def test_matrix_exp_across_scales_and_inf():
    """Norms from tiny to large (0 to 9 squarings), a batch mixing them, and torch's NaN for an inf input."""
    scales = torch.tensor([0.0, 1e-6, 0.3, 2.0, 40.0]).reshape(5, 1, 1)
    x = torch.randn(5, 4, 4, dtype=torch.float64) * scales
    model = nn.Module()
    model.forward = lambda x: torch.linalg.matrix_exp(x)
    check_converted(model.eval(), x, rel=1e-12)
    y = torch.randn(5, 4, 4) * scales.float()
    assert_close(np.array(ops.k_matrix_exp(mx.array(y.numpy()))), torch.linalg.matrix_exp(y).numpy(), rtol=2e-5,
                 what="float32 matrix_exp")
    inf = torch.eye(3).unsqueeze(0).repeat(2, 1, 1)
    inf[1, 0, 1] = float("inf")
    got = np.array(ops.k_matrix_exp(mx.array(inf.numpy())))
    expected = torch.linalg.matrix_exp(inf).numpy()
    assert_close(got[0], expected[0], what="finite matrix")
    np.testing.assert_array_equal(np.isfinite(got[1]), np.isfinite(expected[1]))


def test_singular_lu_gives_torch_factor_and_non_finite_solve():
    """A singular matrix: torch's lu_factor raises, its lu_factor_ex gives the factor with a zero on U's diagonal;
    the port gives that factor for both. lu_solve with it: torch gives some non-finite values (its division by the
    zero pivot), the port NaN for that whole matrix (MLX's triangular solve raises on a zero pivot)."""
    a = torch.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]])
    with pytest.raises(RuntimeError, match="is zero"):
        torch.linalg.lu_factor(a)
    lu, piv, info = torch.linalg.lu_factor_ex(a)
    assert info.item() > 0
    mlu, mpiv = ops.k_lu_factor(mx.array(a.numpy()), outputs="factor")
    assert_close(np.array(mlu), lu.numpy(), what="LU")
    np.testing.assert_array_equal(np.array(mpiv), piv.numpy())
    b = torch.ones(1, 3, 1)
    x = np.array(ops.k_lu_solve(mlu, mpiv, mx.array(b.numpy()), left=True, adjoint=False))
    assert np.isnan(x).all() and not torch.isfinite(torch.linalg.lu_solve(lu, piv, b)).all()
    good = torch.randn(1, 3, 3) + 3 * torch.eye(3)  # in a batch with a singular one, the other is torch's
    both = torch.cat([a, good])
    lu2, piv2, _ = torch.linalg.lu_factor_ex(both)
    x2 = np.array(ops.k_lu_solve(mx.array(lu2.numpy()), mx.array(piv2.numpy()), mx.ones((2, 3, 1)), left=True,
                                 adjoint=False))
    assert np.isnan(x2[0]).all()
    assert_close(x2[1], torch.linalg.lu_solve(lu2, piv2, torch.ones(2, 3, 1))[1].numpy(), what="regular matrix")


def test_pinv_of_rank_deficient_and_singular_inputs():
    """Singular values under the tolerance dropped as torch drops them (rank 1 of 3, an all-zero matrix)."""
    u = torch.randn(2, 4, 1, dtype=torch.float64)
    x = torch.cat([u @ torch.randn(2, 1, 3, dtype=torch.float64), torch.zeros(1, 4, 3, dtype=torch.float64)])
    model = nn.Module()
    model.forward = lambda x: (torch.linalg.pinv(x), torch.linalg.pinv(x, rtol=1e-3, hermitian=False))
    check_converted(model.eval(), x, rel=1e-9)


def test_complete_qr_of_a_tall_matrix_has_no_gradient_as_in_torch():
    x = torch.randn(5, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="not differentiable"):
        torch.linalg.qr(x, mode="complete")[0].sum().backward()
    with pytest.raises(ValueError, match="not differentiable"):
        mx.grad(lambda v: ops.k_qr(v, mode="complete")[0].sum())(mx.random.normal((5, 3)))


def test_refusals_name_the_argument():
    nopivot = nn.Module()
    nopivot.forward = lambda x: torch.linalg.lu_factor_ex(x, pivot=False)
    with pytest.raises(NotImplementedError, match="'pivot'"):
        porter.convert(nopivot.eval(), torch.randn(3, 3), io_layout="torch")
    with pytest.raises(ValueError, match="pivots must lie"):
        ops.k_lu_solve(mx.eye(3), mx.array([[4, 2, 3]], dtype=mx.int32), mx.ones((1, 3, 1)), left=True, adjoint=False)
    with pytest.raises(ValueError, match="square"):
        ops.k_matrix_exp(mx.zeros((2, 3)))


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_inputs_compute_in_float32(dtype):
    a = torch.randn(2, 4, 4) * 0.5
    x = mx.array(a.numpy()).astype(dtype)
    for got, expected in [(ops.k_pinv(x, hermitian=False), torch.linalg.pinv(a)),
                          (ops.k_matrix_exp(x), torch.linalg.matrix_exp(a)),
                          (ops.k_qr(x, mode="reduced")[1], torch.linalg.qr(a)[1])]:
        assert got.dtype == dtype
        assert_close(np.array(got.astype(mx.float32)), expected.numpy(), rtol=3e-2, what=str(dtype))


def test_through_torchscript():
    model = Factors().eval()
    x = torch.randn(2, 4, 6)
    ported = porter.convert(torch.jit.trace(model, (x,), check_trace=False), (x,), io_layout="torch")
    assert_matches(ported, model, (x,))


class Exportable(nn.Module):
    def forward(self, x):
        return torch.linalg.pinv(x), *torch.linalg.qr(x), *torch.linalg.qr(x.mT, mode="complete")


def test_export_as_mlxfn_runs_the_plain_forwards(tmp_path):
    """pinv and qr export without their custom gradients; lu is refused by name (MLX cannot write its LU
    factorization)."""
    model = Exportable().eval()
    x = torch.randn(2, 4, 6)
    ported = porter.convert(model, x, io_layout="torch")
    porter.export_function(ported, str(tmp_path / "f.mlxfn"), mx.array(x.numpy()))
    outs = mx.import_function(str(tmp_path / "f.mlxfn"))(mx.array(x.numpy()))
    for i, (a, e) in enumerate(zip(outs, model(x))):
        assert_close(np.array(a), e.numpy(), rtol=1e-4, what=f"output {i}")
    lu = nn.Module()
    lu.forward = lambda x: torch.linalg.lu_factor(x)
    ported = porter.convert(lu.eval(), torch.randn(2, 3, 3), io_layout="torch")
    with pytest.raises(Exception, match="lu_factor: MLX 0.32 cannot serialize"):
        porter.export_function(ported, str(tmp_path / "g.mlxfn"), mx.array(np.random.randn(2, 3, 3).astype("float32")))
