"""Antialiased resizing (``F.interpolate(..., antialias=True)``, bilinear and bicubic) through the converter,
against torch at two sizes: downsampling by odd factors, upsampling, sizes and scale factors, align_corners, an
infinity that must stay inside its window, and gradients."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from tests.converter_check import check_converted, run_ported

torch.manual_seed(0)


class Resizes(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)  # channels-last inside the port

    def forward(self, x):
        y = self.conv(x)
        outs = []
        for mode in ("bilinear", "bicubic"):
            outs += [F.interpolate(y, size=(5, 3), mode=mode, antialias=True),  # down by odd factors
                     F.interpolate(y, size=(13, 11), mode=mode, antialias=True),  # up: the plain filter
                     F.interpolate(y, size=(4, 6), mode=mode, antialias=True, align_corners=True)]
        return outs


def test_antialiased_resizes_match_torch_at_two_sizes():
    check_converted(Resizes().eval(), torch.randn(2, 3, 17, 12), torch.randn(1, 3, 23, 9))


def test_an_infinity_stays_inside_its_window():
    class Down(nn.Module):
        def forward(self, x):
            return F.interpolate(x, size=(4, 4), mode="bilinear", antialias=True)

    x = torch.randn(1, 2, 16, 16)
    x[0, 0, 2, 3] = float("inf")
    ported = porter.convert(Down().eval(), x, io_layout="torch")
    (got,) = run_ported(ported, (x,))
    want = Down()(x).numpy()
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_scale_factors_and_gradients(mode):
    # (a scale factor's size arithmetic is a guard Porter checks as static: one size here; torch has no half
    # precision antialiased resize on the CPU to compare with)
    from tests.converters.test_ops_math import _assert_input_grads

    class Down(nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=0.5, mode=mode, antialias=True)

    x = torch.randn(2, 3, 10, 9)
    ported = porter.convert(Down().eval(), x, io_layout="torch")
    (got,) = run_ported(ported, (x,))
    np.testing.assert_allclose(got, Down()(x).numpy(), rtol=1e-5, atol=1e-6)
    _assert_input_grads(ported, Down().eval(), (x,))


def test_float64_resizes_are_float64_precise():
    """float64 inputs take float64 weights (as torch's, computed in the input's dtype): 1e-13 against torch, where
    float32-rounded weights were 1e-7 off."""
    model = Resizes().double().eval()
    ported = porter.convert(model, torch.randn(2, 3, 17, 12, dtype=torch.float64), io_layout="torch")
    for x in (torch.randn(2, 3, 17, 12, dtype=torch.float64), torch.randn(1, 3, 23, 9, dtype=torch.float64)):
        for got, want in zip(run_ported(ported, (x,)), model(x)):
            assert got.dtype == np.float64
            np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-13, atol=1e-13)
