"""porter.save / porter.load: roundtrip, torch-free loading (in a subprocess where importing torch fails),
clear errors on bad artifacts."""

import json
import os
import subprocess
import sys
import textwrap

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from tests.converter_check import assert_matches

torch.manual_seed(0)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)
        self.fc = nn.Linear(2, 3)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        y = F.max_pool2d(y, 2)
        y = self.up(y)
        return self.fc(y.mean((2, 3))), y


@pytest.fixture
def model():
    m = Small().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    return m


def test_roundtrip(model, tmp_path):
    x = torch.randn(2, 3, 8, 8)
    ported = porter.convert(model, x, io_layout="mlx")
    porter.save(ported, tmp_path / "out", metadata={"validation": {"ok": True}})
    assert sorted(os.listdir(tmp_path / "out")) == ["README.md", "config.json", "graph.json", "model.safetensors"]
    graph = json.loads((tmp_path / "out" / "graph.json").read_text())
    assert graph["format_version"] == porter.converters.serialize.FORMAT_VERSION
    assert graph["metadata"] == {"validation": {"ok": True}}
    assert graph["source_class"].endswith("Small")
    assert graph["output_layouts"] == ["as-is", "NCHW->NHWC"]
    loaded = porter.load(tmp_path / "out")
    assert loaded.num_transposes == ported.num_transposes
    assert loaded.input_layouts == ported.input_layouts
    for shape in [(2, 3, 8, 8), (1, 3, 12, 6)]:
        assert_matches(loaded, model, (torch.randn(*shape),))
    xm = mx.array(np.random.default_rng(0).standard_normal((1, 6, 6, 3)).astype(np.float32))
    for a, b in zip(ported(xm), loaded(xm)):
        np.testing.assert_array_equal(np.array(a), np.array(b))


def test_graph_json_holds_one_entry_per_line(model, tmp_path):
    """graph.json: a top-level key per line and each node / parameter / module / check on its own line (compact), so
    a check's deep size expression costs its bytes, not a line per sub-expression; the text parses to the graph."""
    from porter.converters.serialize import graph_text

    ported = porter.convert(model, torch.randn(2, 3, 8, 8))
    porter.save(ported, tmp_path / "out")
    text = (tmp_path / "out" / "graph.json").read_text()
    graph = json.loads(text)
    assert graph_text(graph) == text
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert len(lines) == 2 + sum(1 + len(v) + 1 if isinstance(v, (list, dict)) and v else 1 for v in graph.values())
    entries = {line.rstrip(",") for line in lines}
    for node in graph["nodes"]:
        assert "  " + json.dumps(node) in entries
    value = {"a": [{"x": [1, {"y": 2}]}, 3], "b": {}, "c": [], "d": {"k": [1, 2]}, "e": "s"}
    assert json.loads(graph_text(value)) == value
    with pytest.raises(ValueError):
        graph_text({"x": float("nan")})


BLOCK_TORCH = """
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
        return None
sys.meta_path.insert(0, _NoTorch())
"""


def test_load_without_torch(model, tmp_path):
    x = torch.randn(2, 3, 8, 8)
    ported = porter.convert(model, x, io_layout="torch")
    porter.save(ported, tmp_path / "art")
    with torch.no_grad():
        expected = model(x)[0].numpy()
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "expected.npy", expected)
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCK_TORCH)
    script = textwrap.dedent(f"""
        import sys
        try:
            import torch
        except ImportError:
            pass
        else:
            raise SystemExit("torch import was not blocked")
        import numpy as np, mlx.core as mx
        import porter
        ported = porter.load({str(tmp_path / "art")!r})
        out = ported(mx.array(np.load({str(tmp_path / "x.npy")!r})))[0]
        expected = np.load({str(tmp_path / "expected.npy")!r})
        err = float(np.abs(np.array(out) - expected).max())
        assert err <= 1e-4 * float(np.abs(expected).max()), err
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch got imported"
        print("OK")
    """)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "block"))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("OK")


def test_import_porter_is_torch_free():
    code = "import sys, porter, porter.converters; assert 'torch' not in sys.modules, 'torch imported'; print('OK')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_load_errors_name_the_file(model, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        porter.load(tmp_path / "missing")
    ported = porter.convert(model, torch.randn(1, 3, 8, 8))
    porter.save(ported, tmp_path / "a")
    (tmp_path / "a" / "graph.json").write_text("{not json")
    with pytest.raises(ValueError, match="graph.json"):
        porter.load(tmp_path / "a")
    porter.save(ported, tmp_path / "b")
    (tmp_path / "b" / "model.safetensors").write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match="model.safetensors"):
        porter.load(tmp_path / "b")
    porter.save(ported, tmp_path / "c")
    os.remove(tmp_path / "c" / "model.safetensors")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        porter.load(tmp_path / "c")
    porter.save(ported, tmp_path / "d")
    graph = json.loads((tmp_path / "d" / "graph.json").read_text())
    graph["format_version"] = 99
    (tmp_path / "d" / "graph.json").write_text(json.dumps(graph))
    with pytest.raises(ValueError, match="format version 99"):
        porter.load(tmp_path / "d")


def test_save_refuses_other_objects(tmp_path):
    with pytest.raises(TypeError, match="PortedModel"):
        porter.save(object(), tmp_path)


def test_no_pickle_in_artifact(model, tmp_path):
    porter.save(porter.convert(model, torch.randn(1, 3, 8, 8)), tmp_path)
    data = (tmp_path / "model.safetensors").read_bytes()
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + header_len])
    assert {k for k in header if k != "__metadata__"} == set(model.state_dict())


@pytest.mark.parametrize("version", [2, 3, 4])
def test_an_older_artifact_still_loads(model, tmp_path, version):
    """Folders written before format version 3 have no ``signature`` (keyword inputs) and no params'
    ``state_dict`` flag, before 4 no ``train_refusals``/``train_state``, before 5 no stochastic depth or
    functional dropout nodes: they load, run positionally and give the same numbers."""
    x = torch.randn(2, 3, 8, 8)
    porter.save(porter.convert(model, x, io_layout="torch"), tmp_path / "out")
    for name in ("graph.json", "config.json"):
        data = json.loads((tmp_path / "out" / name).read_text())
        if name == "graph.json":
            data["format_version"] = version
            if version < 4:
                data.pop("train_refusals", None)
                data.pop("train_state", None)
            if version < 3:
                data.pop("signature", None)
                for record in data["params"].values():
                    record.pop("state_dict", None)
        else:
            data["porter_format_version"] = version
        (tmp_path / "out" / name).write_text(json.dumps(data))
    loaded = porter.load(tmp_path / "out")
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    got = loaded(mx.array(x.numpy()))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.array(g), w, rtol=1e-5, atol=1e-5)
    newer = json.loads((tmp_path / "out" / "graph.json").read_text())
    newer["format_version"] = porter.converters.serialize.FORMAT_VERSION + 1
    (tmp_path / "out" / "graph.json").write_text(json.dumps(newer))
    with pytest.raises(porter.converters.serialize.ArtifactError, match="upgrade Porter"):
        porter.load(tmp_path / "out")
