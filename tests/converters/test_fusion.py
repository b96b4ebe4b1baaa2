"""Eval-time batch norm + activation fusion in the runtime (converters/fusion.py, BatchNorm.eval_activation):
torch is the oracle for values and gradients; the fused call must equal the unfused one (trace runs unfused); no
fusion where the batch norm has a second reader, the activation has other arguments, the model trains, or the user
replaced a layer; 16-bit inputs as torch (activation of the stored output).
"""

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.compare import assert_close
from porter.layers import BatchNorm, _native

ACTS = {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "hardswish": nn.Hardswish}


def _randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):  # stats and affine away from 0/1, so every term counts
            m.running_mean.copy_(torch.rand(m.num_features, generator=g) * 4 - 2)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 2 + 0.3)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) * 2 - 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=g) * 4 - 2)
    return model.eval()


class Block(nn.Module):
    def __init__(self, act: str, second_reader: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = ACTS[act]() if act in ACTS else nn.Hardtanh(0.0, 5.0)
        self.bn2 = nn.BatchNorm2d(8)
        self.second_reader = second_reader

    def forward(self, x):
        y = self.bn(self.conv(x))
        z = self.act(y)
        z = torch.relu(self.bn2(z))  # a functional relu after a batch norm: a unary node
        return z + y if self.second_reader else z


def _ported(model, x):
    ported = porter.convert(model, (x,))
    return ported, mx.array(x.permute(0, 2, 3, 1).numpy())


def _torch_nhwc(t):
    return t.detach().permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("shape", [(1, 3, 9, 7), (3, 3, 6, 10)])
def test_fused_pairs_match_torch_and_the_unfused_run(act, shape):
    model = _randomize(Block(act), seed=len(act))
    x = torch.randn(*shape) * 3
    ported, xm = _ported(model, x)
    assert sorted(ported._program.fusable.values()) == sorted([act, "relu"])  # Activation layer + unary relu
    assert _native.active()
    out = ported(xm)
    assert_close(np.array(out), _torch_nhwc(model(x)))
    traced, _ = ported.trace(xm)  # records module outputs: runs every node
    np.testing.assert_array_equal(np.array(out), np.array(traced))


@pytest.mark.parametrize("act", ["hardswish", "relu6", "silu"])
def test_gradients_through_fused_pairs_match_torch(act):
    model = _randomize(Block(act), seed=3)
    x = torch.randn(2, 3, 6, 5) * 3
    cot = torch.randn(2, 8, 6, 5)
    tx = x.clone().requires_grad_(True)
    (model(tx) * cot).sum().backward()
    ported, xm = _ported(model, x)
    c = mx.array(_torch_nhwc(cot))

    def loss(params, a):
        ported.update(params)
        return (ported(a) * c).sum()

    grads_x = mx.grad(lambda a: (ported(a) * c).sum())(xm)
    assert_close(np.array(grads_x), _torch_nhwc(tx.grad), what="input gradient")
    params = ported.trainable_parameters()
    grads = mx.grad(loss)(params, xm)
    torch_grads = ported.torch_parameter_grads(grads)
    for name in ("bn.weight", "bn.bias", "conv.weight"):
        assert_close(np.array(torch_grads[name]), dict(model.named_parameters())[name].grad.numpy(), what=name)


def test_no_fusion_for_a_second_reader_or_other_arguments():
    x = torch.randn(2, 3, 5, 6)
    model = _randomize(Block("relu", second_reader=True))
    ported, xm = _ported(model, x)
    assert list(ported._program.fusable.values()) == ["relu"]  # bn -> act has a second reader; bn2 -> relu fuses
    assert_close(np.array(ported(xm)), _torch_nhwc(model(x)))
    model = _randomize(Block("hardtanh05"))
    ported, xm = _ported(model, x)
    assert list(ported._program.fusable.values()) == ["relu"]  # Hardtanh(0, 5) is not ReLU6
    assert_close(np.array(ported(xm)), _torch_nhwc(model(x)))


def test_training_mode_and_replaced_layers_run_unfused():
    model = _randomize(Block("hardswish"))
    x = torch.randn(4, 3, 5, 6)
    ported, xm = _ported(model, x)
    ported.act = mnn.Identity()  # the user's layer now decides
    assert_close(np.array(ported(xm)), _torch_nhwc(model.bn2(model.bn(model.conv(x))).relu()))
    ported, xm = _ported(model, x)
    ported.train()
    model.train()
    assert_close(np.array(ported(xm)), _torch_nhwc(model(x)))  # batch statistics
    assert_close(np.array(ported.bn.running_mean), model.bn.running_mean.numpy())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("act", list(ACTS))
def test_eval_activation_layer_matches_torch(dtype, act):
    tdt, mdt = {"float16": (torch.float16, mx.float16), "bfloat16": (torch.bfloat16, mx.bfloat16),
                "float32": (torch.float32, mx.float32)}[dtype]
    tbn = _randomize(nn.Sequential(nn.BatchNorm2d(5)))[0].to(tdt)  # parameters rounded to dtype, as the port's
    x = (torch.randn(2, 5, 4, 7) * 4).to(tdt)
    with torch.no_grad():
        want = ACTS[act]()(tbn(x)).to(torch.float32)
    bn = BatchNorm(5)
    bn.update({"weight": mx.array(tbn.weight.detach().float().numpy()), "bias": mx.array(tbn.bias.detach().float().numpy()),
               "running_mean": mx.array(tbn.running_mean.float().numpy()),
               "running_var": mx.array(tbn.running_var.float().numpy())})
    bn.eval()
    xm = mx.array(x.float().permute(0, 2, 3, 1).numpy()).astype(mdt)
    got = bn.eval_activation(xm, act)
    assert got is not None and got.dtype == mdt
    rtol = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6}[dtype]
    assert_close(np.array(got.astype(mx.float32)), want.permute(0, 2, 3, 1).numpy(), rtol=rtol)
    assert bn.eval_activation(xm.astype(mx.float64), act) is None  # float64 keeps the MLX ops
    assert bn.eval_activation(xm, "gelu") is None
    bn.train()
    assert bn.eval_activation(xm, act) is None


def test_native_channel_affine_names_a_bad_activation():
    with pytest.raises(ValueError, match="'activation' must be none, relu, relu6"):
        _native.channel_affine(mx.zeros((2, 3)), mx.ones(3), mx.zeros(3), activation="erf")
