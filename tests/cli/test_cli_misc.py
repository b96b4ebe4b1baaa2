"""Help, zoo, --arch through the zoo registry, progress display, and the CLI staying torch-free until needed."""

import json
import subprocess
import sys
import time

import pytest

import porter.zoo
from cli_checkpoints import write_checkpoint
from porter.cli.main import main
from porter.cli.source import open_source
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


def test_zoo_empty_then_registered(runner, monkeypatch):
    monkeypatch.delattr(porter.zoo, "list_models", raising=False)
    result = runner.invoke(main, ["zoo", "list"])
    assert result.exit_code == 0 and "The zoo is empty" in result.output
    result = runner.invoke(main, ["zoo", "info", "resnet18"])
    assert result.exit_code == 2 and "the zoo is empty" in result.stderr

    info = {"tiny": {"summary": "a tiny test net", "torch_model": "tinynets:tiny_net"}}
    monkeypatch.setattr(porter.zoo, "list_models", lambda: list(info), raising=False)
    monkeypatch.setattr(porter.zoo, "model_info", lambda name: info[name], raising=False)
    result = runner.invoke(main, ["zoo", "list", "--json"])
    assert json.loads(result.stdout)["models"] == ["tiny"]
    result = runner.invoke(main, ["zoo", "info", "tiny"])
    assert result.exit_code == 0 and "a tiny test net" in result.output


def test_arch_resolves_through_zoo_and_examples(tmp_path, monkeypatch):
    path, _ = write_checkpoint("state_dict", tmp_path)
    info = {"tiny": {"summary": "", "torch_model": "tinynets:tiny_net"}}
    monkeypatch.setattr(porter.zoo, "list_models", lambda: list(info), raising=False)
    monkeypatch.setattr(porter.zoo, "model_info", lambda name: info[name], raising=False)
    source = open_source(path, arch="tiny", input_shapes=["1,3,8,8"])
    assert source.model_spec == "tinynets:tiny_net"
    from porter.cli.errors import InputError

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
