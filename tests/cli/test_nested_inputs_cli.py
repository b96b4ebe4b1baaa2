"""``--input-shape past[1][0]=...``: a tuple argument given by keyword (a KV cache) from the command line, through
convert, validate and bench, with named errors for a missing, extra or wrong-rank entry (session 15).

Before: ``--input-shape`` names had to be identifiers, so no spelling reached the tensors inside ``past`` (convert
refused ``past[0][0]=...``), and validate/bench matched given shapes to the port's inputs by position only.
"""

import json

import pytest
import torch

from porter.cli.main import main
from tests.security.test_nested_inputs import CachedStep

MODEL = "tests.security.test_nested_inputs:CachedStep"
PAST = ["past[0][0]=2,3,4", "past[0][1]=2,3,4", "past[1][0]=2,5,4", "past[1][1]=2,5,4"]


def _shapes(*values):
    return [a for v in values for a in ("--input-shape", v)]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from click.testing import CliRunner

    folder = tmp_path_factory.mktemp("nested-cli")
    torch.manual_seed(0)
    path = str(folder / "step.pt")
    torch.save(CachedStep().state_dict(), path)
    out = str(folder / "step-mlx")
    result = CliRunner().invoke(main, ["convert", path, "--model", MODEL, "-o", out, *_shapes("2,1,4", *PAST)])
    assert result.exit_code == 0, result.output
    return path, out


def test_convert_records_the_nested_inputs(converted):
    _, out = converted
    with open(f"{out}/graph.json") as fh:
        graph = json.load(fh)
    assert [(e["param"], e.get("path")) for e in graph["signature"]["inputs"]] == [
        ("x", None), ("past", [0, 0]), ("past", [0, 1]), ("past", [1, 0]), ("past", [1, 1])]


def test_validate_with_recorded_and_given_shapes(runner, converted):
    path, out = converted
    result = runner.invoke(main, ["validate", out, "--against", path, "--model", MODEL])
    assert result.exit_code == 0, result.output  # the recorded shapes, past[i][j]= included
    shuffled = [PAST[3], PAST[1], "3,1,4", PAST[0], PAST[2]]  # by name, in any order; other sizes
    shuffled = [s.replace("=2,", "=3,") for s in shuffled]
    result = runner.invoke(main, ["validate", out, "--against", path, "--model", MODEL, *_shapes(*shuffled)])
    assert result.exit_code == 0, result.output


def test_bench_with_given_shapes(runner, converted):
    path, out = converted
    result = runner.invoke(main, ["bench", out, "--against", path, "--model", MODEL, "--batch", "2", "--warmup", "0",
                                  "--repeat", "1", "--allow-pure-mlx", *_shapes("2,1,4", *PAST)])
    assert result.exit_code == 0, result.output


BAD = {
    "missing": (["2,1,4", *PAST[:3]], ["past[1][1]"]),
    "a hole": (["2,1,4", PAST[0], PAST[1], PAST[3]], ["past[1][1]", "past[1][0]"]),
    "extra": (["2,1,4", *PAST, "cache=2,3,4"], ["cache", "it takes"]),
    "extra index": (["2,1,4", *PAST, "past[2][0]=2,3,4"], ["past[2][0]"]),
    "wrong rank": (["2,1,4", "past[0][0]=2,3", *PAST[1:]], ["past[0][0]", "rank 2", "rank-3"]),
    "leaf and tuple": (["2,1,4", *PAST, "past[0]=2,3,4"], ["past[0]", "past[0][0]"]),
    "no positional": ([*PAST], ["positional"]),
}


@pytest.mark.parametrize("command", ["validate", "bench"])
@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_nested_entries_are_named(runner, converted, command, case):
    path, out = converted
    values, words = BAD[case]
    extra = ["--allow-pure-mlx", "--batch", "2", "--repeat", "1", "--warmup", "0"] if command == "bench" else []
    result = runner.invoke(main, [command, out, "--against", path, "--model", MODEL, *extra, *_shapes(*values)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.output.count("Error:") == 1, result.output
    for word in words:
        assert word in result.output, (word, result.output)
