"""Shapes computed at run time are bounded: a node asking for an absurd array raises a ValueError naming the
kernel and the limit (``porter.set_max_elements`` raises it) instead of killing the process."""

import mlx.core as mx
import numpy as np
import pytest

import porter
from porter import ArtifactError
from porter.converters.limits import ResourceLimitError


def _append(graph, kernel, inputs, attrs, name):
    graph["nodes"].append({"kernel": kernel, "inputs": inputs, "attrs": attrs, "outputs": [name], "layout": None,
                           "op": "", "module": "evil", "module_type": ""})


def _x(graph):
    return {"ref": graph["inputs"][0]["name"]}


HUGE = {
    "full": lambda g: _append(g, "full", [[10 ** 6, 10 ** 6, 1000], 1.0], {"dtype": "float32"}, "h"),
    "arange": lambda g: _append(g, "arange", [0, 10 ** 15, 1], {"dtype": "int64"}, "h"),
    "expand": lambda g: _append(g, "expand", [_x(g), [10 ** 7, -1, -1, -1, -1]], {"lead": 1, "perm": [0, 1, 2, 3, 4]},
                                "h"),
    "repeat": lambda g: _append(g, "repeat", [_x(g), [1, 10 ** 5, 10 ** 5, 1]], {"lead": 0, "perm": [0, 1, 2, 3]},
                                "h"),
    "reshape": lambda g: _append(g, "reshape", [_x(g), [10 ** 8, 10 ** 8]], {}, "h"),
    "upsample": lambda g: _append(g, "upsample", [_x(g), [10 ** 6, 10 ** 6]], {"mode": "nearest", "nd": 2}, "h"),
    "upsample scale": lambda g: _append(g, "upsample", [_x(g), None],
                                        {"mode": "linear", "nd": 2, "scale_factors": [1e6, 1e6]}, "h"),
    "pad": lambda g: _append(g, "pad", [_x(g), [0, 10 ** 9, 0, 10 ** 9]],
                             {"mode": "constant", "value": 0.0, "axes": [2, 1]}, "h"),
    "adaptive pool": lambda g: _append(g, "pool", [_x(g), [10 ** 6, 10 ** 6]], {"fn": "adaptive_avg_pool2d"}, "h"),
    "adaptive pool one long dim": lambda g: _append(g, "pool", [_x(g), [10 ** 9, 1]], {"fn": "adaptive_max_pool2d",
                                                                                         "return_indices": True}, "h"),
    "broadcast": lambda g: (_append(g, "full", [[10 ** 5, 1], 1.0], {"dtype": "float32"}, "a"),
                            _append(g, "full", [[1, 10 ** 5], 1.0], {"dtype": "float32"}, "b"),
                            _append(g, "binary", [{"ref": "a"}, {"ref": "b"}], {"fn": "add"}, "h")),
    "int pow": lambda g: _append(g, "int_op", [10, 10 ** 10], {"op": "pow"}, "h"),
    "one_hot classes": lambda g: _append(g, "one_hot", [_x(g)], {"classes": 1 << 24}, "h"),
    "irfft length": lambda g: _append(g, "fft", [_x(g), 10 ** 9], {"kind": "c2r", "axes": [3], "normalization": 0},
                                      "h"),
}


@pytest.mark.parametrize("case", sorted(HUGE))
def test_absurd_runtime_shapes_raise(case, tampered):
    model = porter.load(tampered(HUGE[case]))  # well-formed: the sizes are only known to be absurd at run time
    with pytest.raises(ValueError) as info:
        model(mx.zeros((1, 16, 16, 3)))
    assert "limit" in str(info.value) or "out of range" in str(info.value), str(info.value)


