"""``porter update`` / ``porter.update_weights`` under attack: a checkpoint whose unpickling would run code, and a
tampered converted folder, end in one clear error (exit 2 for the command), no payload run (marker file) and the
folder left as it was."""

import os
import shutil

import pytest
import torch
from click.testing import CliRunner

import porter
from porter.checkpoints import CheckpointError
from porter.cli.main import main
from tests.cli import tinynets
from tests.security.attack_helpers import Payload, assert_input_error


def _copy(tiny_artifact, tmp_path):
    directory = tmp_path / "tiny-mlx"
    shutil.copytree(tiny_artifact[0], directory)
    return directory


def _listing(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def test_payload_in_a_training_checkpoint_never_runs(tiny_artifact, tmp_path):
    directory = _copy(tiny_artifact, tmp_path)
    marker = tmp_path / "marker"
    path = tmp_path / "new.pt"
    torch.save({"state_dict": tinynets.seeded(1).state_dict(), "hook": Payload(marker)}, path)
    before = _listing(directory)
    result = CliRunner().invoke(main, ["update", str(directory), str(path)])
    assert_input_error(result, ["new.pt", "--trust-pickle"])
    with pytest.raises(CheckpointError, match="--trust-pickle"):
        porter.update_weights(str(directory), path)
    assert not marker.exists()
    assert _listing(directory) == before


def test_payload_as_a_tensor_value_never_runs(tiny_artifact, tmp_path):
    directory = _copy(tiny_artifact, tmp_path)
    marker = tmp_path / "marker"
    state = tinynets.seeded(1).state_dict()
    state["fc.weight"] = Payload(marker)  # not a tensor: weights-only unpickling refuses the global
    torch.save(state, tmp_path / "new.pt")
    before = _listing(directory)
    result = CliRunner().invoke(main, ["update", str(directory), str(tmp_path / "new.pt")])
    assert_input_error(result, ["new.pt"])
    assert not marker.exists()
    assert _listing(directory) == before


def test_tampered_folder_refused_before_reading_weights(tiny_artifact, tmp_path):
    directory = _copy(tiny_artifact, tmp_path)
    graph = (directory / "graph.json").read_text()
    (directory / "graph.json").write_text(graph.replace('"conv_weight"', '"no_such_transform"', 1))
    torch.save(tinynets.seeded(1).state_dict(), tmp_path / "new.pt")
    before = _listing(directory)
    result = CliRunner().invoke(main, ["update", str(directory), str(tmp_path / "new.pt")])
    assert_input_error(result, ["tiny-mlx"])
    assert _listing(directory) == before


@pytest.mark.parametrize("where", ["top", "nested"])
def test_a_named_pipe_in_the_folder_is_refused_naming_it(tiny_artifact, tmp_path, where):
    """``porter update DIR`` carries DIR's other files into the new folder. A named pipe there (session 18): one
    nested in a folder (a tokenizer's, say) failed as "Cannot write output directory ... Free disk space" (shutil's
    copy refuses a pipe; opening it would wait for a writer forever), one at the top was dropped silently with the
    old folder. Now both are refused naming the pipe, and DIR is left as it was (the pipe and a regular file beside
    it included)."""
    directory = _copy(tiny_artifact, tmp_path)
    (directory / "tokenizer").mkdir()
    (directory / "tokenizer" / "vocab.txt").write_text("a b c")
    pipe = directory / ("tokenizer" if where == "nested" else "") / "evil-pipe"
    os.mkfifo(pipe)
    torch.save(tinynets.seeded(1).state_dict(), tmp_path / "new.pt")
    before = sorted(os.listdir(directory)) + sorted(os.listdir(directory / "tokenizer"))
    graph = (directory / "graph.json").read_bytes()
    result = CliRunner().invoke(main, ["update", str(directory), str(tmp_path / "new.pt")])
    assert_input_error(result, [str(pipe), "named pipe"])
    assert sorted(os.listdir(directory)) + sorted(os.listdir(directory / "tokenizer")) == before
    assert (directory / "graph.json").read_bytes() == graph
    assert not any(name.startswith(".") for name in os.listdir(tmp_path))  # no temporary folder left


def test_other_files_and_links_are_carried_over(tiny_artifact, tmp_path):
    """The regular case beside the refusal: a nested file, a link kept as a link (never followed)."""
    directory = _copy(tiny_artifact, tmp_path)
    (directory / "tokenizer").mkdir()
    (directory / "tokenizer" / "vocab.txt").write_text("a b c")
    os.symlink("/etc/hostname", directory / "tokenizer" / "link")
    torch.save(tinynets.seeded(1).state_dict(), tmp_path / "new.pt")
    result = CliRunner().invoke(main, ["update", str(directory), str(tmp_path / "new.pt")])
    assert result.exit_code == 0, result.output
    assert (directory / "tokenizer" / "vocab.txt").read_text() == "a b c"
    assert os.readlink(directory / "tokenizer" / "link") == "/etc/hostname"
