"""Converted graphs run their transcendental activations and softmax through porter.layers.activation: the native
kernels on CPU (one primitive each, forward and backward) and the pure-MLX ops without them, both checked against
torch on the same model and data (a squeeze-excite block with SiLU and a sigmoid gate, GELU both ways, exp, and an
attention softmax over the last axis and over channels)."""

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.layers import _native

from ..converter_check import assert_matches, run_ported


class ActNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.se1, self.se2 = nn.Conv2d(16, 4, 1), nn.Conv2d(4, 16, 1)
        self.q, self.k = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        y = nn.functional.silu(self.conv(x))
        s = torch.sigmoid(self.se2(nn.functional.silu(self.se1(y.mean((2, 3), keepdim=True)))))
        y = nn.functional.gelu(y * s) + nn.functional.gelu(y, approximate="tanh") + torch.tanh(y)
        y = y + torch.softmax(y, dim=1) + torch.exp(-y.abs())
        t = y.flatten(2).transpose(1, 2)  # (N, HW, C) tokens
        attn = torch.softmax(self.q(t) @ self.k(t).transpose(1, 2) / 4.0, dim=-1)
        return attn @ t


@pytest.mark.parametrize("native", [True, False], ids=["native", "mlx"])
def test_converted_activations_match_torch(native):
    torch.manual_seed(0)
    model = ActNet().eval()
    for p in model.parameters():
        nn.init.normal_(p, std=0.3)  # biases re-randomised too
    if native and not _native.available():
        pytest.fail(f"native kernels unavailable: {_native.status()['reason']}", pytrace=False)
    with _native.use_native(native):
        ported = porter.convert(model, (torch.randn(2, 3, 9, 7),))
        for shape in ((2, 3, 9, 7), (1, 3, 6, 10)):
            assert_matches(ported, model, (torch.randn(*shape),), rel=2e-5)


def test_converted_graph_uses_the_native_kernels(tmp_path):
    if not _native.available():
        pytest.fail(f"native kernels unavailable: {_native.status()['reason']}", pytrace=False)
    model = ActNet().eval()
    x = torch.randn(1, 3, 6, 5)
    with _native.use_native(True):
        ported = porter.convert(model, (x,))
        (out,) = [mx.array(o) for o in run_ported(ported, (x,))]
        spec = ported.graph["inputs"][0]
        xm = mx.array(np.ascontiguousarray(x.numpy().transpose(spec["perm"])))
        mx.export_to_dot(str(tmp_path / "g.dot"), ported(xm))
    dot = (tmp_path / "g.dot").read_text()
    assert "PorterActivation" in dot and "PorterSoftmax" in dot
    assert "Sigmoid" not in dot.replace("PorterActivation", "") and "Erf" not in dot and "Tanh" not in dot
