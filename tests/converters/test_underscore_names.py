"""Torch names with a leading underscore (``_conv_stem.weight``, EfficientNet-PyTorch's naming) are ordinary
parameters of the port: MLX's ``Module`` treats ``_``-keys as private, Porter's containers do not.

Torch is the oracle: every comparison runs the torch model on the same data in the test.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import mlx.optimizers as optim
import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten
from torch import nn

import porter
from porter.converters.tree import RESERVED_KEYS


class _Block(nn.Module):
    """EfficientNet-PyTorch's MBConv naming: every child starts with an underscore."""

    def __init__(self, c):
        super().__init__()
        self._depthwise_conv = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
        self._bn1 = nn.BatchNorm2d(c)
        self._se_reduce = nn.Conv2d(c, 4, 1)
        self._se_expand = nn.Conv2d(4, c, 1)
        self._gain = nn.Parameter(torch.randn(c, 1, 1))        # an unmapped parameter in a Submodule
        self.register_buffer("_mask", torch.rand(c, 1, 1) > 0.3)  # and a buffer

    def forward(self, x):
        y = torch.nn.functional.silu(self._bn1(self._depthwise_conv(x)))
        s = torch.sigmoid(self._se_expand(torch.nn.functional.silu(self._se_reduce(y.mean((2, 3), keepdim=True)))))
        return x + y * s * self._gain * self._mask


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self._conv_stem = nn.Conv2d(3, 8, 3, stride=2, bias=False)
        self._bn0 = nn.BatchNorm2d(8)
        self._blocks = nn.ModuleList([_Block(8), _Block(8)])
        self._fc = nn.Linear(8, 5)
        self._scale = nn.Parameter(torch.randn(5))

    def forward(self, x):
        x = self._bn0(self._conv_stem(x))
        for block in self._blocks:
            x = block(x)
        return self._fc(x.mean((2, 3))) * self._scale


def _model():
    torch.manual_seed(0)
    model = _Net()
    with torch.no_grad():  # batch norm's ones/zeros re-randomised so its affine and statistics are exercised
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5), m.bias.normal_(), m.running_mean.normal_(), m.running_var.uniform_(0.5, 2)
    return model.eval()


def _nhwc(x):
    return mx.array(np.moveaxis(x.numpy(), 1, -1))


@pytest.fixture(scope="module")
def ported():
    model = _model()
    return model, porter.convert(model, (torch.randn(2, 3, 17, 19),))


def test_underscore_names_are_parameters(ported):
    model, port = ported
    assert {k for k, _ in tree_flatten(port.parameters())} == set(model.state_dict())
    assert {k for k, _ in tree_flatten(port.trainable_parameters())} == {n for n, _ in model.named_parameters()}


@pytest.mark.parametrize("shape", [(2, 3, 17, 19), (1, 3, 24, 24)])
def test_forward_matches_torch(ported, shape):
    model, port = ported
    x = torch.randn(*shape)
    np.testing.assert_allclose(np.array(port(_nhwc(x))), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_gradients_reach_underscore_parameters(ported):
    model, port = ported
    x = torch.randn(2, 3, 17, 19)
    model.zero_grad()
    model(x).square().sum().backward()
    _, grads = mnn.value_and_grad(port, lambda m: m(_nhwc(x)).square().sum())(port)
    grads = dict(tree_flatten(grads))
    for name, p in model.named_parameters():
        g = np.array(grads[name])
        want = p.grad.numpy()
        if g.ndim == 4:  # conv weights are (O, kH, kW, I) in MLX
            g = np.moveaxis(g, -1, 1)
        np.testing.assert_allclose(g, want, rtol=2e-3, atol=1e-4, err_msg=name)


def test_optimizer_step_moves_underscore_parameters():
    model = _model()
    port = porter.convert(model, (torch.randn(2, 3, 17, 19),))
    before = np.array(port["_scale"])
    opt = optim.SGD(learning_rate=0.1)
    _, grads = mnn.value_and_grad(port, lambda m: m(_nhwc(torch.randn(2, 3, 17, 19))).sum())(port)
    opt.update(port, grads)
    assert not np.array_equal(np.array(port["_scale"]), before)
    assert not np.array_equal(np.array(port["_blocks"][0]["_gain"]), np.array(model._blocks[0]._gain.detach()))


def test_cast_and_freeze_reach_underscore_parameters():
    model = _model()
    port = porter.convert(model, (torch.randn(2, 3, 17, 19),))
    port.apply(lambda a: a.astype(mx.float16) if a.dtype == mx.float32 else a)
    floats = {k: a.dtype for k, a in tree_flatten(port.parameters()) if mx.issubdtype(a.dtype, mx.floating)}
    assert "_blocks.1._gain" in floats and set(floats.values()) == {mx.float16}
    port.freeze()
    assert tree_flatten(port.trainable_parameters()) == []


def test_save_load_round_trip(ported, tmp_path):
    model, port = ported
    porter.save(port, tmp_path / "m")
    loaded = porter.load(tmp_path / "m")
    x = torch.randn(1, 3, 24, 24)
    np.testing.assert_allclose(np.array(loaded(_nhwc(x))), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert {k for k, _ in tree_flatten(loaded.trainable_parameters())} == {n for n, _ in model.named_parameters()}


@pytest.mark.parametrize("name", sorted(RESERVED_KEYS))
def test_names_mlx_keeps_for_itself_are_refused(name):
    model = nn.Sequential()
    model.add_module(name, nn.Linear(4, 4))
    with pytest.raises(ValueError, match=name):
        porter.convert(model.eval(), (torch.randn(2, 4),))
