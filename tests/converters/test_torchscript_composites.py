"""TorchScript keeps composite ops as called (``mse_loss``, ``logaddexp``, ``tile``, ``rot90``, ``linspace``,
``cross_entropy``, ``quantile``, ``hstack``, ...), where ``torch.export`` hands Porter their decomposition. Ops
without a converter are now recorded as torch's own decomposition (``converters/capture_script_decompose.py``);
before, each was refused. Scripted and traced, against torch, at the example size with other data; decompositions
that write in place (``quantile``'s ``ceil_``) come out functional."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter


class Composites(nn.Module):
    def forward(self, x, labels):
        b = x.shape[0]
        return (
            F.mse_loss(x, x.flip(-1)), F.smooth_l1_loss(x, x.flip(1), beta=0.5), F.huber_loss(x, x * 0.5),
            F.cross_entropy(x.mean(2), labels, label_smoothing=0.1), F.kl_div(F.log_softmax(x, 1), F.softmax(x.flip(1), 1),
                                                                              reduction="batchmean"),
            F.binary_cross_entropy_with_logits(x, torch.sigmoid(x.flip(2))),
            torch.logaddexp(x, x.flip(1)), torch.tile(x, (1, 2, 1)), torch.rot90(x, 1, (1, 2)),
            x * torch.linspace(0.0, 1.0, 6), torch.hstack([x, x * 2]), torch.quantile(x, 0.3, dim=2),
            torch.cdist(x, x.flip(1) + 1.0, p=1.0), torch.kron(x[0, :2, :2], x[b - 1, :2, :2]),
            torch.isclose(x, x.flip(2), atol=0.5).float(), torch.nansum(x, 1), torch.heaviside(x, x.flip(2)),
            torch.diag_embed(x[:, 0]), torch.tensordot(x, x[0], dims=([1, 2], [0, 1])),
        )


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 4, 6, generator=g), torch.randint(0, 4, (2,), generator=g)


@pytest.mark.parametrize("how", ["script", "trace"])
def test_composite_ops_of_a_torchscript_model(how):
    model = Composites()
    example = _inputs(0)
    frozen = torch.jit.script(model) if how == "script" else torch.jit.trace(model, example)
    port = porter.convert(frozen, example, io_layout="torch")
    x, labels = _inputs(1)
    actual = port(mx.array(x.numpy()), mx.array(labels.numpy()))
    expected = model(x, labels)
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert tuple(a.shape) == tuple(e.shape), (i, a.shape, e.shape)
        np.testing.assert_allclose(np.array(a), e.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


def test_a_composite_without_a_decomposition_is_still_named():
    """A window of a length read from the input (a constant-length one is folded: test_constant_folding.py)."""

    class Windows(nn.Module):
        def forward(self, x):
            return x * torch.blackman_window(x.shape[-1])

    from porter.converters import UnsupportedOpsError  # imported here: the test runs alone too

    with pytest.raises(UnsupportedOpsError, match="blackman_window"):
        porter.convert(torch.jit.trace(Windows(), torch.randn(2, 6)), torch.randn(2, 6), io_layout="torch")
