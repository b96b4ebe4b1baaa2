"""A graph.json whose ``format_version`` is older than what it records (session 17): versions 1 to 5 still load, and
before this check a version-5 header over version 6's ``dtype_follows``, or a version-1 header over a module tree and
a ``drop_block`` node, loaded as if the header said 6. Each feature is refused under a header older than the
version that added it (``converters/format_versions.py``), naming the place and the field; ``porter.save`` writes
the version its graph needs."""

import json
import shutil

import mlx.core as mx
import pytest
import torch

import porter
from porter import ArtifactError
from porter.converters.format_versions import KERNELS, KEYS, NODE_ATTRS, NULL_ATTRS

_DROP_BLOCK = {"kernel": "drop_block", "inputs": [{"ref": "max_pool2d"}], "outputs": ["evil"], "layout": [0, 2, 3, 1],
               "attrs": {"drop_prob": 0.1, "block_size": 3, "gamma_scale": 1.0, "axes": [1, 2]}}
_DEPTH = {"kernel": "stochastic_depth", "inputs": [{"ref": "max_pool2d"}], "outputs": ["evil"],
          "layout": [0, 2, 3, 1], "attrs": {"p": 0.2, "mode": "row", "scale": True, "axis": 0}}

_GQA = {"kernel": "sdpa", "inputs": [{"ref": "max_pool2d"}] * 3, "outputs": ["evil"], "layout": [0, 2, 3, 1],
        "attrs": {"scale": None, "is_causal": False, "gqa": True}}
_GROUPS_AT_RUN_TIME = {"kernel": "group_norm", "inputs": [{"ref": "max_pool2d"}, None, None], "outputs": ["evil"],
                       "layout": [0, 2, 3, 1], "attrs": {"groups": None, "eps": 1e-5}}


def _older(version, edit=None):
    """An edit giving the tiny artifact the header ``version`` and what earlier versions lack removed (from version
    2 on: a version-1 file has no module tree, which the tiny artifact's nodes call), then ``edit``."""

    def apply(graph):
        graph["format_version"] = version
        for key, since in KEYS.items():
            if version == 1:
                break
            if since > version:
                graph.pop(key, None)
        for record in graph["params"].values():
            if version < 3:
                record.pop("state_dict", None)
        if edit is not None:
            edit(graph)

    return apply


def _node(node):
    def edit(graph):
        at = next(i for i, n in enumerate(graph["nodes"]) if n["outputs"] == ["max_pool2d"]) + 1
        graph["nodes"].insert(at, dict(node))
        for later in graph["nodes"][at + 1:]:
            later["inputs"] = [{"ref": "evil"} if x == {"ref": "max_pool2d"} else x for x in later["inputs"]]
    return edit


