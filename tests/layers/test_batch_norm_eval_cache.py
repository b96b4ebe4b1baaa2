"""BatchNorm's eval affine (``alpha``, ``beta``; ``layers/norm.py``) is kept while its arrays are the same objects:
every way the statistics or the affine change (a training step, ``update``, an assignment, ``load_weights``, eps, a
gradient call's copies) is seen, torch the oracle each time."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import torch

import porter.layers as L
from porter.layers import _export
from tests.helpers import mx_to_numpy, torch_to_mx


def _img(t):
    return torch_to_mx(t, True)


def _vec(t):
    return mx.array(t.detach().numpy())


def _out(a):
    return mx_to_numpy(a, True)
from tests.layers.test_norm import _pair

X = (2, 5, 6, 7)  # torch layout, C = 5


def _x(seed):
    return torch.randn(*X, generator=torch.Generator().manual_seed(seed)) * 2 + 1


def _check(tbn, mbn, seed):
    x = _x(seed)
    with torch.no_grad():
        want = tbn(x)
    got = mbn(_img(x))
    np.testing.assert_allclose(_out(got), want.numpy(), rtol=1e-5, atol=1e-5)
    fused = mbn.eval_activation(_img(x), "relu")  # the runtime's batch norm + activation pass
    if fused is not None:
        np.testing.assert_allclose(_out(fused), torch.relu(want).numpy(), rtol=1e-5, atol=1e-5)


def test_kept_between_calls_and_renewed_on_every_change():
    tbn, mbn = _pair(2, 0.1)
    tbn.eval(), mbn.eval()
    _check(tbn, mbn, 0)
    first = mbn._alpha_beta()
    assert mbn._alpha_beta()[0] is first[0]  # kept: a second call builds no op
    _check(tbn, mbn, 1)

    # a training step moves the running statistics (new arrays)
    tbn.train(), mbn.train()
    x = _x(2)
    tbn(x), mbn(_img(x))
    tbn.eval(), mbn.eval()
    _check(tbn, mbn, 3)
    assert mbn._alpha_beta()[0] is not first[0]

    # update / assignment / load_weights / eps
    with torch.no_grad():
        tbn.running_var.mul_(3.0)
        tbn.weight.add_(0.25)
    mbn.update({"running_var": _vec(tbn.running_var.clone())})
    mbn.weight = _vec(tbn.weight.detach().clone())
    _check(tbn, mbn, 4)
    with torch.no_grad():
        tbn.bias.sub_(1.0)
        tbn.running_mean.add_(0.5)
    mbn.load_weights([("bias", _vec(tbn.bias.detach().clone())),
                      ("running_mean", _vec(tbn.running_mean.clone()))], strict=False)
    _check(tbn, mbn, 5)
    tbn.eps = mbn.eps = 0.5
    _check(tbn, mbn, 6)


def test_gradients_of_a_frozen_eval_norm_twice():
    """Fine-tuning with the norm in eval mode: the gradient call's copies of weight and bias are not the kept ones,
    so the affine is rebuilt from them and the gradients are torch's, on every step."""
    tbn, mbn = _pair(2, 0.1)
    tbn.eval(), mbn.eval()
    mbn(_img(_x(0)))  # keep an affine from the tree's own arrays first
    for step in range(2):
        x = _x(10 + step)
        tbn.zero_grad()
        (tbn(x) ** 2).sum().backward()
        loss_and_grad = nn.value_and_grad(mbn, lambda v: (mbn(v) ** 2).sum())
        _, grads = loss_and_grad(_img(x))
        np.testing.assert_allclose(np.array(grads["weight"]), tbn.weight.grad.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.array(grads["bias"]), tbn.bias.grad.numpy(), rtol=1e-4, atol=1e-4)
        _check(tbn, mbn, 20 + step)


def test_not_kept_while_exporting(monkeypatch):
    tbn, mbn = _pair(2, 0.1)
    mbn.eval()
    monkeypatch.setattr(_export, "active", lambda: True)
    mbn._alpha_beta()
    assert "_alpha_beta_kept" not in mbn.__dict__
    monkeypatch.undo()
    mbn._alpha_beta()
    assert "_alpha_beta_kept" in mbn.__dict__
    assert "_alpha_beta_kept" not in dict(mbn) and "_alpha_beta_kept" not in str(mbn.parameters())


def test_compiled_forward_sees_new_statistics():
    """``mx.compile`` with the module's state as its inputs: a new running variance after compiling is used."""
    tbn, mbn = _pair(2, 0.1)
    tbn.eval(), mbn.eval()
    step = mx.compile(lambda v: mbn(v), inputs=mbn.state)
    x = _x(30)
    np.testing.assert_allclose(_out(step(_img(x))), tbn(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        tbn.running_var.mul_(4.0)
    mbn.running_var = _vec(tbn.running_var.clone())
    np.testing.assert_allclose(_out(step(_img(x))), tbn(x).detach().numpy(), rtol=1e-5, atol=1e-5)
