"""``as_strided`` / ``as_strided_copy`` on a model input, a stored tensor (contiguous in torch) or an intermediate the
capture shows owning a storage of exactly its elements (HF Longformer's chunks: symbolic sizes, read at run time): a
gather of positions, compared exactly with torch (overlapping sliding windows, a storage offset, a zero stride, a
buffer), gradients (overlaps accumulate, as torch's), and the refusals (views of other storage, positions past the
end)."""

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
    intermediate.forward = lambda x: torch.as_strided((x * 2)[1:], (2, 2), (1, 2))
    with pytest.raises(NotImplementedError, match="'self'"):
        porter.convert(intermediate.eval(), torch.randn(3, 4), io_layout="torch")
    from porter.converters.ops.shape import k_as_strided

    with pytest.raises(ValueError, match="reach element 12"):
        k_as_strided(mx.zeros((3, 4)), size=[2, 2], stride=[6, 6], offset=0)


# ---------------------------------------------------------------------------------------------------- intermediates
class Chunked(nn.Module):
    """HF Longformer's ``_chunk``: a freshly computed (B, L, D) tensor viewed as chunks of 2w rows, then
    ``as_strided`` into overlapping chunks (step w) by halving the chunk stride; sizes follow L."""

    def __init__(self, w=2):
        super().__init__()
        self.w = w

    def forward(self, x):
        h = (x * 2 + 1).view(x.size(0), x.size(1) // (2 * self.w), 2 * self.w, x.size(2))
        size, stride = list(h.size()), list(h.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
        return h.as_strided(size=size, stride=stride)


def test_an_intermediate_owning_its_storage_matches_torch_at_two_lengths():
    ported = check_converted(Chunked().eval(), torch.randn(2, 8, 3), torch.randn(3, 12, 5), torch.randn(1, 4, 3),
                             rel=0)
    assert [n["kernel"] for n in ported.graph["nodes"] if "as_strided" in n["op"]] == ["as_strided_sized"]  # sizes follow L
    check_converted(Chunked().eval(), torch.randn(2, 8, 3, dtype=torch.float64), rel=0)


def test_a_traced_intermediate_as_strided_converts():
    model = Chunked().eval()
    traced = torch.jit.trace(model, torch.randn(2, 8, 3))
    ported = porter.convert(traced, torch.randn(2, 8, 3), io_layout="torch")
    x = torch.randn(2, 8, 3)
    np.testing.assert_array_equal(np.array(ported(mx.array(x.numpy()))), model(x).numpy())


def test_gradients_through_an_intermediate_as_strided():
    model = Chunked().eval()
    x = torch.randn(2, 8, 3)
    leaf = x.clone().requires_grad_()
    out = model(leaf)
    weight = torch.randn(out.shape)
    (out * weight).sum().backward()
    ported = porter.convert(model, x, io_layout="torch")
    g = mx.grad(lambda v: (ported(v) * mx.array(weight.numpy())).sum())(mx.array(x.numpy()))
    assert_close(np.array(g), leaf.grad.numpy(), rtol=1e-6, what="gradient to the input")


class _Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("fn", [
    lambda x: torch.as_strided((x * 2)[:, 1:], (2, 2), (1, 2)),  # a slice: offset into a larger storage
    lambda x: torch.as_strided((x * 2)[:, :2], (2, 2), (1, 2)),  # a slice at offset 0, storage still larger
    lambda x: torch.as_strided((x * 2)[:2], (2, 2), (1, 2)),  # dense rows at offset 0 of a larger storage
    lambda x: torch.as_strided((x * 2)[:1].expand(3, 4), (2, 2), (1, 2)),  # a zero stride
    lambda x: torch.as_strided((x * 2).view(-1)[2:].view(2, 5), (2, 2), (1, 2)),  # contiguous at an offset
], ids=["slice", "slice_at_0", "rows_at_0", "expanded", "offset_view"])
def test_views_of_other_storage_stay_refused_by_name(fn):
    with pytest.raises(NotImplementedError, match="'self'.*not on a view of other storage"):
        porter.convert(_Lambda(fn).eval(), torch.randn(3, 4), io_layout="torch")


@pytest.mark.parametrize("fn", [
    lambda x: torch.as_strided((x * 2).t().contiguous(), (3, 2), (1, 3)),  # a copy: its storage is its own
    lambda x: torch.as_strided((x * 2).t(), (3, 2), (1, 3)),  # every element, the storage in transposed order
    lambda x: torch.as_strided((x * 2).t().unsqueeze(1), (4, 2), (2, 1)),  # a size-1 dim in between
], ids=["contiguous_copy", "transposed", "unsqueezed"])
def test_an_intermediate_whose_storage_is_its_own_elements_in_any_order(fn):
    check_converted(_Lambda(fn).eval(), torch.randn(3, 4), torch.randn(5, 4), rel=0)


class HeadsChunked(nn.Module):
    """Longformer's query path: a (L, B, H*d) projection seen as (B, H, L, d) and ``reshape``d to (B*H, L, d) is a
    view in torch (B and H merge), so ``_chunk``'s ``as_strided`` reads a storage laid out (L, B*H, d), not in the
    chunked tensor's dim order. Two heads of 3 (static, as a model's head sizes are)."""

    def forward(self, x):
        b, n, _ = x.shape
        projected = (x.transpose(0, 1) * 2 + 1).contiguous()  # (L, B, 6)
        heads = projected.view(n, b, 2, 3).transpose(0, 1).transpose(1, 2).reshape(b * 2, n, 3)
        h = heads.view(b * 2, n // 4, 4, 3)
        size, stride = list(h.size()), list(h.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
        return h.as_strided(size=size, stride=stride)


def test_a_view_in_another_dim_order_reads_its_storage_as_torch_does():
    check_converted(HeadsChunked().eval(), torch.randn(2, 8, 6), torch.randn(3, 12, 6), rel=0)
