"""Ports converted with keyword inputs (``porter.convert(..., example_kwargs=...)``) exported as ``.mlxfn`` files:
the file takes the inputs positionally in the graph's input order, ``FILE.json``/``FILE.md`` record that order, and
the card's usage snippet runs as written. Every file runs where torch and porter cannot be imported, against torch
run in the test."""

import json
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torch import nn

import porter
from porter.cli.main import main
from porter.export import ExportError, export_function
from tests.cli import tinynets
from tests.converters.test_keyword_inputs import _ids, _mask, _mx, _types  # the same BERT inputs
from tests.export.mlxfn_check import RUNNER, assert_close, run_without_porter
from tests.models.text import bert_tokens_small


def _torch(model, *args, **kwargs):
    with torch.no_grad():
        return [t.numpy() for t in torch.utils._pytree.tree_leaves(model(*args, **kwargs))]


def test_bert_with_keyword_inputs_exports_in_graph_order(tmp_path):
    model = bert_tokens_small()
    ids, tt, mask = _ids(2, 6), _types(2, 6), _mask(2, 6)
    ported = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt, "attention_mask": mask})
    order = ported.input_arguments  # the graph's input order: what the file takes positionally
    assert sorted(order) == ["attention_mask", "input_ids", "token_type_ids"]
    values = {"input_ids": ids, "token_type_ids": tt, "attention_mask": mask}
    second = {"input_ids": _ids(3, 9, seed=4), "token_type_ids": _types(3, 9, seed=5), "attention_mask": _mask(3, 9)}
    path = tmp_path / "bert.mlxfn"
    report = export_function(ported, path, [_mx(values[n]) for n in order],
                             more_examples=[[_mx(second[n]) for n in order]])
    assert report.input_names == order and report.input_dtypes == ["int64"] * 3
    record = json.loads((tmp_path / "bert.mlxfn.json").read_text())
    assert [(s["position"], s["name"], s["dtype"]) for s in record["inputs"]] == [(i, n, "int64")
                                                                                  for i, n in enumerate(order)]
    assert {s["name"]: s["keyword"] for s in record["inputs"]} == {"input_ids": False, "token_type_ids": True,
                                                                   "attention_mask": True}
    assert record["inputs"][0]["traced_shapes"] == [[2, 6], [3, 9]] and record["call"] == "positional"
    # the file, in a process without torch or porter, at both traced sizes, against torch called by keyword
    runs = run_without_porter([(path, [values[n].numpy() for n in order]),
                               (path, [second[n].numpy() for n in order])], tmp_path)
    for got, vals in zip(runs, (values, second)):
        want = _torch(model, vals["input_ids"], token_type_ids=vals["token_type_ids"],
                      attention_mask=vals["attention_mask"])
        assert len(got) == len(want)
        for k, (a, b) in enumerate(zip(got, want)):
            assert_close(a, b, what=f"output {k}")


def test_keywords_given_in_another_order_than_the_forward(tmp_path):
    # torch.export orders the inputs as example_kwargs gave them: the file follows the graph, not the signature
    model = bert_tokens_small()
    ids, mask, tt = _ids(2, 5), _mask(2, 5), _types(2, 5)
    ported = porter.convert(model, example_kwargs={"token_type_ids": tt, "attention_mask": mask, "input_ids": ids})
    assert ported.input_arguments == ["token_type_ids", "attention_mask", "input_ids"]
    path = tmp_path / "bert.mlxfn"
    report = export_function(ported, path, [_mx(tt), _mx(mask), _mx(ids)])
    assert report.input_names == ["token_type_ids", "attention_mask", "input_ids"]
    (got,) = run_without_porter([(path, [tt.numpy(), mask.numpy(), ids.numpy()])], tmp_path)
    want = _torch(model, input_ids=ids, attention_mask=mask, token_type_ids=tt)
    for k, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, what=f"output {k}")


