"""Backward passes of the elementwise layers a training step runs on every activation (layers/csrc/elementwise_*:
relu's backward, hardtanh / ReLU6 forward and backward, eval batch norm's channel affine backward as one pass) against
torch, run in the test: values and gradients, 16-bit and float64, odd shapes, sizes that split over threads,
NaN/inf and values exactly at the clamp bounds, second derivatives and vmap."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from tests.helpers import assert_close

from porter.layers import functional as F

DTYPES = {
    "float32": (torch.float32, mx.float32),
    "float16": (torch.float16, mx.float16),
    "bfloat16": (torch.bfloat16, mx.bfloat16),
    "float64": (torch.float64, mx.float64),
}
# odd shapes; the last ones are large enough for the kernels to split over threads (> 1M element-steps)
SHAPES = [(3, 5, 7, 3), (2, 9, 11, 17), (4, 64, 64, 33)]


def _to_mx(t: torch.Tensor, dtype) -> mx.array:
    return mx.array(t.detach().double().numpy()).astype(dtype) if dtype != mx.float64 else mx.array(
        t.detach().numpy(), dtype=mx.float64)


def _to_np(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float64) if a.dtype in (mx.float16, mx.bfloat16) else a)


def _values(shape, seed, dtype, points=()) -> torch.Tensor:
    """Normal values * 4 in ``dtype`` with ``points`` written at the start (exact in every dtype used)."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 4).to(dtype)
    if points:
        x.view(-1)[: len(points)] = torch.tensor(points, dtype=torch.float64).to(dtype)
    return x


# ---------------------------------------------------------------------------------------------------- hardtanh
@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-1.0, 1.0), (-2.5, 0.5)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_hardtanh_values_and_gradient_match_torch(bounds, dtype, shape):
    """Exact values and gradients (clamping and masking round nothing); random values, none on a bound."""
    tdtype, mdtype = DTYPES[dtype]
    lo, hi = bounds
    x = _values(shape, 1, tdtype).requires_grad_(True)
    cot = _values(shape, 2, tdtype)
    y = TF.hardtanh(x, lo, hi)
    y.backward(cot)
    xm = _to_mx(x, mdtype)
    got = F.hardtanh(xm, lo, hi)
    assert got.dtype == mdtype and got.shape == shape
    assert_close(_to_np(got), y.detach().double().numpy(), atol=0, rtol=0, what=f"hardtanh {dtype}")
    gx = mx.grad(lambda a: (F.hardtanh(a, lo, hi) * _to_mx(cot, mdtype)).astype(mx.float32).sum())(xm)
    assert_close(_to_np(gx), x.grad.double().numpy(), atol=0, rtol=0, what=f"hardtanh grad {dtype}")


@pytest.mark.native_only
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_hardtanh_bounds_nan_and_inf_follow_torch(dtype):
    """Values exactly at min_val / max_val get no gradient, NaN stays NaN (and gets no gradient), inf clamps."""
    tdtype, mdtype = DTYPES[dtype]
    points = (0.0, 6.0, -0.0, float("nan"), float("inf"), -float("inf"), 5.9990234375, 1e-3)
    x = _values((2, 7, 5, 3), 3, tdtype, points).requires_grad_(True)
    cot = _values((2, 7, 5, 3), 4, tdtype)
    y = TF.relu6(x)
    y.backward(cot)
    xm = _to_mx(x, mdtype)
    assert_close(_to_np(F.hardtanh(xm, 0.0, 6.0)), y.detach().double().numpy(), atol=0, rtol=0, what="relu6")
    gx = mx.grad(lambda a: (F.hardtanh(a, 0.0, 6.0) * _to_mx(cot, mdtype)).astype(mx.float32).sum())(xm)
    assert_close(_to_np(gx), x.grad.double().numpy(), atol=0, rtol=0, what="relu6 grad")


