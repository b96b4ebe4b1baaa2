"""``torch.tensor([...])`` inside a TorchScript forward (``aten::tensor``: torch.ops cannot take its Python list):
literal data as a constant, data holding graph values (sizes read from the input, a 0-d tensor through ``float``)
built at run time; ``dtype`` honoured, ``device``/``requires_grad`` changing nothing. Scripted and traced modules,
compared with the TorchScript module itself at the example's size and at a second one."""

import warnings

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from tests.converter_check import assert_matches, run_ported


class Literals(nn.Module):
    def forward(self, x):
        w = torch.tensor([[1.0, -2.0], [0.5, 3.0]])  # nested floats: a float32 constant
        idx = torch.tensor([0, 2], dtype=torch.long)
        scale = torch.tensor(2.5)  # the scalar overload
        y = x.index_select(1, idx) @ w * scale
        n = x.shape[1]
        stats = torch.tensor([float(n), 0.25], dtype=torch.float64, device=x.device)  # a size read at run time
        batch = torch.tensor(x.shape[0])  # int64 from a graph value, scalar overload
        flags = torch.tensor([True, False])  # bools
        half = torch.tensor([1.0, float(n)], dtype=torch.float16, requires_grad=False)
        shape = torch.tensor(x.shape)  # a list value (aten::size) as the data
        return y + stats.to(x.dtype).sum() + batch // 2, stats, flags, half, shape  # // : floor_divide.Scalar


class FromTensorValue(nn.Module):
    def forward(self, x):
        peak = float(x.amax())  # a 0-d tensor's value, read through aten::Float
        return x - torch.tensor([peak, 1.0]).sum()


def _x(batch, n, seed=0):
    return torch.randn(batch, n, generator=torch.Generator().manual_seed(seed))


def test_scripted_tensor_literals_follow_the_input():
    scripted = torch.jit.script(Literals().eval())
    assert "aten::tensor" in str(scripted.graph)
    ported = porter.convert(scripted, (_x(2, 3),))
    for x in (_x(2, 3), _x(4, 7, seed=1)):  # a second size: n and the batch are read at run time
        assert_matches(ported, scripted, (x,))
    stats, flags, half, shape = run_ported(ported, (_x(4, 7),))[1:]
    assert shape.tolist() == [4, 7] and shape.dtype == np.int64
    assert stats.tolist() == [7.0, 0.25] and flags.tolist() == [True, False] and half.dtype == np.float16
    kinds = {n["kernel"] for n in ported.graph["nodes"]}
    assert "tensor_from_scalars" in kinds  # the graph-valued ones are built at run time
    assert any(name.startswith("_ts_constant") for name in ported.graph["params"])  # the literal ones are constants


def test_traced_tensor_literals_are_the_traces_constants():
    model = Literals().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's own warning: torch.tensor results become constants
        traced = torch.jit.trace(model, (_x(2, 3),))
    assert "prim::NumToTensor" in str(traced.inlined_graph)  # torch.tensor(x.shape[0]): a size made a tensor
    ported = porter.convert(traced, (_x(2, 3),))
    for x in (_x(2, 3), _x(5, 6, seed=2)):  # the trace baked float(n) in, and reads the batch at run time
        assert_matches(ported, traced, (x,))
    assert_matches(ported, model, (_x(2, 3, seed=3),))
    assert run_ported(ported, (_x(5, 6),))[0].shape == (5, 2)


def test_tensor_literal_from_a_tensor_value():
    scripted = torch.jit.script(FromTensorValue().eval())
    ported = porter.convert(scripted, (_x(2, 5),))
    for x in (_x(2, 5), _x(3, 5, seed=4)):
        assert_matches(ported, scripted, (x,))


def test_the_kernel_refuses_a_shape_its_values_do_not_fill():
    from porter.converters.ops.misc import k_tensor_from_scalars

    assert k_tensor_from_scalars([1, 2.5, mx.array(3.0)], shape=[3], dtype="float32").tolist() == [1.0, 2.5, 3.0]
    assert k_tensor_from_scalars([], shape=[0], dtype="int64").dtype == mx.int64
    with pytest.raises(ValueError, match="2 value\\(s\\) for shape \\(3,\\)"):
        k_tensor_from_scalars([1, 2], shape=[3], dtype="float32")
