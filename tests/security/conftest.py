"""Shared pieces of the adversarial corpus: a small converted model to tamper with, payloads that would create a
marker file if anything ran them, and the exit-code oracle every CLI case asserts.

Everything is built at test time (no binary fixtures): the artifact from ``tinynets.TinyNet`` (tests/cli), the
checkpoints with torch.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CLI_TESTS = os.path.join(os.path.dirname(HERE), "cli")
if CLI_TESTS not in sys.path:
    sys.path.insert(0, CLI_TESTS)  # tinynets


class Payload:
    """Unpickling this runs ``touch marker``: a file the tests assert never appears."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def pickled_payload(marker) -> bytes:
    return pickle.dumps(Payload(marker), protocol=2)


def rewrite_zip(src, dst, replace: dict) -> None:
    """Copy zip ``src`` to ``dst`` with the entries whose name ends with a key of ``replace`` swapped for its value."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            for suffix, new in replace.items():
                if info.filename.endswith(suffix):
                    data = new(data) if callable(new) else new
            zout.writestr(info, data)


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory):
    """A converted TinyNet (``porter.save``) and its torch model; tests copy it before tampering."""
    import torch

    import porter
    import tinynets

    model = tinynets.seeded()
    directory = tmp_path_factory.mktemp("artifact") / "tiny-mlx"
    porter.save(porter.convert(model, torch.randn(1, 3, 16, 16)), directory,
                metadata={"source": {"model": "tinynets:tiny_net", "model_kwargs": {},
                                     "input_shapes": [[1, 3, 16, 16]]}})
    return directory, model


@pytest.fixture
def tampered(tiny_artifact, tmp_path):
    """``tampered(edit)``: a copy of the tiny artifact whose parsed graph.json went through ``edit(graph)``."""

    def make(edit=None, name="t-mlx"):
        directory = tmp_path / name
        shutil.copytree(tiny_artifact[0], directory)
        if edit is not None:
            path = directory / "graph.json"
            graph = json.loads(path.read_text())
            edit(graph)  # edits in place (its return value is ignored)
            path.write_text(json.dumps(graph))
        return directory

    return make


def run_porter(args, cwd, timeout=120, env=None):
    """The real command in a subprocess (stderr as a user sees it, hangs caught by ``timeout``)."""
    return subprocess.run([sys.executable, "-m", "porter.cli.main", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def assert_input_error(result, names, *, listing_before=None, directory=None):
    """Exit 2, exactly one error paragraph naming every string in ``names``, no traceback, nothing left behind."""
    out = getattr(result, "stdout", "") + getattr(result, "stderr", "")
    code = getattr(result, "returncode", getattr(result, "exit_code", None))
    assert code == 2, out
    assert "Traceback" not in out and "Warning" not in out and "site-packages" not in out, out
    assert out.count("Error:") == 1, out
    for name in names:
        assert str(name) in out, (name, out)
    if directory is not None and listing_before is not None:
        assert sorted(os.listdir(directory)) == listing_before, "something was written or left behind"
