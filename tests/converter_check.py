"""Shared check for converter tests: convert a torch model, run both on the same inputs, compare.

Torch is the oracle, run in the test. Layouts are undone through the ported model's recorded input/output
layouts (the one place converter tests handle them). Accuracy bar (float32): max |porter - torch| <=
rel * max |torch|.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import torch

import porter


def to_ported_input(x: torch.Tensor, perm) -> mx.array:
    a = x.detach().numpy()
    if perm is not None:
        a = np.ascontiguousarray(a.transpose(perm))
    return mx.array(a, dtype=mx.float64 if a.dtype == np.float64 else None)  # mx.array reads float64 as float32


def from_ported_output(y, perm) -> np.ndarray:
    a = np.array(y)
    if perm is not None:
        inverse = [perm.index(d) for d in range(len(perm))]
        a = a.transpose(inverse)
    return a


def run_ported(ported, inputs):
    specs = ported.graph["inputs"]
    args = [to_ported_input(x, s["perm"]) for x, s in zip(inputs, specs)]
    out = ported(*args)
    outs = out if isinstance(out, tuple) else (out,)
    return [from_ported_output(o, s["perm"]) if isinstance(o, mx.array) else o
            for o, s in zip(outs, ported.graph["outputs"])]


def assert_matches(ported, model, inputs, rel=1e-4):
    with torch.no_grad():
        expected = model(*inputs)
    expected = torch.utils._pytree.tree_leaves(expected)  # tuples, lists and dicts ({"out": ...}) in order
    actual = run_ported(ported, inputs)
    assert len(actual) == len(expected), f"porter returned {len(actual)} outputs, torch {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor):
            assert a == e, f"output {i}: porter {a!r} != torch {e!r}"
            continue
        e = e.detach().numpy()
        assert a.shape == e.shape, f"output {i}: shape {a.shape} != torch {e.shape}"
        if e.dtype != np.float64:  # Porter computes float64 in float32
            assert a.dtype == e.dtype, f"output {i}: dtype {a.dtype} != torch {e.dtype}"
        if e.dtype.kind in "iub":
            np.testing.assert_array_equal(a, e, err_msg=f"output {i}")
            continue
        nan = np.isnan(e)
        np.testing.assert_array_equal(np.isnan(a), nan, err_msg=f"output {i}: NaN positions differ from torch's")
        a, e = a[~nan], e[~nan]
        infinite = np.isinf(e)
        np.testing.assert_array_equal(a[infinite], e[infinite], err_msg=f"output {i}: infinities differ")
        a, e = a[~infinite], e[~infinite]
        scale = float(np.abs(e).max()) if e.size else 0.0
        err = float(np.abs(a - e).max()) if e.size else 0.0
        assert err <= rel * max(scale, 1e-12), f"output {i}: max abs err {err:.3g} > {rel} * {scale:.3g}"


def check_converted(model, *input_sets, io_layout="torch", rel=1e-4):
    """Convert ``model`` with the first input set and compare with torch on every input set."""
    input_sets = [s if isinstance(s, tuple) else (s,) for s in input_sets]
    ported = porter.convert(model, input_sets[0], io_layout=io_layout)
    for inputs in input_sets:
        assert_matches(ported, model, inputs, rel=rel)
    return ported
