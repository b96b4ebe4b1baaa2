"""Seeded mutation fuzzing of an artifact's ``config.json`` through ``porter export`` (the command that republishes
what it reads): every leaf replaced by hostile values, one or two at a time.

Each run must either export, or exit 1/2 with Porter's message and no exported file left behind. Never a Python
traceback (an exception escaping the command), never a half-written ``.mlxfn``.
"""

import json
import random
import shutil

import pytest
from click.testing import CliRunner

from porter.cli.main import main
from tests.security.attack_helpers import mutate_json

CASES = 24
VALUES = [2 ** 62, -1, 0, 1, 1.5, "x", "", None, True, [], {}, [1, 2], [0, 3, 2, 1], "float64", "int64", "complex64",
          "object", [2 ** 40, 3, 16, 16], [-1, 3, 16, 16], [0, 16, 16, 3], "NCHW->NHWC", "junk->x", [[1]]]


def _mutate(config, rng):
    return mutate_json(config, rng, VALUES, [1, 1, 2])


def _export(directory, out):
    return CliRunner().invoke(main, ["export", str(directory), "-o", str(out), "--input-shape", "2,3,16,16"])


def test_the_unmutated_config_exports(tiny_artifact, tmp_path):
    source, _ = tiny_artifact
    result = _export(source, tmp_path / "tiny.mlxfn")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "tiny.mlxfn").stat().st_size > 0


@pytest.mark.parametrize("seed", range(CASES))
def test_mutated_config_fails_cleanly(tiny_artifact, tmp_path, seed):
    source, _ = tiny_artifact
    directory, out = tmp_path / "m-mlx", tmp_path / "m.mlxfn"
    shutil.copytree(source, directory)
    config = json.loads((directory / "config.json").read_text())
    mutations = _mutate(config, random.Random(seed))
    (directory / "config.json").write_text(json.dumps(config))
    result = _export(directory, out)
    escaped = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not escaped, (mutations, repr(result.exception))
    assert result.exit_code in (0, 1, 2), (mutations, result.output)
    if result.exit_code:
        assert "Error" in result.output and "Traceback" not in result.output, (mutations, result.output)
        assert not out.exists(), mutations
        assert [p.name for p in tmp_path.iterdir()] == ["m-mlx"], mutations  # no temporary left beside it
