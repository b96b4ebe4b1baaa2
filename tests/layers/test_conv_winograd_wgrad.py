"""The weight gradient of Winograd 3x3 convs computed in the Winograd domain (``layers/_native.py``,
``WINOGRAD_WEIGHT_GRAD_MIN_TILES``: ``V^T @ dM`` and the weight transform's adjoint) against torch: values, input and
weight gradients, odd sizes (cropped edge tiles), every padding the path takes, channel counts without a 16-lane
multiple, inf/NaN placement, and which convs take it. Torch runs in each test."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from tests.conv_helpers import check_functional, check_module

import porter.layers._conv_engine as conv_module
import porter.layers.functional as PF
from porter.layers import _native

pytestmark = pytest.mark.native_only  # tests/layers/conftest.py: the native variant only


class _Spy:
    """Counts the Winograd-domain weight gradients (calls of the weight-transform adjoint)."""

    def __init__(self, monkeypatch, min_tiles=1):
        self.calls = 0
        module = _native.kernels()
        real = module.winograd3d_weight_adjoint

        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, "winograd3d_weight_adjoint", call)
        monkeypatch.setattr(_native, "WINOGRAD_WEIGHT_GRAD_MIN_TILES", min_tiles)
        monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES", 1)
        monkeypatch.setattr(conv_module, "WINOGRAD_MIN_CHANNELS", 1)


def _nhwc(t: torch.Tensor) -> mx.array:
    return mx.array(t.detach().movedim(1, -1).contiguous().numpy())


def _w(t: torch.Tensor) -> mx.array:
    return mx.array(t.detach().permute(0, 2, 3, 1).contiguous().numpy())


@pytest.mark.parametrize("x_shape, cin, cout, kwargs", [
    ((2, 16, 9, 7), 16, 32, dict(padding=1)),
    ((2, 17, 8, 11), 17, 33, dict(padding=1)),
    ((3, 20, 5, 6), 20, 3, dict(padding=0)),
    ((1, 32, 7, 7), 32, 48, dict(padding=2)),
    ((2, 24, 10, 9), 24, 24, dict(padding=(0, 1))),
    ((2, 24, 10, 9), 24, 24, dict(padding=(2, 1), bias=False)),
    ((16, 6, 6), 16, 16, dict(padding=1)),  # unbatched
    ((2, 16, 3, 3), 16, 16, dict(padding=0)),  # one output pixel
    ((2, 16, 8, 8), 16, 16, dict(padding=1, padding_mode="reflect")),
])
def test_module_gradients_match_torch_through_the_winograd_weight_gradient(x_shape, cin, cout, kwargs, monkeypatch):
    spy = _Spy(monkeypatch)
    check_module(2, x_shape, cin, cout, 3, **kwargs)
    assert spy.calls > 0


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("x_shape, w_shape, args", [
    ((2, 32, 13, 11), (48, 32, 3, 3), dict(padding=1)),
    ((2, 16, 6, 9), (16, 16, 3, 3), dict(padding=(2, 0))),
])
def test_functional_gradients_match_torch_through_the_winograd_weight_gradient(x_shape, w_shape, args, bias,
                                                                               monkeypatch):
    spy = _Spy(monkeypatch)
    check_functional(2, x_shape, w_shape, bias, args)
    assert spy.calls > 0


def _grads(x, w, padding, cot):
    """torch's and Porter's (input, weight) gradients of ``sum(conv(x, w) * cot)``, torch layout."""
    xt, wt = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    (TF.conv2d(xt, wt, padding=padding) * cot).sum().backward()

    def loss(a, b):
        return (PF.conv2d(a, b, padding=padding) * _nhwc(cot)).sum()

    gx, gw = mx.grad(loss, argnums=(0, 1))(_nhwc(x), _w(w))
    return (xt.grad.numpy(), wt.grad.numpy()), (np.moveaxis(np.array(gx), -1, 1), np.array(gw).transpose(0, 3, 1, 2))


def test_default_threshold_takes_the_path_for_resnet_sized_maps_only(monkeypatch):
    """At the default threshold a 64-channel 32x32 map at batch 2 (512 tiles) takes the Winograd weight gradient and
    a 7x7 map at batch 2 (32 tiles) keeps MLX's; both match torch."""
    spy = _Spy(monkeypatch, min_tiles=_native.WINOGRAD_WEIGHT_GRAD_MIN_TILES)
    torch.manual_seed(0)
    for hw, calls in ((32, 1), (7, 1)):
        x, w = torch.randn(2, 64, hw, hw), torch.randn(64, 64, 3, 3) * 0.05
        cot = torch.randn(2, 64, hw, hw)
        (tx, tw), (px, pw) = _grads(x, w, 1, cot)
        np.testing.assert_allclose(px, tx, rtol=1e-4, atol=1e-4 * np.abs(tx).max())
        np.testing.assert_allclose(pw, tw, rtol=1e-4, atol=1e-4 * np.abs(tw).max())
        assert spy.calls == calls


