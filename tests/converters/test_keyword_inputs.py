"""Keyword example inputs end to end: ``porter.convert(model, args, example_kwargs={...})``, the port binding its
call as the torch forward does (``converters/input_binding.py``), save/load, hostile ``signature`` records.
Torch runs in every test."""

from __future__ import annotations

import copy
import json

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.converters.schema import ArtifactError, check_graph
from tests.converter_check import assert_matches, run_ported
from tests.models.text import bert_tokens_small


def _ids(batch, length, seed=0, vocab=30):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, vocab, (batch, length), generator=g)


def _types(batch, length, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (batch, length), generator=g)


def _mask(batch, length):
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, length // 2:] = 0  # padding in the first row: the mask changes the numbers
    return mask


def _mx(t):
    return mx.array(t.numpy())


# ---------------------------------------------------------------------------------------------------- BERT twin
@pytest.mark.parametrize("batch", [1, 2])
def test_bert_with_token_type_ids_only(batch):
    model = bert_tokens_small()
    ids, tt = _ids(batch, 7), _types(batch, 7)
    ported = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt})
    assert ported.input_arguments == ["input_ids", "token_type_ids"]
    assert ported.call_signature.startswith("(input_ids, attention_mask=None, token_type_ids,")
    # the sequence length and the batch stay free for both inputs
    assert {(d["input"], d["axis"]) for d in ported.dynamic_dims} >= {(0, 0), (0, 1), (1, 0), (1, 1)}
    for b, length in ((batch, 7), (3, 11), (1, 5)):
        ids2, tt2 = _ids(b, length, seed=b), _types(b, length, seed=length)
        assert_matches(ported, model, (ids2,), kwargs={"token_type_ids": tt2})
    # token_type_ids changes the numbers: the port really reads it
    with torch.no_grad():
        zeros = model(ids)[0].numpy()
    assert not np.allclose(run_ported(ported, (ids,), {"token_type_ids": tt})[0], zeros, atol=1e-3)
    # given positionally in the forward's order: attention_mask=None in between is the default it was left out with
    with torch.no_grad():
        want = model(ids, None, tt)[0].numpy()
    np.testing.assert_allclose(np.array(ported(_mx(ids), None, _mx(tt))[0]), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError, match="'attention_mask' was left out"):
        ported(_mx(ids), token_type_ids=_mx(tt), attention_mask=_mx(_mask(batch, 7)))
    with pytest.raises(TypeError, match="missing the argument 'token_type_ids'"):
        ported(_mx(ids))


def test_bert_with_attention_mask():
    model = bert_tokens_small()
    ids, mask = _ids(2, 8), _mask(2, 8)
    ported = porter.convert(model, (ids,), example_kwargs={"attention_mask": mask})
    assert ported.input_arguments == ["input_ids", "attention_mask"]
    assert_matches(ported, model, (ids,), kwargs={"attention_mask": mask})
    assert_matches(ported, model, (_ids(3, 13, seed=5),), kwargs={"attention_mask": _mask(3, 13)})
    with torch.no_grad():
        unmasked = model(ids)[0].numpy()
    assert not np.allclose(run_ported(ported, (ids,), {"attention_mask": mask})[0], unmasked, atol=1e-3)
    with pytest.raises(TypeError, match="'attention_mask'"):
        ported(_mx(ids), attention_mask=None)  # captured with a tensor: None would take another path
    with pytest.raises(TypeError, match="'token_type_ids' was left out"):
        ported(_mx(ids), attention_mask=_mx(mask), token_type_ids=_mx(_types(2, 8)))


def test_bert_keywords_in_another_order_than_the_signature():
    model = bert_tokens_small()
    ids, mask, tt = _ids(2, 6), _mask(2, 6), _types(2, 6)
    ported = porter.convert(model, example_kwargs={"token_type_ids": tt, "attention_mask": mask, "input_ids": ids})
    assert ported.input_arguments == ["token_type_ids", "attention_mask", "input_ids"]  # torch.export's order
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, token_type_ids=tt)[0].numpy()
    for call in (lambda: ported(_mx(ids), _mx(mask), _mx(tt)),
                 lambda: ported(attention_mask=_mx(mask), input_ids=_mx(ids), token_type_ids=_mx(tt))):
        np.testing.assert_allclose(np.array(call()[0]), want, rtol=1e-4, atol=1e-5)
    args, kwargs = ported.split_inputs([_mx(tt), _mx(mask), _mx(ids)])  # graph order -> a call
    np.testing.assert_allclose(np.array(ported(*args, **kwargs)[0]), want, rtol=1e-4, atol=1e-5)


