"""Attacks on ``graph.json``'s ``train_graph`` (format 7, ``converters/train_graph.py``): the training-mode graph is
checked on load as the eval graph is, with the shared inputs, parameters and layers, and every failure names
``train_graph``, the place and the field; nothing is built from a file that fails."""

import json
import shutil

import pytest
import torch

import porter
from porter import ArtifactError
from tests.converters.train_branch_models import AuxNet, seeded


@pytest.fixture(scope="module")
def train_artifact(tmp_path_factory):
    directory = tmp_path_factory.mktemp("train-graph") / "aux-mlx"
    x = torch.randn(4, 3, 10, 9, generator=torch.Generator().manual_seed(0))
    porter.save(porter.convert(seeded(AuxNet()), (x,)), directory)
    return directory


def _tampered(train_artifact, tmp_path, edit):
    directory = tmp_path / "t-mlx"
    shutil.copytree(train_artifact, directory)
    path = directory / "graph.json"
    graph = json.loads(path.read_text())
    edit(graph)
    path.write_text(json.dumps(graph))
    return directory


def _set(key, value):
    return lambda g: g["train_graph"].__setitem__(key, value)


def _node(edit):
    """Edit the training graph's last node reading a parameter or value (``edit(node, graph)``)."""

    def apply(graph):
        node = graph["train_graph"]["nodes"][-1]
        edit(node, graph)

    return apply


def _call_module(graph):
    return next(n for n in graph["train_graph"]["nodes"] if n["kernel"] == "call_module")


def _eval_only_value(graph):
    """The eval graph defines ``eval_only`` (an identity of its input); the training graph's first node reads it."""
    graph["nodes"].insert(0, {"kernel": "identity", "inputs": [{"ref": "x"}], "attrs": {}, "outputs": ["eval_only"],
                              "layout": None, "op": "", "module": "", "module_type": ""})
    graph["train_graph"]["nodes"][0]["inputs"] = [{"ref": "eval_only"}]


