"""A converted model's plain inference call evaluates ahead while Python builds the rest of the graph
(``converters/runtime.py``: ``OVERLAP_EVERY``). The switch changes no number, under any MLX transform or a per-module
trace, and a call does not hold more memory than building the whole graph first."""

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.converters import runtime


class Chain(nn.Module):
    """Deep enough that most values die long before the call returns: convs, norms, activations, a skip, a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.SiLU())
                                    for _ in range(12))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean((2, 3))), x.amax(1)


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    model = Chain().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):  # statistics away from 0/1, so the norms are not identities
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.5, 0.5)
    x = torch.randn(2, 3, 40, 40)
    return model, x, porter.convert(model, x, io_layout="torch")


def _call(ported, x, every):
    before = runtime.OVERLAP_EVERY
    runtime.OVERLAP_EVERY = every
    try:
        out = ported(x)
        mx.eval(out)
        return out
    finally:
        runtime.OVERLAP_EVERY = before


@pytest.mark.parametrize("every", [1, 3, 8])
def test_overlap_gives_the_same_bits_and_torchs_numbers(case, every):
    model, x, ported = case
    xm = mx.array(x.numpy())
    plain = _call(ported, xm, 0)
    ahead = _call(ported, xm, every)
    with torch.no_grad():
        ref = model(x)
    for p, a, r in zip(plain, ahead, ref):
        np.testing.assert_array_equal(np.array(a), np.array(p))
        np.testing.assert_allclose(np.array(a), r.numpy(), rtol=1e-4, atol=1e-4)


def test_transforms_and_traces_build_the_graph_as_before(case):
    """Under mx.grad, mx.vmap and mx.compile MLX refuses async_eval: the call falls back and gives the same values;
    a per-module trace records every module as before."""
    _, x, ported = case
    xm = mx.array(x.numpy())
    runtime_before = runtime.OVERLAP_EVERY
    try:
        results = {}
        for every in (0, 1):
            runtime.OVERLAP_EVERY = every
            grad = mx.grad(lambda v: ported(v)[0].sum())(xm)
            vmapped = mx.vmap(lambda v: ported(v[None])[0][0])(xm)
            compiled = mx.compile(lambda v: ported(v)[0])(xm)
            _, trace = ported.trace(xm)
            mx.eval(grad, vmapped, compiled)
            results[every] = (np.array(grad), np.array(vmapped), np.array(compiled), sorted(trace))
        for a, b in zip(results[0][:3], results[1][:3]):
            np.testing.assert_array_equal(a, b)
        assert results[0][3] == results[1][3] and len(results[1][3]) > 12
    finally:
        runtime.OVERLAP_EVERY = runtime_before


def test_overlap_holds_no_more_memory(case):
    """Evaluating ahead frees each value after its last reader, as one eval of the whole graph does: the call's peak
    is not above the plain call's (a table holding every node's output to the end would be ~12 maps more). Measured
    (MLX peak, maps of 4x96x96x16): 5.9 either way here; every node (1) 11.0, every other 5.0."""
    _, _, ported = case
    xm = mx.random.normal((4, 3, 96, 96), key=mx.random.key(0))  # torch's layout, as the port was converted
    mx.eval(xm)
    peaks = {}
    for every in (0, 8, 0, 8):
        mx.synchronize()
        mx.reset_peak_memory()
        base = mx.get_active_memory()
        _call(ported, xm, every)
        peaks.setdefault(every, []).append(mx.get_peak_memory() - base)
    one_map = 4 * 96 * 96 * 16 * 4
    assert min(peaks[8]) <= min(peaks[0]) + one_map, peaks
