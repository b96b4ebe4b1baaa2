"""A sparse mixture-of-experts port's graph.json under attack (session 18): the capture (``converters/capture_moe.py``)
records the router as ``topk`` -> ``scatter`` of the top-k weights into a (tokens, experts) matrix, the experts run
densely. A stranger can change ``k``, or feed the scatter an index array of their own (a stored buffer), or a
float array where the index goes. MLX's scatters and gathers do not check bounds themselves.

Already refused (kept here as regressions): ``k`` past the experts or negative. Session 18 fixed a float or bool
index array (it failed inside MLX's evaluation, naming nothing). Session 19: a stored index array (a recorded
parameter, or a value computed from recorded arrays alone) out of range or of a dtype torch refuses (uint8, int16
ran) is refused at load, naming graph.json, the node and the input; an index computed from the call's inputs is
refused by the call, naming the node and the input (``converters/index_errors.py``).
"""

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from tests.models._common import randomize_
from tests.models.mixtral import MixtralSparseMoeBlock


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    torch.manual_seed(0)
    block = randomize_(MixtralSparseMoeBlock(16, 12, num_experts=4, top_k=2), 0).eval()
    directory = tmp_path_factory.mktemp("moe") / "moe-mlx"
    porter.save(porter.convert(block, (torch.randn(2, 3, 16),), io_layout="torch"), directory)
    return directory, block


def _index_of(graph, kernel):
    return next(i for i, n in enumerate(graph["nodes"]) if n["kernel"] == kernel)


def _tampered(moe, tmp_path, edit, arrays=None):
    directory = tmp_path / "t-mlx"
    shutil.copytree(moe[0], directory)
    graph = json.loads((directory / "graph.json").read_text())
    edit(graph)
    (directory / "graph.json").write_text(json.dumps(graph))
    if arrays:
        stored, metadata = mx.load(str(directory / "model.safetensors"), return_metadata=True)
        stored.update(arrays)
        mx.save_safetensors(str(directory / "model.safetensors"), stored, metadata)
    return directory


def _x():
    return mx.array(np.random.default_rng(0).standard_normal((2, 3, 16), dtype=np.float32))


def test_the_untouched_port_matches_torch(moe):
    x = _x()
    want = moe[1](torch.from_numpy(np.array(x)))
    want = want[0] if isinstance(want, tuple) else want
    out = porter.load(moe[0])(x)
    out = out[0] if isinstance(out, (tuple, list)) else out
    np.testing.assert_allclose(np.array(out), want.detach().numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [5, -1, 1 << 40])
def test_topk_past_the_experts_is_refused_at_the_call(moe, tmp_path, k):
    def edit(graph):
        graph["nodes"][_index_of(graph, "topk")]["inputs"][1] = k

    model = porter.load(_tampered(moe, tmp_path, edit))
    with pytest.raises(ValueError, match=rf"k \({k}\) is out of range for a dimension of size 4"):
        model(_x())


def _index_from(name, dtype, kernel):
    def edit(graph):
        graph["params"][name] = {"transform": "identity", "attrs": {}, "trainable": False, "torch_shape": [6, 2],
                                 "dtype": dtype}
        graph["nodes"][_index_of(graph, kernel)]["inputs"][1] = {"param": name}
    return edit


@pytest.mark.parametrize("value", [4, -5, 2**31 - 1])
def test_a_stored_scatter_index_out_of_range_is_refused_at_load(moe, tmp_path, value):
    """A recorded index array no caller can change (session 19: refused at load, naming the node and the input;
    session 18 loaded it and refused the call)."""
    index = np.zeros((6, 2), np.int64)
    index[3, 1] = value
    directory = _tampered(moe, tmp_path, _index_from("evil", "int64", "scatter"), {"evil": mx.array(index)})
    node = _index_of(json.loads((directory / "graph.json").read_text()), "scatter")
    with pytest.raises(porter.ArtifactError, match=rf"scatter: index {value} is out of range for a dimension of "
                                                   "size 4") as info:
        porter.load(directory)
    assert (info.value.where, info.value.field) == (f"node {node} (kernel 'scatter')", "inputs[1]"), str(info.value)
    assert info.value.file.endswith("graph.json")


# torch 2.13: scatter(): Expected dtype int32/int64 for index (float, bool and every 8/16-bit integer)
@pytest.mark.parametrize("dtype", ["float32", "bool", "uint8", "int16"])
def test_a_stored_index_of_a_dtype_torch_refuses_is_refused_at_load(moe, tmp_path, dtype):
    """Session 18 refused float and bool at the call; a uint8 or int16 index ran (MLX gathers by any integer)."""
    directory = _tampered(moe, tmp_path, _index_from("evil", dtype, "scatter"),
                          {"evil": mx.zeros((6, 2), dtype=getattr(mx, "bool_" if dtype == "bool" else dtype))})
    node = _index_of(json.loads((directory / "graph.json").read_text()), "scatter")
    with pytest.raises(porter.ArtifactError, match=rf"scatter: expected an (integer|int32 or int64) index array .*"
                                                   rf"but got .*{dtype}") as info:
        porter.load(directory)
    assert (info.value.where, info.value.field) == (f"node {node} (kernel 'scatter')", "inputs[1]"), str(info.value)
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        torch.zeros(6, 4).scatter(1, torch.zeros(6, 2, dtype=getattr(torch, dtype)), torch.ones(6, 2))


def test_an_index_computed_from_the_input_is_refused_at_the_call_naming_the_node(moe, tmp_path):
    """The router's own top-k indices cast to uint8 in the graph: nothing at load can know the values, so the call
    refuses them, naming the node and the input (a TypeError, as torch's)."""
    def edit(graph):
        at = _index_of(graph, "scatter")
        index = graph["nodes"][at]["inputs"][1]
        graph["nodes"].insert(at, {"kernel": "cast", "inputs": [index], "attrs": {"dtype": "uint8"},
                                   "outputs": ["narrow"], "layout": None, "op": "", "module": "", "module_type": ""})
        graph["nodes"][at + 1]["inputs"][1] = {"ref": "narrow"}

    directory = _tampered(moe, tmp_path, edit)
    node = _index_of(json.loads((directory / "graph.json").read_text()), "scatter")
    model = porter.load(directory)
    with pytest.raises(TypeError, match=rf"scatter: expected an int32 or int64 index array .* node {node}, field "
                                        r"'inputs\[1\]'\)"):
        model(_x())