@pytest.mark.parametrize("where", ["x_nan", "x_inf", "cot_inf", "cot_nan", "cot_inf_corner", "cot_inf_edge"])
def test_non_finite_values_reach_the_weight_gradient_torch_gives_them(where, monkeypatch):
    """A weight gradient that is not finite is redone as a direct sum: torch's NaN/inf pattern per weight entry. An
    inf in the cotangent at an output whose window reads padding stays inf for the taps on real input and leaves
    the padding taps finite, as torch's 2-d kernels (no inf * padding zero = NaN: MLX's own conv gradient, and the
    weight gradient below WINOGRAD_WEIGHT_GRAD_MIN_TILES, still give NaN there)."""
    spy = _Spy(monkeypatch)
    torch.manual_seed(1)
    x, w = torch.randn(2, 20, 10, 9), torch.randn(24, 20, 3, 3)
    cot = torch.randn(2, 24, 10, 9)
    if where == "x_nan":
        x[0, 3, 4, 4] = float("nan")
    elif where == "x_inf":
        x[1, 19, 0, 8] = float("inf")
    elif where == "cot_inf":
        cot[0, 5, 4, 4] = float("-inf")  # an interior output (see the note below for one at the border)
    elif where == "cot_inf_corner":
        cot[0, 5, 0, 0] = float("inf")
    elif where == "cot_inf_edge":
        cot[1, 23, 9, 4] = float("-inf")  # the last row: its window's third row is padding
    else:
        cot[1, 0, 2, 3] = float("nan")
    (_, tw), (_, pw) = _grads(x, w, 1, cot)
    assert spy.calls == 1
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(pw), test(tw))
    finite = np.isfinite(tw)
    np.testing.assert_allclose(pw[finite], tw[finite], rtol=1e-4, atol=1e-4 * np.abs(tw[finite]).max())


@pytest.mark.parametrize("padding", [1, (0, 2)])
def test_second_derivative_through_the_winograd_weight_gradient_matches_torch(padding, monkeypatch):
    """A penalty on the weight gradient (its own gradient w.r.t. the input and the weight) differentiates the
    Winograd-domain weight gradient: its passes have no VJP, so its custom VJP is that of MLX's weight gradient."""
    spy = _Spy(monkeypatch)
    torch.manual_seed(2)
    x = torch.randn(2, 16, 9, 7, requires_grad=True)
    w = (torch.randn(24, 16, 3, 3) * 0.2).requires_grad_(True)
    cot = torch.randn(TF.conv2d(x, w, padding=padding).shape)
    (gw,) = torch.autograd.grad((TF.conv2d(x, w, padding=padding) * cot).sum(), w, create_graph=True)
    tx, tw = torch.autograd.grad(gw.pow(2).sum() + (gw * w).sum(), (x, w))

    def penalty(a, b):
        g = mx.grad(lambda b_: (PF.conv2d(a, b_, padding=padding) * _nhwc(cot)).sum())(b)
        return (g ** 2).sum() + (g * b).sum()

    px, pw = mx.grad(penalty, argnums=(0, 1))(_nhwc(x), _w(w))
    assert spy.calls > 0
    np.testing.assert_allclose(np.moveaxis(np.array(px), -1, 1), tx.numpy(), rtol=1e-3,
                               atol=1e-4 * np.abs(tx.numpy()).max())
    np.testing.assert_allclose(np.array(pw).transpose(0, 3, 1, 2), tw.numpy(), rtol=1e-3,
                               atol=1e-4 * np.abs(tw.numpy()).max())