class Scaled(nn.Module):
    """A keyword-only tensor input on a model whose every op exports shapeless (linear, layer norm, GELU)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x, *, scale, shift=None):
        y = torch.nn.functional.gelu(self.norm(self.fc(x))) * scale
        return y if shift is None else y + shift


def test_shapeless_keyword_port_keeps_its_dynamic_dims(tmp_path):
    torch.manual_seed(0)
    model = Scaled().eval()
    x, scale = torch.randn(2, 5, 6), torch.randn(2, 5, 8)
    ported = porter.convert(model, (x,), example_kwargs={"scale": scale}, dynamic="all")
    assert ported.input_arguments == ["x", "scale"]
    path = tmp_path / "scaled.mlxfn"
    report = export_function(ported, path, [_mx(x), _mx(scale)], shapeless=True)
    record = json.loads((tmp_path / "scaled.mlxfn.json").read_text())
    assert record["shapeless"] and record["inputs"][1]["name"] == "scale" and record["inputs"][1]["keyword"]
    assert record["inputs"][0]["dynamic_axes"] == [0, 1] and record["inputs"][1]["dynamic_axes"] == [0, 1]
    assert report.probe_shapes  # checked at a second size inside export_function
    x2, s2 = torch.randn(4, 11, 6), torch.randn(4, 11, 8)
    runs = run_without_porter([(path, [x.numpy(), scale.numpy()]), (path, [x2.numpy(), s2.numpy()])], tmp_path)
    for (got,), (a, s) in zip(runs, ((x, scale), (x2, s2))):
        assert_close(got, _torch(model, a, scale=s)[0], what="output")


def _run_card_snippet(tmp_path, card_path, out_prefix) -> list:
    """The card's Python snippet, run as written from the file's folder in a process where torch and porter cannot
    be imported (``run_mlxfn.py``'s blocker), its outputs saved; returns them."""
    text = card_path.read_text()
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "card_snippet.py"
    blocker = open(RUNNER).read().split("import mlx.core as mx", 1)[0]  # the import blocker and its self-check
    script.write_text(blocker + snippet + "\nimport numpy as np\n"
                      f"for i, o in enumerate(outputs):  # numpy has no bfloat16\n"
                      f"    o = o.astype(mx.float32) if o.dtype == mx.bfloat16 else o\n"
                      f"    np.save({str(out_prefix)!r} + str(i) + '.npy', np.array(o))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         cwd=str(card_path.parent), timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    outs, i = [], 0
    while os.path.exists(f"{out_prefix}{i}.npy"):
        outs.append(np.load(f"{out_prefix}{i}.npy"))
        i += 1
    return outs


def test_the_cards_usage_snippet_runs_and_matches_torch(tmp_path):
    model = bert_tokens_small()
    ids, tt = _ids(1, 7), _types(1, 7)
    ported = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt})
    folder = tmp_path / "shipped"
    folder.mkdir()
    export_function(ported, folder / "bert.mlxfn", [_mx(ids), _mx(tt)])
    card = (folder / "bert.mlxfn.md").read_text()
    assert "| 0 | `input_ids` |" in card and "| 1 | `token_type_ids` (keyword in torch) |" in card
    got = _run_card_snippet(tmp_path, folder / "bert.mlxfn.md", tmp_path / "snippet_out")
    zeros = torch.zeros(1, 7, dtype=torch.long)  # the snippet's inputs: integer zeros
    want = _torch(model, zeros, token_type_ids=zeros)
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, what=f"snippet output {k}")


