"""TorchScript's own placement operators, which ``torch.ops`` does not expose (``aten::to.prim_Device``: a scripted
``t.to(device)`` whose device is ``Optional``, with or without a dtype and ``copy``; ``aten::cpu``): the interpreter
used to look them up in ``torch.ops`` and failed with a bare "operator aten::to.prim_Device does not exist". Now the
value itself where TorchScript aliases it, ``_to_copy`` where it converts or copies; any other TorchScript-only
operator is refused by name. A scripted packed-sequence LSTM (``pack_padded_sequence``, whose packed sizes follow
the lengths' values) reaches the refusal of its data-dependent ops."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches


class Placement(nn.Module):
    def forward(self, x, idx):
        device: Optional[torch.device] = x.device
        y = x * 1.0
        alias = y.to(device)  # aten::to.prim_Device: y itself, so the in-place write below reaches y
        copy = y.to(device, copy=True)  # a copy: the write below stays in it
        copy.add_(1.0)
        alias.mul_(2.0)
        return y + copy, x.to(device, torch.float64), idx.cpu() + 1


class PackedLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]


def _inputs(batch, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 5, generator=gen), torch.randint(0, 9, (batch,), generator=gen)


def test_scripted_placement_ops_convert():
    """Values, dtypes (float64 from ``to(device, dtype)``, int64 ``cpu()``) and the aliasing as torch's, at two
    batches; the gradient to ``x`` through the alias, the copy and the float64 cast."""
    model = torch.jit.script(Placement().eval())
    ported = porter.convert(model, _inputs(2, 0), io_layout="torch")
    for batch, seed in ((2, 1), (3, 2)):
        assert_matches(ported, Placement().eval(), _inputs(batch, seed))
    out = ported(*(np.asarray(t) for t in _inputs(2, 3)))
    assert [str(o.dtype) for o in out] == ["mlx.core.float32", "mlx.core.float64", "mlx.core.int64"]
    result = grad_parity(Placement().eval(), ported, _inputs(2, 4), rtol=1e-6, atol=1e-9, seed=0)
    assert result["ok"] and len(result["inputs"]) == 1, result


def test_scripted_packed_sequence_is_refused_by_name():
    model = torch.jit.script(PackedLSTM().eval())
    example = (torch.randn(3, 7, 4), torch.tensor([7, 3, 5]))
    with pytest.raises(porter.UnsupportedOpsError, match=r"aten\._pack_padded_sequence"):
        porter.convert(model, example, io_layout="torch")
