"""Eval-time batch norm + residual add (+ ReLU) fusion in the runtime (converters/fusion.py batch_norm_residual_runs,
BatchNorm.eval_residual): torch is the oracle for values and gradients; the fused call equals the unfused one (trace
runs unfused); no fusion where the batch norm's output or the sum has a second reader, the skip value broadcasts, the
model trains, or the user replaced a layer; 16-bit inputs as torch (the batch norm's and the sum's outputs rounded)."""

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.compare import assert_close
from porter.layers import BatchNorm, _native
from tests.converters.test_fusion import _ported, _randomize
from tests.converters.test_fusion import _torch_nhwc as _nhwc


class Bottleneck(nn.Module):
    """torchvision's block end: ``out = bn3(conv3(..)); out += identity (downsample or x); relu(out)``."""

    def __init__(self, downsample: bool, relu: bool = True, second_reader: bool = False):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.conv3 = nn.Conv2d(8, 16, 1)
        self.bn3 = nn.BatchNorm2d(16)
        self.downsample = nn.Sequential(nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16)) if downsample else None
        self.expand = None if downsample else nn.Conv2d(8, 16, 1)
        self.with_relu, self.second_reader = relu, second_reader

    def forward(self, x):
        identity = self.downsample(x) if self.downsample is not None else self.expand(x)
        out = self.bn3(self.conv3(self.relu(self.bn1(self.conv1(x)))))
        out = out + identity
        total = out
        if self.with_relu:  # (not in place where the sum is read again: torch's in-place ReLU would change it)
            out = torch.relu(out) if self.second_reader else self.relu(out)
        return out + total if self.second_reader else out


class _Spy:
    def __init__(self, monkeypatch):
        self.calls = []
        real = BatchNorm.eval_residual

        def spy(layer, x, res, activation):
            out = real(layer, x, res, activation)
            self.calls.append((activation, out is not None))
            return out

        monkeypatch.setattr(BatchNorm, "eval_residual", spy)


@pytest.mark.parametrize("downsample,relu", [(True, True), (False, True), (False, False)])
@pytest.mark.parametrize("shape", [(1, 8, 9, 7), (3, 8, 6, 10)])
def test_fused_runs_match_torch_and_the_unfused_run(monkeypatch, downsample, relu, shape):
    spy = _Spy(monkeypatch)
    model = _randomize(Bottleneck(downsample, relu), seed=shape[0])
    x = torch.randn(*shape) * 3
    ported, xm = _ported(model, x)
    spy.calls.clear()  # the conversion's own check ran the port
    runs = list(ported._program.residual.values())
    assert [r[1] for r in runs] == ["relu" if relu else None]
    out = ported(xm)
    assert_close(np.array(out), _nhwc(model(x)))
    assert spy.calls == [("relu" if relu else None, _native.active())]
    traced, _ = ported.trace(xm)  # records module outputs: runs every node
    np.testing.assert_allclose(np.array(out), np.array(traced), rtol=1e-6, atol=1e-6)


def test_gradients_through_a_fused_run_match_torch(monkeypatch):
    """An eval-mode port differentiated (input saliency, adversarial steps, fine-tuning with frozen statistics)."""
    spy = _Spy(monkeypatch)
    model = _randomize(Bottleneck(True), seed=3)
    x = torch.randn(2, 8, 6, 5) * 3
    cot = torch.randn(2, 16, 6, 5)
    tx = x.clone().requires_grad_(True)
    (model(tx) * cot).sum().backward()
    ported, xm = _ported(model, x)
    spy.calls.clear()
    c = mx.array(_nhwc(cot))
    grads_x = mx.grad(lambda a: (ported(a) * c).sum())(xm)
    assert_close(np.array(grads_x), _nhwc(tx.grad), what="input gradient")

    def loss(params, a):
        ported.update(params)
        return (ported(a) * c).sum()

    grads = ported.torch_parameter_grads(mx.grad(loss)(ported.trainable_parameters(), xm))
    for name in ("bn3.weight", "bn3.bias", "conv3.weight", "downsample.1.weight", "downsample.0.weight",
                 "conv1.weight"):
        assert_close(np.array(grads[name]), dict(model.named_parameters())[name].grad.numpy(), what=name)
    assert spy.calls and all(fused for _, fused in spy.calls) == _native.active()


