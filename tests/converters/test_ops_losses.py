"""Losses converted directly because torch's decomposition is not torch's kernel (``converters/ops/losses.py``),
against torch's kernel: values, reductions, 1-d input, a second batch size, gradients, both capture frontends."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
from torch._decomp import get_decompositions

import porter

aten = torch.ops.aten


def _targets(rows, classes, gen):
    """Label lists of every length (none, some, all classes), repeated labels, garbage after the first -1."""
    y = torch.randint(0, classes, (rows, classes), generator=gen)
    for r in range(rows):
        end = r % (classes + 1)
        if end < classes:
            y[r, end] = -1
    return y


def test_torchs_decomposition_of_multilabel_margin_loss_is_not_its_kernel():
    """Why the op has a converter: if torch fixes its decomposition, this fails and the converter may go."""
    decomp = get_decompositions([aten.multilabel_margin_loss_forward])[aten.multilabel_margin_loss_forward.default]
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 7, generator=gen), torch.tensor([[3, 0, -1, 1, 0, 0, 0]] * 4)
    assert not torch.allclose(decomp(x, y, 1)[0], aten.multilabel_margin_loss_forward(x, y, 1)[0])


class _Loss(nn.Module):
    def __init__(self, reduction):
        super().__init__()
        self.loss = nn.MultiLabelMarginLoss(reduction=reduction)

    def forward(self, x, y):
        return self.loss(x * 2, y)


@pytest.mark.parametrize("frontend", ["export", "trace"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss_matches_torch(reduction, frontend):
    """It converted before through torch's decomposition and gave 5.68 where torch gives 1.50."""
    gen = torch.Generator().manual_seed(1)
    model = _Loss(reduction).eval()
    x, y = torch.randn(4, 7, generator=gen), _targets(4, 7, gen)
    source = model if frontend == "export" else torch.jit.trace(model, (x, y))
    ported = porter.convert(source, (x, y), io_layout="torch")
    for rows, classes in ((4, 7), (3, 7), (9, 7)):
        x, y = torch.randn(rows, classes, generator=gen), _targets(rows, classes, gen)
        got = np.array(ported(mx.array(x.numpy()), mx.array(y.numpy())))
        np.testing.assert_allclose(got, model(x, y).numpy(), rtol=1e-6, atol=1e-6)
    x = torch.randn(5, 7, generator=gen, requires_grad=True)
    y = _targets(5, 7, gen)
    model(x, y).sum().backward()
    grad = mx.grad(lambda a: ported(a, mx.array(y.numpy())).sum())(mx.array(x.detach().numpy()))
    np.testing.assert_allclose(np.array(grad), x.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_multilabel_margin_loss_of_one_sample(reduction):
    gen = torch.Generator().manual_seed(2)
    model = _Loss(reduction).eval()
    x, y = torch.randn(6, generator=gen), torch.tensor([5, 1, 5, -1, 0, 3])
    ported = porter.convert(model, (x, y), io_layout="torch")
    got = np.array(ported(mx.array(x.numpy()), mx.array(y.numpy())))
    assert got.shape == tuple(model(x, y).shape)
    np.testing.assert_allclose(got, model(x, y).numpy(), rtol=1e-6, atol=1e-6)


def test_multilabel_margin_loss_refuses_a_label_out_of_range():
    model = _Loss("mean").eval()
    x, y = torch.randn(2, 4), torch.tensor([[1, -1, 0, 0], [3, 2, -1, 0]])
    ported = porter.convert(model, (x, y), io_layout="torch")
    with pytest.raises(ValueError, match="multilabel_margin_loss target: index 4 is out of range"):
        ported(mx.array(x.numpy()), mx.array(np.array([[1, 4, -1, 0], [3, 2, -1, 0]])))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss_of_0d_inputs(reduction):
    """torch takes 0-d scores and label as one sample of one class (a 0-d loss); the port converted that and then
    failed on its first call. Labels 0 and -1 (the only values torch accepts), the gradient, label 1 refused."""
    model = _Loss(reduction).eval()
    ported = porter.convert(model, (torch.tensor(0.7), torch.tensor(0)), io_layout="torch")
    for value, label in ((0.7, 0), (-3.0, -1), (2.5, 0)):
        x = torch.tensor(value, requires_grad=True)
        want = model(x, torch.tensor(label))
        want.backward()
        got = ported(mx.array(value), mx.array(label))
        assert got.shape == tuple(want.shape) == ()
        np.testing.assert_array_equal(np.array(got), want.detach().numpy())
        grad = mx.grad(lambda a: ported(a, mx.array(label)))(mx.array(value))
        np.testing.assert_array_equal(np.array(grad), x.grad.numpy())
    with pytest.raises(ValueError, match="multilabel_margin_loss target: index 1 is out of range"):
        ported(mx.array(0.7), mx.array(1))
