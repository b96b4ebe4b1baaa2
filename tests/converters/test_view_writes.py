"""Writes into views (``y[:, 0] = 1``, ``y[..., 1:] = x``, ``v.add_(1)`` on a slice, ``y[mask] = v``): torch
mutates the base; the port must read the written base afterwards. Torch runs the same data in every test."""

import pytest
import torch
import torch.nn as nn

import porter
from tests.converter_check import check_converted


class Writes(nn.Module):
    def forward(self, x):
        a = x.clone()
        a[:, 0] = 1.0                                   # select + fill_ (of a lifted 0-d tensor)
        a[:, 1].fill_(2.5)
        a[:, 2, :2].zero_()
        b = torch.zeros_like(x)
        b[:, :, 1:] = x[:, :, :-1]                      # slice + copy_ (HF's shift_tokens_right)
        c = x.clone()
        c[:, 1:, ::2] *= 2                              # slice of a slice with a step, in-place mul
        c[-1][0].add_(5)                                # select of select, negative index
        d = x.clone()
        d.view(-1)[::3] = 0.5                           # write through a flattening view
        e = x.clone()
        e.transpose(1, 2)[:, 0] = -1.0                  # write through a transpose
        e.permute(2, 0, 1)[1].relu_()
        f = x.clone()
        f[f > 0.5] = 0.0                                # masked assign (index_put_)
        f[x < -1] = torch.tensor(-1.0)
        g = (x > 0).clone()
        g[:, 0] = True                                  # bool fill
        h = x.clone()
        h.float()[:, 1] = 7.0                           # x.float() is x itself: the write lands in h
        i = x.long()
        i[:, 0] = 3                                     # into an int64 copy
        return a, b, c, d, e, f, g, h, i


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_writes_into_views_reach_the_base(io_layout):
    ported = check_converted(Writes().eval(), torch.randn(2, 4, 6), torch.randn(3, 5, 7), io_layout=io_layout,
                             rel=0)
    ops = {n["op"] for n in ported.graph["nodes"]}
    assert {"aten.select_scatter.default", "aten.slice_scatter.default", "aten.index_put_.default",
            "aten.fill_.Scalar", "aten.fill_.Tensor", "aten.zero_.default", "aten.copy_.default"} <= ops


def test_conv_output_written_through_a_view_in_channels_last():
    class ConvWrite(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            y[:, :, 0, :] = 0.0                         # zero the first row of every channel
            y[:, 1] += 1.0
            return torch.relu(y)

    check_converted(ConvWrite().eval(), torch.randn(2, 3, 6, 5), torch.randn(1, 3, 4, 7), io_layout="mlx",
                    rel=1e-6)


def test_reading_a_view_taken_before_a_write_into_its_base_fails_by_name():
    class Stale(nn.Module):
        def forward(self, x):
            y = x.clone()
            first, second = y[:, 0], y[:, 1]
            first.fill_(2.0)
            return second[:, None] + y  # second would see nothing new, but Porter cannot tell without tracking overlap

    with pytest.raises(NotImplementedError, match="modified in place after the view was taken"):
        porter.convert(Stale(), torch.randn(2, 3, 4))


def test_writing_into_a_chunk_fails_by_name():
    class Chunk(nn.Module):
        def forward(self, x):
            y = x.clone()
            a, b = y.chunk(2, dim=1)
            a.zero_()
            return y

    with pytest.raises(NotImplementedError, match="split/chunk/unbind"):
        porter.convert(Chunk(), torch.randn(2, 4, 3))


def test_reading_a_view_of_a_tensor_written_in_place_afterwards_fails_by_name():
    class BaseWrite(nn.Module):
        def forward(self, x):
            y = x.clone()
            row = y[:, 0]
            y.add_(1.0)  # torch: row sees the +1
            return row * 2

    with pytest.raises(NotImplementedError, match="modified in place after the view was taken"):
        porter.convert(BaseWrite(), torch.randn(2, 3, 4))


class ContiguousWrites(nn.Module):
    """``x.contiguous()`` is ``x`` itself when ``x`` already is contiguous (a write into it reaches ``x``) and a
    copy otherwise (a write stays in the copy, and views of the source stay readable): DeBERTa-v2's ``ConvLayer``
    zeroes ``conv(x.permute(0, 2, 1)).permute(0, 2, 1).contiguous()`` in place."""

    def forward(self, x, mask):
        t = x.permute(0, 2, 1)
        copy = t.contiguous()
        copy.masked_fill_(mask[:, None, :], 0.0)        # a copy: t and x keep their values
        same = x.clone()
        alias = same.contiguous()
        alias[:, 0] = -2.0                              # same itself: the write reaches it
        row = t[:, 0]                                   # a view of x taken before the writes, still valid
        planes = x[:, None].expand(-1, 2, -1, -1).clone()          # (B, 2, L, C), NCHW-contiguous
        cl = planes.contiguous(memory_format=torch.channels_last)  # a channels-last copy
        cl.mul_(3.0)
        return copy, t * 1.0, same, row + 1.0, planes, cl


def test_a_write_into_contiguous_reaches_the_source_only_when_contiguous_aliases_it():
    def inputs(b, length, c, seed):
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(b, length, c, generator=gen), torch.rand(b, length, generator=gen) > 0.5

    ported = check_converted(ContiguousWrites().eval(), inputs(2, 5, 3, 0), inputs(3, 7, 4, 1), rel=0)
    assert "aten.masked_fill_.Scalar" in {n["op"] for n in ported.graph["nodes"]}
