"""A list that several modules share stays shared, with its contents, after a conversion (torch.export puts back a
copy per module: ``converters/capture_containers.py``)."""

from __future__ import annotations

import torch
from torch import nn

import porter
from tests.converter_check import assert_matches


class Writer(nn.Module):
    def __init__(self, outputs, index):
        super().__init__()
        self.conv = nn.Conv1d(2, 2, 3, padding=1)
        self.outputs = outputs
        self.index = index

    def forward(self, x):
        x = self.conv(x)
        self.outputs[self.index] = x * 2
        return x


class SharedList(nn.Module):
    """Two children write into the list the root holds; the root reads it (DynUNet's deep supervision heads)."""

    def __init__(self):
        super().__init__()
        self.outputs = [torch.zeros(1), torch.zeros(1)]
        self.first, self.second = Writer(self.outputs, 0), Writer(self.outputs, 1)
        self.table = {"scale": 3.0}

    def forward(self, x):
        y = self.second(self.first(x))
        return y + self.outputs[0] - self.outputs[1] * self.table["scale"]


def test_a_shared_list_stays_shared_and_the_port_reads_what_the_forward_wrote():
    torch.manual_seed(0)
    model = SharedList().eval()
    ported = porter.convert(model, (torch.randn(2, 2, 7),), io_layout="torch")
    assert model.first.outputs is model.outputs and model.second.outputs is model.outputs
    assert [tuple(t.shape) for t in model.outputs] == [(1,), (1,)]  # the contents from before the capture
    assert model.table == {"scale": 3.0}
    assert_matches(ported, model, (torch.randn(3, 2, 9),))  # torch's model still computes what it did
    x = torch.randn(1, 2, 5)
    with torch.no_grad():
        model(x)
    assert model.outputs[1].shape == (1, 2, 5)