CASES = {  # version in the header, edit, (where, field) named
    "v5 with dtype_follows": (5, lambda g: g.update(dtype_follows=[]), ("the file", "dtype_follows")),
    "v5 with float32_constants": (5, lambda g: g.update(float32_constants=[]), ("the file", "float32_constants")),
    "v5 with a drop_block node": (5, _node(_DROP_BLOCK), ("node 4 (kernel 'drop_block')", "kernel")),
    "v1 header over a version-6 file": (1, _node(_DROP_BLOCK), ("the file", "modules")),
    "v4 with a stochastic_depth node": (4, _node(_DEPTH), ("node 4 (kernel 'stochastic_depth')", "kernel")),
    "v5 with count_batches": (5, lambda g: g["modules"]["bn1"]["config"].update(count_batches=False),
                              ("modules['bn1']", "config.count_batches")),
    "v4 with a StochasticDepth layer": (4, lambda g: g["modules"].update(
        drop={"type": "StochasticDepth", "config": {"p": 0.1, "mode": "row", "scale": True, "axis": 0}}),
        ("modules['drop']", "type")),
    "v3 with train_refusals": (3, lambda g: g.update(train_refusals={"bn1": "why"}), ("the file", "train_refusals")),
    "v2 with a signature": (2, lambda g: g.update(signature={
        "params": [{"name": "x", "kind": "positional_or_keyword"}], "inputs": [{"param": "x"}]}), ("the file", "signature")),
    "v2 with a state_dict flag": (2, lambda g: g["params"]["fc.bias"].update(state_dict=False),
                                  ("params['fc.bias']", "state_dict")),
    "v1 with the module tree": (1, None, ("the file", "modules")),
    # nested in layer records and node attributes (session 18: loaded before)
    "v3 with a TorchDropout layer": (3, lambda g: g["modules"].update(
        drop={"type": "TorchDropout", "config": {"p": 0.1, "kind": "feature", "axes": [0, 3]}}),
        ("modules['drop']", "type")),
    "v3 with a TorchRReLU layer": (3, lambda g: g["modules"].update(
        act={"type": "TorchRReLU", "config": {"lower": 0.1, "upper": 0.3}}), ("modules['act']", "type")),
    "v3 with instance norm statistics": (3, lambda g: g["modules"].update(norm={"type": "InstanceNorm", "config": {
        "num_features": 8, "eps": 1e-5, "affine": False, "momentum": 0.1, "track_running_stats": False}}),
        ("modules['norm']", "config.momentum")),
    "v4 with an embedding's padding_idx": (4, lambda g: g["modules"].update(emb={"type": "Embedding", "config": {
        "num_embeddings": 4, "embedding_dim": 2, "padding_idx": 0}}), ("modules['emb']", "config.padding_idx")),
    "v3 with sdpa's gqa": (3, _node(_GQA), ("node 4 (kernel 'sdpa')", "attrs.gqa")),
    "v3 with group_norm's null groups": (3, _node(_GROUPS_AT_RUN_TIME),
                                         ("node 4 (kernel 'group_norm')", "attrs.groups")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_feature_newer_than_the_header_is_refused(case, tampered):
    version, edit, (where, field) = CASES[case]
    with pytest.raises(ArtifactError, match="was added in format version") as info:
        porter.load(tampered(_older(version, edit)))
    assert (info.value.where, info.value.field) == (where, field), str(info.value)
    assert info.value.file.endswith("graph.json") and f"says format version {version}" in str(info.value)


def _older_folder(tampered, version):
    """The tiny artifact as a real older folder: graph.json by :func:`_older`, config.json saying the same version."""
    directory = tampered(_older(version))
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "porter_format_version": version}))
    return directory


@pytest.mark.parametrize("version", [2, 3, 5])
def test_an_older_header_over_its_own_features_loads_and_saves_as_it_was(version, tampered, tmp_path):
    """Version 2 to 5 headers over what those versions had: load, compute, and a save keeps the version."""
    model = porter.load(_older_folder(tampered, version))
    x = mx.random.normal((2, 16, 16, 3))
    want = model(x)
    porter.save(model, tmp_path / "again")
    assert json.loads((tmp_path / "again" / "graph.json").read_text())["format_version"] == version
    assert mx.array_equal(porter.load(tmp_path / "again")(x), want).item()


def test_a_save_writes_the_version_the_graph_needs(tampered, tmp_path):
    """A version-5 model given a layer config only version 6 records (count_batches=False) saves as version 6."""
    model = porter.load(_older_folder(tampered, 5))
    model.bn1.count_batches = False
    porter.save(model, tmp_path / "again")
    graph = json.loads((tmp_path / "again" / "graph.json").read_text())
    assert graph["format_version"] == 6 and graph["modules"]["bn1"]["config"]["count_batches"] is False
    porter.load(tmp_path / "again")


def test_every_listed_kernel_is_registered():
    """A kernel renamed without updating the table would lose its version check silently."""
    from porter.converters.registry import get_kernel_spec, kernel_names

    assert set(KERNELS) - {"call_module"} <= set(kernel_names())
    for kernel, attr in [*NODE_ATTRS, *NULL_ATTRS]:  # and an attribute renamed
        assert attr in get_kernel_spec(kernel).attrs, (kernel, attr)


