"""Index arrays of the dtypes torch refuses (session 19), kernel by kernel against torch 2.13 run in the test.

MLX gathers and scatters by any integer dtype, so a uint8, int8 or int16 index array (a stored buffer in a crafted
``graph.json``, or a ``cast`` node) ran where torch refuses it ("gather(): Expected dtype int32/int64 for index"),
and ``x[idx]`` read a uint8 array as positions where torch reads it as a mask (rows 1, 0, 1, 0 for torch's rows 0
and 2). Each kernel now refuses what its torch op refuses (``embedding_bag`` casts narrow integers, as torch does)
and gives torch's values for what it takes. The graph-level naming (node and field, at load for a stored array) is
in ``test_moe_artifacts.py``.
"""

import warnings

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from porter.converters.index_errors import IndexTypeError
from porter.converters.ops.embedding_bag import k_embedding_bag
from porter.converters.ops.misc import k_embedding, k_gather, k_index, k_index_select
from porter.converters.ops.mutation import k_index_put
from porter.converters.ops.scatter import k_index_scatter, k_scatter
from porter.converters.ops.scatter_more import k_put

_X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
_ROWS = np.array([1, 0, 1, 0])  # also a "mask" of 4 entries for x[idx]
_GRID = np.array([[1, 0, 2], [3, 1, 0]])


def _t(values, dtype):
    return torch.from_numpy(values).to(getattr(torch, dtype))


def _m(values, dtype):
    return mx.array(values).astype(getattr(mx, dtype))


# name: (torch op, port kernel), each of (x values, index values, index dtype)
OPS = {
    "gather": (lambda x, i: torch.gather(x, 0, i), lambda x, i: k_gather(x, i, axis=0), _GRID),
    "index_select": (lambda x, i: torch.index_select(x, 0, i), lambda x, i: k_index_select(x, i, axis=0), _ROWS),
    "embedding": (lambda x, i: F.embedding(i, x), lambda x, i: k_embedding(x, i), _ROWS),
    "index": (lambda x, i: x[i], lambda x, i: k_index(x, [i]), _ROWS),
    "index_put": (lambda x, i: x.index_put((i,), torch.tensor(7.0)),
                  lambda x, i: k_index_put(x, [i], mx.array(7.0), accumulate=False), _ROWS),
    "scatter": (lambda x, i: x.scatter(0, i, 1.0), lambda x, i: k_scatter(x, i, 1.0, axis=0, reduce="none",
                                                                            include_self=True), _GRID),
    "index_add": (lambda x, i: x.index_add(0, i, torch.ones(4, 3)),
                  lambda x, i: k_index_scatter(x, i, mx.ones((4, 3)), axis=0, reduce="sum", alpha=1.0), _ROWS),
    "index_copy": (lambda x, i: x.index_copy(0, i, torch.ones(4, 3)),
                   lambda x, i: k_index_scatter(x, i, mx.ones((4, 3)), axis=0, reduce="none", alpha=1.0), _ROWS),
    "put": (lambda x, i: x.put(i, torch.ones(4)), lambda x, i: k_put(x, i, mx.ones((4,)), accumulate=False), _ROWS),
    "embedding_bag": (lambda x, i: F.embedding_bag(i, x, torch.tensor([0, 2]), mode="sum"),
                      lambda x, i: k_embedding_bag(x, i, mx.array([0, 2]), None, mode="sum", include_last=False,
                                                   padding_idx=-1), _ROWS),
}


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_an_index_dtype_is_taken_or_refused_as_torch_does(op, dtype):
    torch_op, port_op, index = OPS[op]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's uint8 mask deprecation
            want = torch_op(torch.from_numpy(_X), _t(index, dtype))
    except (RuntimeError, IndexError) as e:
        refused = e
    else:
        refused = None
    if refused is not None or (op in ("index", "index_put") and dtype == "uint8"):  # torch's uint8 mask
        with pytest.raises(IndexTypeError, match=rf"{op}.*{dtype}"):
            mx.eval(port_op(mx.array(_X), _m(index, dtype)))
        return
    got = port_op(mx.array(_X), _m(index, dtype))
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(np.array(got), want.numpy(), rtol=1e-6, atol=1e-6)


def test_a_uint8_mask_is_what_torch_reads_it_as():
    """The case that made wrong numbers: torch reads [1, 0, 1, 0] as the mask of rows 0 and 2."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.from_numpy(_X)[_t(_ROWS, "uint8")].shape == (2, 3)
    with pytest.raises(IndexTypeError, match="uint8 index is a mask in torch"):
        k_index(mx.array(_X), [_m(_ROWS, "uint8")])


def _stored_index(values, dtype, kernel="index"):
    """An edit: a ``kernel`` node (``x[evil]`` over the batch, or ``x[evil] = 0``) between TinyNet's max pool and
    its next reader, ``evil`` a recorded array of ``values``."""
    import json

    def edit(directory):
        path = directory / "graph.json"
        graph = json.loads(path.read_text())
        graph["params"]["evil"] = {"transform": "identity", "attrs": {}, "trainable": False,
                                   "torch_shape": [len(values)], "dtype": dtype}
        at = next(i for i, n in enumerate(graph["nodes"]) if n["outputs"] == ["max_pool2d"]) + 1
        source = [{"ref": "max_pool2d"}] if kernel == "index_put" else []  # x[evil] = x[evil]
        inputs = [{"ref": "max_pool2d"}, [{"param": "evil"}]] + source
        graph["nodes"].insert(at, {"kernel": kernel, "inputs": inputs,
                                   "attrs": {"accumulate": False} if kernel == "index_put" else {},
                                   "outputs": ["picked"], "layout": [0, 2, 3, 1], "op": "", "module": "",
                                   "module_type": ""})
        for node in graph["nodes"][at + 1:]:
            node["inputs"] = [{"ref": "picked"} if x == {"ref": "max_pool2d"} else x for x in node["inputs"]]
        path.write_text(json.dumps(graph))
        arrays, metadata = mx.load(str(directory / "model.safetensors"), return_metadata=True)
        arrays["evil"] = mx.array(values).astype(getattr(mx, dtype))
        mx.save_safetensors(str(directory / "model.safetensors"), arrays, metadata)
        return directory

    return edit


@pytest.mark.parametrize("kernel", ["index", "index_put"])
@pytest.mark.parametrize("values,dtype,problem", [([0], "uint8", "uint8"), ([3], "int64", "index 3 is out of range"),
                                                  ([0], "int16", "int16")])
def test_a_stored_index_list_is_refused_at_load(tampered, kernel, values, dtype, problem):
    """``x[idx]`` / ``x[idx] = v`` take a list of index arrays: a stored one torch would refuse (or a stored uint8
    "mask" read as positions) is refused at load, naming the node and the input (example batch 1)."""
    import porter

    directory = _stored_index(values, dtype, kernel)(tampered())
    with pytest.raises(porter.ArtifactError, match=problem) as info:
        porter.load(directory)
    assert info.value.field == "inputs[1]" and f"(kernel {kernel!r})" in info.value.where, str(info.value)


def test_a_stored_index_list_torch_takes_still_loads(tampered, tiny_artifact):
    import porter

    directory = _stored_index([0], "int64")(tampered())
    x = np.random.default_rng(0).standard_normal((1, 16, 16, 3)).astype(np.float32)
    np.testing.assert_array_equal(np.array(porter.load(directory)(mx.array(x))),
                                  np.array(porter.load(tiny_artifact[0])(mx.array(x))))
