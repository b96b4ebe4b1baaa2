"""A sparse mixture-of-experts port's graph.json under attack (session 18): the capture (``converters/capture_moe.py``)
records the router as ``topk`` -> ``scatter`` of the top-k weights into a (tokens, experts) matrix, the experts run
densely. A stranger can change ``k``, or feed the scatter an index array of their own (a stored buffer), or a
float array where the index goes. MLX's scatters and gathers do not check bounds themselves.

Already refused (kept here as regressions): ``k`` past the experts or negative, indices out of range in either
direction (the host-side range check). Fixed: a float or bool index array failed inside MLX's evaluation ("Cannot
gather with indices type", a RuntimeError naming nothing); now a TypeError naming the kernel and the node.
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
def test_scatter_index_out_of_range_is_refused(moe, tmp_path, value):
    index = np.zeros((6, 2), np.int64)
    index[3, 1] = value
    model = porter.load(_tampered(moe, tmp_path, _index_from("evil", "int64", "scatter"), {"evil": mx.array(index)}))
    with pytest.raises(ValueError, match=rf"scatter: index {value} is out of range for a dimension of size 4"):
        model(_x())


@pytest.mark.parametrize("dtype", ["float32", "bool"])
def test_a_float_or_bool_index_is_refused_naming_the_kernel_and_node(moe, tmp_path, dtype):
    """torch refuses them too (``scatter(): Expected dtype int32/int64 for index``)."""
    directory = _tampered(moe, tmp_path, _index_from("evil", dtype, "scatter"),
                          {"evil": mx.zeros((6, 2), dtype=mx.bool_ if dtype == "bool" else mx.float32)})
    node = _index_of(json.loads((directory / "graph.json").read_text()), "scatter")
    problem = rf"scatter: expected an integer index array but got .*{dtype} .* node {node}\)"
    with pytest.raises(TypeError, match=problem):
        porter.load(directory)(_x())
    with pytest.raises(RuntimeError, match="Expected dtype int32/int64 for index"):
        torch.zeros(6, 4).scatter(1, torch.zeros(6, 2), torch.ones(6, 2))
