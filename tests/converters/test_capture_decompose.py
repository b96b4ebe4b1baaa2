"""Ops without a converter are decomposed by torch's own decompositions (converters/capture_decompose.py): the
composite ops a model calls convert through them, with torch's numbers at two sizes, the size checks and the module
tree intact; programs that need no decomposition are left untouched; what torch cannot decompose is still reported
by name."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from porter.converters import UnsupportedOpsError
from porter.converters.capture_decompose import decompose_unsupported, unsupported_with_decomposition
from tests.converter_check import check_converted, run_ported


class Composites(nn.Module):
    """Composite ops torch.export keeps as called, none of which Porter converts directly."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        a = torch.hstack([y, y]).sum(1, keepdim=True) + torch.tile(y, (1, 2, 1, 1))[:, 2:6]
        b = torch.logaddexp(y, y.flip(1)) + torch.logaddexp2(y, -y) + torch.xlogy(y.abs(), y.abs() + 1)
        c = torch.rot90(y, 2, (2, 3)) + torch.isclose(y, y.round(), atol=0.1).float() + torch.fliplr(y)
        d = (torch.count_nonzero(y > 0, dim=1)[:, None] + torch.nansum(y, 1, keepdim=True)
             + torch.aminmax(y, dim=1)[0][:, None])
        return a + b + c + d, torch.narrow(y, 3, 1, 2), torch.diag_embed(y[:, 0, 0])


def test_composite_ops_convert_with_torchs_numbers_at_two_sizes():
    check_converted(Composites().eval(), torch.randn(2, 3, 8, 9), torch.randn(1, 3, 11, 7))


def test_decomposed_program_keeps_the_module_tree_and_the_size_checks():
    import porter.layers as PL

    model = Composites().eval()
    ported = porter.convert(model, torch.randn(2, 3, 8, 9), io_layout="torch")
    assert isinstance(ported.conv, PL.Conv2d)  # the conv still maps to its layer under torch's name
    with pytest.raises(ValueError, match="size 2 in dim 1"):  # the channel count is still checked by name
        ported(mx.zeros((1, 2, 8, 9)))


def test_programs_with_only_supported_ops_are_not_touched():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    ep = torch.export.export(model, (torch.randn(1, 3, 8, 8),), strict=False)
    assert decompose_unsupported(ep) is ep
    composite = torch.export.export(Composites().eval(), (torch.randn(1, 3, 8, 8),), strict=False)
    table = torch.export.default_decompositions()
    assert unsupported_with_decomposition(composite, table)  # some ops to decompose
    assert not unsupported_with_decomposition(decompose_unsupported(composite), table)  # none left after


def test_an_op_torch_cannot_decompose_is_still_reported_by_name():
    class Gamma(nn.Module):
        def forward(self, x):
            return torch.igamma(x, x) + torch.hstack([x, x]).sum()

    with pytest.raises(UnsupportedOpsError, match="igamma"):
        porter.convert(Gamma().eval(), torch.rand(3, 4) + 1)


def test_an_exported_program_given_directly_is_decomposed_too():
    model = Composites().eval()
    x = torch.randn(2, 3, 8, 9)
    ep = torch.export.export(model, (x,), strict=False)
    ported = porter.convert(ep, io_layout="torch")
    with torch.no_grad():
        want = model(x)
    for got, w in zip(run_ported(ported, (x,)), want):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-5)
