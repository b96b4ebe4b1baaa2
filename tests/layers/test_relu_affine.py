"""``porter.layers.functional.relu`` and ``channel_affine`` (layers/activation.py, layers/affine.py): the public entry
points the converters' relu and batch-norm kernels and the zoo's ReLU use. Against torch, on both paths (native
kernels and pure MLX, via the ``backend`` fixture): values with NaN/inf/-0.0, 16-bit and float64 inputs, odd
shapes, gradients of every argument, and torch's eval batch norm with re-randomised statistics.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import functional as F

from tests.helpers import assert_close

DTYPES = {
    "float32": (torch.float32, mx.float32),
    "float16": (torch.float16, mx.float16),
    "bfloat16": (torch.bfloat16, mx.bfloat16),
    "float64": (torch.float64, mx.float64),
}


def _to_mx(t: torch.Tensor, dtype) -> mx.array:
    return mx.array(t.double().numpy()).astype(dtype) if dtype != mx.float64 else mx.array(t.numpy(), dtype=mx.float64)


def _to_np(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float64) if a.dtype in (mx.float16, mx.bfloat16) else a)


def _special(shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
    flat = x.view(-1)
    flat[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-30])
    return x


# ---------------------------------------------------------------------------------------------------- relu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (13,), (3, 1, 1029)])
def test_relu_matches_torch_exactly(dtype, shape):
    tdtype, mdtype = DTYPES[dtype]
    x = _special(shape, 1).to(tdtype)
    out = F.relu(_to_mx(x, mdtype))
    assert out.dtype == mdtype
    expected = torch.relu(x)
    assert_close(_to_np(out), expected.double().numpy(), atol=0, rtol=0, what=f"relu {dtype}")


def test_relu_integers_match_torch():
    x = torch.tensor([[-3, 0, 5], [7, -1, 2]], dtype=torch.int32)
    out = F.relu(mx.array(x.numpy()))
    assert out.dtype == mx.int32
    assert_close(np.array(out), torch.relu(x).numpy(), atol=0, rtol=0, what="relu int32")


def test_relu_gradient_matches_torch():
    x = _special((3, 4, 5), 2).float()
    x.view(-1)[:3] = torch.tensor([0.0, -0.0, 2.0])  # at 0 torch gives 0 gradient
    x = torch.where(torch.isfinite(x), x, torch.zeros_like(x)).requires_grad_(True)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    torch.relu(x).backward(g)
    gx = mx.grad(lambda a: (F.relu(a) * mx.array(g.numpy())).sum())(mx.array(x.detach().numpy()))
    assert_close(np.array(gx), x.grad.numpy(), atol=0, rtol=0, what="relu grad")


def test_relu_refuses_a_non_array():
    with pytest.raises(TypeError, match=r"\[relu\] 'x' must be an mx.array"):
        F.relu(np.ones(3, dtype=np.float32))


# ---------------------------------------------------------------------------------------------------- channel_affine
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 5, 7, 3), (4, 6), (1, 3, 4, 5, 17)])
def test_channel_affine_matches_torch(dtype, shape):
    tdtype, mdtype = DTYPES[dtype]
    c = shape[-1]
    g = torch.Generator().manual_seed(4)
    x = _special(shape, 5).to(tdtype)
    alpha = (torch.randn(c, generator=g, dtype=torch.float64) * 2).to(tdtype)
    beta = torch.randn(c, generator=g, dtype=torch.float64).to(tdtype)
    out = F.channel_affine(_to_mx(x, mdtype), _to_mx(alpha, mdtype), _to_mx(beta, mdtype))
    assert out.dtype == mdtype and out.shape == shape
    if tdtype in (torch.float32, torch.float64):
        expected = (x * alpha + beta).double().numpy()
        tol = 0 if tdtype == torch.float64 else 1e-6  # the native pass may fuse the multiply-add (one rounding)
        assert_close(_to_np(out), expected, atol=tol, rtol=tol, what=f"channel_affine {dtype}")
    else:
        # 16-bit: both paths compute in float32 and round once (torch's half CPU kernels do the same); a fused
        # multiply-add may differ from torch's two float32 roundings by one 16-bit step at a rounding tie
        expected = (x.float() * alpha.float() + beta.float()).to(tdtype).double().numpy()
        step = 2.0 ** -7 if tdtype == torch.bfloat16 else 2.0 ** -10
        assert_close(_to_np(out), expected, atol=1e-6, rtol=step, what=f"channel_affine {dtype}")


def test_channel_affine_gradients_match_torch():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 5, 7, generator=g, requires_grad=True)
    alpha = torch.randn(7, generator=g, requires_grad=True)
    beta = torch.randn(7, generator=g, requires_grad=True)
    cot = torch.randn(2, 3, 5, 7, generator=g)
    (x * alpha + beta).backward(cot)
    grads = mx.grad(lambda a, b, c: (F.channel_affine(a, b, c) * mx.array(cot.numpy())).sum(), argnums=(0, 1, 2))(
        *(mx.array(t.detach().numpy()) for t in (x, alpha, beta)))
    for got, want, name in zip(grads, (x.grad, alpha.grad, beta.grad), ("x", "alpha", "beta")):
        assert_close(np.array(got), want.numpy(), atol=1e-5, rtol=1e-5, what=f"channel_affine grad {name}")


def test_channel_affine_is_torch_eval_batch_norm():
    g = torch.Generator().manual_seed(7)
    bn = torch.nn.BatchNorm2d(6).eval()
    with torch.no_grad():  # running stats and affine parameters start at 0/1: re-randomise them
        bn.running_mean.normal_(generator=g)
        bn.running_var.uniform_(0.5, 2.0, generator=g)
        bn.weight.normal_(generator=g)
        bn.bias.normal_(generator=g)
    x = torch.randn(2, 6, 5, 9, generator=g)
    expected = bn(x).permute(0, 2, 3, 1).detach().numpy()
    alpha = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    beta = bn.bias - bn.running_mean * alpha
    params = [mx.array(t.detach().numpy()) for t in (alpha, beta)]
    out = F.channel_affine(mx.array(x.permute(0, 2, 3, 1).numpy()), *params)
    assert_close(np.array(out), expected, atol=1e-5, rtol=1e-5, what="channel_affine vs BatchNorm2d")


@pytest.mark.parametrize("name", ["x", "alpha", "beta"])
def test_channel_affine_names_a_non_array_argument(name):
    args = {"x": mx.ones((2, 3)), "alpha": mx.ones(3), "beta": mx.zeros(3)}
    args[name] = [1.0, 2.0, 3.0]
    with pytest.raises(TypeError, match=rf"\[channel_affine\] '{name}' must be an mx.array"):
        F.channel_affine(**args)
