"""Every checkpoint format end to end: save a real file, `porter convert` it, load the result without torch,
compare with torch run in the test."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.cli.cli_checkpoints import X_SHAPE, listing, write_checkpoint
from porter.cli.layouts import ported_to_torch, torch_to_ported
from porter.compare import RTOL, assert_close
from porter.cli.main import main

pytestmark = pytest.mark.slow  # subprocesses or long sweeps: `pytest -m "not slow"` skips them

HERE = os.path.dirname(os.path.abspath(__file__))

# kind -> extra arguments `porter convert` needs for it
KINDS = {
    "torchscript": [], "traced": [], "export": [], "pickled": ["--trust-pickle"],
    "state_dict": ["--model", "tests.cli.tinynets:tiny_net"], "wrapped": ["--model", "tests.cli.tinynets:TinyNet"],
    "dataparallel": ["--model", "tests.cli.tinynets:tiny_net"], "legacy": ["--model", "tests.cli.tinynets:tiny_net"],
    "safetensors": ["--model", "tests.cli.tinynets:tiny_net", "--model-kwargs", '{"num_classes": 5}'],
}


def run_torch_free(directory, arrays, tmp_path):
    """Outputs of the converted model in ``directory`` computed in a subprocess that cannot import torch."""
    paths = []
    for i, array in enumerate(arrays):
        paths.append(str(tmp_path / f"in{i}.npy"))
        np.save(paths[-1], array)
    prefix = str(tmp_path / "out")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "torch_free.py"), directory, *paths, prefix],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    outputs = []
    while os.path.exists(f"{prefix}{len(outputs)}.npy"):
        outputs.append(np.load(f"{prefix}{len(outputs)}.npy"))
    return outputs


def assert_matches_torch(ours, theirs):
    theirs = theirs.detach().numpy()
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert_close(ours, theirs, rtol=RTOL, atol=0.0)  # the project's float32 bar, relative to max |torch|


@pytest.mark.parametrize("kind", list(KINDS))
def test_convert_each_format_and_load_without_torch(runner, tmp_path, kind):
    path, model = write_checkpoint(kind, tmp_path)
    shape_args = [] if kind == "export" else ["--input-shape", ",".join(map(str, X_SHAPE))]
    result = runner.invoke(main, ["convert", path, "--json", *KINDS[kind], *shape_args])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    out_dir = os.path.splitext(path)[0] + "-mlx"
    assert doc["ok"] and doc["output"] == out_dir and doc["validation"] is not None
    assert sorted(os.listdir(out_dir)) == ["README.md", "config.json", "graph.json", "model.safetensors"]
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]  # no temp folders left

    x = torch.randn(X_SHAPE, generator=torch.Generator().manual_seed(5))
    (ours,) = run_torch_free(out_dir, [torch_to_ported(x.numpy(), doc["input_layouts"][0])], tmp_path)
    with torch.no_grad():
        expected = model(x)
    assert_matches_torch(ported_to_torch(ours, doc["output_layouts"][0]), expected)


def test_text_output_has_summary_and_load_hint(runner, tmp_path):
    path, _ = write_checkpoint("traced", tmp_path)
    result = runner.invoke(main, ["convert", path, "-o", str(tmp_path / "out" / "tiny")])
    assert result.exit_code == 0, result.output
    assert "Converted" in result.stdout and "TorchScript" in result.stdout
    assert "porter.load(" in result.stdout and "tiny" in result.stdout
    assert "guessed from 'conv1.weight'" in result.stderr  # the guessed input shape is announced


def test_torch_io_layout_keeps_torch_shapes(runner, tmp_path):
    path, model = write_checkpoint("traced", tmp_path)
    result = runner.invoke(main, ["convert", path, "--io-layout", "torch", "--json", "--input-shape", "1,3,12,12"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    x = torch.randn(3, 3, 16, 16)  # another batch and size than the example
    (ours,) = run_torch_free(doc["output"], [x.numpy()], tmp_path)
    with torch.no_grad():
        assert_matches_torch(ours, model(x))


def test_no_validate_skips_validation(runner, tmp_path):
    path, _ = write_checkpoint("traced", tmp_path)
    result = runner.invoke(main, ["convert", path, "--no-validate", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["validation"] is None


def test_force_replaces_and_failure_keeps_the_old_result(runner, tmp_path, monkeypatch):
    import porter

    path, _ = write_checkpoint("traced", tmp_path)
    assert runner.invoke(main, ["convert", path, "--no-validate"]).exit_code == 0
    out = tmp_path / "traced-mlx"
    first = (out / "model.safetensors").read_bytes()
    assert runner.invoke(main, ["convert", path, "--no-validate"]).exit_code == 2  # exists, no --force

    real_save = porter.save

    def save_then_fail(ported, directory, **kwargs):
        real_save(ported, directory, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(porter, "save", save_then_fail)
    result = runner.invoke(main, ["convert", path, "--no-validate", "--force"])
    assert result.exit_code == 2 and "No space left" in result.stderr  # a write error is the user's to fix (issue 10)
    assert listing(tmp_path) == ["traced-mlx", "traced-mlx/README.md", "traced-mlx/config.json",
                                 "traced-mlx/graph.json", "traced-mlx/model.safetensors", "traced.pt"]
    assert (out / "model.safetensors").read_bytes() == first
    monkeypatch.setattr(porter, "save", real_save)
    assert runner.invoke(main, ["convert", path, "--force"]).exit_code == 0


def test_validation_failure_exits_1_and_writes_nothing(runner, tmp_path, monkeypatch):
    import mlx.core as mx

    import porter

    path, _ = write_checkpoint("traced", tmp_path)
    real_convert = porter.convert

    def convert_wrongly(*args, **kwargs):
        """A converter bug: one weight comes out wrong."""
        from mlx.utils import tree_flatten, tree_unflatten

        ported = real_convert(*args, **kwargs)
        name, value = tree_flatten(ported.trainable_parameters())[0]  # torch state_dict name, MLX array
        ported.update(tree_unflatten([(name, value + 1.0)]))
        mx.eval(ported.parameters())
        return ported

    monkeypatch.setattr(porter, "convert", convert_wrongly)
    result = runner.invoke(main, ["convert", path, "--input-shape", "1,3,12,12"])
    assert result.exit_code == 1, result.output
    assert "Validation failed" in result.stderr and "Nothing was written" in result.stderr
    assert listing(tmp_path) == ["traced.pt"]
    result = runner.invoke(main, ["convert", path, "--input-shape", "1,3,12,12", "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["validation"]["ok"] is False
    assert listing(tmp_path) == ["traced.pt"]


def test_validate_command(runner, tmp_path):
    path, _ = write_checkpoint("state_dict", tmp_path)
    assert runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:tiny_net", "--no-validate",
                                "--input-shape", "1,3,16,16"]).exit_code == 0
    out = str(tmp_path / "weights-mlx")
    report_path = tmp_path / "report.json"
    # the recorded architecture is never imported from the artifact: the refusal names it as a hint
    result = runner.invoke(main, ["validate", out, "--against", path])
    assert result.exit_code == 2, result.output
    assert "--model tests.cli.tinynets:tiny_net" in result.stderr and "Traceback" not in result.output
    # given on the command line it runs; the input shape comes from what convert recorded
    result = runner.invoke(main, ["validate", out, "--against", path, "--model", "tests.cli.tinynets:tiny_net",
                                  "--grads", "--json", str(report_path)])
    assert result.exit_code == 0, result.output
    assert json.loads(report_path.read_text())["ok"] is True

    from tests.cli import tinynets

    other = str(tmp_path / "other.pt")
    torch.save(tinynets.seeded(seed=1).state_dict(), other)  # same architecture, different weights
    result = runner.invoke(main, ["validate", out, "--against", other, "--model", "tests.cli.tinynets:tiny_net",
                                  "--json", "-"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False


def test_inspect_lists_modules_and_unsupported_ops(runner, tmp_path):
    path, _ = write_checkpoint("state_dict", tmp_path)
    result = runner.invoke(main, ["inspect", path, "--model", "tests.cli.tinynets:tiny_net", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    from tests.cli.tinynets import tiny_net

    assert doc["unsupported"] == [] and doc["num_parameters"] == sum(
        p.numel() for p in tiny_net().parameters())
    from tests.cli.tinynets import NeedsUnsupported

    bad = str(tmp_path / "fft.pt")
    torch.save(NeedsUnsupported().state_dict(), bad)
    result = runner.invoke(main, ["inspect", bad, "--model", "tests.cli.tinynets:NeedsUnsupported", "--input-shape",
                                  "1,3,8,8"])
    assert result.exit_code == 0, result.output
    assert "igamma" in result.stdout and "airy_ai" in result.stdout


def test_bench_reports_ratio(runner, tmp_path):
    path, _ = write_checkpoint("traced", tmp_path)
    assert runner.invoke(main, ["convert", path, "--no-validate"]).exit_code == 0
    result = runner.invoke(main, ["bench", str(tmp_path / "traced-mlx"), "--against", path, "--batch", "1,2",
                                  "--warmup", "1", "--repeat", "2", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["results"]
    assert [r["batch"] for r in rows] == [1, 2]
    assert all(r["mlx_ms"] > 0 and r["torch_ms"] > 0 and r["ratio"] > 0 for r in rows)


def test_several_inputs(runner, tmp_path):
    from tests.cli.tinynets import TwoInputs

    torch.manual_seed(0)
    model = TwoInputs().eval()
    path = str(tmp_path / "two.pt")
    torch.save(model.state_dict(), path)
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:TwoInputs",
                                  "--input-shape", "1,3,8,8", "--input-shape", "1,1,8,8", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["input_shapes"] == [[1, 3, 8, 8], [1, 1, 8, 8]]
    x, y = torch.randn(2, 3, 8, 8), torch.randn(2, 1, 8, 8)
    (ours,) = run_torch_free(doc["output"], [torch_to_ported(x.numpy(), doc["input_layouts"][0]),
                                             torch_to_ported(y.numpy(), doc["input_layouts"][1])], tmp_path)
    with torch.no_grad():
        assert_matches_torch(ported_to_torch(ours, doc["output_layouts"][0]), model(x, y))


def test_bench_refuses_without_a_native_build(runner, tmp_path, monkeypatch):
    """`porter bench` on the CPU without the native kernels for the current sources: refused naming the build and the
    command; --allow-pure-mlx times it and records the state in --json."""
    import importlib

    from porter import bench as bench_lib

    cli_bench = importlib.import_module("porter.cli.bench")
    missing = bench_lib.benchmark_isolated({"framework": "native"}, env={"PORTER_KERNEL_DIR": str(tmp_path / "none")})
    assert missing["available"] is False
    monkeypatch.setattr(cli_bench, "native_kernels", lambda: missing)
    path, _ = write_checkpoint("traced", tmp_path)
    assert runner.invoke(main, ["convert", path, "--no-validate"]).exit_code == 0
    args = ["bench", str(tmp_path / "traced-mlx"), "--batch", "1", "--warmup", "0", "--repeat", "1"]
    result = runner.invoke(main, args)
    assert result.exit_code == 2
    assert "not built for the current sources" in result.output and "porter build-kernels" in result.output
    assert "--allow-pure-mlx" in result.output and missing["directory"] in result.output.replace("\n", "")
    result = runner.invoke(main, args + ["--allow-pure-mlx", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["native"]["available"] is False
