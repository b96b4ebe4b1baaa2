"""F.grid_sample (2-d: bilinear / nearest / bicubic x zeros / border / reflection x align_corners) and F.affine_grid through
the converter, against torch on the same data: two sizes, grids reaching outside the image, NaN coordinates,
half-pixel ties for nearest (exact), gradients to the image and to the grid."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from tests.converter_check import run_ported

torch.manual_seed(0)
MODES = [(mode, padding, ac) for mode in ("bilinear", "nearest") for padding in ("zeros", "border", "reflection")
         for ac in (False, True)]
CUBIC = [("bicubic", padding, ac) for padding in ("zeros", "border", "reflection") for ac in (False, True)]


class Sampler(nn.Module):
    """A conv (channels-last inside the port) sampled through an affine grid and through a given grid."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x, theta, grid):
        y = self.conv(x)
        outs = []
        for ac in (False, True):
            affine = F.affine_grid(theta, (x.shape[0], 4, 7, 5), align_corners=ac)
            outs.append(affine)
            for mode, padding, _ in MODES[::2]:
                outs.append(F.grid_sample(y, affine, mode=mode, padding_mode=padding, align_corners=ac))
                outs.append(F.grid_sample(y, grid, mode=mode, padding_mode=padding, align_corners=ac))
        return outs


def _inputs(n, h, w, gh, gw):
    grid = torch.rand(n, gh, gw, 2) * 3 - 1.5  # a third of the points outside [-1, 1]
    grid[0, 0, 0, 0] = float("nan")
    grid[-1, 1, 1, 1] = float("nan")
    return torch.randn(n, 3, h, w), torch.randn(n, 2, 3) * 0.8, grid


def test_grid_sample_and_affine_grid_match_torch_at_two_sizes():
    model = Sampler().eval()
    sets = [_inputs(2, 6, 8, 5, 4), _inputs(3, 9, 5, 3, 6)]
    ported = porter.convert(model, sets[0], io_layout="torch", dynamic="auto")
    for inputs in sets:
        with torch.no_grad():
            expected = [t.numpy() for t in model(*inputs)]
        actual = run_ported(ported, inputs)
        assert len(actual) == len(expected) == 26
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert a.shape == e.shape and a.dtype == e.dtype, f"output {i}"
            np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=f"output {i}: NaN positions")
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=2e-6, err_msg=f"output {i}")


@pytest.mark.parametrize("mode,padding,align_corners", MODES + CUBIC)
def test_each_mode_exactly_on_an_image_input(mode, padding, align_corners):
    """No conv before: nearest samples are torch's bit for bit (half-pixel ties round to even), bilinear to 1 ulp."""

    class One(nn.Module):
        def forward(self, x, grid):
            return F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align_corners)

    x = torch.randn(2, 3, 4, 5)
    # ties: with W = 4 and align_corners=False, x = 0 unnormalises to 1.5 (and -0.5 / 0.5 land on half pixels)
    ticks = torch.tensor([-1.5, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.3, float("nan")])
    grid = torch.stack(torch.meshgrid(ticks, ticks.flip(0), indexing="ij"), dim=-1)[None].expand(2, -1, -1, -1)
    grid = grid.contiguous()
    ported = porter.convert(One().eval(), (x, grid), io_layout="torch")
    actual = run_ported(ported, (x, grid))[0]
    expected = One()(x, grid).numpy()
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    if mode == "nearest":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_gradients_to_image_and_grid(padding):
    from porter.converters.ops.sample import k_grid_sample

    x = torch.randn(2, 3, 5, 6)
    grid = torch.rand(2, 4, 3, 2) * 2.4 - 1.2
    weight = torch.randn(2, 3, 4, 3)
    xt, gt = x.clone().requires_grad_(), grid.clone().requires_grad_()
    (F.grid_sample(xt, gt, padding_mode=padding, align_corners=False) * weight).sum().backward()

    w = mx.array(weight.permute(0, 2, 3, 1).numpy())

    def loss(xm, gm):
        return (k_grid_sample(xm, gm, mode="bilinear", padding=padding, align_corners=False) * w).sum()

    dx, dg = mx.grad(loss, argnums=(0, 1))(mx.array(x.permute(0, 2, 3, 1).numpy()), mx.array(grid.numpy()))
    np.testing.assert_allclose(np.array(dx).transpose(0, 3, 1, 2), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(dg), gt.grad.numpy(), rtol=1e-4, atol=1e-4)


