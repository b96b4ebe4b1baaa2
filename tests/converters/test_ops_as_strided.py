"""``as_strided`` / ``as_strided_copy`` on a model input or a stored tensor (contiguous in torch): a gather of
positions, compared exactly with torch (overlapping sliding windows, a storage offset, a zero stride, a buffer),
gradients (overlaps accumulate, as torch's), and the refusals (an intermediate value, positions past the end)."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from porter.compare import assert_close
from tests.converter_check import check_converted


class Strided(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(12.0))

    def forward(self, x):
        windows = torch.as_strided(x, (3, 4, 3), (12, 2, 1))  # overlapping windows of each row
        shifted = x.as_strided((2, 5), (1, 3), 2)
        repeated = torch.as_strided(x, (4, 3), (0, 5))  # a zero stride repeats
        return windows, shifted, repeated, torch.as_strided_copy(self.table, (3, 3), (3, 1), 1)


def test_as_strided_matches_torch_exactly():
    check_converted(Strided().eval(), torch.randn(3, 12), rel=0)
    check_converted(Strided().eval(), torch.randn(3, 12, dtype=torch.float64), rel=0)


def test_gradients_accumulate_over_overlaps_as_in_torch():
    model = Strided().eval()
    x = torch.randn(3, 12)
    leaf = x.clone().requires_grad_()
    outs = model(leaf)
    weights = [torch.randn(o.shape) for o in outs]
    sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    ported = porter.convert(model, x, io_layout="torch")
    mw = [mx.array(w.numpy()) for w in weights]
    g = mx.grad(lambda v: sum((o * w).sum() for o, w in zip(ported(v), mw)))(mx.array(x.numpy()))
    assert_close(np.array(g), leaf.grad.numpy(), rtol=1e-6, what="gradient to the input")


def test_refusals_name_the_argument():
    intermediate = nn.Module()
    intermediate.forward = lambda x: torch.as_strided(x.t() * 2, (2, 2), (1, 2))
    with pytest.raises(NotImplementedError, match="'self'"):
        porter.convert(intermediate.eval(), torch.randn(3, 4), io_layout="torch")
    from porter.converters.ops.shape import k_as_strided

    with pytest.raises(ValueError, match="reach element 12"):
        k_as_strided(mx.zeros((3, 4)), size=[2, 2], stride=[6, 6], offset=0)
