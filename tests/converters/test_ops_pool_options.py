"""Pool/pad options whose exact torch semantics live only in Porter's layers (ceil mode, divisors, dilation,
indices, fractional windows, LP norms, non-constant padding), through the converter."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.converter_check import check_converted

torch.manual_seed(0)


class Fn(nn.Module):
    def __init__(self, fn, channels=3, nd=2):
        super().__init__()
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[nd]
        self.conv = conv(3, channels, 1)
        self.fn = fn

    def forward(self, x):
        return self.fn(self, self.conv(x))


class Fractional(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("samples", torch.rand(4, 3, 2))

    def forward(self, x):
        return F.fractional_max_pool2d(x, 2, output_size=(3, 4), _random_samples=self.samples[: x.shape[0]],
                                       return_indices=True)


CASES = {
    "avg_ceil_no_pad_count": (lambda s, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                              [(2, 3, 8, 8), (1, 3, 7, 10)], 2),
    "avg_divisor_override": (lambda s, x: F.avg_pool2d(x, 2, 1, divisor_override=3), [(2, 3, 5, 5), (1, 3, 6, 4)], 2),
    "avg1d_ceil": (lambda s, x: F.avg_pool1d(x, 3, 2, ceil_mode=True), [(2, 3, 10), (1, 3, 7)], 1),
    "avg3d": (lambda s, x: F.avg_pool3d(x, 2, 1, 1, count_include_pad=False), [(2, 3, 3, 4, 4), (1, 3, 4, 3, 5)], 3),
    "max_dilation_ceil": (lambda s, x: F.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True),
                          [(2, 3, 9, 9), (1, 3, 8, 11)], 2),
    "max_indices_used": (lambda s, x: F.max_pool2d(x, 3, 2, 1, return_indices=True), [(2, 3, 9, 9), (1, 3, 6, 7)], 2),
    "max1d_unpool1d": (lambda s, x: F.max_unpool1d(*F.max_pool1d(x, 2, return_indices=True), 2, output_size=[x.shape[-1]]),
                       [(2, 3, 9), (1, 3, 6)], 1),
    "max3d_unpool3d": (lambda s, x: F.max_unpool3d(*F.max_pool3d(x, 2, return_indices=True), 2),
                       [(2, 3, 4, 4, 4), (1, 3, 2, 6, 4)], 3),
    "adaptive_max_indices": (lambda s, x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True),
                             [(2, 3, 7, 7), (1, 3, 5, 9)], 2),
    "adaptive_max1d": (lambda s, x: F.adaptive_max_pool1d(x, 4), [(2, 3, 9), (1, 3, 13)], 1),
    "lp_pool2d": (lambda s, x: F.lp_pool2d(x.abs() + 0.1, 2.0, 3, stride=2, ceil_mode=True),
                  [(2, 3, 8, 8), (1, 3, 7, 9)], 2),
    "pad_reflect": (lambda s, x: F.pad(x, (1, 2, 2, 1), mode="reflect"), [(2, 3, 5, 5), (1, 3, 4, 6)], 2),
    "pad_replicate_3d": (lambda s, x: F.pad(x, (1, 0, 0, 2, 1, 1), mode="replicate"),
                         [(2, 3, 3, 3, 3), (1, 3, 2, 4, 3)], 3),
    "pad_circular": (lambda s, x: F.pad(x, (2, 1), mode="circular"), [(2, 3, 5), (1, 3, 4)], 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pool_options(name):
    fn, shapes, nd = CASES[name]
    check_converted(Fn(fn, nd=nd).eval(), *[torch.randn(*s) for s in shapes], io_layout="mlx")


def test_fractional_max_pool_with_samples():
    check_converted(Fractional().eval(), torch.randn(2, 3, 9, 10), torch.randn(3, 3, 8, 11), io_layout="torch")


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_conv_padding_mode(mode):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=(1, 2), padding_mode=mode)).eval()
    check_converted(model, torch.randn(2, 3, 6, 6), torch.randn(1, 3, 5, 8), io_layout="mlx")
