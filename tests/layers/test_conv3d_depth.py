"""3-d convs as a sum over depth taps of 2-d convs (layers/conv.py::_depth_taps_conv3d) against torch: odd sizes,
stride, padding, dilation, groups, 16-bit, gradients w.r.t. input, weight and bias; with the decomposition on (the
default) and off (MLX's 3-d conv for one group). Sizes with >= 16 channels and >= 32 output tiles take Winograd
inside on the native path."""

import pytest
import torch
from conv_helpers import check_module

import porter.layers.conv as conv_module

# (input shape in torch layout, in_channels, out_channels, kernel_size, kwargs)
CASES = [
    ((1, 3, 5, 7, 9), 3, 4, 3, dict(padding=1)),
    ((2, 2, 6, 5, 7), 2, 3, (3, 2, 3), dict(stride=(2, 1, 2), padding=(1, 0, 1))),
    ((1, 2, 7, 6, 5), 2, 3, 3, dict(dilation=(2, 1, 2), padding=(2, 1, 0))),
    ((1, 2, 7, 6, 5), 2, 3, 3, dict(stride=(3, 1, 1), dilation=(2, 1, 1))),
    ((1, 4, 5, 6, 7), 4, 6, (2, 3, 3), dict(groups=2, padding=(0, 1, 1))),
    ((2, 6, 3, 5, 5), 6, 6, (3, 1, 1), dict(padding=(1, 0, 0), groups=3, bias=False)),
    ((1, 3, 4, 9, 9), 3, 5, (1, 7, 7), dict(stride=(1, 2, 2), padding=(0, 3, 3))),  # R(2+1)D / R3D stem shapes
    ((1, 3, 5, 9, 9), 3, 5, (3, 7, 7), dict(stride=(1, 2, 2), padding=(1, 3, 3))),
    ((1, 8, 3, 5, 5), 8, 4, 1, dict(stride=(2, 2, 2))),
    ((1, 16, 5, 13, 11), 16, 16, 3, dict(padding=1)),  # Winograd on each depth tap (native)
    ((2, 16, 4, 9, 10), 16, 24, 3, dict(padding=(2, 1, 1), stride=(2, 1, 1))),  # Winograd, depth stride
    ((1, 16, 4, 12, 12), 16, 16, 3, dict(padding=1, stride=2)),  # the strided 2-d path's custom gradient
]


@pytest.mark.parametrize("depth_as_batch", [True, False])
@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES)
def test_conv3d_matches_torch(monkeypatch, depth_as_batch, x_shape, cin, cout, k, kwargs):
    monkeypatch.setattr(conv_module, "DEPTH_AS_BATCH_3D", depth_as_batch)
    check_module(3, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_conv3d_other_dtypes(dtype):
    check_module(3, (1, 4, 5, 6, 7), 4, 5, 3, dtype=dtype, padding=1, stride=(2, 1, 1))


def test_second_input_size_reuses_the_layer():
    check_module(3, (1, 16, 3, 9, 8), 16, 16, 3, padding=1, seed=2)
    check_module(3, (2, 16, 6, 12, 10), 16, 16, 3, padding=1, seed=2)
