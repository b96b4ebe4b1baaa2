"""Weighted layers in training mode compute their parameter gradients as soon as their cotangent is
(``layers/_grad_order.py``): the same gradients, bit for bit, as the ungated call; a chain's backward peak bounded
near torch's (MLX's depth-first order held every layer's cotangent until the walk came back); eval mode, frozen
parameters and export build no gate; second derivatives (a gradient penalty) still match torch."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
import torch

from porter.layers import Conv2d, Conv3d, ConvTranspose2d, Linear, _grad_order
from porter.layers.conv_weights import torch_conv_weight_to_mlx


def _chain(n, factory):
    model = nn.Sequential(*[factory() for _ in range(n)])
    model.train()
    mx.eval(model.parameters())
    return model


def _grads(model, x, gate: bool, monkeypatch):
    if not gate:
        monkeypatch.setattr(_grad_order, "weights_first", lambda m, x, w, b=None: (x, w, b))
    g = nn.value_and_grad(model, lambda m, x: (m(x) * x).sum())(model, x)[1]
    mx.eval(g)
    monkeypatch.undo()
    return g


@pytest.mark.parametrize("factory,shape", [
    (lambda: Conv2d(8, 8, 3, padding=1), (2, 9, 7, 8)),
    (lambda: Conv3d(8, 8, 3, padding=1, bias=False), (2, 3, 5, 6, 8)),
    (lambda: ConvTranspose2d(8, 8, 3, padding=1), (2, 6, 5, 8)),
    (lambda: Linear(8, 8), (3, 4, 8)),
])
def test_same_gradients_bit_for_bit(factory, shape, monkeypatch):
    model = _chain(3, factory)
    x = mx.random.normal(shape, key=mx.random.key(0))
    gated, plain = _grads(model, x, True, monkeypatch), _grads(model, x, False, monkeypatch)
    for (_, a), (_, b) in zip(nn.utils.tree_flatten(gated), nn.utils.tree_flatten(plain)):
        np.testing.assert_array_equal(np.array(a), np.array(b))


@pytest.mark.native_only  # tests/layers/conftest.py: MLX's own 3-d conv gradient (PORTER_NATIVE=0) peaks ~90x
def test_conv_chain_backward_peak(monkeypatch):
    """Four 3-d convs on a 6 MiB activation: measured 7.9 input sizes ungated (every cotangent held until the
    walk came back), 6.3 gated (the three saved inputs and about three transients). The bound is on the gated
    peak (MLX's own order for the ungated one varies between machines)."""
    model = _chain(4, lambda: Conv3d(32, 32, 3, padding=1, bias=False))
    x = mx.random.normal((2, 8, 28, 28, 32), key=mx.random.key(1))
    mx.eval(x)

    def peak(gate):
        _grads(model, x, gate, monkeypatch)  # warm-up
        mx.synchronize()
        base = mx.get_active_memory()
        mx.reset_peak_memory()
        _grads(model, x, gate, monkeypatch)
        return (mx.get_peak_memory() - base) / x.nbytes

    gated = peak(True)
    assert gated <= 6.8, (gated, peak(False))


def test_no_gate_in_eval_frozen_or_export():
    calls = []
    original = _grad_order._gate
    try:
        _grad_order._gate = lambda xs, params: calls.append(len(xs) + len(params)) or original(xs, params)
        layer = Linear(4, 3)
        x = mx.ones((2, 4))
        layer.eval()
        layer(x)
        assert calls == []
        layer.train()
        layer.freeze()
        layer(x)
        assert calls == []
        layer.unfreeze(keys=["bias"])
        layer(x)
        assert calls == [2]  # the input and the bias only
        layer.unfreeze()
        layer(x)
        assert calls == [2, 3]
    finally:
        _grad_order._gate = original


def test_second_derivative_matches_torch():
    """A gradient penalty (WGAN-GP): the input gradient's norm differentiated w.r.t. the weights, through gated
    convs in training mode, against torch's double backward."""
    torch.manual_seed(0)
    tconvs = [torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(2)]
    xt = torch.randn(2, 4, 6, 5, requires_grad=True)
    out = torch.tanh(tconvs[1](torch.tanh(tconvs[0](xt)))).sum()
    (gx,) = torch.autograd.grad(out, xt, create_graph=True)
    gx.square().sum().backward()

    convs = [Conv2d(4, 4, 3, padding=1) for _ in range(2)]
    for c, t in zip(convs, tconvs):
        c.weight = mx.array(torch_conv_weight_to_mlx(t.weight.detach().numpy()))
        c.bias = mx.array(t.bias.detach().numpy())
        c.train()
    model = nn.Sequential(convs[0], nn.Tanh(), convs[1], nn.Tanh())
    x = mx.array(xt.detach().permute(0, 2, 3, 1).numpy())

    def penalty(params):
        model.update(params)
        gx = mx.grad(lambda x: model(x).sum())(x)
        return gx.square().sum()

    grads = mx.grad(penalty)(model.trainable_parameters())
    for i, t in enumerate(tconvs):
        got = np.array(grads["layers"][2 * i]["weight"])
        np.testing.assert_allclose(got, torch_conv_weight_to_mlx(t.weight.grad.numpy()), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.array(grads["layers"][2 * i]["bias"]), t.bias.grad.numpy(), rtol=1e-4,
                                   atol=1e-5)


def test_compiled_and_vmapped_training_steps(monkeypatch):
    """A compiled training step and per-example gradients (vmap of grad) through gated layers: the values of the
    ungated layers'."""
    model = nn.Sequential(Conv2d(3, 4, 3, padding=1), nn.ReLU(), Linear(4, 2))
    model.train()
    mx.eval(model.parameters())
    x = mx.random.normal((2, 5, 5, 3), key=mx.random.key(3))

    def loss(m, x):
        return m(x).square().mean()

    def step():
        return nn.value_and_grad(model, loss)(model, x)

    monkeypatch.setattr(_grad_order, "weights_first", lambda m, x, w, b=None: (x, w, b))
    reference = step()
    mx.eval(reference)
    monkeypatch.undo()
    compiled = mx.compile(lambda x: nn.value_and_grad(model, loss)(model, x))(x)
    mx.eval(compiled)
    for (_, a), (_, b) in zip(nn.utils.tree_flatten(compiled), nn.utils.tree_flatten(reference)):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-7)

    lin = Linear(3, 2)
    lin.train()
    xs = mx.random.normal((4, 3), key=mx.random.key(4))

    def per_example(x):
        def f(w):
            lin.update({"weight": w})
            return lin(x).square().sum()

        return mx.grad(f)(lin.weight)

    got = mx.vmap(per_example)(xs)
    w, b = np.array(lin.weight), np.array(lin.bias)
    for i in range(4):
        xi = np.array(xs[i])
        expected = 2 * np.outer(w @ xi + b, xi)
        np.testing.assert_allclose(np.array(got[i]), expected, rtol=1e-5, atol=1e-6)
