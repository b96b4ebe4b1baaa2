"""Helpers of the adversarial corpus: payloads that would create a marker file if anything ran them, zip
rewriting, the real command in a subprocess, and the exit-code oracle every CLI case asserts.

Everything is built at test time (no binary fixtures): the artifact from ``tinynets.TinyNet`` (tests/cli), the
checkpoints with torch.
"""

import os
import pickle
import subprocess
import sys
import zipfile

from tests.paths import repo_env


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


def run_porter(args, cwd, timeout=120, env=None):
    """The real command in a subprocess (stderr as a user sees it, hangs caught by ``timeout``)."""
    return subprocess.run([sys.executable, "-m", "porter.cli.main", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=repo_env(**(env or {})))


def assert_input_error(result, names, *, listing_before=None, directory=None):
    """Exit 2, exactly one error paragraph naming every string in ``names``, no traceback, nothing left behind."""
    out = getattr(result, "stdout", "") + getattr(result, "stderr", "")
    code = getattr(result, "returncode", getattr(result, "exit_code", None))
    assert code == 2, out
    assert "Traceback" not in out and "Warning" not in out and "site-packages" not in out, out
    assert sum(line.startswith("Error:") for line in out.splitlines()) == 1, out  # one paragraph
    for name in names:
        assert str(name) in out, (name, out)
    if directory is not None and listing_before is not None:
        assert sorted(os.listdir(directory)) == listing_before, "something was written or left behind"


def json_leaves(value, path=()):
    """Every path (keys and list indices) into a parsed JSON document, leaves and containers, the root left out."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from json_leaves(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from json_leaves(item, path + (i,))
    if path:
        yield path


def mutate_json(document, rng, values, counts) -> list:
    """Replace ``rng.choice(counts)`` places of ``document`` (in place) by ``rng.choice(values)``; returns the
    ``(path, value)`` pairs made (a later pick whose path an earlier one replaced is skipped)."""
    paths, done = list(json_leaves(document)), []
    for _ in range(rng.choice(counts)):
        path, value = rng.choice(paths), rng.choice(values)
        target = document
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):  # an earlier mutation changed what this path goes through
            continue
        done.append((path, value))
    return done


def quantized_artifact(tmp_path_factory):
    """``(folder, port, torch model)``: a saved 4-bit port (a quantized 1x1 conv at '0', quantized Linear layers at '3'
    and '5') of a small float model, for the tests that tamper with a quantized artifact."""
    import torch
    from torch import nn

    import porter
    from porter.layers import quantize_model

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(32, 32, 1), nn.ReLU(), nn.Flatten(), nn.Linear(512, 64), nn.ReLU(),
                          nn.Linear(64, 10)).eval()
    ported = porter.convert(model, torch.randn(1, 32, 4, 4))
    assert quantize_model(ported, group_size=32, bits=4).quantized == ["0", "3", "5"]
    directory = tmp_path_factory.mktemp("quantized") / "q-mlx"
    porter.save(ported, directory)
    return directory, ported, model
