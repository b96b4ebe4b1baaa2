"""3-d convs against torch: odd sizes, stride, padding, dilation, groups, 16-bit, gradients w.r.t. input, weight and
bias; with the depth-tap decomposition (layers/_conv_engine.py::_depth_taps_conv3d) on (the default) and off. Grouped convs
always take it; one-group convs with >= 16 channels and >= 128 Winograd tiles per tap take it with Winograd on the
native path (the rest: MLX's 3-d conv)."""

import pytest
import torch
from tests.conv_helpers import check_module

import porter.layers._conv_engine as conv_module  # the conv strategies and their switches

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
    ((1, 16, 7, 10, 10), 16, 16, 3, dict(dilation=(2, 1, 1), padding=(2, 1, 1))),  # Winograd taps, dilated depth
    ((1, 4, 7, 6, 5), 4, 6, 3, dict(groups=2, dilation=(2, 1, 1), stride=(2, 1, 2), padding=1)),  # grouped taps
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


@pytest.mark.native_only
def test_winograd_depth_taps_are_cached_by_the_3d_weight():
    """One cache entry per 3-d weight, found again on the next call (a tap sliced per call would miss every time
    and fill the cache)."""
    import mlx.core as mx

    import porter.layers as L
    from porter.layers import _native

    _native.clear_winograd_cache()
    conv = L.Conv3d(16, 16, 3, padding=1)
    conv.eval()  # in training mode the call computes from the gate's copies of the weights (layers/_grad_order.py)
    x = mx.random.normal((1, 5, 13, 11, 16), key=mx.random.key(0))
    first = conv(x)
    mx.eval(first)
    assert _native.winograd_cache_info()["entries"] == 1
    for _ in range(3):
        mx.eval(conv(x))
    assert _native.winograd_cache_info()["entries"] == 1
    assert mx.array_equal(conv(x), first).item()