CASES = {  # edit, (where pattern, field)
    "not an object": (lambda g: g.update(train_graph=[1]), ("the file", "train_graph")),
    "no nodes": (lambda g: g["train_graph"].pop("nodes"), ("the file", "train_graph.nodes")),
    "no switch": (lambda g: g["train_graph"].pop("switch"), ("the file", "train_graph.switch")),
    "unknown key": (_set("params", {}), ("the file", "train_graph.params")),
    "nested training graph": (lambda g: g["train_graph"].update(train_graph=dict(g["train_graph"])),
                              ("the file", "train_graph.train_graph")),
    "empty switch": (_set("switch", []), ("the file", "train_graph.switch")),
    "switch not names": (_set("switch", [3]), ("the file", "train_graph.switch[0]")),
    "switch twice": (_set("switch", ["", ""]), ("the file", "train_graph.switch[1]")),
    # session 19: a parameter's path took its layer's mode; a path of empty names its nearest holder's (the root's)
    "switch names a parameter": (_set("switch", ["fc.weight"]), ("the file", "train_graph.switch[0]")),
    "switch through a buffer": (_set("switch", ["", "stem.1.running_mean.x"]), ("the file", "train_graph.switch[1]")),
    "switch not a module path": (_set("switch", ["stem..0"]), ("the file", "train_graph.switch[0]")),
    "switch a lone dot": (_set("switch", ["."]), ("the file", "train_graph.switch[0]")),
    "unknown kernel": (_node(lambda n, g: n.update(kernel="os.system")), ("train_graph: node", "kernel")),
    "undefined value": (_node(lambda n, g: n.update(inputs=[{"ref": "nowhere"}])), ("train_graph: node",
                                                                                    "inputs[0]")),
    "a value only the eval graph defines": (_eval_only_value, ("train_graph: node", "inputs[0]")),
    "unrecorded parameter": (lambda g: _call_module(g).update(inputs=[{"param": "evil.weight"}]),
                             ("train_graph: node", "inputs[0]")),
    "unknown layer": (lambda g: _call_module(g)["attrs"].update(module="not.a.layer"),
                      ("train_graph: node", "attrs.module")),
    "value defined twice": (lambda g: g["train_graph"]["nodes"].append(dict(g["train_graph"]["nodes"][-1])),
                            ("train_graph: node", "outputs[0]")),
    "output of nothing": (lambda g: g["train_graph"]["outputs"][0].update(value={"ref": "nowhere"}),
                          ("train_graph: the file", "outputs[0].value")),
    "single with two outputs": (_set("output_structure", "single"), ("train_graph: the file", "outputs")),
    "tree over too few outputs": (lambda g: g["train_graph"]["output_tree"]["items"].pop(),
                                  ("train_graph: the file", "output_tree")),
    "bad input check": (_set("input_checks", [{"lhs": {"dim": [7, 0]}, "cmp": "eq", "rhs": 1, "guard": "",
                                               "message": ""}]), ("train_graph: input_checks[0]", "lhs.dim[0]")),
    "module output of nothing": (_set("module_outputs", [{"value": "nowhere", "module": "fc", "perm": [0, 1]}]),
                                 ("train_graph: module_outputs[0]", "value")),
    "dtype_follows of an untyped node": (lambda g: g["train_graph"].update(
        dtype_follows=[g["train_graph"]["nodes"][-1]["outputs"][0]]), ("train_graph: the file", "dtype_follows[0]")),
    "under a version-6 header": (lambda g: g.update(format_version=6), ("the file", "train_graph")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_tampered_training_graph_is_refused_by_name(case, train_artifact, tmp_path):
    edit, (where, field) = CASES[case]
    with pytest.raises(ArtifactError) as info:
        porter.load(_tampered(train_artifact, tmp_path, edit))
    assert info.value.where.startswith(where) and info.value.field == field, str(info.value)
    assert info.value.file.endswith("graph.json")


def _append(graph, kernel, inputs, attrs, name):
    graph["train_graph"]["nodes"].append({"kernel": kernel, "inputs": inputs, "attrs": attrs, "outputs": [name],
                                          "layout": None, "op": "", "module": "", "module_type": ""})


def _four_fulls(graph):
    """Four 8 GiB values alive together, in the training graph only (16 GiB past the default bound)."""
    for name in "abcd":
        _append(graph, "full", [[1 << 30, 2], 1.0], {"dtype": "float32"}, name)
    for left, right, out in (("a", "b", "ab"), ("ab", "c", "abc"), ("abc", "d", "abcd")):
        _append(graph, "binary", [{"ref": left}, {"ref": right}], {"fn": "add"}, out)


SIZED = {  # edit, (where, field, message)
    "over the byte bound": (_four_fulls, ("train_graph: nodes", "", "max_graph_bytes")),
    "an axis past the rank": (lambda g: _append(g, "reduce", [{"ref": "relu"}], {"fn": "sum", "axes": [9],
                                                                                 "keepdims": False}, "s"),
                              ("train_graph: node 17 (kernel 'reduce')", "attrs.axes[0]", "out of range for a 4-d")),
}


@pytest.mark.parametrize("case", sorted(SIZED))
def test_the_training_graph_sizes_are_checked_at_load(case, train_artifact, tmp_path):
    """Session 18 walked only the eval graph at the example's sizes: a training graph over the bounds, or with an
    axis past a value's rank, loaded and was refused only by a call in training mode."""
    edit, (where, field, message) = SIZED[case]
    with pytest.raises(ArtifactError, match=message) as info:
        porter.load(_tampered(train_artifact, tmp_path, edit))
    assert (info.value.where, info.value.field) == (where, field), str(info.value)
    assert info.value.file.endswith("graph.json")


def test_the_untampered_artifact_loads(train_artifact):
    """The control: the same folder loads and runs both graphs (so each case above fails for its edit alone)."""
    import mlx.core as mx

    loaded = porter.load(train_artifact)
    x = mx.random.normal((2, 10, 9, 3))
    assert loaded(x).shape == (2, 5)
    loaded.train()
    assert [tuple(o.shape) for o in loaded(x)] == [(2, 5), (2, 5)]


def test_update_keeps_and_checks_the_training_graph(train_artifact, tmp_path):
    """``porter update`` of a format-7 port: the training graph survives, the updated port's training forward is
    torch's with the new weights (auxiliary head included), and a tampered training graph is refused before
    anything is written."""
    import mlx.core as mx
    import numpy as np
    from click.testing import CliRunner

    from porter.cli.main import main
    from tests.security.attack_helpers import assert_input_error

    model = seeded(AuxNet(), 3)
    torch.save(model.state_dict(), tmp_path / "new.pt")
    out = tmp_path / "updated-mlx"
    result = CliRunner().invoke(main, ["update", str(train_artifact), str(tmp_path / "new.pt"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    before, after = (json.loads((d / "graph.json").read_text()) for d in (train_artifact, out))
    assert after["train_graph"] == before["train_graph"] and after["format_version"] == 7
    x = np.random.default_rng(0).standard_normal((2, 3, 10, 9)).astype(np.float32)
    ported = porter.load(out)
    ported.train()
    got = ported(mx.array(x.transpose(0, 2, 3, 1)))
    want = model.train()(torch.from_numpy(x))
    for ours, theirs in zip(got, (want.logits, want.aux_logits)):
        np.testing.assert_allclose(np.array(ours), theirs.detach().numpy(), rtol=1e-5, atol=1e-5)

    bad = _tampered(train_artifact, tmp_path, _set("switch", ["fc.weight"]))
    listing = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(main, ["update", str(bad), str(tmp_path / "new.pt"), "-o", str(tmp_path / "u2")])
    assert_input_error(result, ["graph.json", "train_graph.switch[0]"], directory=tmp_path, listing_before=listing)


@pytest.mark.parametrize("seed", range(24))
def test_a_mutated_training_graph_fails_cleanly(train_artifact, tmp_path, seed):
    """Seeded mutations of the ``train_graph`` record alone (``test_graph_fuzz.py``'s hostile values): the folder
    loads and runs in both modes (and ``trace``), or fails with Porter's errors naming the file, or at run the op or
    the modes; never a ``KeyError``/``IndexError``/``AttributeError`` from inside Porter (350 seeds clean in
    session 19)."""
    import random

    import mlx.core as mx

    from tests.security.attack_helpers import mutate_json
    from tests.security.test_graph_fuzz import HOSTILE

    mutations = []

    def edit(graph):
        mutations.extend(mutate_json(graph["train_graph"], random.Random(seed), HOSTILE, [1, 1, 2, 3]))

    directory = _tampered(train_artifact, tmp_path, edit)
    x = mx.random.normal((2, 10, 9, 3), key=mx.random.key(0))
    try:
        model = porter.load(directory)
        mx.eval(model(x))
        model.train()
        mx.eval(model(x))
        mx.eval(list(model.trace(x)[1].values()))
    except ArtifactError as e:
        assert "graph.json" in str(e), (mutations, str(e))
    except (ValueError, TypeError) as e:
        assert any(s in str(e) for s in ("while running", "input '", "module_outputs", "training")), (mutations, e)
