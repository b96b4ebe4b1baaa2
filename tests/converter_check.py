"""Shared check for converter tests: convert a torch model, run both on the same inputs, compare.

Torch is the oracle, run in the test. Layouts and the bar are porter.compare's (the one place they live): inputs
go into the port's declared input layouts, outputs come back through its output layouts, and each output must
satisfy max |porter - torch| <= rel * max |torch| (NaN where torch has NaN, torch's infinities, integer and bool
outputs exactly). Shapes and dtypes are checked before values.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import torch

import porter
from porter.converters.output_tree import leaves
from porter.compare import RTOL, assert_close, declared_layouts, mlx_to_numpy, port_inputs, to_torch_layout


class Fn(torch.nn.Module):
    """A module whose forward is ``fn`` (a torch function or lambda under test)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def run_ported(ported, inputs, kwargs=None):
    """The port's outputs on torch-layout ``inputs`` (and keyword inputs ``kwargs``, passed by name as to torch),
    in torch's layout, in their own dtypes (numpy)."""
    from porter.converters.capture import example_tensors, with_tensors

    kwargs = kwargs or {}
    arrays, _ = port_inputs(ported, example_tensors(tuple(inputs), kwargs))
    args, kw = with_tensors(tuple(inputs), kwargs, arrays)
    out = ported(*args, **kw)
    count = len(ported.graph["outputs"]) if hasattr(ported, "graph") else len(leaves(out))
    pairs = leaves(out, declared_layouts(ported, "output_layouts", count))  # torch's tree_leaves order
    return [to_torch_layout(mlx_to_numpy(o, widen=False), lay) if isinstance(o, mx.array) else o for o, lay in pairs]


def assert_matches(ported, model, inputs, rel=RTOL, kwargs=None):
    with torch.no_grad():
        expected = model(*inputs, **(kwargs or {}))
    expected = torch.utils._pytree.tree_leaves(expected)  # tuples, lists and dicts ({"out": ...}) in order
    actual = run_ported(ported, inputs, kwargs)
    assert len(actual) == len(expected), f"porter returned {len(actual)} outputs, torch {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor):
            assert a == e, f"output {i}: porter {a!r} != torch {e!r}"
            continue
        e = e.detach().numpy()
        assert a.shape == e.shape, f"output {i}: shape {a.shape} != torch {e.shape}"
        if e.dtype != np.float64:  # Porter computes float64 in float32
            assert a.dtype == e.dtype, f"output {i}: dtype {a.dtype} != torch {e.dtype}"
        # atol rel * 1e-12: an all-zero torch output still allows a relative 1e-12 (the bar this file always had)
        assert_close(a, e, rtol=rel, atol=rel * 1e-12, what=f"output {i}")


def check_converted(model, *input_sets, io_layout="torch", rel=RTOL):
    """Convert ``model`` with the first input set and compare with torch on every input set."""
    input_sets = [s if isinstance(s, tuple) else (s,) for s in input_sets]
    ported = porter.convert(model, input_sets[0], io_layout=io_layout)
    for inputs in input_sets:
        assert_matches(ported, model, inputs, rel=rel)
    return ported


def assert_state_matches(ported, model, rtol=1e-5, atol=1e-6):
    """Every ``state_dict`` entry of ``model`` (running statistics after training steps too) equals the port's."""
    arrays = ported.torch_parameters()
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(np.array(arrays[name]), value.numpy(), rtol=rtol, atol=atol, err_msg=name)