class CubicWarp(nn.Module):
    """Bicubic resampling of a conv's output (channels-last inside the port) by an affine grid and by a flow field
    added to it (an optical-flow warp), every padding mode, both corner conventions."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x, theta, flow):
        y = self.conv(x)
        outs = []
        for ac in (False, True):
            grid = F.affine_grid(theta, list(y.shape), align_corners=ac)
            warped = grid + flow.permute(0, 2, 3, 1)
            for padding in ("zeros", "border", "reflection"):
                outs.append(F.grid_sample(y, grid, mode="bicubic", padding_mode=padding, align_corners=ac))
                outs.append(F.grid_sample(y, warped, mode="bicubic", padding_mode=padding, align_corners=ac))
        return outs


def test_bicubic_grid_sample_matches_torch_at_two_sizes():
    """Flow fields reach outside the image (up to 3 pixels: every tap of a reflected row folds), NaN and inf
    coordinates give torch's NaN samples."""
    model = CubicWarp().eval()

    def inputs(n, h, w):
        flow = torch.randn(n, 2, h, w) * 0.9
        flow[0, 0, 0, 0], flow[-1, 1, 1, 2] = float("nan"), float("inf")
        return torch.randn(n, 3, h, w), torch.randn(n, 2, 3) * 0.8, flow

    sets = [inputs(2, 6, 9), inputs(3, 11, 7)]
    ported = porter.convert(model, sets[0], io_layout="torch", dynamic="auto")
    for inputs_ in sets:
        with torch.no_grad():
            expected = [t.numpy() for t in model(*inputs_)]
        actual = run_ported(ported, inputs_)
        assert len(actual) == len(expected) == 12
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert a.shape == e.shape and a.dtype == e.dtype, f"output {i}"
            np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=f"output {i}: NaN positions")
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_bicubic_gradients_to_image_and_grid(padding, align_corners):
    from porter.converters.ops.sample import k_grid_sample

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 5, 6, generator=gen, dtype=torch.float64)
    grid = torch.rand(2, 4, 3, 2, generator=gen, dtype=torch.float64) * 2.8 - 1.4
    weight = torch.randn(2, 3, 4, 3, generator=gen, dtype=torch.float64)
    xt, gt = x.clone().requires_grad_(), grid.clone().requires_grad_()
    out = F.grid_sample(xt, gt, mode="bicubic", padding_mode=padding, align_corners=align_corners)
    (out * weight).sum().backward()
    for dtype, tol in ((mx.float32, 1e-4), (mx.float64, 1e-10)):
        w = mx.array(weight.permute(0, 2, 3, 1).numpy(), dtype=dtype)

        def loss(xm, gm):
            return (k_grid_sample(xm, gm, mode="bicubic", padding=padding, align_corners=align_corners) * w).sum()

        xm, gm = mx.array(x.permute(0, 2, 3, 1).numpy(), dtype=dtype), mx.array(grid.numpy(), dtype=dtype)
        dx, dg = mx.grad(loss, argnums=(0, 1))(xm, gm)
        assert dx.dtype == dg.dtype == dtype
        np.testing.assert_allclose(np.array(dx).transpose(0, 3, 1, 2), xt.grad.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(np.array(dg), gt.grad.numpy(), rtol=tol, atol=tol)


def test_refused_forms_name_the_argument():
    from porter.converters.ops.sample import k_affine_grid, k_grid_sample

    with pytest.raises(ValueError, match="bicubic interpolation takes a 2-d image"):
        k_grid_sample(mx.zeros((1, 3, 4, 4, 2)), mx.zeros((1, 2, 3, 3, 3)), mode="bicubic", padding="zeros",
                      align_corners=False)

    with pytest.raises(ValueError, match="grid_sample: expected"):
        k_grid_sample(mx.zeros((1, 4, 4, 2)), mx.zeros((1, 3, 3, 3)), mode="nearest", padding="zeros",
                      align_corners=False)
    with pytest.raises(ValueError, match="affine_grid: expected"):
        k_affine_grid(mx.zeros((2, 2, 3)), [1, 3, 4, 4], align_corners=False)


class VolumeSampler(nn.Module):
    """3-d: a Conv3d (channels-last inside the port) resampled through a 3-d affine grid and through a dense
    displacement field added to an identity grid (VoxelMorph's spatial transformer)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 3, 3, padding=1)

    def forward(self, x, theta, flow):
        y = self.conv(x)
        outs = []
        for ac in (False, True):
            affine = F.affine_grid(theta, (x.shape[0], 3, 4, 5, 3), align_corners=ac)
            identity = F.affine_grid(torch.eye(3, 4).expand(x.shape[0], 3, 4), list(y.shape), align_corners=ac)
            warped = identity + flow.permute(0, 2, 3, 4, 1)
            outs.append(affine)
            for mode, padding, _ in MODES[::2]:
                outs.append(F.grid_sample(y, affine, mode=mode, padding_mode=padding, align_corners=ac))
                outs.append(F.grid_sample(y, warped, mode=mode, padding_mode=padding, align_corners=ac))
        return outs


def _volume_inputs(n, d, h, w):
    flow = torch.randn(n, 3, d, h, w) * 0.4
    flow[0, 0, 0, 0, 0] = float("nan")
    return torch.randn(n, 2, d, h, w), torch.randn(n, 3, 4) * 0.8, flow


def test_3d_grid_sample_and_affine_grid_match_torch_at_two_sizes():
    model = VolumeSampler().eval()
    sets = [_volume_inputs(2, 4, 5, 6), _volume_inputs(3, 4, 5, 6)]  # torch pins the field's spatial size
    ported = porter.convert(model, sets[0], io_layout="torch")
    for inputs in sets:
        with torch.no_grad():
            expected = [t.numpy() for t in model(*inputs)]
        actual = run_ported(ported, inputs)
        assert len(actual) == len(expected) == 26
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert a.shape == e.shape and a.dtype == e.dtype, f"output {i}"
            np.testing.assert_array_equal(np.isnan(a), np.isnan(e), err_msg=f"output {i}: NaN positions")
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=2e-6, err_msg=f"output {i}")


def test_3d_gradients_to_volume_and_grid():
    from porter.converters.ops.sample import k_grid_sample

    x = torch.randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 2, 3) * 2.4 - 1.2
    weight = torch.randn(2, 3, 3, 4, 2)
    xt, gt = x.clone().requires_grad_(), grid.clone().requires_grad_()
    (F.grid_sample(xt, gt, padding_mode="border", align_corners=True) * weight).sum().backward()
    w = mx.array(weight.permute(0, 2, 3, 4, 1).numpy())

    def loss(xm, gm):
        return (k_grid_sample(xm, gm, mode="bilinear", padding="border", align_corners=True) * w).sum()

    dx, dg = mx.grad(loss, argnums=(0, 1))(mx.array(x.permute(0, 2, 3, 4, 1).numpy()), mx.array(grid.numpy()))
    np.testing.assert_allclose(np.array(dx).transpose(0, 4, 1, 2, 3), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(dg), gt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("dtype, eps", [("float16", 2.0 ** -10), ("bfloat16", 2.0 ** -7)])
def test_half_precision_samples_with_float32_coordinates(dtype, eps, mode):
    """A float16/bfloat16 port computes the sampling coordinates and corner weights in float32 (torch's CUDA
    kernel's opmath) and rounds the sample once: within one unit of the dtype of the exact samples of the rounded
    inputs. In bfloat16 a 21-pixel row's unnormalised coordinates were multiples of 1/4 and the samples 90% off;
    in float16 0.8% (as torch's CPU half kernel still is)."""

    class Sample(torch.nn.Module):
        def forward(self, x, grid):
            return F.grid_sample(x, grid, mode=mode, align_corners=False)

    gen = torch.Generator().manual_seed(0)
    x, grid = torch.randn(4, 8, 14, 21, generator=gen), torch.rand(4, 30, 5, 2, generator=gen) * 2.2 - 1.1
    ported = porter.convert(Sample(), (x, grid), io_layout="torch", dtype=dtype)
    half = getattr(torch, dtype)
    exact = F.grid_sample(x.to(half).double(), grid.to(half).double(), mode=mode, align_corners=False).numpy()
    (out,) = run_ported(ported, (x, grid))
    error = np.abs(np.asarray(out, dtype=np.float64) - exact).max() / np.abs(exact).max()
    assert error <= eps, error