@pytest.mark.parametrize("node", [_GQA, _GROUPS_AT_RUN_TIME,
                                  {**_GROUPS_AT_RUN_TIME, "attrs": {"groups": 8, "eps": 1e-5}}],
                         ids=["gqa", "null groups", "int groups"])
@pytest.mark.parametrize("version", [3, 4])
def test_a_node_attribute_loads_from_the_version_that_added_it(tampered, version, node):
    """The boundary of the nested features: refused one version below (above), accepted at their version; a
    group_norm with its groups recorded was there before (version 3 loads it)."""
    directory = tampered(_older(version, _node(node)))
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "porter_format_version": version}))
    if version == 3 and node["attrs"].get("gqa", node["attrs"].get("groups", 0)) in (True, None):
        with pytest.raises(ArtifactError, match="was added in format version 4"):
            porter.load(directory)
        return
    model = porter.load(directory)
    assert mx.all(mx.isfinite(model(mx.random.normal((2, 16, 16, 3))))).item()


@pytest.mark.parametrize("value", [6.0, True, "6", None, [6]], ids=repr)
def test_config_format_version_must_be_graphs_int(tampered, value):
    """config.json's copy of the version: a float equal to it (6.0 == 6) or a bool loaded before (session 18), a
    string was refused with a message that printed it as the number."""
    directory = tampered()
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "porter_format_version": value}))
    with pytest.raises(ArtifactError, match="expected an int") as info:
        porter.load(directory)
    assert info.value.file.endswith("config.json") and info.value.field == "porter_format_version"


class _Functional(torch.nn.Module):
    """No mapped layer (a version-1 file has no module tree), no parameter; a 1-d input (one that may record a
    ``scalar_size``)."""

    def forward(self, x):
        return torch.softmax(x, dim=-1) * 2.0


@pytest.fixture(scope="module")
def version_1(tmp_path_factory):
    """A real version-1 folder: a port of :class:`_Functional` with its header and config saying 1 and the keys
    version 1 lacked removed."""
    directory = tmp_path_factory.mktemp("v1") / "v1-mlx"
    porter.save(porter.convert(_Functional().eval(), torch.randn(4)), directory)
    graph = json.loads((directory / "graph.json").read_text())
    for key, since in KEYS.items():
        if since > 1:
            graph.pop(key, None)
    for record in graph["params"].values():
        record.pop("state_dict", None)
    graph["format_version"] = 1
    (directory / "graph.json").write_text(json.dumps(graph))
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "porter_format_version": 1}))
    return directory


V1_EDITS = {  # written by version 2's Porter (added after its bump): under a version-1 header, refused
    "compute_dtype": (lambda g: g.update(compute_dtype="float16"), ("the file", "compute_dtype")),
    "tied_weights": (lambda g: g.update(tied_weights={}), ("the file", "tied_weights")),
    "output_tree": (lambda g: g.update(output_structure="tuple", output_tree={"dict": [["y", {"leaf": 0}]]}),
                    ("the file", "output_tree")),
    "an input's scalar_size": (lambda g: g["inputs"][0].update(scalar_size=4), ("input 0 ('x')", "scalar_size")),
}


def test_a_version_1_folder_loads_and_matches_torch(version_1):
    x = torch.randn(4)
    out = porter.load(version_1)(mx.array(x.numpy()))
    assert mx.allclose(out, mx.array(_Functional()(x).numpy()), rtol=1e-6, atol=1e-6).item()


@pytest.mark.parametrize("case", sorted(V1_EDITS))
def test_a_version_2_feature_under_a_version_1_header_is_refused(version_1, tmp_path, case):
    edit, (where, field) = V1_EDITS[case]
    directory = tmp_path / "t-mlx"
    shutil.copytree(version_1, directory)
    graph = json.loads((directory / "graph.json").read_text())
    edit(graph)
    (directory / "graph.json").write_text(json.dumps(graph))
    with pytest.raises(ArtifactError, match="was added in format version 2") as info:
        porter.load(directory)
    assert (info.value.where, info.value.field) == (where, field), str(info.value)
