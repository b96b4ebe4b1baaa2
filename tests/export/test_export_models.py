"""Converted models exported as .mlxfn files, run where torch and porter cannot be imported, against the port and
against torch (run in the test). Fixed-shape exports; shapeless ones are in test_export_shapeless.py."""

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

from porter.compare import RTOL
from porter.export import flatten_outputs
import porter
from porter.examples import BasicBlock, ResNet

from tests.models import REGISTRY, make_inputs
from tests.models._common import randomize_
from tests.export.mlxfn_check import assert_close, port_inputs, run_without_porter, to_torch_layout, torch_outputs


def _resnet_winograd(seed=0):
    # 16 channels at 16x16 after the stem: layer1's 3x3 convs take Porter's native Winograd kernel (>= 32 tiles)
    torch.manual_seed(seed)
    return randomize_(ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10, widths=(16, 16, 32, 32)), seed)


class Pools(nn.Module):
    """Exact ops only (max pools, nearest upsampling, a padded ceil-mode pool on an odd size): compared with atol=0."""

    def __init__(self):
        super().__init__()
        self.pool1 = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.pool2 = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool2(self.up(self.pool1(x)))


# name -> (builder, input shapes, a replacement the export must report)
CASES = {
    "resnet_winograd": (_resnet_winograd, ((1, 3, 64, 64),), "native Winograd 3x3 conv -> pure-MLX ops"),
    "mobilenet_v3": (REGISTRY["mobilenet_v3"].builder, REGISTRY["mobilenet_v3"].inputs,
                     "native depthwise conv -> pure-MLX ops"),
    "vit": (REGISTRY["vit"].builder, REGISTRY["vit"].inputs, "native gelu -> pure-MLX ops"),
    "gpt2": (REGISTRY["gpt2"].builder, REGISTRY["gpt2"].inputs, "native softmax -> pure-MLX ops"),
    "deeplabv3": (REGISTRY["deeplabv3"].builder, REGISTRY["deeplabv3"].inputs, "native relu -> pure-MLX ops"),
    "segnet_unpool": (REGISTRY["segnet_unpool"].builder, REGISTRY["segnet_unpool"].inputs,
                      "max unpool's index check, block test and custom VJP -> one scatter; out-of-range indices "
                      "write nowhere"),
    "pools": (lambda seed=0: Pools().eval(), ((2, 3, 15, 13),), "mx.contiguous -> an elementwise copy (mx.where)"),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case converted, exported and its example inputs kept: {name: (model, ported, inputs, report)}."""
    folder = tmp_path_factory.mktemp("mlxfn")
    out = {}
    for name, (build, shapes, _) in CASES.items():
        model = build(seed=0)
        inputs = make_inputs(shapes)
        if name == "pools":  # NaN, -inf and ties through every exact op
            inputs[0][0, 0, 0, :4] = float("nan")
            inputs[0][1, 2, 5:9, 3] = float("-inf")
            inputs[0][1, 1] = inputs[0][1, 1].round()
        ported = porter.convert(model, inputs, dynamic="static")  # a fixed-shape file: no need for more
        report = porter.export_function(ported, folder / f"{name}.mlxfn", port_inputs(ported, inputs))
        out[name] = (model, ported, inputs, report)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_export_reports_its_replacements(exported, name):
    from porter.layers import _native

    _, ported, inputs, report = exported[name]
    expected = CASES[name][2]
    if expected.startswith("native ") and not _native.available():  # PORTER_NATIVE=0 or no build: nothing native
        assert not any(k.startswith("native ") for k in report.replacements), report.replacements
    else:
        assert expected in report.replacements, report.replacements
    assert all(count > 0 for count in report.replacements.values())
    assert report.input_shapes == [tuple(a.shape) for a in port_inputs(ported, inputs)]
    assert not report.shapeless and report.probe_shapes == []
    assert report.max_abs_diff <= 1e-4
    assert all(f"x {what}" in str(report) for what in report.replacements)


@pytest.mark.parametrize("name", list(CASES))
def test_file_in_process_matches_the_port(exported, name):
    _, ported, inputs, report = exported[name]
    args = port_inputs(ported, inputs)
    expected = ported(*args)
    expected = [array for _, array in flatten_outputs(expected)]  # a dict output (segmentation's {"out"}) in order
    got = mx.import_function(report.path)(*args)
    assert len(got) == len(expected) == len(report.output_names)
    for i, (a, e) in enumerate(zip(got, expected)):
        assert_close(np.array(a), np.array(e), rel=0 if name == "pools" else RTOL, what=f"{name} output {i}")


def test_export_leaves_the_normal_path_alone(exported):
    """After an export the port takes the native kernels again (export mode ends with the export)."""
    from porter.layers import _native, exporting

    assert not exporting()
    if _native.available():
        assert _native.active("test")


@pytest.mark.slow
def test_files_run_without_torch_or_porter(exported, tmp_path):
    """The README promise: a process that cannot import torch or porter runs the files, with the port's and torch's
    numbers; a fixed-shape file called at another size is refused by MLX (no numbers for a size it was not built
    for)."""
    names = list(CASES)
    jobs = [(exported[n][3].path, port_inputs(exported[n][1], exported[n][2])) for n in names]
    _, resnet, _, resnet_report = exported["resnet_winograd"]
    other = make_inputs(((2, 3, 48, 48),), seed=1)
    jobs.append((resnet_report.path, port_inputs(resnet, other)))
    results = run_without_porter(jobs, tmp_path)
    for name, outputs in zip(names, results):
        model, ported, inputs, _ = exported[name]
        assert not isinstance(outputs, str), f"{name}: {outputs}"
        expected_port = ported(*port_inputs(ported, inputs))
        expected_port = [array for _, array in flatten_outputs(expected_port)]
        exact = 0 if name == "pools" else RTOL
        for i, (a, e) in enumerate(zip(outputs, expected_port)):
            assert_close(a, np.array(e), rel=exact, what=f"{name} output {i} vs the port")
        expected_torch = torch_outputs(model, inputs)
        assert len(outputs) == len(expected_torch)
        for i, (a, e) in enumerate(zip(to_torch_layout(ported, outputs), expected_torch)):
            assert_close(a, e, rel=exact, what=f"{name} output {i} vs torch")
    assert isinstance(results[-1], str) and "No imported function found which matches" in results[-1], results[-1]
