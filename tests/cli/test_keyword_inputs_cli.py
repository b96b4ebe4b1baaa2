"""``porter convert --input-shape name=...``: keyword inputs from the command line, and the artifact they make
through validate, bench and export."""

import json

import torch

from porter.cli.main import main
from tests.cli import tinynets

MODEL = "tests.cli.tinynets:token_net"


def _run(runner, args):
    return runner.invoke(main, args, catch_exceptions=False)


def test_convert_validate_bench_export_with_a_keyword_input(runner, tmp_path):
    path = str(tmp_path / "tokens.pt")
    torch.save(tinynets.token_net().state_dict(), path)
    out = str(tmp_path / "tokens-mlx")
    result = _run(runner, ["convert", path, "--model", MODEL, "-o", out, "--input-shape", "1,7:int64",
                           "--input-shape", "token_type_ids=1,7:int64"])
    assert result.exit_code == 0, result.output
    assert "token_type_ids=mx.zeros" in result.output  # the load hint passes it by keyword
    graph = json.loads((tmp_path / "tokens-mlx" / "graph.json").read_text())
    assert [e["param"] for e in graph["signature"]["inputs"]] == ["input_ids", "token_type_ids"]
    assert graph["metadata"]["source"]["input_names"] == [None, "token_type_ids"]
    result = _run(runner, ["validate", out, "--against", path, "--model", MODEL])
    assert result.exit_code == 0, result.output
    result = _run(runner, ["bench", out, "--batch", "1,3", "--repeat", "1", "--warmup", "0", "--against", path,
                           "--model", MODEL])
    assert result.exit_code == 0, result.output
    result = _run(runner, ["inspect", path, "--model", MODEL, "--input-shape", "1,7:int64", "--input-shape",
                           "token_type_ids=1,7:int64"])
    assert result.exit_code == 0 and "all ops supported" in result.output, result.output
    result = runner.invoke(main, ["export", out, "-o", str(tmp_path / "t.mlxfn")])  # positional, graph order
    assert result.exit_code == 0 and "fn(input_ids, token_type_ids)" in result.output, result.output
    record = json.loads((tmp_path / "t.mlxfn.json").read_text())
    assert [(s["name"], s["keyword"]) for s in record["inputs"]] == [("input_ids", False), ("token_type_ids", True)]


def test_bad_keyword_input_names_are_refused(runner, tmp_path):
    path = str(tmp_path / "tokens.pt")
    torch.save(tinynets.token_net().state_dict(), path)
    for shape, said in (("token types=1,7:int64", "not a Python identifier"),
                        ("token_types=1,7:int64", "token_types")):
        result = runner.invoke(main, ["convert", path, "--model", MODEL, "-o", str(tmp_path / "o"),
                                      "--input-shape", "1,7:int64", "--input-shape", shape])
        assert result.exit_code == 2 and said in result.output, result.output
    result = runner.invoke(main, ["convert", path, "--model", MODEL, "-o", str(tmp_path / "o"), "--input-shape",
                                  "1,7:int64", "--input-shape", "a=1,7:int64", "--input-shape", "a=1,7:int64"])
    assert result.exit_code == 2 and "twice" in result.output, result.output


def test_a_pt2_exported_with_keyword_inputs_converts(runner, tmp_path):
    model = tinynets.token_net().eval()
    ids, tt = torch.randint(1, 20, (2, 5)), torch.randint(0, 2, (2, 5))
    path = str(tmp_path / "tokens.pt2")
    torch.export.save(torch.export.export(model, (ids,), {"token_type_ids": tt}, strict=False), path)
    out = str(tmp_path / "tokens-mlx")
    result = _run(runner, ["convert", path, "-o", out])  # validated against the program, keyword input by name
    assert result.exit_code == 0, result.output
    graph = json.loads((tmp_path / "tokens-mlx" / "graph.json").read_text())
    assert [e["param"] for e in graph["signature"]["inputs"]] == ["input_ids", "token_type_ids"]
