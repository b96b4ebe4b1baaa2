"""Bad input through the command line: one clear paragraph, exit status 2, no traceback, nothing written."""

import json
import os

import pytest
import torch

import porter
from tests.cli.cli_checkpoints import listing, write_checkpoint
from porter.cli.main import main


def run(runner, args):
    return runner.invoke(main, args, catch_exceptions=False)


def assert_input_error(result, tmp_path, before, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "Error: " in result.stderr  # possibly after "note:" remarks
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert listing(tmp_path) == before, "a failed command must leave nothing behind"


def test_missing_file(runner, tmp_path):
    result = run(runner, ["convert", str(tmp_path / "nope.pt")])
    assert_input_error(result, tmp_path, [], "nope.pt' does not exist")


def test_empty_file(runner, tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    result = run(runner, ["convert", str(tmp_path / "empty.pt")])
    assert_input_error(result, tmp_path, ["empty.pt"], "is empty (0 bytes)")


@pytest.mark.parametrize("kind", ["torchscript", "export", "state_dict"])
def test_truncated_archive(runner, tmp_path, kind):
    path, _ = write_checkpoint(kind, tmp_path)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) * 2 // 3])
    before = listing(tmp_path)
    result = run(runner, ["convert", path, "--model", "tests.cli.tinynets:tiny_net"])
    assert_input_error(result, tmp_path, before, "truncated or corrupted", "again")


def test_random_binary(runner, tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(bytes(range(256)) * 64)
    result = run(runner, ["convert", str(path)])
    assert_input_error(result, tmp_path, ["model.pt"], "not a checkpoint format Porter recognises")


def test_state_dict_without_model(runner, tmp_path):
    path, _ = write_checkpoint("state_dict", tmp_path)
    result = run(runner, ["convert", path])
    assert_input_error(result, tmp_path, ["weights.pt"], "only weights", "--model package.module:factory")


def test_keys_and_shapes_mismatch_listed_by_name(runner, tmp_path):
    path, _ = write_checkpoint("state_dict", tmp_path)
    result = run(runner, ["convert", path, "--model", "tests.cli.tinynets:TinyNet", "--model-kwargs",
                          '{"num_classes": 7, "width": 4}'])
    assert_input_error(result, tmp_path, ["weights.pt"], "do not match the architecture tests.cli.tinynets:TinyNet",
                       "shape mismatch fc.weight: checkpoint (5, 8) vs model (7, 4)",
                       "shape mismatch conv1.weight: checkpoint (8, 3, 3, 3) vs model (4, 3, 3, 3)",
                       "shape mismatch bn1.running_mean")


def test_pickled_module_refused(runner, tmp_path):
    path, _ = write_checkpoint("pickled", tmp_path)
    result = run(runner, ["convert", path])
    assert_input_error(result, tmp_path, ["whole.pt"], "arbitrary code", "--trust-pickle", "state_dict()")


def test_input_shape_the_model_cannot_take(runner, tmp_path):
    path, _ = write_checkpoint("torchscript", tmp_path)
    result = run(runner, ["convert", path, "--input-shape", "1,4,16,16"])
    assert_input_error(result, tmp_path, ["scripted.pt"], "cannot take input of shape (1,4,16,16)",
                       "expected input[1, 4, 16, 16] to have 3 channels")


def test_existing_output_needs_force(runner, tmp_path):
    path, _ = write_checkpoint("torchscript", tmp_path)
    (tmp_path / "scripted-mlx").mkdir()
    (tmp_path / "scripted-mlx" / "keep.txt").write_text("mine")
    before = listing(tmp_path)
    result = run(runner, ["convert", path])
    assert_input_error(result, tmp_path, before, "already exists", "--force")


def test_non_writable_output_directory(runner, tmp_path):
    path, _ = write_checkpoint("torchscript", tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        target = "/sys/porter-cli-test" if os.access(ro, os.W_OK) else str(ro / "out")  # root ignores mode bits
        result = run(runner, ["convert", path, "-o", target])
        assert result.exit_code == 2 and "Cannot write output directory" in result.stderr
        assert not os.path.exists(target)
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("args, needle", [
    (["convert"], "Give the checkpoint FILE"),
    (["convert", "x.pt", "--example", "resnet18"], "--example builds its own checkpoint"),
    (["convert", "x.pt", "--io-layout", "nchw"], "'nchw' is not one of"),
    (["convert", "--example", "vgg99"], "not a built-in example"),
    (["bench", "d", "--batch", "1,x"], "--batch '1,x' is not a comma-separated list"),
    (["validate", "d"], "Missing option '--against'"),
])
def test_usage_errors_exit_2(runner, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    result = run(runner, args)
    assert result.exit_code == 2
    assert needle in result.output
    assert listing(tmp_path) == []


def test_json_error_document(runner, tmp_path):
    result = run(runner, ["convert", str(tmp_path / "nope.pt"), "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2 and "does not exist" in doc["error"]


def test_internal_error_is_one_paragraph_and_debug_shows_traceback(runner, tmp_path, monkeypatch):
    path, _ = write_checkpoint("torchscript", tmp_path)

    def broken_convert(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(porter, "convert", broken_convert, raising=False)
    result = runner.invoke(main, ["convert", path])
    assert result.exit_code == 3
    assert "ZeroDivisionError: boom" in result.stderr and "--debug" in result.stderr
    assert "Traceback" not in result.output
    result = runner.invoke(main, ["convert", path, "--debug"])
    assert isinstance(result.exception, ZeroDivisionError)  # the real exception and traceback surface
    assert listing(tmp_path) == ["scripted.pt"]


class _FakeUnsupported(NotImplementedError):
    def __init__(self, ops):
        super().__init__(f"{len(ops)} unsupported ops")
        self.ops = ops


def test_unsupported_ops_all_listed(runner, tmp_path, monkeypatch):
    """The CLI lists every op the converter names (the converter's own detection is tested with it)."""
    path, _ = write_checkpoint("torchscript", tmp_path)
    fake = type("UnsupportedOpsError", (_FakeUnsupported,), {})
    ops = ["aten.fft_fft2 (at: body)", "aten.special_airy_ai (at: body)", "aten.nonzero (at: head)"]

    def convert(*args, **kwargs):
        raise fake(ops)

    monkeypatch.setattr(porter, "convert", convert, raising=False)
    result = run(runner, ["convert", path])
    assert_input_error(result, tmp_path, ["scripted.pt"], "3 operation(s) Porter cannot convert", *ops)


def test_unsupported_ops_from_the_real_converter(runner, tmp_path):
    from tests.cli.tinynets import NeedsUnsupported

    path = str(tmp_path / "fft.pt")
    torch.save(NeedsUnsupported().state_dict(), path)
    result = run(runner, ["convert", path, "--model", "tests.cli.tinynets:NeedsUnsupported",
                          "--input-shape", "1,3,8,8"])
    assert_input_error(result, tmp_path, ["fft.pt"], "Porter cannot convert", "igamma", "airy_ai")


def test_ctrl_c_exits_130_and_writes_nothing(runner, tmp_path, monkeypatch):
    path, _ = write_checkpoint("torchscript", tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(porter, "save", interrupted, raising=False)
    monkeypatch.setattr(porter, "convert", lambda *a, **k: object(), raising=False)
    result = runner.invoke(main, ["convert", path, "--no-validate"])
    assert result.exit_code == 130 and "Interrupted" in result.stderr
    assert listing(tmp_path) == ["scripted.pt"]


def test_example_failure_removes_its_checkpoint_and_folders(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(runner, ["convert", "--example", "resnet18", "-o", "a/b/r18", "--input-shape", "1,3,5"])
    assert_input_error(result, tmp_path, [], "cannot take input of shape (1,3,5)")


def test_converter_limitation_is_an_input_error(runner, tmp_path, monkeypatch):
    path, _ = write_checkpoint("torchscript", tmp_path)

    def limited(*args, **kwargs):
        raise NotImplementedError("[Conv2d] padding_mode='circular' is not supported")

    monkeypatch.setattr(porter, "convert", limited, raising=False)
    result = run(runner, ["convert", path])
    assert_input_error(result, tmp_path, ["scripted.pt"], "cannot convert the model", "padding_mode='circular'")
