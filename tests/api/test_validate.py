"""porter.validate against a hand-written MLX port of a small torch model (independent of the converter).

The fake port follows the PortedModel contract (io_layout, input/output layouts, trace in torch layout,
torch_parameter_grads), so these tests pin validate's own behaviour: layouts, per-module divergence naming,
gradient parity, second input size, JSON.
"""

import json

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.validate import Report, parse_layout


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)  # in place: validate must snapshot bn's output before relu overwrites it
        self.pool = nn.AdaptiveAvgPool2d((2, 2))
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        feat = self.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(self.pool(feat), 1)), feat


def make_small():
    torch.manual_seed(0)
    m = Small()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 1.5)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.2, 0.2)
    return m.eval()


class FakePort(mnn.Module):
    """Hand port of :class:`Small`; ``bug`` injects one known defect."""

    def __init__(self, model: Small, io_layout: str = "mlx", bug: str = ""):
        super().__init__()
        sd = {k: mx.array(v.detach().numpy()) for k, v in model.state_dict().items() if v.dtype.is_floating_point}
        self.params = {
            "conv.weight": sd["conv.weight"].transpose(0, 2, 3, 1),  # OIHW -> OHWI
            "conv.bias": sd["conv.bias"], "bn.weight": sd["bn.weight"], "bn.bias": sd["bn.bias"],
            "fc.weight": sd["fc.weight"], "fc.bias": sd["fc.bias"],
        }
        self.buffers = {"bn.running_mean": sd["bn.running_mean"], "bn.running_var": sd["bn.running_var"]}
        self.freeze(keys=["buffers"], strict=False)
        self._io = io_layout
        self._bug = bug

    @property
    def io_layout(self):
        return self._io

    @property
    def input_layouts(self):
        return ["NCHW->NHWC" if self._io == "mlx" else "as-is"]

    @property
    def output_layouts(self):
        return ["as-is", "NCHW->NHWC" if self._io == "mlx" else "as-is"]

    num_transposes = 1

    @property
    def graph(self):
        return {"inputs": [{"meta": {"kind": "tensor", "shape": [2, 3, 8, 8], "hint": [2, 3, 8, 8],
                                     "dtype": "float32"}}]}

    def _forward(self, x, record):
        p, b = self.params, self.buffers
        if self._io == "torch":
            x = x.transpose(0, 2, 3, 1)
        y = mx.conv2d(x, p["conv.weight"], padding=1) + p["conv.bias"]
        record["conv"] = y
        y = (y - b["bn.running_mean"]) * mx.rsqrt(b["bn.running_var"] + 1e-5) * p["bn.weight"] + p["bn.bias"]
        if self._bug == "stop_gradient":
            y = mx.stop_gradient(y)
        record["bn"] = y
        feat = mx.maximum(y, 0)
        record["relu"] = feat
        n, h, w, c = feat.shape
        # adaptive 2x2 average: window o covers [floor(o*L/2), ceil((o+1)*L/2)) in each dim
        rows = [(o * h // 2, -(-(o + 1) * h // 2)) for o in range(2)]
        cols = [(o * w // 2, -(-(o + 1) * w // 2)) for o in range(2)]
        pooled = mx.stack([mx.stack([feat[:, r0:r1, c0:c1].mean(axis=(1, 2)) for c0, c1 in cols], axis=1)
                           for r0, r1 in rows], axis=1)
        record["pool"] = pooled
        if self._bug == "flatten_nhwc":
            flat = pooled.reshape(n, -1)  # the classic bug: channels-last element order
        else:
            flat = pooled.transpose(0, 3, 1, 2).reshape(n, -1)
        logits = flat @ p["fc.weight"].T + p["fc.bias"]
        record["fc"] = logits
        if self._io == "torch":
            feat = feat.transpose(0, 3, 1, 2)
        return logits, feat

    def __call__(self, x):
        return self._forward(x, {})

    def trace(self, x):
        record = {}
        out = self._forward(x, record)
        to_torch = {k: (v.transpose(0, 3, 1, 2) if v.ndim == 4 else v) for k, v in record.items()}
        return out, to_torch

    def torch_parameter_grads(self, grads_tree):
        g = grads_tree["params"]
        out = {k: np.array(v) for k, v in g.items()}
        out["conv.weight"] = np.array(g["conv.weight"].transpose(0, 3, 1, 2))
        return out


def perturb(port: FakePort, name: str, factor: float = 1.01) -> None:
    port.params[name] = port.params[name] * factor


@pytest.mark.parametrize("io_layout", ["mlx", "torch"])
def test_correct_port_passes_at_two_sizes_with_grads(io_layout):
    model = make_small()
    report = porter.validate(model, FakePort(model, io_layout), grads=True)
    assert isinstance(report, Report)
    assert report.ok, str(report)
    assert report.first_divergence is None
    assert len(report.runs) == 2  # example size from the port's graph meta, plus a second size torch accepts
    assert report.runs[0]["input_shapes"] == [[2, 3, 8, 8]]
    assert report.runs[1]["input_shapes"] == [[1, 3, 11, 11]]  # other batch, odd spatial size
    names = [m["name"] for m in report.runs[0]["modules"]]
    assert names == ["conv", "bn", "relu", "pool", "fc"]  # torch execution order
    assert report.grads["ok"]
    assert {r["name"] for r in report.grads["parameters"]} == {"conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                                               "fc.weight", "fc.bias"}
    assert len(report.grads["inputs"]) == 1
    assert "PASS" in str(report)


@pytest.mark.parametrize("param, module, mtype", [
    ("conv.weight", "conv", "Conv2d"), ("bn.weight", "bn", "BatchNorm2d"), ("fc.bias", "fc", "Linear"),
])
def test_perturbed_weight_names_first_diverging_module(param, module, mtype):
    model = make_small()
    port = FakePort(model)
    perturb(port, param)
    report = porter.validate(model, port)
    assert not report.ok
    fd = report.first_divergence
    assert fd["name"] == module and fd["type"] == mtype
    assert fd["max_abs"] > 0 and fd["max_rel"] > 1e-4
    text = str(report)
    assert "FAIL" in text and f"first divergence: {module} ({mtype})" in text


def test_inplace_relu_does_not_hide_bn_output():
    # bn's output is overwritten in place by ReLU(inplace=True); without a snapshot, torch's "bn" output would
    # equal relu's and a correct port would appear to diverge at bn.
    model = make_small()
    report = porter.validate(model, FakePort(model))
    bn = next(m for m in report.runs[0]["modules"] if m["name"] == "bn")
    assert bn["ok"] and bn["max_abs"] < 1e-5


def test_flatten_layout_bug_is_found_at_fc():
    model = make_small()
    report = porter.validate(model, FakePort(model, bug="flatten_nhwc"))
    assert not report.ok
    assert report.first_divergence["name"] == "fc"
    # The feature-map output (second output) is still right: only logits are wrong.
    rows = report.runs[0]["outputs"]
    assert not rows[0]["ok"] and rows[1]["ok"]


def test_gradient_parity_catches_a_broken_backward():
    model = make_small()
    report = porter.validate(model, FakePort(model, bug="stop_gradient"), grads=True)
    assert all(row["ok"] for run in report.runs for row in run["outputs"])  # forward is right
    assert not report.ok and not report.grads["ok"]
    bad = {r["name"] for r in report.grads["parameters"] if not r["ok"]}
    assert bad == {"conv.weight", "conv.bias", "bn.weight", "bn.bias"}
    assert not report.grads["inputs"][0]["ok"]


def test_model_grads_left_untouched():
    model = make_small()
    porter.validate(model, FakePort(model), grads=True)
    assert all(p.grad is None for p in model.parameters())


def test_explicit_inputs_and_json(tmp_path):
    model = make_small()
    xs = [(torch.randn(1, 3, 6, 6),), (torch.randn(3, 3, 10, 4),)]
    report = porter.validate(model, FakePort(model), xs)
    assert [r["input_shapes"] for r in report.runs] == [[[1, 3, 6, 6]], [[3, 3, 10, 4]]]
    path = tmp_path / "report.json"
    text = report.to_json(str(path))
    data = json.loads(path.read_text())
    assert data == json.loads(text)
    assert data["ok"] is True and data["first_divergence"] is None
    assert data["runs"][0]["outputs"][1]["shape"] == [1, 4, 6, 6]
    summary = report.summary()
    assert summary["ok"] and summary["max_rel_error"] < 1e-5


def test_report_json_encodes_infinite_errors():
    model = make_small()

    class WrongShape(FakePort):
        def __call__(self, x):
            logits, feat = super().__call__(x)
            return logits[:, :4], feat

        def trace(self, x):
            return self(x), {}

    report = porter.validate(model, WrongShape(model), [(torch.randn(2, 3, 8, 8),)])
    row = report.runs[0]["outputs"][0]
    assert not row["ok"] and row["note"] == "shape differs"
    assert json.loads(report.to_json())["runs"][0]["outputs"][0]["max_abs"] == "inf"
    assert "no trace" not in str(report)


def test_single_size_when_torch_rejects_others():
    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3 * 8 * 8, 5)

        def forward(self, x):
            return self.fc(x.flatten(1))

    class FixedPort(mnn.Module):
        def __init__(self, m):
            super().__init__()
            self.params = {"fc.weight": mx.array(m.fc.weight.detach().numpy()),
                           "fc.bias": mx.array(m.fc.bias.detach().numpy())}
            self.io_layout, self.input_layouts, self.output_layouts = "torch", ["as-is"], ["as-is"]

        def __call__(self, x):
            return x.reshape(x.shape[0], -1) @ self.params["fc.weight"].T + self.params["fc.bias"]

    torch.manual_seed(0)
    model = Fixed().eval()
    report = porter.validate(model, FixedPort(model), example_inputs=torch.randn(2, 3, 8, 8))
    assert report.ok
    # spatial sizes are rejected by torch; the batch-only variant is accepted
    assert [r["input_shapes"] for r in report.runs] == [[[2, 3, 8, 8]], [[1, 3, 8, 8]]]
    assert any("torch rejects" in n for n in report.notes)
    assert any("no trace()" in n for n in report.notes)


def test_exact_compare_for_integer_outputs():
    from porter.validate import _compare

    a = np.array([1, 2, 3], dtype=np.int64)
    assert _compare(a, a.copy(), 1e-4, 1e-4)["ok"]
    b = a.copy()
    b[1] = 3
    row = _compare(b, a, 1e-4, 1e-4)
    assert not row["ok"] and row["max_abs"] == 1.0


def test_nan_handling_in_compare():
    from porter.validate import _compare

    e = np.array([np.nan, 1.0, 2.0], dtype=np.float32)
    assert _compare(e.copy(), e, 1e-4, 0)["ok"]  # NaN where torch has NaN is agreement
    a = np.array([0.0, 1.0, 2.0], dtype=np.float32)
    assert not _compare(a, e, 1e-4, 0)["ok"]
    assert not _compare(e, a, 1e-4, 0)["ok"]


@pytest.mark.parametrize("text, rank, perm", [
    ("as-is", 4, (0, 1, 2, 3)), ("NCHW->NHWC", 4, (0, 2, 3, 1)), ("NCL->NLC", 3, (0, 2, 1)),
    ("NCDHW->NDHWC", 5, (0, 2, 3, 4, 1)), ("permute(0,2,3,1)", 4, (0, 2, 3, 1)), ("CHW->HWC", 3, (1, 2, 0)),
])
def test_parse_layout(text, rank, perm):
    assert parse_layout(text, rank) == perm


@pytest.mark.parametrize("text, rank", [("NCHW->NHWC", 3), ("NCHW->NHWX", 4), ("sideways", 2),
                                        ("permute(0,0,1)", 3)])
def test_parse_layout_rejects(text, rank):
    with pytest.raises(ValueError, match=r"\[validate\]"):
        parse_layout(text, rank)


def test_argument_errors():
    model = make_small()
    port = FakePort(model)
    with pytest.raises(TypeError, match="list of input tuples.*but got Tensor"):
        porter.validate(model, port, torch.randn(2, 3, 8, 8))
    with pytest.raises(TypeError, match="list of input tuples.*but got tuple"):
        porter.validate(model, port, (torch.randn(2, 3, 8, 8),))
    with pytest.raises(ValueError, match="'rtol' and 'atol' must be non-negative"):
        porter.validate(model, port, rtol=-1.0)
    with pytest.raises(ValueError, match="at least one input tuple"):
        porter.validate(model, port, [])


def test_import_porter_validate_is_torch_free():
    import subprocess
    import sys

    code = ("import sys; import porter; from porter.validate import validate, Report; "
            "assert callable(porter.validate); assert 'torch' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_failing_backward_is_reported_not_raised():
    model = make_small()

    @mx.custom_function
    def no_backward(x):
        return x

    @no_backward.vjp
    def no_backward_vjp(primals, cotangent, output):
        raise ValueError("[Unpool] no backward w.r.t. indices")

    class NoBackward(FakePort):
        def __call__(self, x):
            logits, feat = super().__call__(x)
            return no_backward(logits), feat

    report = porter.validate(model, NoBackward(model), [(torch.randn(2, 3, 8, 8),)], grads=True)
    assert all(row["ok"] for row in report.runs[0]["outputs"])
    assert not report.ok and not report.grads["ok"]
    assert report.grads["error"] == "ValueError: [Unpool] no backward w.r.t. indices"
    assert "the port's backward failed: ValueError" in str(report)


def test_torchscript_and_exported_program_sources():
    model = make_small()
    port = FakePort(model)
    xs = [(torch.randn(2, 3, 8, 8),)]
    scripted = torch.jit.trace(model, xs[0], strict=False)
    report = porter.validate(scripted, port, xs)
    assert report.ok and report.runs[0]["modules"] == []
    assert any("TorchScript" in n for n in report.notes)
    perturb(port, "fc.bias")
    assert not porter.validate(scripted, port, xs).ok  # outputs are still compared

    program = torch.export.export(make_small(), xs[0])
    report = porter.validate(program, FakePort(model), xs)
    assert report.ok
    assert report.to_dict()["model"] == "ExportedProgram"


def test_output_count_mismatch_and_unmatched_trace_names():
    model = make_small()

    class OneOutput(FakePort):
        def __call__(self, x):
            return super().__call__(x)[0]

        def trace(self, x):
            out, record = super().trace(x)
            return out[0], {"renamed." + k: v for k, v in record.items()}

    report = porter.validate(model, OneOutput(model), [(torch.randn(2, 3, 8, 8),)])
    assert not report.ok
    row = report.runs[0]["outputs"][0]
    assert row["index"] == "all" and "torch returned 2 tensors, the port 1" in row["note"]
    assert report.runs[0]["modules"] == []
    assert report.runs[0]["unmatched_modules"] == ["conv", "bn", "relu", "pool", "fc"]
    assert any("nothing to compare" in n for n in report.notes)
