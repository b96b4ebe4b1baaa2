"""``native_layer_norm`` / ``native_group_norm`` with their ``mean``/``rstd`` outputs read by the model (the
``norm_stats`` kernel, ``converters/ops/norm.py``): values and shapes against torch at two sizes, float64, torch's
bfloat16 statistics, and gradients (torch's layer norm statistics carry none, its group norm's do)."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from porter.compare import assert_close
from tests.converter_check import check_converted

torch.manual_seed(0)


class Stats(nn.Module):
    def __init__(self, channels=6, groups=3):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels))
        self.bias = nn.Parameter(torch.randn(channels))
        self.groups = groups

    def forward(self, x):
        n, c = x.shape[:2]
        hw = x[0, 0].numel()
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, list(x.shape[-2:]), None, None, 1e-5)
        lout, lmean, lrstd = torch.ops.aten.native_layer_norm(x.transpose(1, -1), [c], self.weight, self.bias, 1e-3)
        gout, gmean, grstd = torch.ops.aten.native_group_norm(x, self.weight, self.bias, n, c, hw, self.groups, 1e-5)
        return out * mean + rstd, lmean, lrstd, lout, gout, gmean * 2, grstd


def test_statistics_match_torch_at_two_sizes():
    check_converted(Stats().eval(), torch.randn(2, 6, 5, 7) * 3 + 1, torch.randn(3, 6, 4, 3))


def test_statistics_float64():
    model = Stats().double().eval()
    check_converted(model, torch.randn(2, 6, 5, 7, dtype=torch.float64), rel=1e-12)


def test_bfloat16_statistics_are_bfloat16_as_in_torch():
    model = Stats().eval()
    x = torch.randn(2, 6, 4, 5)
    ported = porter.convert(model, x, io_layout="torch").astype(mx.bfloat16)
    with torch.no_grad():
        expected = model.bfloat16()(x.bfloat16())
    for i, (got, e) in enumerate(zip(ported(mx.array(x.numpy()).astype(mx.bfloat16)), expected)):
        assert got.dtype == mx.bfloat16, i
        assert_close(np.array(got.astype(mx.float32)), e.float().numpy(), rtol=3e-2, what=f"output {i}")


def test_gradients_flow_only_through_the_normalised_output():
    model = Stats().eval()
    x = torch.randn(2, 6, 4, 5)
    leaf = x.clone().requires_grad_()
    outs = model(leaf)
    weights = [torch.randn(o.shape) for o in outs]
    # torch: layer norm's statistics are not differentiable, group norm's are
    assert not outs[1].requires_grad and outs[6].requires_grad
    sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    ported = porter.convert(model, x, io_layout="torch")
    mw = [mx.array(w.numpy()) for w in weights]
    g = mx.grad(lambda v: sum((o * w).sum() for o, w in zip(ported(v), mw)))(mx.array(x.numpy()))
    assert_close(np.array(g), leaf.grad.numpy(), rtol=1e-4, what="gradient to the input")