def test_hardtanh_refuses_bad_bounds_and_non_arrays():
    with pytest.raises(ValueError, match=r"\[hardtanh\] 'min_val' cannot be greater than 'max_val'"):
        F.hardtanh(mx.zeros(3), 1.0, -1.0)
    with pytest.raises(TypeError, match=r"\[hardtanh\] 'x' must be an mx.array"):
        F.hardtanh(np.zeros(3, dtype=np.float32))


def test_hardtanh_second_derivative_and_vmap_match_torch():
    x = _values((3, 4, 5), 5, torch.float32).requires_grad_(True)
    w = _values((3, 4, 5), 6, torch.float32)
    # d/dx of sum(w * grad_x(sum(hardtanh(x)^2))): the mask is piecewise constant, so torch's double backward
    (gx,) = torch.autograd.grad(TF.hardtanh(x, -2.0, 3.0).pow(2).sum(), x, create_graph=True)
    (ggx,) = torch.autograd.grad((gx * w).sum(), x)
    inner = mx.grad(lambda a: (F.hardtanh(a, -2.0, 3.0) ** 2).sum())
    got = mx.grad(lambda a: (inner(a) * _to_mx(w, mx.float32)).sum())(_to_mx(x, mx.float32))
    assert_close(np.array(got), ggx.numpy(), atol=1e-6, rtol=1e-6, what="hardtanh second derivative")
    mapped = mx.vmap(lambda a: F.hardtanh(a, -2.0, 3.0), in_axes=1)(_to_mx(x, mx.float32))
    assert_close(np.array(mapped), TF.hardtanh(x, -2.0, 3.0).detach().transpose(0, 1).numpy(), atol=0, rtol=0,
                 what="hardtanh vmap")


# ---------------------------------------------------------------------------------------------------- relu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_relu_gradient_matches_torch_in_every_dtype(dtype, shape):
    tdtype, mdtype = DTYPES[dtype]
    x = _values(shape, 7, tdtype, (0.0, -0.0, 1e-3, -1e-3)).requires_grad_(True)
    cot = _values(shape, 8, tdtype)
    torch.relu(x).backward(cot)
    gx = mx.grad(lambda a: (F.relu(a) * _to_mx(cot, mdtype)).astype(mx.float32).sum())(_to_mx(x, mdtype))
    assert gx.dtype == mdtype
    assert_close(_to_np(gx), x.grad.double().numpy(), atol=0, rtol=0, what=f"relu grad {dtype}")


@pytest.mark.native_only
def test_relu_gradient_of_nan_and_inf_follows_torch():
    """torch's relu backward masks on the output (``y <= 0``): a NaN output passes its gradient, +inf too."""
    x = _values((2, 3, 4, 5), 9, torch.float32, (float("nan"), float("inf"), -float("inf"), 0.0)).requires_grad_(True)
    cot = _values((2, 3, 4, 5), 10, torch.float32)
    torch.relu(x).backward(cot)
    gx = mx.grad(lambda a: (F.relu(a) * _to_mx(cot, mx.float32)).sum())(_to_mx(x, mx.float32))
    assert_close(np.array(gx), x.grad.numpy(), atol=0, rtol=0, what="relu grad nan/inf")


def test_relu_second_derivative_and_vmap_of_its_gradient_match_torch():
    x = _values((3, 4, 5), 11, torch.float32).requires_grad_(True)
    w = _values((3, 4, 5), 12, torch.float32)
    (gx,) = torch.autograd.grad(torch.relu(x).pow(2).sum(), x, create_graph=True)
    (ggx,) = torch.autograd.grad((gx * w).sum(), x)
    inner = mx.grad(lambda a: (F.relu(a) ** 2).sum())
    xm = _to_mx(x, mx.float32)
    got = mx.grad(lambda a: (inner(a) * _to_mx(w, mx.float32)).sum())(xm)
    assert_close(np.array(got), ggx.numpy(), atol=1e-6, rtol=1e-6, what="relu second derivative")
    mapped = mx.vmap(inner, in_axes=2)(xm)
    assert_close(np.array(mapped), gx.detach().permute(2, 0, 1).numpy(), atol=0, rtol=0, what="relu grad vmap")


