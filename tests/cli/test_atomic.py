"""The output directory appears complete or not at all (porter.cli.atomic)."""

import os

import pytest

from tests.cli.cli_checkpoints import listing
from porter.cli.atomic import atomic_directory, check_destination
from porter.cli.errors import InputError


def _write(directory, name, text):
    with open(os.path.join(directory, name), "w") as fh:
        fh.write(text)


def test_success_moves_complete_directory_into_place(tmp_path):
    out = tmp_path / "model-mlx"
    with atomic_directory(str(out)) as tmp:
        _write(tmp, "a.txt", "1")
        assert not out.exists()  # invisible until complete
        assert os.path.dirname(tmp) == str(tmp_path)  # same parent: the final move is a rename
    assert listing(tmp_path) == ["model-mlx", "model-mlx/a.txt"]
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask  # a normal folder, not mkdtemp's private 0700


def test_failure_leaves_nothing_behind(tmp_path):
    out = tmp_path / "deep" / "er" / "model-mlx"
    with pytest.raises(RuntimeError):
        with atomic_directory(str(out)) as tmp:
            _write(tmp, "half.safetensors", "x")
            raise RuntimeError("disk full")
    assert listing(tmp_path) == []  # neither the temp folder nor the parents it created


def test_keyboard_interrupt_leaves_nothing_behind(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(str(tmp_path / "out")) as tmp:
            _write(tmp, "half", "x")
            raise KeyboardInterrupt
    assert listing(tmp_path) == []


def test_existing_directory_needs_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _write(str(out), "old.txt", "old")
    with pytest.raises(InputError, match="already exists.*--force"):
        with atomic_directory(str(out)):
            pytest.fail("must refuse before yielding")
    assert listing(tmp_path) == ["out", "out/old.txt"]


def test_force_keeps_old_directory_until_new_one_is_complete(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _write(str(out), "graph.json", "old")  # --force replaces a converted model's folder only
    with pytest.raises(RuntimeError):
        with atomic_directory(str(out), force=True) as tmp:
            _write(tmp, "new.txt", "new")
            raise RuntimeError("conversion failed")
    assert listing(tmp_path) == ["out", "out/graph.json"]  # a failed --force run keeps the old result
    with atomic_directory(str(out), force=True) as tmp:
        _write(tmp, "new.txt", "new")
        assert (out / "graph.json").exists()
    assert listing(tmp_path) == ["out", "out/new.txt"]  # replaced whole, no backup left


def test_output_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="exists and is not a directory"):
        check_destination(str(tmp_path / "file"), force=True)
    with pytest.raises(InputError, match="is not a directory"):
        with atomic_directory(str(tmp_path / "file" / "out")):
            pass
    assert listing(tmp_path) == ["file"]


def test_non_writable_parent(tmp_path):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        if os.access(parent, os.W_OK):
            # Running as root: permission bits do not stop us. /sys refuses new folders even to root.
            target = "/sys/porter-test-out"
        else:
            target = str(parent / "out")
        with pytest.raises(InputError, match="Cannot (write|create) output"):
            with atomic_directory(target):
                pytest.fail("must not yield")
        assert not os.path.exists(target)
    finally:
        parent.chmod(0o755)
    assert listing(tmp_path) == ["ro"]