def test_no_fusion_for_second_readers_training_and_replaced_layers(monkeypatch):
    x = torch.randn(2, 8, 5, 6)
    model = _randomize(Bottleneck(True, second_reader=True))
    ported, xm = _ported(model, x)
    assert [r[1] for r in ported._program.residual.values()] == [None]  # the sum has a second reader: no ReLU
    assert_close(np.array(ported(xm)), _nhwc(model(x)))
    spy = _Spy(monkeypatch)
    model = _randomize(Bottleneck(True))
    ported, xm = _ported(model, x)
    spy.calls.clear()
    ported.relu = mnn.Identity()  # the user's layer now decides: the run is not fused, Identity runs
    with torch.no_grad():
        ident = model.downsample(x)
        want = model.bn3(model.conv3(model.bn1(model.conv1(x)))) + ident
    assert_close(np.array(ported(xm)), _nhwc(want))
    assert spy.calls == []
    ported, xm = _ported(model, x)
    ported.train()
    model.train()
    assert_close(np.array(ported(xm)), _nhwc(model(x)))  # batch statistics: eval_residual declines
    assert all(not fused for _, fused in spy.calls)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("relu", [True, False])
def test_eval_residual_layer_matches_torch(dtype, relu):
    tdt, mdt = {"float16": (torch.float16, mx.float16), "bfloat16": (torch.bfloat16, mx.bfloat16),
                "float32": (torch.float32, mx.float32)}[dtype]
    tbn = _randomize(nn.Sequential(nn.BatchNorm2d(5)))[0].to(tdt)  # parameters rounded to dtype, as the port's
    x = (torch.randn(2, 5, 4, 7) * 4).to(tdt)
    r = (torch.randn(2, 5, 4, 7) * 4).to(tdt)
    with torch.no_grad():
        want = tbn(x) + r
        want = (torch.relu(want) if relu else want).to(torch.float32)
    bn = BatchNorm(5)
    bn.update({"weight": mx.array(tbn.weight.detach().float().numpy()), "bias": mx.array(tbn.bias.detach().float().numpy()),
               "running_mean": mx.array(tbn.running_mean.float().numpy()),
               "running_var": mx.array(tbn.running_var.float().numpy())})
    bn.eval()
    xm = mx.array(x.float().permute(0, 2, 3, 1).numpy()).astype(mdt)
    rm = mx.array(r.float().permute(0, 2, 3, 1).numpy()).astype(mdt)
    act = "relu" if relu else None
    got = bn.eval_residual(xm, rm, act)
    if not _native.active():
        assert got is None
        return
    assert got is not None and got.dtype == mdt
    rtol = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6}[dtype]
    assert_close(np.array(got.astype(mx.float32)), want.permute(0, 2, 3, 1).numpy(), rtol=rtol)
    assert bn.eval_residual(xm.astype(mx.float64), rm.astype(mx.float64), act) is None  # float64: MLX ops
    assert bn.eval_residual(xm, rm[:1], act) is None  # a broadcast skip value
    assert bn.eval_residual(xm, rm.astype(mx.float32) if dtype != "float32" else rm.astype(mx.float16), act) is None
    assert bn.eval_residual(xm, rm, "silu") is None
    bn.train()
    assert bn.eval_residual(xm, rm, act) is None


def test_native_op_jvp_vmap_and_checks():
    if not _native.active():
        pytest.skip("native kernels only")
    rng = np.random.default_rng(0)
    x, r = (mx.array(rng.standard_normal((3, 4, 5, 6)).astype(np.float32)) for _ in range(2))
    a, b = mx.array(rng.random(6).astype(np.float32) + 0.5), mx.array(rng.standard_normal(6).astype(np.float32))

    def ref(x, a, b, r):
        return mx.maximum(x * a + b + r, 0.0)

    def ours(x, a, b, r):
        return _native.channel_affine_residual(x, a, b, r, "relu")

    tangents = [mx.array(rng.standard_normal(t.shape).astype(np.float32)) for t in (x, a, b, r)]
    got = mx.jvp(ours, [x, a, b, r], tangents)[1][0]
    np.testing.assert_allclose(np.array(got), np.array(mx.jvp(ref, [x, a, b, r], tangents)[1][0]), atol=1e-5)
    got = mx.vmap(ours, in_axes=(1, None, None, 1))(x, a, b, r)
    np.testing.assert_allclose(np.array(got), np.array(mx.vmap(ref, in_axes=(1, None, None, 1))(x, a, b, r)),
                               atol=1e-5)
    for g, w in zip(mx.grad(lambda *t: (ours(*t) ** 2).sum(), argnums=(0, 1, 2, 3))(x, a, b, r),
                    mx.grad(lambda *t: (ref(*t) ** 2).sum(), argnums=(0, 1, 2, 3))(x, a, b, r)):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="'activation' must be none or relu"):
        _native.channel_affine_residual(x, a, b, r, "gelu")
    with pytest.raises(ValueError, match="res must have x's shape and dtype"):
        _native.channel_affine_residual(x, a, b, r[:1], "relu")