def test_cli_exports_a_keyword_port_with_its_card(tmp_path):
    runner = CliRunner()
    path = str(tmp_path / "tokens.pt")
    net = tinynets.token_net().eval()
    torch.save(net.state_dict(), path)
    out = str(tmp_path / "tokens-mlx")
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:token_net", "-o", out,
                                  "--input-shape", "1,7:int64", "--input-shape", "token_type_ids=1,7:int64"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    target = tmp_path / "t.mlxfn"
    result = runner.invoke(main, ["export", out, "-o", str(target), "--batch", "1,3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "fn(input_ids, token_type_ids)" in result.output
    record = json.loads((tmp_path / "t.mlxfn.json").read_text())
    assert [s["name"] for s in record["inputs"]] == ["input_ids", "token_type_ids"]
    assert record["inputs"][1]["traced_shapes"] == [[1, 7], [3, 7]]
    ids, tt = _ids(3, 7, seed=3, vocab=20), _types(3, 7, seed=4)
    (got,) = run_without_porter([(target, [ids.numpy(), tt.numpy()])], tmp_path)
    want = _torch(net, ids, token_type_ids=tt)
    assert_close(got[0], want[0], what="output")
    assert _run_card_snippet(tmp_path, tmp_path / "t.mlxfn.md", tmp_path / "cli_snippet")  # runs as written
    # the card is part of the output: an existing one is not replaced without --force
    (tmp_path / "u.mlxfn.md").write_text("mine")
    result = runner.invoke(main, ["export", out, "-o", str(tmp_path / "u.mlxfn")])
    assert result.exit_code == 2 and "u.mlxfn.md" in result.output and "--force" in result.output, result.output
    assert not (tmp_path / "u.mlxfn").exists() and (tmp_path / "u.mlxfn.md").read_text() == "mine"
    result = runner.invoke(main, ["export", out, "-o", str(tmp_path / "u.mlxfn"), "--force"])
    assert result.exit_code == 0 and "input_ids" in (tmp_path / "u.mlxfn.md").read_text(), result.output


def test_a_failed_export_leaves_no_card(tmp_path):
    model = bert_tokens_small()
    ids, tt = _ids(2, 6), _types(2, 6)
    ported = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt})
    with pytest.raises(ExportError, match="shapeless"):  # BERT's position-id slice cannot follow a size change
        export_function(ported, tmp_path / "bert.mlxfn", [_mx(ids), _mx(tt)], shapeless=True)
    assert os.listdir(tmp_path) == []
    with pytest.raises(ExportError, match="'card' must be a bool or None"):
        export_function(ported, tmp_path / "bert.mlxfn", [_mx(ids), _mx(tt)], card="yes")
    (tmp_path / "bert.mlxfn.json").mkdir()
    with pytest.raises(ExportError, match="bert.mlxfn.json"):
        export_function(ported, tmp_path / "bert.mlxfn", [_mx(ids), _mx(tt)])
    assert sorted(os.listdir(tmp_path)) == ["bert.mlxfn.json"]
    report = export_function(ported, tmp_path / "plain.mlxfn", [_mx(ids), _mx(tt)], card=False)
    assert report.card_paths == [] and sorted(os.listdir(tmp_path)) == ["bert.mlxfn.json", "plain.mlxfn"]


def test_var_positional_and_var_keyword_inputs(tmp_path):
    from tests.converters.test_keyword_inputs import Star  # forward(x, *extra, scale=None, **named)

    torch.manual_seed(0)
    model = Star().eval()
    x, e, b = torch.randn(2, 5, 4), torch.randn(2, 5, 3), torch.randn(3)
    with pytest.warns(UserWarning, match="static shapes instead"):
        ported = porter.convert(model, (x, e), example_kwargs={"bias": b})
    path = tmp_path / "star.mlxfn"
    report = export_function(ported, path, [_mx(x), _mx(e), _mx(b)])
    assert report.input_names == ["x", "extra[0]", "named['bias']"]
    card = (tmp_path / "star.mlxfn.md").read_text()
    assert "outputs = fn(x, extra0, bias)" in card
    (got,) = run_without_porter([(path, [x.numpy(), e.numpy(), b.numpy()])], tmp_path)
    assert_close(got[0], _torch(model, x, e, bias=b)[0], what="output")
    (snippet,) = _run_card_snippet(tmp_path, tmp_path / "star.mlxfn.md", tmp_path / "snippet")
    assert snippet.shape == (2, 5, 3)
