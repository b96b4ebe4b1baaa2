"""``porter.validate`` of a float16/bfloat16 port: compared with the float32 torch model, per module, under a bar
derived from torch's own error in that dtype; the report names the module that loses the most."""

import json

import mlx.core as mx
import pytest
import torch
from torch import nn

import porter
from tests.models import REGISTRY, make_inputs


def _resnet():
    spec = REGISTRY["resnet_basic"]
    return spec.builder(0), make_inputs(spec.inputs)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_port_passes_and_reports_per_module(dtype):
    model, xs = _resnet()
    report = porter.validate(model, porter.convert(model, xs, dtype=dtype))
    assert report.ok, str(report)
    p = report.precision
    assert p["dtype"] == dtype and p["against"] == "float32" and p["torch_in_dtype"]
    names = [m["name"] for m in report.runs[0]["modules"]]
    assert [m["name"] for m in p["modules"]] == names and len(names) > 20
    assert p["loses_most"]["name"] in names and p["loses_most"]["step"] > 0
    for row in report.runs[0]["modules"]:  # each row carries torch's own half error and the bar derived from it
        assert row["bar"] >= 4.0 * row["torch_half_max_abs"] and row["max_abs"] <= row["bar"]
    # the float32 bar alone would fail the port: half precision costs something, and the report shows it
    assert max(row["max_rel"] for row in report.runs[0]["outputs"]) > 1e-4
    summary = report.summary()
    assert summary["dtype"] == dtype and summary["loses_most"] == p["loses_most"]["name"]
    assert f"loses the most: {p['loses_most']['name']}" in str(report)
    json.loads(report.to_json())


def test_a_broken_half_port_fails_and_names_the_module():
    model, xs = _resnet()
    ported = porter.convert(model, xs, dtype="float16")
    conv = ported.layer2[0].conv2
    conv.weight = conv.weight * 1.05  # 5%: far beyond float16's rounding
    report = porter.validate(model, ported)
    assert not report.ok
    assert report.first_divergence["name"] == "layer2.0.conv2"
    assert report.precision["loses_most"]["name"] == "layer2.0.conv2"


class FloatConstant(nn.Module):
    """``y @ (arange(64) / 64)``: the constant is float32 even in a half model, so torch cannot run it in half."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x) @ (torch.arange(64.0).reshape(8, 8) / 64 - 0.5)


def test_fallback_bar_when_torch_cannot_run_in_half():
    torch.manual_seed(0)
    model = FloatConstant().eval()
    x = torch.randn(3, 8)
    ported = porter.convert(model, x, dtype="bfloat16")
    assert ported(mx.array(x.numpy())).dtype == mx.bfloat16  # the port casts the constant's matmul down
    report = porter.validate(model, ported)
    assert report.ok, str(report)
    assert report.precision["torch_in_dtype"] is False and report.precision["fallback_rtol"] == 8e-2
    assert any("torch cannot run the model in bfloat16" in n for n in report.notes)
    assert "torch could not run the model in bfloat16" in str(report)


def test_float32_port_has_no_precision_section():
    model, xs = _resnet()
    report = porter.validate(model, porter.convert(model, xs))
    assert report.ok and report.precision is None and "dtype" not in report.summary()
