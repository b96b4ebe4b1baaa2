"""porter.layers.BatchNorm against torch.nn.BatchNorm{1,2,3}d: train-mode steps (running statistics, momentum and
cumulative average, num_batches_tracked), eval, gradients, half precision, argument errors."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
import torch

import porter.layers as L
from tests.helpers import mx_to_numpy, torch_to_mx

TORCH_BN = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}
SHAPES = {0: (6, 5), 1: (3, 5, 7), 2: (2, 5, 5, 3), 3: (2, 5, 3, 4, 3)}  # torch layout, C = 5


def _pair(nd, momentum, affine=True, track=True):
    tbn = TORCH_BN[max(nd, 1)](5, momentum=momentum, affine=affine, track_running_stats=track)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        if affine:
            tbn.weight.copy_(torch.rand(5, generator=g) + 0.5)
            tbn.bias.copy_(torch.randn(5, generator=g))
        if track:
            tbn.running_mean.copy_(torch.randn(5, generator=g))
            tbn.running_var.copy_(torch.rand(5, generator=g) + 0.5)
    mbn = L.BatchNorm(5, momentum=momentum, affine=affine, track_running_stats=track)
    weights = [(k, mx.array(v.detach().numpy())) for k, v in tbn.state_dict().items()]
    mbn.load_weights(weights)
    return tbn, mbn


@pytest.mark.parametrize("nd", [0, 1, 2, 3])
@pytest.mark.parametrize("momentum", [0.1, 0.3, None])
def test_training_steps_then_eval_match_torch(nd, momentum):
    tbn, mbn = _pair(nd, momentum)
    tbn.train(), mbn.train()
    batched = True
    for step in range(3):
        x = torch.randn(*SHAPES[nd], generator=torch.Generator().manual_seed(step)) * 2 + 1
        y_t = tbn(x).detach().numpy()
        y_m = mx_to_numpy(mbn(torch_to_mx(x, batched)), batched)
        np.testing.assert_allclose(y_m, y_t, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.array(mbn.running_mean), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.array(mbn.running_var), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)
        assert int(mbn.num_batches_tracked) == int(tbn.num_batches_tracked) == step + 1
    tbn.eval(), mbn.eval()
    x = torch.randn(*SHAPES[nd])
    np.testing.assert_allclose(mx_to_numpy(mbn(torch_to_mx(x, True)), True), tbn(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("affine,track", [(False, True), (True, False), (False, False)])
def test_without_affine_or_running_stats(affine, track):
    tbn, mbn = _pair(2, 0.1, affine=affine, track=track)
    for mode in ("train", "eval"):
        getattr(tbn, mode)(), getattr(mbn, mode)()
        x = torch.randn(*SHAPES[2])
        np.testing.assert_allclose(mx_to_numpy(mbn(torch_to_mx(x, True)), True), tbn(x).detach().numpy(),
                                   rtol=1e-5, atol=1e-5)
    assert sorted(k for k, _ in _flat(mbn.parameters())) == sorted(tbn.state_dict())


def _flat(tree):
    from mlx.utils import tree_flatten
    return tree_flatten(tree)


@pytest.mark.parametrize("training", [True, False])
def test_gradients_match_torch(training):
    tbn, mbn = _pair(2, 0.1)
    tbn.train(training), mbn.train(training)
    x = torch.randn(*SHAPES[2], requires_grad=True)
    cot = torch.randn(*SHAPES[2])
    (tbn(x) * cot).sum().backward()
    xm, cm = torch_to_mx(x, True), torch_to_mx(cot, True)

    def loss(params, xm):
        mbn.update(params)
        return (mbn(xm) * cm).sum()

    params = mbn.trainable_parameters()
    (gp, gx) = mx.grad(loss, argnums=(0, 1))(params, xm)
    np.testing.assert_allclose(mx_to_numpy(gx, True), x.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(gp["weight"]), tbn.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(gp["bias"]), tbn.bias.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert set(params) == {"weight", "bias"}  # running statistics are buffers, never trained


@pytest.mark.parametrize("tdtype,mdtype,tol", [(torch.float16, mx.float16, 2e-3), (torch.bfloat16, mx.bfloat16, 2e-2)])
def test_half_precision_input(tdtype, mdtype, tol):
    tbn, mbn = _pair(2, 0.1)
    tbn.train(), mbn.train()
    x = torch.randn(*SHAPES[2]).to(tdtype)
    y_t = tbn.float()(x.float()).to(tdtype).float().detach().numpy()  # torch CPU: float32 statistics
    y_m = mbn(torch_to_mx(x, True))
    assert y_m.dtype == mdtype
    np.testing.assert_allclose(mx_to_numpy(y_m, True), y_t, rtol=tol, atol=tol)


def test_is_an_mlx_batchnorm_and_errors():
    assert isinstance(L.BatchNorm(3), nn.BatchNorm)
    assert L.BatchNorm1d is L.BatchNorm2d is L.BatchNorm3d is L.BatchNorm
    with pytest.raises(ValueError, match="'num_features'"):
        L.BatchNorm(0)
    with pytest.raises(ValueError, match="'momentum'"):
        L.BatchNorm(3, momentum=1.5)
    bn = L.BatchNorm(3)
    with pytest.raises(ValueError, match="3 channels"):
        bn(mx.zeros((2, 4, 4, 5)))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        bn(mx.zeros((1, 3)))
    bn.eval()
    assert bn(mx.zeros((1, 3))).shape == (1, 3)
    bn.unfreeze()
    assert set(bn.trainable_parameters()) == {"weight", "bias"}