def test_binding_errors_name_the_argument():
    model = bert_tokens_small()
    ids, tt = _ids(2, 6), _types(2, 6)
    ported = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt})
    with pytest.raises(TypeError, match="multiple values for argument 'input_ids'"):
        ported(_mx(ids), input_ids=_mx(ids), token_type_ids=_mx(tt))
    with pytest.raises(TypeError, match="unexpected keyword argument 'token_types'"):
        ported(_mx(ids), token_types=_mx(tt))
    with pytest.raises(TypeError, match="missing a required argument: 'input_ids'|missing the argument 'input_ids'"):
        ported(token_type_ids=_mx(tt))
    with pytest.raises(TypeError, match="too many positional arguments"):
        ported(*[_mx(ids)] * 6)


def test_convert_refuses_bad_example_kwargs_by_name():
    model = bert_tokens_small()
    ids = _ids(1, 4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'token_types'"):
        porter.convert(model, (ids,), example_kwargs={"token_types": ids})
    with pytest.raises(TypeError, match="multiple values for argument 'input_ids'"):
        porter.convert(model, (ids,), example_kwargs={"input_ids": ids})
    with pytest.raises(TypeError, match=r"example_kwargs\['attention_mask'\] must be a torch.Tensor"):
        porter.convert(model, (ids,), example_kwargs={"attention_mask": [1, 1]})
    with pytest.raises(TypeError, match="example_kwargs"):
        porter.convert(model, {"input_ids": ids})  # a dict is not positional inputs: it says where keywords go
    with pytest.raises(TypeError, match="an example_kwargs key must be a Python identifier"):
        porter.convert(model, (ids,), example_kwargs={"a.b": ids})


# ---------------------------------------------------------------------------------------------------- *args, **kwargs
class Star(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, *extra, scale=None, **named):
        y = self.fc(x)
        for e in extra:
            y = y * e
        if scale is not None:
            y = y * scale
        return y + named["bias"] if "bias" in named else y


def test_var_positional_and_var_keyword():
    torch.manual_seed(0)
    model = Star().eval()
    x, e, b = torch.randn(2, 5, 4), torch.randn(2, 5, 3), torch.randn(3)
    # torch.export (2.13) takes no dynamic_shapes for a forward whose **kwargs receive entries: static, said so
    with pytest.warns(UserWarning, match="static shapes instead"):
        ported = porter.convert(model, (x, e), example_kwargs={"bias": b})
    assert ported.input_arguments == ["x", "extra[0]", "named['bias']"]
    assert_matches(ported, model, (x, e), kwargs={"bias": b})
    assert_matches(ported, model, (torch.randn(2, 5, 4), torch.randn(2, 5, 3)), kwargs={"bias": torch.randn(3)})
    with pytest.raises(ValueError, match="x"):
        ported(_mx(torch.randn(4, 9, 4)), _mx(torch.randn(4, 9, 3)), bias=_mx(b))
    no_named = porter.convert(model, (x, e), example_kwargs={"scale": torch.randn(3)})  # *args alone stays dynamic
    x2, e2, s2 = torch.randn(4, 9, 4), torch.randn(4, 9, 3), torch.randn(3)
    assert_matches(no_named, model, (x2, e2), kwargs={"scale": s2})
    with pytest.raises(TypeError, match=r"\*extra takes 1 positional input"):
        ported(_mx(x), bias=_mx(b))
    with pytest.raises(TypeError, match="missing the keyword argument 'bias'"):
        ported(_mx(x), _mx(e))
    with pytest.raises(TypeError, match="'shift'"):
        ported(_mx(x), _mx(e), bias=_mx(b), shift=_mx(b))
    with pytest.raises(TypeError, match="'scale' was left out"):
        ported(_mx(x), _mx(e), bias=_mx(b), scale=_mx(b))


# ---------------------------------------------------------------------------------------------------- defaults
class Defaults(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, weight=torch.full((4,), 0.5), shift=None, *, flag=False):
        y = self.fc(x) * weight
        if shift is not None:
            y = y + shift
        return torch.relu(y) if flag else y


def test_tensor_defaults_and_none_defaults():
    torch.manual_seed(0)
    model = Defaults().eval()
    x, w, s = torch.randn(2, 4), torch.randn(4), torch.randn(2, 4)
    left_out = porter.convert(model, (x,))  # the tensor default is a constant of the port
    assert_matches(left_out, model, (x,))
    assert_matches(left_out, model, (torch.randn(5, 4),))
    with pytest.raises(TypeError, match="'weight' was left out"):
        left_out(_mx(x), weight=_mx(w))  # no value equals a tensor default: refused
    np.testing.assert_allclose(np.array(left_out(_mx(x), shift=None)), model(x).detach().numpy(), rtol=1e-5,
                               atol=1e-6)  # None is the default shift was left out with
    given = porter.convert(model, (x,), example_kwargs={"weight": w, "shift": s})
    assert_matches(given, model, (x,), kwargs={"weight": w, "shift": s})
    assert_matches(given, model, (torch.randn(3, 4),), kwargs={"weight": torch.randn(4), "shift": torch.randn(3, 4)})
    with pytest.raises(TypeError, match="missing the argument 'weight'"):
        given(_mx(x), shift=_mx(s))


def test_non_tensor_keywords_are_baked_in():
    torch.manual_seed(0)
    model = Defaults().eval()
    x = torch.randn(2, 4)
    ported = porter.convert(model, (x,), example_kwargs={"flag": True})
    assert "flag=True (fixed)" in ported.call_signature
    with torch.no_grad():
        want = model(x, flag=True).numpy()
    np.testing.assert_allclose(np.array(ported(_mx(x), flag=True)), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="'flag' was converted as True"):
        ported(_mx(x), flag=False)
    with pytest.raises(TypeError, match="'flag' was converted as True"):
        ported(_mx(x), flag=1)  # 1 is not True here: the capture took the bool
    with pytest.raises(TypeError, match="missing the argument 'flag'"):
        ported(_mx(x))  # the forward's default (False) is not what was converted
    none = porter.convert(model, (x,), example_kwargs={"shift": None})  # given as its default: left out
    assert none.input_arguments == ["x"]
    np.testing.assert_allclose(np.array(none(_mx(x))), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------- artifacts
def test_save_load_round_trip_binds_keywords(tmp_path):
    model = bert_tokens_small()
    ids, tt = _ids(1, 6), _types(1, 6)
    ported = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt})
    porter.save(ported, tmp_path / "bert")
    graph = json.loads((tmp_path / "bert" / "graph.json").read_text())
    assert [e["param"] for e in graph["signature"]["inputs"]] == ["input_ids", "token_type_ids"]
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    assert [i.get("keyword") for i in config["inputs"]] == [None, "token_type_ids"]
    assert "token_type_ids=mx.zeros((2, 6), dtype=mx.int64)" in (tmp_path / "bert" / "README.md").read_text()  # the card's usage
    loaded = porter.load(tmp_path / "bert")
    assert loaded.call_signature == ported.call_signature
    ids2, tt2 = _ids(2, 9, seed=3), _types(2, 9, seed=4)
    assert_matches(loaded, model, (ids2,), kwargs={"token_type_ids": tt2})
    with pytest.raises(TypeError, match="'attention_mask' was left out"):
        loaded(_mx(ids2), token_type_ids=_mx(tt2), attention_mask=_mx(_mask(2, 9)))


