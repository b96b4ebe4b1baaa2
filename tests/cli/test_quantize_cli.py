"""``porter convert -q/--quantize --q-bits --q-group-size`` (issue 13): the float port is validated against torch,
then quantized; the folder records the quantized layers and loads back quantized; the quantization error is
measured per module against torch (run in the test) and bounded by what 8-bit weights cost."""

import json

import mlx.nn as mnn
import numpy as np
import pytest
import torch

import porter
import porter.layers as PL
from tests.cli import tinynets
from tests.cli.cli_checkpoints import X_SHAPE, listing
from porter.cli.layouts import ported_to_torch, torch_to_ported
from porter.cli.main import main


def _checkpoint(tmp_path):
    model = tinynets.seeded(width=32)  # 3x3 conv over 32 channels: a reduction of 288, a multiple of 32
    path = str(tmp_path / "wide.pt")
    torch.save(model.state_dict(), path)
    return path, model


@pytest.mark.slow  # converts, validates twice (about 10 s)
def test_convert_quantized(runner, tmp_path):
    path, model = _checkpoint(tmp_path)
    out = tmp_path / "q-mlx"
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:tiny_net", "--model-kwargs",
                                  '{"width": 32}', "-o", str(out), "--input-shape", ",".join(map(str, X_SHAPE)),
                                  "-q", "--q-bits", "8", "--q-group-size", "32", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    q = doc["quantization"]
    assert q["bits"] == 8 and set(q["quantized"]) == {"conv2", "fc"}
    assert "conv1" in q["float"] and "divisible" in q["float"]["conv1"]  # 27 = 3 channels x 3 x 3
    assert q["error"]["worst_module"] and 0 < q["error"]["max_rel_error"] < 0.05
    assert json.loads((out / "config.json").read_text())["quantization"] == {"group_size": 32, "bits": 8,
                                                                            "mode": "affine", "conv1": False}
    loaded = porter.load(out)
    assert isinstance(loaded.conv2, PL.QuantizedConv2d) and isinstance(loaded.fc, mnn.QuantizedLinear)
    x = torch.randn(X_SHAPE)
    with torch.no_grad():
        expected = model(x).numpy()
    got = ported_to_torch(np.array(loaded(torch_to_ported(x.numpy(), doc["input_layouts"][0]))),
                          doc["output_layouts"][0])
    # 8-bit weights in groups of 32 move the outputs by a few parts in a thousand of their scale, not more
    error = np.abs(got - expected).max() / np.abs(expected).max()
    assert 0 < error < 0.05, error


@pytest.mark.parametrize("args, text", [(["--q-bits", "8"], "--q-bits only apply with -q"),
                                        (["--q-group-size", "32"], "--q-group-size only apply with -q"),
                                        (["-q", "--q-bits", "3"], "--q-bits"),
                                        (["-q", "--q-group-size", "48"], "--q-group-size")])
def test_bad_quantize_options_exit_2_before_converting(runner, tmp_path, args, text):
    path, _ = _checkpoint(tmp_path)
    before = listing(tmp_path)
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:tiny_net", "--no-validate", *args])
    assert result.exit_code == 2 and text in result.output, result.output
    assert listing(tmp_path) == before
