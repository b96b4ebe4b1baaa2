"""Every ``porter`` subcommand fed a broken converted folder or checkpoint (session 19): an empty, truncated or
wrong-type file, a directory where a file belongs, an unreadable file (``EACCES`` on open: the tests run as root,
where ``chmod 000`` stops nothing, so the opens of that one path are made to fail as they fail for a user), and an
output whose folder is a file. Each ends in exit 2 with one ``Error:`` paragraph naming the file, no traceback,
and nothing written.
"""

import builtins
import contextlib
import errno
import os
import shutil

import pytest
import torch
from click.testing import CliRunner

from porter.cli.main import main
from tests.cli import tinynets
from tests.security.attack_helpers import assert_input_error

FILES = ("graph.json", "model.safetensors", "config.json")


def _empty(path):
    path.write_bytes(b"")


def _truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _wrong_type(path):
    path.write_bytes(b"PK\x03\x04 not what this file should be" if path.suffix == ".json" else b'{"a": 1}')


def _directory(path):
    path.unlink()
    path.mkdir()


DAMAGES = {"empty": _empty, "truncated": _truncated, "wrong type": _wrong_type, "a directory": _directory}


@contextlib.contextmanager
def unreadable(target):
    """Opening ``target`` fails with EACCES (``open`` and ``os.open``), every other path opens as before."""
    real_open, real_os_open = builtins.open, os.open
    target = os.path.realpath(target)

    def denied(path):
        return not isinstance(path, int) and os.path.realpath(os.fspath(path)) == target

    def fake_open(file, *args, **kwargs):
        if denied(file):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(file))
        return real_open(file, *args, **kwargs)

    def fake_os_open(path, *args, **kwargs):
        if denied(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_os_open(path, *args, **kwargs)

    builtins.open, os.open = fake_open, fake_os_open
    try:
        yield
    finally:
        builtins.open, os.open = real_open, real_os_open


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "w.pt"
    torch.save(tinynets.seeded().state_dict(), path)
    return path


def _commands(directory, checkpoint, out):
    return {
        "inspect": ["inspect", directory],
        "validate": ["validate", directory, "--against", checkpoint, "--model", "tests.cli.tinynets:tiny_net"],
        "bench": ["bench", directory, "--repeat", "1", "--warmup", "0"],
        "update": ["update", directory, checkpoint, "-o", out / "updated-mlx"],
        "export": ["export", directory, "-o", out / "m.mlxfn"],
    }


def _check(command, file, tmp_path):
    before = sorted(os.listdir(tmp_path))
    result = CliRunner().invoke(main, [str(a) for a in command])
    assert_input_error(result, [str(file)], directory=tmp_path, listing_before=before)


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("name", FILES)
def test_a_broken_file_of_a_converted_folder(tiny_artifact, checkpoint, tmp_path, name, damage):
    directory = tmp_path / "t-mlx"
    shutil.copytree(tiny_artifact[0], directory)
    DAMAGES[damage](directory / name)
    for command in _commands(directory, checkpoint, tmp_path).values():
        _check(command, directory / name, tmp_path)


@pytest.mark.parametrize("name", FILES)
def test_an_unreadable_file_of_a_converted_folder(tiny_artifact, checkpoint, tmp_path, name):
    directory = tmp_path / "t-mlx"
    shutil.copytree(tiny_artifact[0], directory)
    with unreadable(directory / name):
        for command in _commands(directory, checkpoint, tmp_path).values():
            _check(command, directory / name, tmp_path)


@pytest.mark.parametrize("damage", sorted(DAMAGES) + ["unreadable"])
def test_a_broken_checkpoint(tiny_artifact, checkpoint, tmp_path, damage):
    commands = {
        "convert": ["convert", checkpoint, "-o", tmp_path / "out-mlx", "--model", "tests.cli.tinynets:tiny_net",
                    "--input-shape", "1,3,16,16"],
        "inspect": ["inspect", checkpoint, "--model", "tests.cli.tinynets:tiny_net"],
        **{k: v for k, v in _commands(tiny_artifact[0], checkpoint, tmp_path).items() if k in ("validate", "update")},
        "zoo convert": ["zoo", "convert", checkpoint, "--arch", "resnet18", "-o", tmp_path / "z.safetensors"],
    }
    context = unreadable(checkpoint) if damage == "unreadable" else contextlib.nullcontext()
    if damage != "unreadable":
        DAMAGES[damage](checkpoint)
    with context:
        for command in commands.values():
            _check(command, checkpoint, tmp_path)


def test_an_output_whose_folder_is_a_file(tiny_artifact, checkpoint, tmp_path):
    """Session 18 said "the folder ... does not exist" of a file standing where the folder goes."""
    plain = tmp_path / "plain"
    plain.write_text("x")
    directory = tiny_artifact[0]
    for command in (["export", directory, "-o", plain / "m.mlxfn"],
                    ["zoo", "convert", checkpoint, "--arch", "resnet18", "-o", plain / "z.safetensors"]):
        before = sorted(os.listdir(tmp_path))
        result = CliRunner().invoke(main, [str(a) for a in command])
        assert_input_error(result, [f"'{plain}' is not a folder"], directory=tmp_path, listing_before=before)
    result = CliRunner().invoke(main, ["update", str(directory), str(checkpoint), "-o", str(plain / "u-mlx")])
    assert_input_error(result, [str(plain), "is not a directory"])