def test_exported_program_with_keyword_inputs():
    model = bert_tokens_small()
    ids, mask = _ids(2, 6), _mask(2, 6)
    ep = torch.export.export(model, (ids,), {"attention_mask": mask}, strict=False)
    ported = porter.convert(ep)
    assert ported.input_arguments == ["input_ids", "attention_mask"]
    with torch.no_grad():
        want = model(ids, attention_mask=mask)[0].numpy()
    np.testing.assert_allclose(np.array(ported(_mx(ids), attention_mask=_mx(mask))[0]), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError, match="too many positional arguments"):
        ported(_mx(ids), _mx(mask))  # keyword-only in a program: it records no Python signature to place it


class Shift(nn.Module):
    def forward(self, x, shift: torch.Tensor):
        return x + shift


def test_torchscript_refuses_example_kwargs_by_frontend():
    model = torch.jit.script(Shift().eval())
    with pytest.raises(TypeError, match="TorchScript"):
        porter.convert(model, (torch.randn(2, 4),), example_kwargs={"shift": torch.randn(2, 4)})


def _bert_graph():
    model = bert_tokens_small()
    ported = porter.convert(model, (_ids(2, 6),), example_kwargs={"token_type_ids": _types(2, 6)})
    return ported.graph


HOSTILE = {
    "not an identifier": lambda s: s["params"][0].update(name="input ids"),
    "a keyword": lambda s: s["params"][0].update(name="lambda"),
    "a dotted name": lambda s: s["params"][0].update(name="__class__.__init__"),
    "a name given twice": lambda s: s["params"][1].update(name="input_ids"),
    "kinds out of order": lambda s: s["params"].insert(0, {"name": "k", "kind": "keyword_only"}),
    "a required after a default": lambda s: s["params"][1].pop("default"),
    "an unknown kind": lambda s: s["params"][0].update(kind="positional"),
    "an input of an unknown param": lambda s: s["inputs"][1].update(param="labels"),
    "an input bound twice": lambda s: s["inputs"][1].update(param="input_ids"),
    "a missing input entry": lambda s: s["inputs"].pop(),
    "an index on a named param": lambda s: s["inputs"][1].update(index=0),
    "a default that is code": lambda s: s["params"][1].update(default={"value": {"__reduce__": "os.system"}}),
    "a constant that is a list": lambda s: s.update(constants=[{"param": "position_ids", "value": [1, 2]}]),
    "a required param nobody gives": lambda s: s["params"].insert(
        1, {"name": "labels", "kind": "positional_only"}) or s["params"][0].update(kind="positional_only"),
    "an unknown field": lambda s: s.update(code="print(1)"),
    "a long name": lambda s: s["params"][0].update(name="a" * 5000),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_signature_is_refused_naming_the_field(case):
    graph = copy.deepcopy(_BERT_GRAPH or _set_bert_graph())
    HOSTILE[case](graph["signature"])
    with pytest.raises(ArtifactError, match="signature"):
        check_graph(graph)


def test_hostile_signature_on_disk_fails_load(tmp_path):
    model = bert_tokens_small()
    ported = porter.convert(model, (_ids(2, 6),), example_kwargs={"token_type_ids": _types(2, 6)})
    porter.save(ported, tmp_path / "bert")
    path = tmp_path / "bert" / "graph.json"
    graph = json.loads(path.read_text())
    graph["signature"]["params"][0]["name"] = "x; import os"
    path.write_text(json.dumps(graph))
    with pytest.raises(ArtifactError, match="signature"):
        porter.load(tmp_path / "bert")


def test_a_param_named_like_the_port_itself_cannot_shadow_it():
    # names from the file are keys of the call's arguments only: "self", "_program" or "kwargs" bind like any name
    graph = copy.deepcopy(_BERT_GRAPH or _set_bert_graph())
    graph["signature"]["params"][0]["name"] = "self"
    graph["signature"]["params"][2]["name"] = "_program"
    graph["signature"]["inputs"] = [{"param": "self"}, {"param": "_program"}]
    check_graph(graph)
    model = bert_tokens_small()
    ids, tt = _ids(2, 6), _types(2, 6)
    ported = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt})
    twin = type(ported)(graph, ported.named_arrays())
    with torch.no_grad():
        want = model(ids, token_type_ids=tt)[0].numpy()
    np.testing.assert_allclose(np.array(twin(self=_mx(ids), _program=_mx(tt))[0]), want, rtol=1e-4, atol=1e-5)
    assert twin._program is not None and callable(twin.__call__)


