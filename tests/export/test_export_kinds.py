"""Ports of different kinds exported as ``.mlxfn`` files and run where torch and porter cannot be imported, against
torch run in the test: half precision (bfloat16, shapeless, at a second size), float64, quantized, TorchScript with
dict outputs, integer and bool inputs. Each file's card snippet runs as written."""

import warnings

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.layers import quantize_model
from tests.export.mlxfn_check import port_inputs, run_without_porter, to_torch_layout, torch_outputs
from tests.export.test_export_keyword import _run_card_snippet


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 32)
        self.norm = nn.LayerNorm(32)
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        return self.out(torch.nn.functional.gelu(self.norm(self.fc(x))))


class Heads(nn.Module):
    """Token ids and a bool mask in; a dict out (TorchScript's prim::DictConstruct), an integer count among them."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.fc = nn.Linear(8, 3)

    def forward(self, ids, mask):
        h = self.embed(ids).masked_fill(mask[..., None], 0.0)
        return {"logits": self.fc(h).sum(1), "kept": (~mask).sum(1)}


def _check(ported, model, path, input_sets, rel, tmp_path):
    runs = run_without_porter([(path, [np.array(a) for a in port_inputs(ported, s)]) for s in input_sets], tmp_path)
    for got, inputs in zip(runs, input_sets):
        assert not isinstance(got, str), got
        want = torch_outputs(model, inputs)
        got = to_torch_layout(ported, got)
        assert len(got) == len(want)
        for k, (a, b) in enumerate(zip(got, want)):
            assert a.shape == b.shape, (k, a.shape, b.shape)
            scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
            assert float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) <= rel * scale, k
    assert _run_card_snippet(tmp_path, path.parent / (path.name + ".md"), tmp_path / "snippet")


def test_bfloat16_port_exports_shapeless(tmp_path):
    # the file's pure-MLX layer norm and GELU round differently from the native kernels in bfloat16: the check
    # against the port allows 4 bfloat16 ulps (it refused the file with 1e-4)
    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(2, 5, 6)
    ported = porter.convert(model, (x,), dtype="bfloat16", dynamic="all")
    path = tmp_path / "mlp.mlxfn"
    report = porter.export_function(ported, path, port_inputs(ported, (x,)), shapeless=True)
    assert report.probe_shapes and report.input_dtypes == ["float32"]
    _check(ported, model, path, [(x,), (torch.randn(3, 9, 6),)], 5e-2, tmp_path)
    with pytest.raises(porter.ExportError, match="differ from the model's"):  # an explicit bar is the bar
        porter.export_function(ported, tmp_path / "tight.mlxfn", port_inputs(ported, (x,)), shapeless=True,
                               rtol=1e-7, atol=1e-7)


class Smooth(Mlp):
    """Mlp's layers through the functions MLX computes float64 in float32 precision (erf GELU, softmax, sigmoid, exp)."""

    def forward(self, x):
        h = torch.nn.functional.gelu(self.norm(self.fc(x)))
        return torch.softmax(self.out(h), -1) * torch.sigmoid(h[..., :4]) + torch.exp(-h[..., 4:8].abs())


def test_float64_port(tmp_path):
    """An exported float64 port computes in float64 (the file's pure-MLX ops take Porter's float64 forms)."""
    torch.manual_seed(1)
    model = Smooth().double().eval()
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    ported = porter.convert(model, (x,))
    path = tmp_path / "mlp64.mlxfn"
    report = porter.export_function(ported, path, port_inputs(ported, (x,)))
    assert report.input_dtypes == ["float64"]
    _check(ported, model, path, [(x,)], 1e-12, tmp_path)


def test_quantized_port(tmp_path):
    torch.manual_seed(2)
    model = Mlp().eval()
    x = torch.randn(2, 5, 6)
    ported = porter.convert(model, (x,))
    assert quantize_model(ported, group_size=32, bits=8).quantized  # the 32 -> 4 head
    path = tmp_path / "q.mlxfn"
    porter.export_function(ported, path, port_inputs(ported, (x,)))
    _check(ported, model, path, [(x,)], 2e-2, tmp_path)  # 8-bit weights against torch's float model


@pytest.mark.parametrize("frontend", ["export", "script"])
def test_integer_and_bool_inputs_and_a_dict_output(frontend, tmp_path):
    torch.manual_seed(3)
    model = Heads().eval()
    ids, mask = torch.randint(0, 20, (2, 7)), torch.rand(2, 7) > 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = torch.jit.script(model) if frontend == "script" else model
    ported = porter.convert(source, (ids, mask))
    path = tmp_path / "heads.mlxfn"
    report = porter.export_function(ported, path, port_inputs(ported, (ids, mask)))
    assert report.input_dtypes == ["int64", "bool"] and report.output_names == ["logits", "kept"]
    assert report.input_names == ["ids", "mask"]  # TorchScript records no signature: the graph's input names
    _check(ported, model, path, [(ids, mask)], 1e-5, tmp_path)


class WithNones(nn.Module):
    """A dict output with ``None`` fields (as a transformers ModelOutput leaves them): the file has no None."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return {"logits": self.fc(x), "hidden": None, "pair": (x.sum(1), None, x.amax(1))}


def test_none_outputs_are_left_out(tmp_path):
    torch.manual_seed(4)
    model = WithNones().eval()
    x = torch.randn(2, 4)
    ported = porter.convert(model, (x,))
    assert ported(mx.array(x.numpy()))["hidden"] is None
    path = tmp_path / "nones.mlxfn"
    report = porter.export_function(ported, path, port_inputs(ported, (x,)))
    assert report.output_names == ["logits", "pair.0", "pair.2"]  # was refused: 'model' returned a NoneType
    _check(ported, model, path, [(x,)], 1e-5, tmp_path)
    with pytest.raises(porter.ExportError, match="'model' returned a str") as info:
        porter.export_function(lambda a: {"y": "text"}, tmp_path / "s.mlxfn", [mx.zeros((2, 4))])
    assert "refuses them" not in str(info.value)  # its own message, not reworded as a refusal of the inputs
