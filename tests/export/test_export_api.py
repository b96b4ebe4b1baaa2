"""porter.export_function's arguments: every bad one named in the error, nothing half-written, an existing file
kept when the export fails; output structures and dtypes."""

import os

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
import torch

import porter
from porter import ExportError
import porter.layers as L

from tests.export.mlxfn_check import assert_close, port_inputs, torch_outputs


class Small(nn.Module):
    def __init__(self, dtype=mx.float32):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.fc.update({k: v.astype(dtype) for k, v in self.fc.parameters().items()})
        self.softmax = L.Softmax(-1)

    def __call__(self, x):
        return self.softmax(L.GELU()(self.fc(x)))


def _files(folder):
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("path, message", [
    ("model.bin", "'path' must name a file ending in .mlxfn"),
    (".mlxfn", "'path' must name a file ending in .mlxfn"),
    ("missing/model.mlxfn", "'path': the folder"),
    ("adir.mlxfn", "'path' 'adir.mlxfn' is a directory"),
])
def test_bad_path_is_named(tmp_path, monkeypatch, path, message):
    monkeypatch.chdir(tmp_path)
    os.mkdir("adir.mlxfn")
    with pytest.raises(ExportError, match=message.replace("(", r"\(").replace(")", r"\)")):
        porter.export_function(Small(), path, [(2, 6)])
    assert _files(tmp_path) == ["adir.mlxfn"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(model=42), "'model' must be callable"),
    (dict(example_inputs=[]), "'example_inputs' must be a non-empty list"),
    (dict(example_inputs=[(2, 6), (2, 0)]), r"'example_inputs\[1\]' must be an mx.array"),
    (dict(example_inputs=[(2, 6), "2,6"]), r"'example_inputs\[1\]' must be an mx.array"),
    (dict(example_inputs=[(2, 7)]), r"'example_inputs' \[\(2, 7\)\]: the model refuses them"),
    (dict(shapeless=1), "'shapeless' must be a bool"),
    (dict(probe_inputs=[(3, 6)]), "'probe_inputs' is only used with shapeless=True"),
    (dict(model=lambda x: "text"), "'model' returned a str"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, message):
    args = dict(model=Small(), path=tmp_path / "m.mlxfn", example_inputs=[(2, 6)])
    args.update(kwargs)
    with pytest.raises(ExportError, match=message):
        porter.export_function(args.pop("model"), args.pop("path"), args.pop("example_inputs"), **args)
    assert _files(tmp_path) == []


def test_failed_export_keeps_the_existing_file(tmp_path):
    path = tmp_path / "m.mlxfn"
    path.write_bytes(b"previous")

    def needs_host(x):
        return x * mx.max(x).item()  # a host read while tracing

    with pytest.raises(ExportError, match="reads an array's value on the host"):
        porter.export_function(needs_host, path, [(2, 6)])
    assert path.read_bytes() == b"previous" and _files(tmp_path) == ["m.mlxfn"]
    report = porter.export_function(Small(), path, [(2, 6)])  # a successful one replaces it
    assert path.read_bytes() != b"previous" and report.path == str(path) and _files(tmp_path) == ["m.mlxfn"]
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask  # a normal file, not mkstemp's 0600


def test_dict_and_nested_outputs_are_flattened_in_order(tmp_path):
    w = mx.array(np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32))

    def heads(x):
        return {"out": x @ w, "aux": (mx.tanh(x), {"sum": x.sum(axis=-1)})}

    x = mx.random.normal((2, 6))
    report = porter.export_function(heads, tmp_path / "h.mlxfn", [x])
    assert report.output_names == ["out", "aux.0", "aux.1.sum"]
    got = mx.import_function(report.path)(x)
    expected = [heads(x)["out"], heads(x)["aux"][0], heads(x)["aux"][1]["sum"]]
    for a, e in zip(got, expected):
        assert_close(np.array(a), np.array(e), rel=0)


@pytest.mark.parametrize("dtype, rel", [(mx.float32, 1e-6), (mx.float16, 2e-3), (mx.bfloat16, 1e-2)])
def test_half_precision_exports(tmp_path, dtype, rel):
    """16-bit models: the export's pure-MLX softmax/GELU compute in float32 and round once, as the native ones."""
    model = Small(dtype)
    x = mx.random.normal((3, 6)).astype(dtype)
    report = porter.export_function(model, tmp_path / "h.mlxfn", [x])
    assert "native softmax -> pure-MLX ops" in report.replacements or not porter.layers._native.available()
    (got,) = mx.import_function(report.path)(x)
    expected = model(x)
    assert got.dtype == dtype
    assert_close(np.array(got.astype(mx.float32)), np.array(expected.astype(mx.float32)), rel=rel)


