"""torch.linalg through the converter (``converters/ops/linalg.py``): values against torch on the same data at two
sizes and batch shapes, float64, gradients to the inputs against torch's autograd, both capture frontends, and
the edge cases where a port cannot do what torch does (singular and non-positive-definite inputs, half precision,
empty batches). Vectors of ``svd``/``eigh`` are unique only up to sign: their reconstructions are compared."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from porter.compare import assert_close
from porter.converters.ops import linalg as ops
from tests.converter_check import assert_matches, check_converted

torch.manual_seed(0)


def _spd(a):
    return a @ a.mT + a.shape[-1] * torch.eye(a.shape[-1], dtype=a.dtype)


class Linalg(nn.Module):
    """Every converted op on well-conditioned matrices built from ``x`` (``(*, n, n + 2)``)."""

    def forward(self, x):
        n = x.shape[-2]
        a = x[..., :n] + 4 * torch.eye(n, dtype=x.dtype)
        b = x[..., n:]
        spd = _spd(x[..., :n])
        chol = torch.linalg.cholesky(spd)
        return (torch.linalg.inv(a), torch.inverse(a.mT), torch.linalg.det(a), torch.det(a * 0.5),
                *torch.linalg.slogdet(a), torch.logdet(spd), torch.slogdet(a.mT)[1],
                torch.linalg.svdvals(x), torch.linalg.eigvalsh(a + a.mT), torch.linalg.eigvalsh(a, UPLO="U"),
                chol, torch.linalg.cholesky(spd, upper=True), torch.cholesky(spd),
                torch.linalg.solve(a, b), torch.linalg.solve(a, b[..., 0]), torch.linalg.solve(a, b.mT, left=False),
                torch.linalg.solve_triangular(a.triu(), b, upper=True),
                torch.linalg.solve_triangular(a, b, upper=False, unitriangular=True),
                torch.linalg.solve_triangular(a, b.mT, upper=True, left=False),
                torch.linalg.solve_triangular(a[..., :1, :, :], b, upper=False),  # batch dims broadcast
                torch.cholesky_solve(b, chol), torch.cholesky_solve(b, chol.mT, upper=True))


class Vectors(nn.Module):
    """``svd`` and ``eigh`` through sign-free invariants: reconstructions, projectors, and the values."""

    def forward(self, x):
        u, s, vh = torch.linalg.svd(x, full_matrices=False)
        uf, sf, vhf = torch.linalg.svd(x)
        n = x.shape[-2]
        w, v = torch.linalg.eigh(x[..., :n] + x[..., :n].mT)
        return (u * s[..., None, :]) @ vh, s, u @ u.mT, uf @ uf.mT, vhf.mT @ vhf, sf, (v * w[..., None, :]) @ v.mT, w


def test_linalg_matches_torch_at_two_sizes():
    check_converted(Linalg().eval(), torch.randn(2, 3, 4, 6), torch.randn(3, 1, 5, 7))


def test_linalg_float64():
    check_converted(Linalg().eval(), torch.randn(2, 4, 6, dtype=torch.float64),
                    torch.randn(3, 3, 5, dtype=torch.float64), rel=1e-10)


def test_svd_and_eigh_invariants():
    check_converted(Vectors().eval(), torch.randn(2, 4, 6), torch.randn(3, 5, 7))


def _input_grads(ported, model, x, rtol):
    """d(sum_i <out_i, w_i>)/dx of the port against torch's autograd."""
    with torch.no_grad():
        outs = model(x)
    weights = [torch.randn(o.shape, dtype=o.dtype) for o in outs]
    leaf = x.clone().requires_grad_()
    sum((o * w).sum() for o, w in zip(model(leaf), weights)).backward()
    dtype = mx.float64 if x.dtype == torch.float64 else mx.float32
    mw = [mx.array(w.numpy(), dtype=dtype) for w in weights]

    def loss(v):
        return sum((o * w).sum() for o, w in zip(ported(v), mw))

    g = mx.grad(loss)(mx.array(x.numpy(), dtype=dtype))
    assert_close(np.array(g), leaf.grad.numpy(), rtol=rtol, what="gradient to the input")


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-3), (torch.float64, 1e-9)])
def test_linalg_gradients_match_torch_autograd(dtype, rtol):
    model = Linalg().eval()
    x = torch.randn(2, 4, 6, dtype=dtype)
    ported = porter.convert(model, x, io_layout="torch")
    _input_grads(ported, model, x, rtol)
    _input_grads(ported, model, torch.randn(3, 2, 5, 7, dtype=dtype)[0], rtol)


def test_linalg_through_torchscript():
    model = Linalg().eval()
    x = torch.randn(2, 4, 6)
    traced = torch.jit.trace(model, (x,), check_trace=False)
    ported = porter.convert(traced, (x,), io_layout="torch")
    assert_matches(ported, model, (x,))
    assert_matches(ported, model, (torch.randn(3, 4, 6),))  # a trace bakes the matrix size in (torch.eye(n))


