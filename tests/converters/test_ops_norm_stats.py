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


class BatchStats(nn.Module):
    """``F.batch_norm`` with no running statistics (the ``batch_norm_batch_stats`` kernel): affine, weight only, bias
    only and none, on a channels-last map, on (N, C) features and on (N, C, L) signals."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6))
        self.b = nn.Parameter(torch.randn(6))

    def forward(self, x, feats, sig):
        F = torch.nn.functional
        return (F.batch_norm(x, None, None, self.w, self.b, training=True, eps=1e-3),
                F.batch_norm(x, None, None, self.w, None, training=True),
                F.batch_norm(feats, None, None, None, self.b, training=True),
                F.batch_norm(sig, None, None, None, None, training=True))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_functional_batch_statistics_values_and_gradients(dtype):
    """Values at two sizes; gradients to the input and to weight and bias through porter.layers' batch-statistics
    VJP (torch's backward formula), against torch's autograd."""
    tdt = getattr(torch, dtype)
    model = BatchStats().to(tdt).eval()
    gen = torch.Generator().manual_seed(4)

    def inputs(n, h, w, length):
        return (torch.randn(n, 6, h, w, generator=gen, dtype=tdt) * 2 + 1,
                torch.randn(n + 2, 6, generator=gen, dtype=tdt), torch.randn(n, 6, length, generator=gen, dtype=tdt))

    sets = [inputs(2, 5, 7, 9), inputs(3, 4, 3, 5)]
    ported = check_converted(model, *sets, io_layout="torch", rel=1e-5 if dtype == "float32" else 1e-12)
    xs = sets[0]
    leaves = [t.clone().requires_grad_() for t in xs]
    outs = model(*leaves)
    weights = [torch.randn(o.shape, generator=gen, dtype=tdt) for o in outs]
    sum((o * w).sum() for o, w in zip(outs, weights)).backward()
    mdt = getattr(mx, dtype)
    wm = [mx.array(w.detach().numpy(), dtype=mdt) for w in weights]

    def loss(params, *arrays):
        ported.update(params)
        return sum((o * w).sum() for o, w in zip(ported(*arrays), wm))

    arrays = [mx.array(t.numpy(), dtype=mdt) for t in xs]
    grads = mx.grad(loss, argnums=(0, 1, 2, 3))(ported.trainable_parameters(), *arrays)
    tol = 1e-4 if dtype == "float32" else 1e-10
    for got, leaf in zip(grads[1:], leaves):
        assert_close(np.array(got), leaf.grad.numpy(), rtol=tol, what="input gradient")
    flat = dict(__import__("mlx.utils", fromlist=["tree_flatten"]).tree_flatten(grads[0]))
    assert_close(np.array(flat["w"]), model.w.grad.numpy(), rtol=tol, what="weight gradient")
    assert_close(np.array(flat["b"]), model.b.grad.numpy(), rtol=tol, what="bias gradient")


def test_batch_statistics_kernel_on_any_axis():
    """The kernel normalizes over every axis but ``axis`` wherever that axis is (moved last for porter.layers'
    normalization and back)."""
    from porter.converters.ops.norm import k_batch_norm_batch_stats

    x = torch.randn(3, 5, 4, 2, dtype=torch.float64)
    w, b = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    expected = torch.nn.functional.batch_norm(x, None, None, w, b, training=True).numpy()
    got = k_batch_norm_batch_stats(*(mx.array(t.numpy(), dtype=mx.float64) for t in (x, w, b)), axis=1, eps=1e-5)
    assert got.shape == x.shape
    assert_close(np.array(got), expected, rtol=1e-12, what="axis 1")
