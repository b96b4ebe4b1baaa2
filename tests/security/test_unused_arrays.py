"""Arrays outside every mapped layer that no node reads are reported (session 15).

Before: such arrays (an unused head torch keeps in its ``state_dict``, or bytes a stranger added as a recorded
parameter beside the model) loaded without a word, so a user could not see bytes the graph never uses. Now
``porter.load`` warns (:class:`porter.UnusedArraysWarning`, naming the weights file and the arrays),
``PortedModel.unused_params`` lists them, and ``porter validate``/``bench``/``inspect DIR`` say so.
"""

import json
import shutil
import warnings

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from tests.security.attack_helpers import run_porter


class WithUnusedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 4)
        self.head = nn.Linear(4, 3)  # trained for another task, never called here
        self.register_buffer("unused_table", torch.arange(5.0))

    def forward(self, x):
        return self.body(x).relu()


@pytest.fixture(scope="module")
def with_head(tmp_path_factory):
    torch.manual_seed(0)
    model = WithUnusedHead().eval()
    directory = tmp_path_factory.mktemp("unused") / "head-mlx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        porter.save(porter.convert(model, torch.randn(2, 6)), directory,
                    metadata={"source": {"input_shapes": [[2, 6]]}})
    return directory, model


def test_load_warns_naming_the_file_and_the_unused_arrays(with_head):
    directory, model = with_head
    with pytest.warns(porter.UnusedArraysWarning) as record:
        ported = porter.load(directory)
    message = str(record[0].message)
    assert "model.safetensors" in message and "graph.json" in message, message
    for name in ("head.weight", "head.bias", "unused_table"):
        assert repr(name) in message, message
    assert f"({(12 + 3 + 5) * 4} bytes)" in message, message
    assert record[0].message.names == ["head.bias", "head.weight", "unused_table"]
    assert ported.unused_params == ["head.bias", "head.weight", "unused_table"]
    x = torch.randn(3, 6)
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_smuggled_array_is_reported(tiny_artifact, tmp_path):
    """A stranger adds an array to the weights and records it as a parameter: it is named, not silently kept."""
    from porter.converters.weights_io import write_safetensors
    from porter.converters.serialize import _read_header
    from porter.converters.shards import _load_file

    directory = tmp_path / "t-mlx"
    shutil.copytree(tiny_artifact[0], directory)
    graph = json.loads((directory / "graph.json").read_text())
    graph["params"]["payload"] = {"transform": "identity", "attrs": {}, "trainable": False, "torch_shape": [64],
                                  "dtype": "uint8"}
    (directory / "graph.json").write_text(json.dumps(graph))
    path = str(directory / "model.safetensors")
    stamps = {}
    arrays = _load_file(path, _read_header(path, stamps), stamps[path])
    arrays["payload"] = mx.array(np.frombuffer(b"MZ" * 32, dtype=np.uint8))
    write_safetensors(path, arrays, {"format": "mlx", "porter_layout": "mlx"})
    with pytest.warns(porter.UnusedArraysWarning, match="'payload'"):
        ported = porter.load(directory)
    assert ported.unused_params == ["payload"]


def test_a_model_using_every_array_loads_without_warning(tiny_artifact):
    with warnings.catch_warnings():
        warnings.simplefilter("error", porter.UnusedArraysWarning)
        assert porter.load(tiny_artifact[0]).unused_params == []


def test_cli_reports_unused_arrays(with_head, tmp_path):
    directory, _ = with_head
    result = run_porter(["inspect", directory, "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["unused_arrays"] == ["head.bias", "head.weight", "unused_table"]
    assert "Warning" not in result.stderr
    text = run_porter(["inspect", directory], cwd=tmp_path)
    assert text.returncode == 0 and "head.weight" in text.stdout + text.stderr, text.stdout + text.stderr


def test_inspect_escapes_control_characters_from_the_file(tiny_artifact, tmp_path):
    """Strings shown from a stranger's graph.json (the source class, array names) cannot repaint the terminal."""
    from click.testing import CliRunner

    from porter.cli.main import main

    directory = tmp_path / "esc-mlx"
    shutil.copytree(tiny_artifact[0], directory)
    graph = json.loads((directory / "graph.json").read_text())
    graph["source_class"] = "Net\x1b[2J\x1b[31mvalidated OK\r"
    (directory / "graph.json").write_text(json.dumps(graph))
    result = CliRunner().invoke(main, ["inspect", str(directory)], color=True)  # color: click keeps escapes
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\r" not in result.output, repr(result.output)
    assert "\\x1b[2J" in result.output and "\\r" in result.output, result.output
