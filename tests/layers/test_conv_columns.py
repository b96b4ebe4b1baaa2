"""Strided and dilated 2-d convs through the native im2col and one GEMM (``layers/_conv_engine.py::COLUMNS``) against
torch: values and gradients to input, weight and bias, odd sizes, asymmetric padding, batch 1 and > 1, NaN and inf.

The parity tests run in both backend variants (``tests/layers/conftest.py``): the native one takes the columns path
(>= 16 input channels, float32), the pure-MLX one MLX's conv / the dilation phases; both must match torch.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.conv_helpers import check_functional, check_module

import porter.layers.functional as PF
from porter.layers import _conv_engine as engine
from porter.layers import _native
from porter.layers.conv_weights import torch_conv_weight_to_mlx

# torch layout: x (N, C, H, W), weight (C_out, C_in, kH, kW); kwargs as torch's F.conv2d takes them
CASES = [
    ((2, 16, 9, 11), (8, 16, 3, 3), dict(stride=2, padding=1)),  # ResNet's stride-2 3x3, odd sizes
    ((1, 16, 10, 7), (5, 16, 3, 3), dict(stride=2, padding=1)),  # batch 1, trailing input no output reads
    ((2, 16, 8, 9), (6, 16, 3, 2), dict(stride=(2, 3), padding=(1, 0))),
    ((1, 24, 9, 9), (4, 24, 5, 5), dict(stride=2, padding=2)),
    ((2, 16, 7, 8), (4, 16, 4, 4), dict(stride=2)),  # even kernel, no padding
    ((2, 16, 9, 10), (8, 16, 3, 3), dict(padding=2, dilation=2)),  # DeepLab-style rate 2
    ((1, 16, 12, 11), (4, 16, 3, 3), dict(padding=4, dilation=4)),
    ((2, 16, 9, 8), (6, 16, 3, 3), dict(padding=(1, 3), dilation=(1, 3))),
    ((2, 16, 9, 9), (6, 16, 3, 3), dict(padding=1, dilation=2)),  # padding < d: output smaller than the input
]


@pytest.mark.parametrize("x_shape, w_shape, kwargs", CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_columns_conv_matches_torch(x_shape, w_shape, kwargs, bias):
    check_functional(2, x_shape, w_shape, bias, kwargs)


def test_columns_conv_module_second_size():
    """One module, two input sizes (the columns are laid out per call)."""
    check_module(2, (2, 16, 11, 13), 16, 8, 3, stride=2, padding=1)
    check_module(2, (3, 16, 6, 5), 16, 8, 3, stride=2, padding=1)


@pytest.mark.parametrize("kwargs", [dict(stride=2, padding=1), dict(padding=2, dilation=2)])
def test_nan_and_inf_land_where_torch_puts_them(kwargs):
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 16, 9, 10), torch.randn(8, 16, 3, 3), torch.randn(8)
    x[0, 3, 4, 5] = float("nan")
    x[1, 7, 2, 2] = float("inf")
    expected = F.conv2d(x, w, b, **kwargs).permute(0, 2, 3, 1).numpy()
    xm = mx.array(x.permute(0, 2, 3, 1).numpy())
    got = np.array(PF.conv2d(xm, mx.array(torch_conv_weight_to_mlx(w.numpy())), mx.array(b.numpy()), **kwargs))
    assert np.isnan(expected).any() and np.isinf(expected).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(expected))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)


class _Counter:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.mark.native_only
def test_columns_path_is_taken_and_switch_agrees(monkeypatch):
    """COLUMNS on: the native im2col runs for a strided and a dilated conv; off or capped: MLX's paths, same values;
    too few input channels, float16 or groups: never."""
    counter = _Counter(_native.im2col)
    monkeypatch.setattr(_native, "im2col", counter)
    rng = np.random.default_rng(0)
    x = mx.array(rng.standard_normal((2, 9, 11, 16)).astype(np.float32))
    w = mx.array(rng.standard_normal((8, 3, 3, 16)).astype(np.float32))
    strided = lambda: np.array(PF.conv2d(x, w, stride=2, padding=1))  # noqa: E731
    dilated = lambda: np.array(PF.conv2d(x, w, padding=2, dilation=2))  # noqa: E731
    on = strided(), dilated()
    assert counter.calls == 2
    monkeypatch.setattr(engine, "COLUMNS_MAX_BYTES", 0)
    capped = strided(), dilated()
    monkeypatch.setattr(engine, "COLUMNS_MAX_BYTES", 256 << 20)
    monkeypatch.setattr(engine, "COLUMNS", False)
    off = strided(), dilated()
    assert counter.calls == 2
    for a, b, c in zip(on, capped, off):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-4)
    monkeypatch.setattr(engine, "COLUMNS", True)
    PF.conv2d(x[..., :8], w[..., :8], stride=2, padding=1)  # 8 input channels
    PF.conv2d(x.astype(mx.float16), w.astype(mx.float16), stride=2, padding=1)
    PF.conv2d(x, mx.concatenate([w[..., :8]] * 2), stride=2, padding=1, groups=2)
    assert counter.calls == 2


@pytest.mark.native_only
def test_strided_columns_conv_keeps_its_gradient_path(monkeypatch):
    """The strided conv's forward is the columns path, its gradients are the custom VJP's (no col2im for them)."""
    counter = _Counter(_native.col2im)
    monkeypatch.setattr(_native, "col2im", counter)
    rng = np.random.default_rng(1)
    x = mx.array(rng.standard_normal((2, 9, 11, 16)).astype(np.float32))
    w = mx.array(rng.standard_normal((8, 3, 3, 16)).astype(np.float32))
    mx.eval(mx.grad(lambda a, b: PF.conv2d(a, b, stride=2, padding=1).sum(), argnums=(0, 1))(x, w))
    assert counter.calls == 0
