"""L2 normalisation (porter.layers.functional.l2_normalize, csrc/normalize_kernels.h) against torch's F.normalize:
values in float32/float16/bfloat16/float64, odd and short rows, zero rows (NaN in float16, as torch), rows below
eps, NaN/inf, strided inputs, a non-last axis (the MLX-ops path), gradients (torch's autograd), second derivatives,
vmap and argument errors. Every test runs on the native kernels and the pure-MLX path (tests/layers/conftest.py)."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import porter.layers.functional as PF

DTYPES = {torch.float32: mx.float32, torch.float16: mx.float16, torch.bfloat16: mx.bfloat16,
          torch.float64: mx.float64}
# values: 16-bit results are torch's roundings of the same float32 steps (a norm summed in another order may round
# to the neighbouring 16-bit value: one ulp); gradients: sums over the row
TOL = {torch.float32: (2e-6, 1e-5), torch.float64: (1e-14, 1e-12), torch.float16: (1e-3, 2e-2),
       torch.bfloat16: (8e-3, 8e-2)}
SHAPES = [(7, 33), (2, 3, 49, 32), (5, 1), (3, 8), (4, 17), (2, 1000), (6, 7)]


def _to_mx(t: torch.Tensor) -> mx.array:
    if t.dtype == torch.bfloat16:
        return mx.array(t.float().numpy()).astype(mx.bfloat16)
    return mx.array(t.numpy(), dtype=DTYPES[t.dtype])


def _np(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float64) if a.dtype in (mx.bfloat16, mx.float16) else a)


def _torch_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def _input(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64) * 3 + 0.5
    if x.shape[-1] > 1 and x.ndim >= 2:
        x.view(-1, x.shape[-1])[0] = 0  # a zero row
    return x.to(dtype)


def _grad_check(x_t, axis, eps, dtype, seed=1):
    gen = torch.Generator().manual_seed(seed)
    g_t = torch.randn(*x_t.shape, generator=gen, dtype=torch.float64).to(dtype)
    leaf = x_t.clone().requires_grad_(True)
    F.normalize(leaf, dim=axis, eps=eps).backward(g_t)
    _, (dx,) = mx.vjp(lambda a: [PF.l2_normalize(a, axis, eps)], [_to_mx(x_t)], [_to_mx(g_t)])
    assert dx.dtype == DTYPES[dtype] and tuple(dx.shape) == tuple(x_t.shape)
    gatol = TOL[dtype][1]
    np.testing.assert_allclose(_np(dx), _torch_np(leaf.grad), rtol=gatol, atol=gatol)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES)
def test_values_match_torch(shape, dtype):
    x_t = _input(shape, dtype)
    y = PF.l2_normalize(_to_mx(x_t), -1, 1e-12)
    want = F.normalize(x_t, dim=-1)
    assert y.dtype == DTYPES[dtype] and tuple(y.shape) == tuple(want.shape)
    atol = TOL[dtype][0]
    np.testing.assert_allclose(_np(y), _torch_np(want), rtol=atol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_zero_rows_as_torch(dtype):
    """A zero row is 0 / 1e-12 = 0, except in float16 where 1e-12 rounds to 0: 0 / 0 = NaN, as torch's."""
    x_t = torch.zeros(3, 40, dtype=dtype)
    y = _np(PF.l2_normalize(_to_mx(x_t), -1, 1e-12))
    want = _torch_np(F.normalize(x_t, dim=-1))
    assert np.array_equal(np.isnan(y), np.isnan(want)) and np.isnan(want).any() == (dtype == torch.float16)
    np.testing.assert_array_equal(y[~np.isnan(y)], want[~np.isnan(want)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_nan_and_inf_rows(dtype):
    x_t = torch.tensor([[1.0, float("inf"), 2.0] + [0.5] * 14, [1.0, float("nan"), 2.0] + [0.5] * 14,
                        [float("inf"), float("-inf"), 0.0] + [0.5] * 14, [3.0, -4.0, 0.0] + [0.0] * 14],
                       dtype=dtype)
    y = _np(PF.l2_normalize(_to_mx(x_t), -1, 1e-12))
    want = _torch_np(F.normalize(x_t, dim=-1))
    np.testing.assert_allclose(y, want, rtol=TOL[dtype][0], atol=TOL[dtype][0], equal_nan=True)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", [(7, 33), (2, 3, 49, 32), (4, 17), (3, 8)])
def test_gradients_match_torch(shape, dtype):
    _grad_check(_input(shape, dtype), -1, 1e-12, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradient_below_eps_and_at_zero(dtype):
    """Rows whose norm is below eps: the clamp passes no gradient (dx = g / eps); a zero row likewise (the norm's
    own backward is 0 there, never 0 / 0)."""
    x_t = torch.tensor([[1e-7, -2e-7, 3e-7, 0.0, 1e-7], [0.0] * 5, [1.0, 2.0, -3.0, 0.5, 0.25]], dtype=dtype)
    _grad_check(x_t, -1, 1e-3, dtype)


@pytest.mark.parametrize("axis", [0, 1, -2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_other_axes(axis, dtype):
    """Not the last axis: MLX ops (the native kernel normalises rows), the same numbers."""
    x_t = _input((5, 6, 7), dtype, seed=3)
    y = PF.l2_normalize(_to_mx(x_t), axis, 1e-12)
    atol = TOL[dtype][0]
    np.testing.assert_allclose(_np(y), _torch_np(F.normalize(x_t, dim=axis)), rtol=atol, atol=atol, equal_nan=True)
    _grad_check(x_t, axis, 1e-12, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strided_input(dtype):
    """A transposed (non-contiguous) view normalised over its last axis, as Swin V2's q/k after a permute."""
    x_t = _input((4, 9, 33), dtype, seed=4)
    xm = mx.swapaxes(_to_mx(x_t), 1, 2)
    y = PF.l2_normalize(xm, -1, 1e-12)
    atol = TOL[dtype][0]
    np.testing.assert_allclose(_np(y), _torch_np(F.normalize(x_t.transpose(1, 2), dim=-1)), rtol=atol, atol=atol,
                               equal_nan=True)


def test_second_derivative_matches_torch():
    x_t = _input((3, 11), torch.float64, seed=5)[1:].float()  # no zero row: 0/0 in both second derivatives
    gen = torch.Generator().manual_seed(6)
    g_t, h_t = torch.randn(3, 11, generator=gen)[1:], torch.randn(3, 11, generator=gen)[1:]
    leaf = x_t.clone().requires_grad_(True)
    (dx,) = torch.autograd.grad(F.normalize(leaf, dim=-1), leaf, g_t, create_graph=True)
    (dx.double() * h_t.double()).sum().backward()

    def first(a):
        return mx.vjp(lambda b: [PF.l2_normalize(b, -1, 1e-12)], [a], [mx.array(g_t.numpy())])[1][0]

    second = mx.grad(lambda a: (first(a) * mx.array(h_t.numpy())).sum())(mx.array(x_t.numpy()))
    np.testing.assert_allclose(np.array(second), leaf.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_vmap_over_rows_and_over_the_normalised_axis():
    x_t = _input((4, 5, 6), torch.float32, seed=7)
    xm = _to_mx(x_t)
    rows = mx.vmap(lambda a: PF.l2_normalize(a, -1, 1e-12), in_axes=1, out_axes=1)(xm)
    np.testing.assert_allclose(np.array(rows), F.normalize(x_t, dim=-1).numpy(), rtol=2e-6, atol=2e-6)
    last = mx.vmap(lambda a: PF.l2_normalize(a, -1, 1e-12), in_axes=2, out_axes=2)(xm)  # rows along axis 1
    np.testing.assert_allclose(np.array(last), F.normalize(x_t, dim=1).numpy(), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"eps": -1.0}, ValueError, "'eps'"), ({"eps": float("inf")}, ValueError, "'eps'"),
    ({"eps": float("nan")}, ValueError, "'eps'"), ({"axis": 2}, ValueError, "'axis'"),
    ({"axis": 1.0}, TypeError, "'axis'"),
])
def test_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        PF.l2_normalize(mx.ones((2, 3)), **kwargs)


def test_integer_input_refused():
    with pytest.raises(TypeError, match="'x' must be floating point"):
        PF.l2_normalize(mx.ones((2, 3), dtype=mx.int32))
