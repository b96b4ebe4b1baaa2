"""``--force`` replaces an output folder whole: it must never take the user's files with it. ``porter convert
w.pt -o . --force`` used to delete the working directory, checkpoint included."""

import os

import pytest
import torch
from click.testing import CliRunner

from porter.cli.main import main

from tests.cli import tinynets
from tests.security.attack_helpers import assert_input_error

ARGS = ["--model", "tests.cli.tinynets:tiny_net", "--input-shape", "1,3,16,16", "--no-validate", "--force"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    folder = tmp_path / "proj"
    folder.mkdir()
    torch.save(tinynets.seeded().state_dict(), folder / "w.pt")
    (folder / "important.py").write_text("the user's code")
    (folder / "notes").mkdir()
    (folder / "notes" / "todo.txt").write_text("keep")
    monkeypatch.chdir(folder)
    return folder


def _tree(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)


@pytest.mark.parametrize("output, words", [
    (".", ["'.'", "current directory"]),
    ("..", ["'..'", "current directory"]),
    ("notes", ["'notes'", "not a converted model", "no graph.json"]),
    ("{home}", ["home folder"]),
])
def test_force_never_deletes_user_files(project, output, words, monkeypatch, tmp_path):
    home = tmp_path / "home"  # "~" is a folder of the test's: nothing real is at stake
    home.mkdir()
    (home / "graph.json").write_text("{}")  # even looking like a converted model
    monkeypatch.setenv("HOME", str(home))
    output = output.format(home=home)
    before = _tree(tmp_path)
    result = CliRunner().invoke(main, ["convert", "w.pt", "-o", output, *ARGS])
    assert_input_error(result, words)
    assert _tree(tmp_path) == before


def test_force_never_deletes_the_input(project, tmp_path):
    out = project / "out"
    result = CliRunner().invoke(main, ["convert", "w.pt", "-o", str(out), *ARGS])
    assert result.exit_code == 0, result.output
    os.rename(project / "w.pt", out / "w.pt")  # the checkpoint now lives in the converted folder
    result = CliRunner().invoke(main, ["convert", str(out / "w.pt"), "-o", str(out), *ARGS])
    assert_input_error(result, ["'" + str(out) + "'", "the input"])
    assert (out / "w.pt").exists()


def test_force_still_replaces_a_converted_model(project):
    for _ in range(2):
        result = CliRunner().invoke(main, ["convert", "w.pt", "-o", "out", *ARGS])
        assert result.exit_code == 0, result.output
    assert "graph.json" in os.listdir(project / "out") and (project / "important.py").exists()
    (project / "empty").mkdir()
    result = CliRunner().invoke(main, ["convert", "w.pt", "-o", "empty", *ARGS])
    assert result.exit_code == 0, result.output
