"""A whole-graph bound: bytes alive at once and multiply-adds per call (session 14, converters/graph_budget.py).

Before, each array was bounded on its own (2**31 elements), so a graph.json of a few kilobytes could ask for four
8 GiB ``full``s alive together (32 GiB) or 2**15-square matmuls (2**45 multiply-adds each: hours of CPU). Now
``porter.load`` builds the graph at the example's sizes without evaluating it and refuses one over a bound,
naming graph.json, the node and the argument that raises it; a call is checked again for its actual sizes (dynamic
dims) before anything is evaluated.
"""

import mlx.core as mx
import numpy as np
import pytest

import porter
from porter.converters import ArtifactError
from porter.converters.graph_budget import GraphLimitError

from .attack_helpers import run_porter
from .test_artifact_attacks import _append

GIB8 = [1 << 30, 2]  # float32: 8 GiB, within the per-array limit (2**31 elements) and MLX's int32 dims


def _four_fulls(graph):
    for name in "abcd":
        _append(graph, "full", [GIB8, 1.0], {"dtype": "float32"}, name)
    _append(graph, "binary", [{"ref": "a"}, {"ref": "b"}], {"fn": "add"}, "ab")
    _append(graph, "binary", [{"ref": "ab"}, {"ref": "c"}], {"fn": "add"}, "abc")
    _append(graph, "binary", [{"ref": "abc"}, {"ref": "d"}], {"fn": "add"}, "abcd")


def _matmul_chain(graph):
    _append(graph, "full", [[1 << 15, 1 << 15], 1.0], {"dtype": "float32"}, "m0")
    for i in range(3):
        _append(graph, "matmul", [{"ref": f"m{i}"}, {"ref": f"m{i}"}], {"swap_a": False, "swap_b": False}, f"m{i + 1}")


def _big_svd(graph):
    _append(graph, "full", [[1 << 15, 1 << 15], 1.0], {"dtype": "float32"}, "m")
    _append(graph, "svd", [{"ref": "m"}], {"full_matrices": False}, "usv")


CASES = {
    "an svd of a 2**15-square matrix": (_big_svd, "max_graph_macs", "kernel 'svd'"),
    "four 8 GiB fulls alive together": (_four_fulls, "max_graph_bytes", "kernel 'full'"),
    "a chain of 2**15-square matmuls": (_matmul_chain, "max_graph_macs", "kernel 'matmul'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_graph_over_the_bound_is_refused_at_load(case, tampered):
    edit, argument, where = CASES[case]
    directory = tampered(edit)
    with pytest.raises(ArtifactError) as info:
        porter.load(directory)
    message = str(info.value)
    assert "graph.json" in message and argument in message and where in message, message


def test_the_bound_can_be_raised_explicitly(tampered):
    directory = tampered(_four_fulls)
    model = porter.load(directory, max_graph_bytes=64 << 30)  # built lazily at load: nothing allocated
    assert model.graph_limits["max_bytes"] == 64 << 30
    assert model.astype("float16").graph_limits == model.graph_limits  # a copy keeps the raised bound
    with pytest.raises(ValueError, match="'max_graph_bytes' must be a positive int"):
        porter.load(directory, max_graph_bytes=-1)


def test_sequential_fulls_that_die_at_once_stay_under_the_peak(tampered):
    """Liveness, not a sum: 8 GiB values each freed by the next node count one at a time."""
    def edit(graph):
        for i in range(4):
            _append(graph, "full", [GIB8, 1.0], {"dtype": "float32"}, f"f{i}")
    porter.load(tampered(edit))  # four unread 8 GiB values, never alive together: loads under 16 GiB


def test_each_call_is_checked_for_its_actual_sizes(tiny_artifact):
    """Dynamic dims: the example passes, a larger call goes over the bound and is refused before evaluation."""
    import torch

    directory, model = tiny_artifact
    ported = porter.load(directory)
    ported.set_graph_limits(max_bytes=1 << 20)
    small = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = np.array(ported(mx.array(small.transpose(0, 2, 3, 1))))
    np.testing.assert_allclose(got, model(torch.from_numpy(small)).detach().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(GraphLimitError, match=r"kernel 'call_module' in module 'conv1'.*max_graph_bytes"):
        ported(mx.zeros((1, 256, 256, 3)))


def test_cli_names_the_flag_and_the_flag_raises_it(tampered, tmp_path):
    directory = tampered(_four_fulls)
    against = tmp_path / "missing.pt"
    result = run_porter(["validate", directory, "--against", against], cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in out, out
    assert "Refusing to load" in out and "graph.json" in out and "--max-graph-bytes" in out, out
    result = run_porter(["--max-graph-bytes", str(64 << 30), "validate", directory, "--against", against], cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 2 and "Refusing to load" not in out and "max_graph" not in out, out  # it loaded
    result = run_porter(["--max-graph-bytes", "lots", "validate", directory, "--against", against], cwd=tmp_path)
    assert result.returncode == 2 and "--max-graph-bytes" in result.stdout + result.stderr
