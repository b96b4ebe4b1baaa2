"""`porter convert --dtype` and `porter validate` of a half-precision folder."""

import json

import pytest

import porter
from tests.cli.cli_checkpoints import listing, write_checkpoint
from porter.cli.main import main


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_convert_dtype_writes_and_validates_a_half_folder(runner, tmp_path, dtype):
    path, _ = write_checkpoint("state_dict", tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:tiny_net",
                                  "--input-shape", "2,3,12,12", "--dtype", dtype, "-o", str(out)],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"dtype {dtype}" in result.output and "loses the most:" in result.output
    config = json.loads((out / "config.json").read_text())
    graph = json.loads((out / "graph.json").read_text())
    assert config["dtype"] == dtype and graph["compute_dtype"] == dtype
    assert graph["metadata"]["validation"]["dtype"] == dtype
    assert porter.load(out).dtype == dtype
    card = (out / "README.md").read_text()
    assert f"Run in `{dtype}` against the float32 torch model" in card
    assert f"loses the most: `{graph['metadata']['validation']['loses_most']}`" in card

    result = runner.invoke(main, ["validate", str(out), "--against", path, "--model", "tests.cli.tinynets:tiny_net"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"precision: {dtype} port against the float32 torch model" in result.output


@pytest.mark.parametrize("bad", ["half", "int8", "Float16"])
def test_bad_dtype_is_refused_naming_the_option(runner, tmp_path, bad):
    path, _ = write_checkpoint("state_dict", tmp_path)
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:tiny_net", "--dtype", bad],
                           catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert f"--dtype '{bad}'" in result.stderr and "float16, bfloat16" in result.stderr
    assert listing(tmp_path) == ["weights.pt"]


def test_torchscript_half_is_compared_on_outputs(runner, tmp_path):
    path, _ = write_checkpoint("torchscript", tmp_path)
    result = runner.invoke(main, ["convert", path, "--input-shape", "2,3,12,12", "--dtype", "float16", "-o",
                                  str(tmp_path / "out")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "4 x torch's own float16 error" in result.output  # torch ran the scripted model in float16 too
    assert "no per-module outputs to compare" in result.output
