"""``porter export DIR -o FILE``: the file runs as the converted model does; bad arguments exit 2 naming the argument,
with nothing written."""

import json
import os

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.compare import ATOL, assert_close
import porter
from porter.cli.main import main
from tests.cli.tinynets import seeded


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """TinyNet (conv, batch norm, max pool, adaptive avg pool, linear) converted and saved as `porter convert`
    does, with its input shape recorded."""
    folder = tmp_path_factory.mktemp("export_cli")
    model = seeded()
    ported = porter.convert(model, (torch.randn(2, 3, 16, 16),), dynamic=[0, 2, 3])
    directory = folder / "tiny-mlx"
    porter.save(ported, directory, metadata={"source": {"input_shapes": [[2, 3, 16, 16]]}})
    return model, directory


def _listing(folder):
    return sorted(os.listdir(folder))


def test_export_writes_a_file_that_runs_like_the_model(converted, runner, tmp_path):
    model, directory = converted
    out = tmp_path / "tiny.mlxfn"
    result = runner.invoke(main, ["export", str(directory), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] and doc["path"] == str(out) and doc["input_shapes"] == [[2, 16, 16, 3]]
    assert doc["replacements"] and doc["max_abs_diff"] <= 1e-4 and not doc["shapeless"]
    x = torch.randn(2, 3, 16, 16)
    (got,) = mx.import_function(str(out))(mx.array(x.permute(0, 2, 3, 1).numpy()))
    with torch.no_grad():
        expected = model(x).numpy()
    assert_close(np.array(got), expected, atol=ATOL)
    # text output lists the replacements; another --input-shape traces at that size
    out2 = tmp_path / "tiny24.mlxfn"
    result = runner.invoke(main, ["export", str(directory), "-o", str(out2), "--input-shape", "1,3,24,20"])
    assert result.exit_code == 0, result.output
    assert "replaced for export" in result.output and "(1, 24, 20, 3)" in result.output
    assert "mx.import_function" in result.output
    assert _listing(tmp_path) == ["tiny.mlxfn", "tiny.mlxfn.json", "tiny.mlxfn.md", "tiny24.mlxfn",
                                  "tiny24.mlxfn.json", "tiny24.mlxfn.md"]  # each file with its card


def test_default_output_and_force(converted, runner, tmp_path, monkeypatch):
    _, directory = converted
    copy = tmp_path / "m-mlx"
    os.mkdir(copy)
    for name in os.listdir(directory):
        (copy / name).write_bytes((directory / name).read_bytes())
    result = runner.invoke(main, ["export", str(copy) + "/", "-q"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m-mlx.mlxfn").is_file()
    result = runner.invoke(main, ["export", str(copy)])
    assert result.exit_code == 2 and "already exists" in result.stderr and "--force" in result.stderr
    result = runner.invoke(main, ["export", str(copy), "--force", "-q"])
    assert result.exit_code == 0, result.output
    os.remove(tmp_path / "m-mlx.mlxfn")
    result = runner.invoke(main, ["export", str(copy)])  # its card is still there: not replaced without --force
    assert result.exit_code == 2 and "m-mlx.mlxfn.json' (-o's card" in result.stderr, result.stderr
    for card in ("m-mlx.mlxfn.json", "m-mlx.mlxfn.md"):
        os.remove(tmp_path / card)
    monkeypatch.chdir(copy)
    result = runner.invoke(main, ["export", ".", "-q"])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(tmp_path)) == ["m-mlx", "m-mlx.mlxfn", "m-mlx.mlxfn.json", "m-mlx.mlxfn.md"]


@pytest.mark.parametrize("args, needle", [
    (["export", "{tmp}/nope-mlx", "-o", "{tmp}/a.mlxfn"], "'{tmp}/nope-mlx' does not exist"),
    (["export", "{dir}", "-o", "{tmp}/a.mlxfn", "--input-shape", "2,3,x,16"], "--input-shape '2,3,x,16' is not a list"),
    (["export", "{dir}", "-o", "{tmp}/a.mlxfn", "--input-shape", "2,3,-1,16"], "--input-shape '2,3,-1,16'"),
    (["export", "{dir}", "-o", "{tmp}/a.onnx"], "-o '{tmp}/a.onnx' must name a file ending in .mlxfn"),
    (["export", "{dir}", "-o", "{tmp}/sub/a.mlxfn"], "-o '{tmp}/sub/a.mlxfn': the folder"),
    (["export", "{dir}", "-o", "{tmp}/afile/a.mlxfn"], "-o '{tmp}/afile/a.mlxfn': '{tmp}/afile' is not a folder"),
    (["export", "{dir}", "-o", "/sys/a.mlxfn"], "-o '/sys/a.mlxfn': cannot write in the folder '/sys'"),
    (["export", "{dir}", "-o", "{tmp}/a.mlxfn", "--probe-shape", "3,3,16,16"], "--probe-shape is only used with"),
    (["export", "{dir}", "-o", "{tmp}/a.mlxfn", "--input-shape", "2,3,16"], "Cannot export"),
])
def test_bad_arguments_exit_2_naming_them(converted, runner, tmp_path, args, needle):
    _, directory = converted
    (tmp_path / "afile").write_text("not a folder")
    fill = {"tmp": str(tmp_path), "dir": str(directory)}
    result = runner.invoke(main, [a.format(**fill) for a in args])
    assert result.exit_code == 2, result.output
    assert needle.format(**fill) in result.stderr, result.stderr
    assert _listing(tmp_path) == ["afile"]  # nothing written, no temporary file left


def test_shapeless_refusal_names_the_module_and_writes_nothing(converted, runner, tmp_path):
    _, directory = converted
    result = runner.invoke(main, ["export", str(directory), "-o", str(tmp_path / "s.mlxfn"), "--shapeless", "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert "shapeless export" in doc["error"] and "Module 'pool'" in doc["error"], doc["error"]
    assert _listing(tmp_path) == []


def test_help_lists_export(runner):
    result = runner.invoke(main, ["--help"])
    assert "export" in result.output
    result = runner.invoke(main, ["export", "--help"])
    for needle in ["--shapeless", "--input-shape", "--probe-shape", "-o", "mx.import_function"]:
        assert needle in result.output


def test_integer_inputs_are_traced_with_their_dtype(runner, tmp_path):
    """Token ids: the example is built in the recorded dtype (int64), not float."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3)).eval()
    ids = torch.tensor([[1, 2, 3], [4, 5, 9]])
    ported = porter.convert(model, (ids,), dynamic="static")
    porter.save(ported, tmp_path / "emb-mlx", metadata={"source": {"input_shapes": [[2, 3]]}})
    out = tmp_path / "emb.mlxfn"
    result = runner.invoke(main, ["export", str(tmp_path / "emb-mlx"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    (got,) = mx.import_function(str(out))(mx.array(ids.numpy()))
    with torch.no_grad():
        expected = model(ids).numpy()
    assert np.max(np.abs(np.array(got) - expected)) <= 1e-5


def test_batch_traces_several_sizes_into_one_file(converted, runner, tmp_path):
    model, directory = converted
    out = tmp_path / "b.mlxfn"
    result = runner.invoke(main, ["export", str(directory), "-o", str(out), "--batch", "1,3", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["traced_shapes"] == [[[1, 16, 16, 3]], [[3, 16, 16, 3]]]
    fn = mx.import_function(str(out))
    for batch in (1, 3):
        x = torch.randn(batch, 3, 16, 16)
        (got,) = fn(mx.array(x.permute(0, 2, 3, 1).numpy()))
        with torch.no_grad():
            expected = model(x).numpy()
        assert_close(np.array(got), expected, atol=ATOL)
    for args, needle in [(["--batch", "1,0"], "--batch '1,0' is not a comma-separated list of positive integers"),
                         (["--batch", "2", "--shapeless"], "--batch and --shapeless both given")]:
        result = runner.invoke(main, ["export", str(directory), "-o", str(tmp_path / "c.mlxfn"), *args])
        assert result.exit_code == 2 and needle in result.stderr, result.stderr
    assert _listing(tmp_path) == ["b.mlxfn", "b.mlxfn.json", "b.mlxfn.md"]


@pytest.mark.slow
def test_export_needs_no_torch(converted, tmp_path):
    """An artifact exports on a machine without torch: `porter export` never imports it."""
    import subprocess
    import sys

    _, directory = converted
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch':\n"
            "            raise ImportError('no torch here')\n"
            "sys.meta_path.insert(0, Block())\n"
            "from porter.cli.main import main\n"
            f"main(['export', {str(directory)!r}, '-o', {str(tmp_path / 'n.mlxfn')!r}, '-q'])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "n.mlxfn").is_file() and "replaced for export" in run.stdout