_BERT_GRAPH = None


def _set_bert_graph():
    global _BERT_GRAPH
    _BERT_GRAPH = _bert_graph()
    return _BERT_GRAPH


# ---------------------------------------------------------------------------------------------------- tools
def test_validate_bench_and_export_on_a_keyword_port(tmp_path):
    from click.testing import CliRunner

    from porter.cli.main import main
    from porter.export import ExportError, export_function

    model = bert_tokens_small()
    ids, tt = _ids(2, 6), _types(2, 6)
    ported = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt})
    torch.manual_seed(0)
    report = porter.validate(model, ported, [(ids, tt), (_ids(3, 9), _types(3, 9))])  # the port's input order
    assert report.ok, str(report)
    assert porter.validate(model, ported).ok  # default inputs: from the port's recorded inputs, a second size
    report = export_function(ported, str(tmp_path / "bert.mlxfn"), [_mx(ids), _mx(tt)])  # positional, graph order
    assert report.input_names == ["input_ids", "token_type_ids"]
    with pytest.raises(ExportError, match="the model refuses them"):  # a missing input: the port's own refusal
        export_function(ported, str(tmp_path / "bert.mlxfn"), [_mx(ids)])
    porter.save(ported, tmp_path / "bert")
    result = CliRunner().invoke(main, ["bench", str(tmp_path / "bert"), "--batch", "1,2", "--input-shape",
                                       "2,6:int64", "--input-shape", "2,6:int64", "--repeat", "1", "--warmup", "0"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["export", str(tmp_path / "bert"), "-o", str(tmp_path / "b.mlxfn"),
                                       "--input-shape", "2,6:int64", "--input-shape", "2,6:int64"])
    assert result.exit_code == 0 and "fn(input_ids, token_type_ids)" in result.output, result.output
    with torch.no_grad():
        want = model(ids, token_type_ids=tt)[0].numpy()
    got = mx.import_function(str(tmp_path / "b.mlxfn"))(_mx(ids), _mx(tt))[0]
    np.testing.assert_allclose(np.array(got), want, rtol=1e-4, atol=1e-5)


def test_a_graph_without_signature_takes_its_inputs_positionally():
    # an artifact written before the signature was recorded (or a program without in_spec) still loads and runs
    torch.manual_seed(0)
    model = Defaults().eval()
    x = torch.randn(2, 4)
    ported = porter.convert(model, (x,))
    graph = copy.deepcopy(ported.graph)
    del graph["signature"]
    check_graph(graph)
    old = type(ported)(graph, ported.named_arrays())
    np.testing.assert_allclose(np.array(old(_mx(x))), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert old.call_signature == "(input0, /)" and old.split_inputs([1]) == ([1], {})
    with pytest.raises(TypeError, match="keyword argument 'x'.*positionally"):
        old(x=_mx(x))
    with pytest.raises(TypeError, match="expects 1 input"):
        old(_mx(x), _mx(x))


def test_keyword_inputs_follow_dynamic_modes_and_dtype():
    model = bert_tokens_small()
    ids, tt = _ids(2, 6), _types(2, 6)
    batch_only = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt}, dynamic="batch")
    assert sorted((d["input"], d["axis"]) for d in batch_only.dynamic_dims) == [(0, 0), (1, 0)]
    assert_matches(batch_only, model, (_ids(4, 6),), kwargs={"token_type_ids": _types(4, 6)})
    with pytest.raises(ValueError, match="token_type_ids|input_ids"):
        batch_only(_mx(_ids(2, 9)), token_type_ids=_mx(_types(2, 9)))  # the sequence length was made static
    half = porter.convert(model, (ids,), example_kwargs={"token_type_ids": tt}, dtype="float16")
    with torch.no_grad():
        want = model(ids, token_type_ids=tt)[0].numpy()
    got = np.array(half(_mx(ids), token_type_ids=_mx(tt))[0].astype(mx.float32))
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