def test_limit_can_be_raised(tampered):
    directory = tampered(lambda g: _append(g, "full", [[3000, 1000], 2.0], {"dtype": "float32"}, "h"))
    model = porter.load(directory)
    x = mx.array(np.random.default_rng(0).standard_normal((1, 16, 16, 3)).astype(np.float32))
    try:
        porter.set_max_elements(1 << 21)
        with pytest.raises(ResourceLimitError, match="3000000 elements"):
            model(x)
        porter.set_max_elements(4_000_000)
        model(x)
    finally:
        porter.set_max_elements(None)
    assert porter.max_elements() == 1 << 31
    with pytest.raises(ValueError, match="limit"):
        porter.set_max_elements(0)


def test_well_formed_but_wrong_graph_raises_value_error(tampered):
    # types and ranges pass the schema; the values only fail at run time: a ValueError naming the kernel, no crash
    cases = [lambda g: _append(g, "int_op", [1, 0], {"op": "floordiv"}, "h"),
             lambda g: _append(g, "upsample", [_x(g), None], {"mode": "linear", "nd": 2, "scale_factors": [2.0, 0.0]},
                               "h"),
             lambda g: _append(g, "getitem", [{"ref": g["nodes"][0]["outputs"][0]}], {"index": 99}, "h"),
             lambda g: _append(g, "select", [_x(g), 99], {"axis": 1}, "h")]
    for i, edit in enumerate(cases):
        model = porter.load(tampered(edit, name=f"w{i}"))
        with pytest.raises((ValueError, TypeError)) as info:
            model(mx.zeros((1, 16, 16, 3)))
        assert "Segmentation" not in str(info.value)


def test_constant_indices_out_of_range_are_refused_at_load(tampered):
    # MLX's gathers do not check bounds: an out-of-range index would read other memory. Computed from constants
    # alone (a ``full``), they are the same at every call: refused at load since session 19 (the call before),
    # naming the node and its index input
    cases = [lambda g: (_append(g, "full", [[1], 10 ** 6], {"dtype": "int64"}, "i"),
                        _append(g, "index_select", [_x(g), {"ref": "i"}], {"axis": 1}, "h")),
             lambda g: (_append(g, "full", [[2], -(10 ** 9)], {"dtype": "int64"}, "i"),
                        _append(g, "embedding", [{"param": "fc.weight"}, {"ref": "i"}], {}, "h")),
             lambda g: (_append(g, "full", [[1, 1, 1, 1], 99], {"dtype": "int64"}, "i"),
                        _append(g, "gather", [_x(g), {"ref": "i"}], {"axis": 2}, "h")),
             lambda g: (_append(g, "full", [[3], 5], {"dtype": "int64"}, "i"),
                        _append(g, "index", [_x(g), [None, None, None, {"ref": "i"}]], {}, "h"))]
    for i, edit in enumerate(cases):
        with pytest.raises(ArtifactError, match="is out of range for a dimension of size") as info:
            porter.load(tampered(edit, name=f"w{i}"))
        assert info.value.field == "inputs[1]" and info.value.file.endswith("graph.json"), str(info.value)


@pytest.mark.parametrize("sharded", [False, True])
def test_weights_larger_than_memory_refused_before_reading(sharded, tiny_artifact, tmp_path, monkeypatch):
    """A sparse file can declare terabytes on no disk: the total is checked against free memory before any tensor
    data is read (here the machine is made to look small)."""
    import porter
    from porter.converters import limits, shards
    from porter.converters.limits import ResourceLimitError

    directory = tmp_path / "art"
    porter.save(porter.load(tiny_artifact[0]), directory, max_shard_size=1000 if sharded else None)
    monkeypatch.setattr(limits, "available_memory", lambda: 1000)
    monkeypatch.setattr(shards, "read_tensors", lambda *a, **k: pytest.fail("tensor data read"))
    with pytest.raises(ResourceLimitError, match="weights of .*art.* more than the 0.00 GiB of memory available"):
        porter.load(directory)
    monkeypatch.undo()
    porter.load(directory)
    assert limits.available_memory() > 1 << 20