# ---------------------------------------------------------------------------------------------------- channel affine
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES + [(5, 6)])
def test_eval_batch_norm_backward_matches_torch(relu, dtype, shape):
    """torch's eval BatchNorm (re-randomised running statistics, weight and bias) and its gradients to the input,
    weight and bias, against Porter's BatchNorm layer (channel affine, one backward pass), ReLU fused or not."""
    import porter.layers as L

    tdtype, mdtype = DTYPES[dtype]
    c = shape[-1]
    g = torch.Generator().manual_seed(13)
    bn = torch.nn.BatchNorm1d(c).double().eval()
    with torch.no_grad():
        bn.running_mean.normal_(generator=g)
        bn.running_var.uniform_(0.5, 2.0, generator=g)
        bn.weight.normal_(generator=g)
        bn.bias.normal_(generator=g)
    x = _values(shape, 14, tdtype).requires_grad_(True)
    cot = _values(shape, 15, tdtype)
    xt = x.double().reshape(-1, c)
    y = bn(xt)
    y = torch.relu(y) if relu else y
    (y.reshape(shape) * cot.double()).sum().backward()

    pm = L.BatchNorm(c)
    pm.update({k: mx.array(getattr(bn, k).detach().float().numpy()) for k in ("weight", "bias", "running_mean",
                                                                               "running_var")})
    pm.eval()

    def loss(params, a):
        pm.update(params)
        out = pm(a)
        out = F.relu(out) if relu else out
        return (out.astype(mx.float32) * _to_mx(cot, mx.float32)).sum()

    params = {"weight": pm.weight, "bias": pm.bias}
    gp, gx = mx.grad(loss, argnums=(0, 1))(params, _to_mx(x, mdtype))
    assert gx.dtype == mdtype
    scale = np.abs(x.grad.double().numpy()).max()
    tol = {"float32": 1e-5, "float64": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    assert_close(_to_np(gx), x.grad.double().numpy(), atol=tol * scale, rtol=tol, what=f"bn grad x {dtype}")
    for name in ("weight", "bias"):
        want = getattr(bn, name).grad.numpy()
        # sums over many rows of 16-bit inputs: compare against torch's float64 sums at the inputs' resolution
        assert_close(np.array(gp[name]), want, atol=tol * np.abs(want).max(), rtol=tol, what=f"bn grad {name} {dtype}")


def test_channel_affine_second_derivatives_match_torch():
    g = torch.Generator().manual_seed(16)
    x = torch.randn(2, 3, 5, 7, generator=g, dtype=torch.float64, requires_grad=True)
    alpha = torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True)
    beta = torch.randn(7, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 3, 5, 7, generator=g, dtype=torch.float64)
    # the gradients of sum((x * alpha + beta)^2) differentiated again, every argument
    grads = torch.autograd.grad(((x * alpha + beta) ** 2).sum(), (x, alpha, beta), create_graph=True)
    outer = (grads[0] * w).sum() + grads[1].pow(2).sum() + grads[2].pow(2).sum()
    want = torch.autograd.grad(outer, (x, alpha, beta))

    def inner(a, b, c):
        return mx.grad(lambda a_, b_, c_: (F.channel_affine(a_, b_, c_) ** 2).sum(), argnums=(0, 1, 2))(a, b, c)

    wm = mx.array(w.numpy().astype(np.float32))

    def outer_m(a, b, c):
        ga, gb, gc = inner(a, b, c)
        return (ga * wm).sum() + (gb ** 2).sum() + (gc ** 2).sum()

    got = mx.grad(outer_m, argnums=(0, 1, 2))(*(mx.array(t.detach().numpy().astype(np.float32)) for t in (x, alpha,
                                                                                                         beta)))
    for gm, wt, name in zip(got, want, ("x", "alpha", "beta")):
        scale = np.abs(wt.numpy()).max()
        assert_close(np.array(gm), wt.numpy(), atol=1e-4 * scale, rtol=1e-4, what=f"second derivative {name}")
