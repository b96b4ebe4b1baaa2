"""Help, zoo, --arch through the zoo registry, progress display, and the CLI staying torch-free until needed."""

import json
import subprocess
import sys
import time

import pytest

import mlx.nn
import porter.zoo
from tests.cli.cli_checkpoints import write_checkpoint
from porter.checkpoints import open_model as open_source
from porter.cli.main import main
from porter.cli.ui import Progress


def test_help_documents_every_command_and_exit_statuses(runner):
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ["convert", "validate", "inspect", "bench", "zoo"]:
        assert command in result.output
    assert "porter convert --example resnet18" in result.output and "Exit status" in result.output
    result = runner.invoke(main, ["convert", "--help"])
    for needle in ["TorchScript", "torch.export", "state_dict", "--trust-pickle", "--model", "--input-shape"]:
        assert needle in result.output


def test_cli_import_and_help_do_not_import_torch():
    code = ("import sys; from porter.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def _only_in_the_zoo(monkeypatch, *entries):
    """The zoo's registry holding ``entries`` alone (typed entries, as ``register_model`` makes them)."""
    monkeypatch.setattr(porter.zoo.registry, "_MODELS", {entry.name: entry for entry in entries})
    monkeypatch.setattr(porter.zoo.registry, "_PARAMETER_COUNTS", {})


def _tiny_entry(summary="a tiny test net"):
    return porter.zoo.ZooEntry("tiny", lambda: mlx.nn.Linear(2, 3), "test", summary, "tests.cli.tinynets:tiny_net",
                               (1, 3, 8, 8))


def test_zoo_empty_then_registered(runner, monkeypatch):
    _only_in_the_zoo(monkeypatch)
    result = runner.invoke(main, ["zoo", "list"])
    assert result.exit_code == 0 and "The zoo is empty" in result.output
    result = runner.invoke(main, ["zoo", "info", "resnet18"])
    assert result.exit_code == 2 and "the zoo is empty" in result.stderr

    _only_in_the_zoo(monkeypatch, _tiny_entry())
    result = runner.invoke(main, ["zoo", "list", "--json"])
    assert json.loads(result.stdout)["models"] == ["tiny"]
    result = runner.invoke(main, ["zoo", "info", "tiny"])
    assert result.exit_code == 0 and "a tiny test net" in result.output
    assert "num_parameters   9" in result.output  # Linear(2, 3): 6 weights + 3 biases


def test_arch_resolves_through_zoo_and_examples(tmp_path, monkeypatch):
    path, _ = write_checkpoint("state_dict", tmp_path)
    _only_in_the_zoo(monkeypatch, _tiny_entry(""))
    source = open_source(path, arch="tiny", input_shapes=["1,3,8,8"])
    assert source.model_spec == "tests.cli.tinynets:tiny_net"
    from porter.checkpoints import CheckpointError as InputError

    with pytest.raises(InputError, match="do not match the architecture porter.examples:resnet18"):
        open_source(path, arch="resnet18")  # a built-in example, but not these weights


def test_progress_bar_draws_on_a_terminal_only(capsys):
    with Progress(["a", "b"], enabled=True) as progress:
        with progress.step("a"):
            time.sleep(0.5)
    err = capsys.readouterr().err
    assert "[" in err and "1/2 a" in err and err.endswith("\r")  # drawn, then wiped (click strips ANSI here)
    with Progress(["a"], enabled=False) as progress:
        with progress.step("a"):
            time.sleep(0.3)
    assert capsys.readouterr().err == ""
