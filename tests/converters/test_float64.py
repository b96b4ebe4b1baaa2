"""A float64 torch model converts to a float64 port: parameters, activations and outputs stay float64 and match
torch's float64 to 1e-12 (convolutions through porter.layers' float64 engine, batch norm off the float32 native
kernel), gradients included; float64 weights survive save/load; a cast to float64 inside a float32 model is a
float64 cast."""

import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
import torch
from tests.converter_check import assert_matches, run_ported

import porter


class DoubleConvNet(torch.nn.Module):
    """Every conv kind whose float64 MLX used to get wrong or refuse: strided + dilated, depthwise, grouped 3-d via
    1d/2d, transposed (depthwise too), with eval batch norm and ReLU between."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, stride=2, dilation=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, groups=8, padding=1, padding_mode="reflect")
        self.up = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.dw_up = torch.nn.ConvTranspose2d(4, 4, 2, stride=2, groups=4, dilation=2)
        self.c1d = torch.nn.Conv1d(4, 6, 3, stride=2, dilation=2, groups=2)
        self.fc = torch.nn.Linear(6, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = self.dw_up(self.up(self.dw(x) + 1.5))
        x = self.c1d(x.flatten(2))
        return self.fc(x.mean(dim=2))


def _double_model():
    torch.manual_seed(0)
    model = DoubleConvNet().double().eval()
    with torch.no_grad():  # running statistics away from 0 and 1 so that batch norm's arithmetic is exercised
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.5, 0.5)
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    return model


@pytest.mark.parametrize("frontend", ["export", "torchscript"])
def test_float64_model_converts_to_float64_numbers(frontend):
    model = _double_model()
    x = torch.randn(2, 3, 17, 15, dtype=torch.float64)
    ported = porter.convert(model if frontend == "export" else torch.jit.trace(model, (x,)), (x,))
    assert all(a.dtype == mx.float64 for name, a in {**ported.params, **ported.buffers}.items()
               if not name.endswith("num_batches_tracked"))
    (out,) = run_ported(ported, (x,))
    assert out.dtype == np.float64
    assert_matches(ported, model, (x,), rel=1e-12)
    assert_matches(ported, model, (torch.randn(1, 3, 20, 22, dtype=torch.float64),), rel=1e-12)  # another size


def test_float64_model_validates_with_gradients_at_1e_12():
    model = _double_model()
    x = torch.randn(2, 3, 17, 15, dtype=torch.float64)
    ported = porter.convert(model, (x,))
    report = porter.validate(model, ported, [(x,)], rtol=1e-12, atol=1e-12, grads=True)
    assert report.ok, str(report)
    assert report.grads["ok"] and len(report.grads["parameters"]) == 14, str(report)


def test_float64_weights_survive_save_and_load(tmp_path):
    model = _double_model()
    x = torch.randn(2, 3, 17, 15, dtype=torch.float64)
    porter.save(porter.convert(model, (x,)), tmp_path / "m")
    loaded = porter.load(tmp_path / "m")
    assert loaded.params["c1.weight"].dtype == mx.float64
    assert_matches(loaded, model, (x,), rel=1e-12)
    # the float64 reader (safetensors.numpy) keeps loading torch-free; a numpy float64 input stays float64
    code = ("import sys, numpy as np, porter; p = porter.load(sys.argv[1]); y = p(np.ones((1, 17, 15, 3))); "
            "assert 'torch' not in sys.modules, 'torch imported'; print(y.dtype)")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "mlx.core.float64"


class CastToDouble(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([1.0 + 1e-12, 3.0, 1.0 / 3.0], dtype=torch.float64))

    def forward(self, x):
        return (x.double() * self.scale).sum(-1) + 1e-13


def test_cast_to_float64_inside_a_float32_model_is_float64():
    model = CastToDouble()
    x = torch.randn(4, 3)
    ported = porter.convert(model, (x,))
    (out,) = run_ported(ported, (x,))
    assert out.dtype == np.float64
    assert_matches(ported, model, (x,), rel=1e-15)


def test_float64_and_bfloat16_weights_share_one_file(tmp_path):
    """The streaming writer stores any MLX dtype (float64 beside bfloat16 too) and the reader gives them back."""
    from porter.converters.weights_io import read_tensors, write_safetensors
    from porter.converters.serialize import _read_header

    weights = {"w": mx.array(np.random.default_rng(0).normal(size=3), dtype=mx.float64),
               "extra": mx.array([1.5, -2.25]).astype(mx.bfloat16)}
    path = str(tmp_path / "model.safetensors")
    write_safetensors(path, weights)
    back = read_tensors(path, _read_header(path))
    assert {k: v.dtype for k, v in back.items()} == {"w": mx.float64, "extra": mx.bfloat16}
    assert all(np.array_equal(np.array(back[k].astype(mx.float64)), np.array(weights[k].astype(mx.float64)))
               for k in weights)


class ZeroDimDoubleBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(0.1, dtype=torch.float64))
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x) * self.scale - self.scale


def test_zero_dim_float64_buffer_keeps_a_float32_model_float32():
    """torch promotes a 0-dim tensor like a scalar (float32 * 0-dim float64 is float32); MLX would widen."""
    model = ZeroDimDoubleBuffer().eval()
    x = torch.randn(2, 3, 8, 9)
    ported = porter.convert(model, (x,))
    assert ported.buffers["scale"].shape == () and ported.buffers["scale"].dtype == mx.float64
    (out,) = run_ported(ported, (x,))
    assert out.dtype == np.float32
    assert_matches(ported, model, (x,), rel=1e-5)


class Resizes64(torch.nn.Module):
    def forward(self, x):
        f = torch.nn.functional.interpolate
        return [f(x, size=(5, 7), mode=m, align_corners=a) for m in ("bilinear", "bicubic") for a in (False, True)] + [
            f(x, scale_factor=0.37, mode="bicubic"), f(x, size=(30, 29), mode="bicubic")]


def test_float64_interpolation_is_float64_precise():
    """Bicubic ``interpolate`` on float64 takes its step, offsets and weights in float64 (torch's opmath_t): 1e-13
    where the float32 ones were 2e-6 off; bilinear (porter.layers) alongside. Two input sizes, fixed output sizes."""
    model = Resizes64().eval()
    ported = porter.convert(model, torch.randn(2, 3, 17, 12, dtype=torch.float64), io_layout="torch")
    for x in (torch.randn(2, 3, 17, 12, dtype=torch.float64), torch.randn(1, 3, 23, 9, dtype=torch.float64)):
        for got, want in zip(run_ported(ported, (x,)), model(x)):
            assert got.dtype == np.float64
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-13, atol=1e-13)
