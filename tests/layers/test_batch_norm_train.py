"""Batch norm with the batch's statistics (training, or ``track_running_stats=False``): its custom VJP
(``layers/_batch_norm_train.py``, torch's backward formula) against torch's gradients, and the memory it saves."""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import _batch_norm_train
from tests.helpers import mx_to_numpy, torch_to_mx
from tests.layers.test_norm import SHAPES, _pair


def _grads(tbn, mbn, x, cot):
    """torch's and Porter's (input, weight, bias) gradients of ``sum(bn(x) * cot)``; Porter's from ``x`` in ``x``'s
    dtype, torch's from float32 (torch's CPU kernels compute half inputs' statistics in float32)."""
    xt = x.float().requires_grad_(True)
    (tbn(xt) * cot).sum().backward()
    xm, cm = torch_to_mx(x.float(), True).astype(_MX[x.dtype]), torch_to_mx(cot, True)

    def loss(params, xm):
        mbn.update(params)
        return (mbn(xm).astype(mx.float32) * cm).sum()

    params = mbn.trainable_parameters()
    gp, gx = mx.grad(loss, argnums=(0, 1))(params, xm)
    assert gx.dtype == xm.dtype
    theirs = [xt.grad.numpy()] + ([tbn.weight.grad.numpy(), tbn.bias.grad.numpy()] if tbn.affine else [])
    ours = [mx_to_numpy(gx.astype(mx.float32), True)] + ([np.array(gp["weight"]), np.array(gp["bias"])]
                                                          if tbn.affine else [])
    return theirs, ours


_MX = {torch.float32: mx.float32, torch.float16: mx.float16, torch.bfloat16: mx.bfloat16}


@pytest.mark.parametrize("nd", [0, 1, 2, 3])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training,track", [(True, True), (False, False)])
def test_gradients_match_torch(nd, affine, training, track):
    tbn, mbn = _pair(nd, 0.1, affine=affine, track=track)
    tbn.train(training), mbn.train(training)
    torch.manual_seed(nd)
    x, cot = torch.randn(*SHAPES[nd]) * 3 + 1, torch.randn(*SHAPES[nd])
    theirs, ours = _grads(tbn, mbn, x, cot)
    for t, m in zip(theirs, ours):
        np.testing.assert_allclose(m, t, rtol=1e-4, atol=1e-5)
    if track:  # the running statistics still follow torch's
        np.testing.assert_allclose(np.array(mbn.running_var), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 5e-3), (torch.bfloat16, 4e-2)])
def test_half_precision_gradients(dtype, tol):
    tbn, mbn = _pair(3, 0.1)
    tbn.train(), mbn.train()
    torch.manual_seed(0)
    x, cot = torch.randn(*SHAPES[3]).to(dtype), torch.randn(*SHAPES[3])
    theirs, ours = _grads(tbn, mbn, x, cot)
    for t, m in zip(theirs, ours):
        np.testing.assert_allclose(m, t, rtol=tol, atol=tol * np.abs(t).max())


def test_nonfinite_input_spreads_as_in_torch():
    tbn, mbn = _pair(2, 0.1)
    tbn.train(), mbn.train()
    x = torch.randn(*SHAPES[2])
    x[0, 1, 2, 2] = float("nan")
    x[1, 3, 0, 0] = float("inf")
    theirs, ours = _grads(tbn, mbn, x, torch.randn(*SHAPES[2]))
    for t, m in zip(theirs, ours):
        np.testing.assert_array_equal(np.isnan(m), np.isnan(t))


def test_backward_keeps_only_the_input():
    """Issue 15: differentiated through MLX's ops, a training batch norm saved ~4 whole-input arrays for its
    backward; the custom VJP saves the input. The extra peak of a gradient, over the input itself, is bounded."""
    from porter.layers import BatchNorm3d

    bn = BatchNorm3d(32)
    bn.train()
    x = mx.random.normal((4, 8, 16, 16, 32))  # 4 MiB
    mx.eval(x, bn.parameters())

    def peak(forward):
        def loss(params, x):
            bn.update(params)
            return (forward(x) ** 2).sum()

        mx.eval(bn.parameters())
        mx.reset_peak_memory()
        base = mx.get_active_memory()
        mx.eval(mx.grad(loss, argnums=(0, 1))(bn.trainable_parameters(), x))
        return (mx.get_peak_memory() - base) / x.nbytes

    plain = peak(lambda x: _batch_norm_train._forward(x, bn.weight, bn.bias, bn.eps)[0])
    ours = peak(bn)
    # measured: 7.0 input sizes (the input's gradient, the output and its square, the backward's temporaries)
    # against 13.0 through MLX's ops here and 9.0 on another CI machine (MLX's own peak depends on its eval order):
    # the bound is on ours; the plain path only has to be worse, so the measure is seen to tell them apart
    assert ours <= 8 and plain > ours + 1, (ours, plain)


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("shape", [(0, 5, 4, 3), (2, 5, 0, 3), (0, 5)])
def test_an_empty_batch_keeps_the_running_statistics_as_torch(shape, momentum):
    """Training on an empty batch: torch returns an empty output, counts the batch and keeps its running statistics;
    session 18's port set them to NaN (the empty batch's mean, 0/0), so every later eval call returned NaN."""
    nd = len(shape) - 2
    tbn, mbn = _pair(nd, momentum)
    tbn.train(), mbn.train()
    x = torch.randn(*shape)
    want = tbn(x)
    got = mbn(torch_to_mx(x, True))
    mx.eval(got)
    assert got.shape == np.moveaxis(np.empty(want.shape), 1, -1).shape and got.size == 0
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_array_equal(np.array(getattr(mbn, name)), getattr(tbn, name).numpy())


@pytest.mark.parametrize("view", ["transposed", "strided", "broadcast"])
def test_non_contiguous_inputs_match_torch(view):
    """The native primitive reads a row-contiguous copy of a strided input (``readable_inputs``): a transposed or
    stepped view, or a broadcast one (every example the same), trains as torch does on the same values."""
    tbn, mbn = _pair(2, 0.1)
    tbn.train(), mbn.train()
    base = np.random.default_rng(0).standard_normal((4, 5, 6, 8)).astype(np.float32)  # torch layout
    if view == "transposed":
        x_mx = mx.array(base).transpose(0, 2, 3, 1)
        x_t = torch.from_numpy(base)
    elif view == "strided":
        x_mx = mx.array(base.transpose(0, 2, 3, 1))[:, ::2, 1::3]
        x_t = torch.from_numpy(base)[:, :, ::2, 1::3]
    else:
        x_mx = mx.broadcast_to(mx.array(base[:1].transpose(0, 2, 3, 1)), (3, 6, 8, 5))
        x_t = torch.from_numpy(base[:1]).expand(3, 5, 6, 8)
    got = mbn(x_mx)
    want = tbn(x_t)
    np.testing.assert_allclose(np.array(got), want.detach().numpy().transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(mbn.running_var), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)
