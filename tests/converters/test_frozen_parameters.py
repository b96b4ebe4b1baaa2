"""Frozen parameters (``requires_grad_(False)``: Whisper's sinusoidal ``embed_positions``, YOLO's DFL conv, a frozen
backbone): torch gives them no gradient and an optimizer leaves them alone, so the port keeps them out of
``trainable_parameters()`` (they are buffers of the port) while ``torch_parameters()`` still holds them under their
torch names for a strict checkpoint round trip. Torch is the oracle, run in each test."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten
from torch import nn

import porter
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches


class _Frozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(9, 6)
        self.table.requires_grad_(False)
        self.proj = nn.Linear(6, 6)
        self.head = nn.Linear(6, 3)
        self.head.weight.requires_grad_(False)  # the bias trains

    def forward(self, x):
        return self.head(torch.tanh(self.proj(x) + self.table.weight[: x.shape[1]]))


@pytest.mark.parametrize("frontend", ["export", "torchscript"])
def test_frozen_parameters_are_not_trained_and_round_trip(tmp_path, frontend):
    torch.manual_seed(0)
    model = _Frozen().eval()
    source = torch.jit.script(model) if frontend == "torchscript" else model
    ported = porter.convert(source, (torch.randn(2, 5, 6),), io_layout="torch")
    assert_matches(ported, model, (torch.randn(3, 7, 6),))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert set(ported.params) == trainable == {"proj.weight", "proj.bias", "head.bias"}
    assert {"table.weight", "head.weight"} <= set(ported.buffers)
    assert len(tree_flatten(ported.trainable_parameters())) == 3  # what an MLX optimizer would update
    assert set(ported.torch_parameters()) == set(model.state_dict())
    result = grad_parity(model, ported, (torch.randn(2, 4, 6),), rtol=1e-4, atol=1e-6, seed=0)
    assert result["ok"], result
    assert {r["name"] for r in result["parameters"]} == trainable
    porter.save(ported, tmp_path / "frozen")
    loaded = porter.load(tmp_path / "frozen")
    assert set(loaded.params) == trainable
    other = _Frozen()
    other.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in loaded.torch_parameters().items()},
                          strict=True)
    x = torch.randn(1, 3, 6)
    with torch.no_grad():
        torch.testing.assert_close(other(x), model(x))