def test_float64_port_exports_in_float64(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv1d(3, 4, 3, stride=2), torch.nn.ReLU(), torch.nn.AvgPool1d(2)).double()
    example = (torch.randn(2, 3, 17, dtype=torch.float64),)
    ported = porter.convert(model.eval(), example, dynamic="static")
    report = porter.export_function(ported, tmp_path / "d.mlxfn", port_inputs(ported, example))
    (got,) = mx.import_function(report.path)(*port_inputs(ported, example))
    assert got.dtype == mx.float64
    (expected,) = torch_outputs(model, example)
    assert_close(np.array(got).transpose(0, 2, 1), expected, rel=1e-6)


def test_inf_and_nan_outputs_are_checked_in_place(tmp_path):
    """The file's check accepts inf and NaN where the model has them (inf - inf is not an error)."""

    def f(x):
        return mx.log(x)  # -inf at 0, NaN below, finite above

    x = mx.array(np.array([[0.0, -1.0, 2.0, np.inf]], dtype=np.float32))
    report = porter.export_function(f, tmp_path / "log.mlxfn", [x])
    assert report.max_abs_diff == 0.0
    np.testing.assert_array_equal(np.array(mx.import_function(report.path)(x)[0]), np.array(f(x)))


def test_more_examples_trace_several_sizes_into_one_file(tmp_path):
    """A CNN cannot go shapeless (pooling slices); several batch sizes in one file can."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 4 * 4, 3)).eval()
    example = (torch.randn(1, 3, 8, 8),)
    ported = porter.convert(model, example, dynamic="batch")
    report = porter.export_function(ported, tmp_path / "b.mlxfn", [(1, 8, 8, 3)], more_examples=[[(4, 8, 8, 3)]])
    assert report.traced_shapes == [[(1, 8, 8, 3)], [(4, 8, 8, 3)]] and "(1, 8, 8, 3); (4, 8, 8, 3)" in str(report)
    fn = mx.import_function(report.path)
    for batch in (1, 4):
        x = torch.randn(batch, 3, 8, 8)
        (got,) = fn(*port_inputs(ported, (x,)))
        assert_close(np.array(got), torch_outputs(model, (x,))[0], what=f"batch {batch}")
    with pytest.raises(ValueError, match="No imported function found"):
        fn(*port_inputs(ported, (torch.randn(2, 3, 8, 8),)))
    with pytest.raises(ExportError, match="'more_examples' is for fixed-shape files"):
        porter.export_function(ported, tmp_path / "c.mlxfn", [(1, 8, 8, 3)], more_examples=[[(2, 8, 8, 3)]],
                               shapeless=True)
    with pytest.raises(ExportError, match=r"'more_examples\[0\]' \[\(2, 9, 9, 3\)\]: the model refuses them"):
        porter.export_function(ported, tmp_path / "c.mlxfn", [(1, 8, 8, 3)], more_examples=[[(2, 9, 9, 3)]])
    with pytest.raises(ExportError, match=r"'more_examples\[0\]' has 2 input\(s\)"):
        porter.export_function(ported, tmp_path / "c.mlxfn", [(1, 8, 8, 3)], more_examples=[[(2, 8, 8, 3), (1,)]])
    assert _files(tmp_path) == ["b.mlxfn", "b.mlxfn.json", "b.mlxfn.md"]  # a port's file comes with its card


def test_training_mode_dropout_is_refused_with_the_hint(tmp_path):
    """Dropout in training mode draws new numbers per call: the file cannot match the model, and the error says
    to call model.eval(); in eval mode the same model exports."""
    model = nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.5))
    mx.eval(model.parameters())
    model.train()
    with pytest.raises(ExportError, match=r"call model.eval\(\) first"):
        porter.export_function(model, tmp_path / "d.mlxfn", [(4, 6)])
    assert _files(tmp_path) == []
    model.eval()
    report = porter.export_function(model, tmp_path / "d.mlxfn", [(4, 6)])
    assert report.max_abs_diff == 0.0