class Edges(nn.Module):
    def forward(self, x):
        return torch.linalg.det(x), *torch.linalg.slogdet(x), torch.logdet(x)


def test_singular_and_negative_determinants_match_torch():
    """det 0, slogdet (0, -inf), logdet NaN of a negative determinant and -inf of a zero one: torch's values."""
    x = torch.tensor([[[1.0, 2.0], [2.0, 4.0]], [[0.0, 1.0], [1.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]],
                      [[2.0, 1.0], [1.0, 3.0]]])
    check_converted(Edges().eval(), x)


def test_singular_inverse_raises_as_torch_does():
    """torch raises for a singular matrix; the port's MLX raises when the result is evaluated."""
    model = nn.Module()
    model.forward = lambda x: torch.linalg.inv(x)
    ported = porter.convert(model.eval(), torch.randn(2, 3, 3), io_layout="torch")
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.inv(torch.zeros(2, 3, 3))
    with pytest.raises(RuntimeError):
        mx.eval(ported(mx.zeros((2, 3, 3))))


def test_cholesky_of_a_non_positive_definite_matrix_is_nan():
    """torch raises; the port gives NaN for exactly the matrices that have no factor, the others as torch."""
    good = _spd(torch.randn(3, 3))
    x = torch.stack([good, -torch.eye(3), torch.tensor([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])])
    y = np.array(ops.k_cholesky(mx.array(x.numpy()), upper=False))
    assert_close(y[0], torch.linalg.cholesky(good).numpy(), what="factor of the positive-definite matrix")
    assert np.isnan(y[1:]).all()
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky(x)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_inputs_compute_in_float32(dtype):
    """torch's CPU linalg refuses half; a port made half (``ported.astype``) computes in float32 and casts back."""
    a = torch.randn(2, 4, 4) + 4 * torch.eye(4)
    x = mx.array(a.numpy()).astype(dtype)
    for fn, expected in [("inv", torch.linalg.inv(a)), ("det", torch.linalg.det(a)),
                         ("svdvals", torch.linalg.svdvals(a))]:
        y = ops.k_matrix_fn(x, fn=fn)
        assert y.dtype == dtype
        assert_close(np.array(y.astype(mx.float32)), expected.numpy(), rtol=2e-2, what=fn)


def test_empty_batches_give_torch_shapes_and_values():
    for fn, expected in [("inv", torch.linalg.inv(torch.zeros(0, 3, 3))),
                         ("det", torch.linalg.det(torch.zeros(2, 0, 0))), ("logdet", torch.logdet(torch.zeros(2, 0, 0))),
                         ("svdvals", torch.linalg.svdvals(torch.zeros(0, 2, 3)))]:
        shape = {"inv": (0, 3, 3), "det": (2, 0, 0), "logdet": (2, 0, 0), "svdvals": (0, 2, 3)}[fn]
        y = np.array(ops.k_matrix_fn(mx.zeros(shape), fn=fn))
        assert y.shape == tuple(expected.shape), fn
        np.testing.assert_array_equal(y, expected.numpy())


def test_non_square_and_mismatched_inputs_are_named():
    with pytest.raises(ValueError, match="square"):
        ops.k_matrix_fn(mx.zeros((2, 3)), fn="inv")
    with pytest.raises(ValueError, match="incompatible shapes"):
        ops.k_solve(mx.eye(3), mx.zeros((4, 2)), left=True)


class Exportable(nn.Module):
    def forward(self, x):
        a = x[..., :4] + 4 * torch.eye(4)
        spd = _spd(x[..., :4])
        chol = torch.linalg.cholesky(spd)
        return (torch.linalg.inv(a), torch.linalg.solve(a, x[..., 4:]), chol, torch.cholesky_solve(x[..., 4:], chol),
                torch.linalg.svdvals(x), torch.linalg.eigvalsh(spd),
                torch.linalg.solve_triangular(a, x[..., 4:], upper=True))


def test_export_as_mlxfn_runs_the_plain_forwards(tmp_path):
    """No custom gradients in an .mlxfn (MLX cannot write them) and ``solve`` as ``inv(A) @ B`` (MLX cannot write its
    LU factorization); ``det``/``slogdet`` need that factorization and are refused by name."""
    model = Exportable().eval()
    x = torch.randn(2, 4, 6)
    ported = porter.convert(model, x, io_layout="torch")
    porter.export_function(ported, str(tmp_path / "f.mlxfn"), mx.array(x.numpy()))
    outs = mx.import_function(str(tmp_path / "f.mlxfn"))(mx.array(x.numpy()))
    for i, (a, e) in enumerate(zip(outs, model(x))):
        assert_close(np.array(a), e.numpy(), rtol=1e-4, what=f"output {i}")
    det = porter.convert(Edges().eval(), torch.randn(2, 3, 3), io_layout="torch")
    with pytest.raises(Exception, match="det: MLX 0.32 cannot serialize"):
        porter.export_function(det, str(tmp_path / "g.mlxfn"), mx.array(np.random.randn(2, 3, 3).astype("float32")))
