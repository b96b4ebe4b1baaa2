"""Grouped, non-depthwise convolutions (1 < groups < in_channels: ResNeXt, RegNet) against torch, on both paths:
the native direct kernel (layers/csrc/grouped_conv_kernels.h, forward and both gradients) and MLX's grouped conv.
Outputs and gradients w.r.t. input, weight and bias; sizes that do not divide evenly, strides, dilation, padding
modes, output channels per group different from input channels per group, float64 and second derivatives."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.conv_helpers import check_functional, check_module

import porter.layers.functional as PF
from porter.layers import _native
from porter.layers.conv_weights import torch_conv_weight_to_mlx

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")

# (input shape in torch layout, in_channels, out_channels, kernel_size, kwargs)
CASES_2D = [
    ((1, 104, 9, 11), 104, 104, 3, dict(groups=13, padding=1)),  # RegNet-Y-400MF's group width 8
    ((2, 12, 7, 8), 12, 18, 3, dict(groups=3, stride=2, padding=1)),  # 4 in -> 6 out per group, strided
    ((2, 8, 10, 9), 8, 4, (3, 2), dict(groups=2, dilation=(2, 3), padding=(2, 1))),
    ((1, 16, 9, 9), 16, 32, 3, dict(groups=4, stride=(2, 3), padding=(0, 2), bias=False)),
    ((2, 6, 6, 7), 6, 6, 3, dict(groups=2, padding=1, padding_mode="reflect")),
    ((6, 5, 5), 6, 9, 2, dict(groups=3, padding="same")),  # unbatched, even kernel 'same'
    ((1, 8, 4, 4), 8, 8, 3, dict(groups=2, padding=3)),  # windows entirely on the zero padding
    ((3, 64, 14, 14), 64, 64, 3, dict(groups=2, padding=1)),  # 32 channels per group, enough work for threads
]
CASES_1D = [((2, 6, 13), 6, 9, 3, dict(groups=3, stride=2, padding=1)), ((1, 8, 9), 8, 8, 4, dict(groups=4))]
CASES_3D = [((1, 8, 4, 5, 6), 8, 12, 3, dict(groups=4, padding=1)),
            ((2, 6, 5, 4, 5), 6, 6, (2, 3, 2), dict(groups=2, stride=(1, 2, 2), dilation=(2, 1, 1)))]


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_2D)
def test_grouped_conv2d_module(x_shape, cin, cout, k, kwargs):
    check_module(2, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_1D)
def test_grouped_conv1d_module(x_shape, cin, cout, k, kwargs):
    check_module(1, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_3D)
def test_grouped_conv3d_module(x_shape, cin, cout, k, kwargs):
    check_module(3, x_shape, cin, cout, k, **kwargs)


# Channels per group torchvision uses (ResNeXt-50 32x4d: 4, 8, 16, 32; RegNet-X/Y: 8, 16, 24, 40, 56, 64) and odd
# ones (3, 5, 12): the native kernel tiles a group in vectors of the CPU's width (16 float32 = two AVX2 registers,
# one AVX-512), padding a partial vector, and blocks up to 6 interior positions: 9 columns give a run of 6, one
# of 1 and two border columns; stride 2 a run of 3.
GROUP_WIDTHS = [3, 4, 5, 8, 12, 16, 24, 32, 40, 56, 64]


@pytest.mark.parametrize("width", GROUP_WIDTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_grouped_conv2d_group_widths(width, dtype):
    groups, stride = (2, 1) if width % 2 == 0 else (3, 2)
    c = groups * width
    check_module(2, (2, c, 7, 9), c, c, 3, dtype=dtype, groups=groups, stride=stride, padding=1)


@pytest.mark.parametrize("cin, cout, groups", [(32, 48, 2), (48, 16, 2), (36, 60, 3), (128, 64, 2)])
def test_grouped_conv2d_in_and_out_widths_differ(cin, cout, groups):
    """Output groups wider or narrower than input groups (the forward tiles the outputs, the input gradient the
    inputs), up to 64 outputs per group (eight AVX2 float32 vectors)."""
    check_module(2, (1, cin, 6, 8), cin, cout, 3, groups=groups, padding=1)


def test_grouped_conv_functional_second_size():
    check_functional(2, (2, 12, 8, 7), (18, 4, 3, 3), True, dict(groups=3, stride=2, padding=1))
    check_functional(2, (1, 12, 5, 13), (18, 4, 3, 3), False, dict(groups=3, padding=(1, 0)))


@pytest.mark.native_only  # MLX's own conv has no float64 (the pure path's float64 is not this kernel's business)
def test_grouped_conv_float64_and_second_derivative():
    """float64 matches torch to 1e-12; a second derivative (the kernels are each other's adjoints) too."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 12, 6, 7)), rng.standard_normal((18, 4, 3, 3))
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    y = F.conv2d(tx, tw, stride=(2, 1), padding=1, groups=3)
    (gx,) = torch.autograd.grad((y**2).sum(), tx, create_graph=True)
    (gw,) = torch.autograd.grad(gx.sum(), tw)
    xm = mx.array(x.transpose(0, 2, 3, 1), dtype=mx.float64)
    wm = mx.array(torch_conv_weight_to_mlx(w), dtype=mx.float64)

    def loss(a, b):
        return (PF.conv2d(a, b, stride=(2, 1), padding=1, groups=3) ** 2).sum()

    out = PF.conv2d(xm, wm, stride=(2, 1), padding=1, groups=3)
    np.testing.assert_allclose(np.array(out), y.detach().numpy().transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)
    dx = mx.grad(loss)(xm, wm)
    np.testing.assert_allclose(np.array(dx), gx.detach().numpy().transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-11)
    dwdx = mx.grad(lambda b: mx.grad(loss)(xm, b).sum(), argnums=0)(wm)
    np.testing.assert_allclose(np.array(dwdx), torch_conv_weight_to_mlx(gw.numpy()), rtol=1e-10, atol=1e-10)


def test_grouped_conv_vmap_and_views():
    x = mx.random.normal((3, 2, 7, 6, 12), key=mx.random.key(0))
    w = mx.random.normal((18, 3, 3, 4), key=mx.random.key(1))
    direct = mx.stack([PF.conv2d(x[i], w, padding=1, groups=3) for i in range(3)])
    assert mx.allclose(mx.vmap(lambda a: PF.conv2d(a, w, padding=1, groups=3))(x), direct, rtol=1e-5, atol=1e-5)
    xt = x[0].transpose(0, 2, 1, 3)  # a strided view
    ref = PF.conv2d(mx.array(np.array(xt)), w, padding=1, groups=3)
    assert mx.allclose(PF.conv2d(xt, w, padding=1, groups=3), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.native_only
def test_grouped_conv_runs_the_native_kernel(tmp_path):
    assert _native.active()
    x, w = mx.random.normal((1, 9, 9, 104)), mx.random.normal((104, 3, 3, 8))
    grads = mx.grad(lambda a, b: PF.conv2d(a, b, padding=1, groups=13).sum(), argnums=(0, 1))(x, w)
    mx.export_to_dot(str(tmp_path / "g.dot"), *grads)
    dot = (tmp_path / "g.dot").read_text()
    assert "PorterGroupedConvInputGrad" in dot and "PorterGroupedConvWeightGrad" in dot
    with pytest.raises(ValueError, match=r"\[porter.grouped_conv\] groups must divide C_out"):
        _native.grouped_conv(x, mx.random.normal((100, 3, 3, 8)), (1, 1), (1, 1), (1, 1), (1, 1), 13)
