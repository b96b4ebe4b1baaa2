"""Depthwise convolutions (groups == in_channels, any channel multiplier) against torch, on both paths: the native
kernel (layers/csrc/conv_kernels.h) and the pure-MLX tap sum (tests/layers/conftest.py runs every test twice).
Outputs and gradients w.r.t. input, weight and bias."""

import random

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.conv_helpers import check_functional, check_module

import porter.layers.functional as PF

# torch warns that it copies the input for an even 'same' kernel; that is torch's business
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


# ---------------------------------------------------------------------------------------------------- modules
# (input shape in torch layout, in_channels, out_channels, kernel_size, kwargs); groups = in_channels throughout
CASES_1D = [
    ((2, 4, 9), 4, 4, 3, dict(padding=1)),
    ((2, 4, 9), 4, 8, 3, {}),  # multiplier 2
    ((2, 3, 11), 3, 9, 4, dict(stride=2, padding=2)),  # multiplier 3
    ((2, 5, 13), 5, 5, 2, dict(stride=5)),  # stride larger than the kernel: inputs no output reads
    ((1, 6, 17), 6, 12, 3, dict(stride=3, dilation=2, padding=1)),
    ((2, 4, 6), 4, 4, 3, dict(padding=4)),  # windows entirely on the zero padding
    ((2, 4, 8), 4, 4, 4, dict(padding="same", dilation=3)),
    ((2, 4, 9), 4, 4, 3, dict(padding=2, padding_mode="reflect")),
    ((2, 4, 9), 4, 8, 3, dict(padding=3, padding_mode="circular", stride=2)),
    ((4, 9), 4, 4, 3, dict(padding=1)),  # unbatched
    ((2, 16, 7), 16, 16, 3, dict(padding=1, bias=False)),
    ((2, 13, 10), 13, 13, 3, dict(padding=1)),  # half a vector plus a remainder
    ((2, 45, 10), 45, 90, 3, dict(stride=2, padding=1)),  # 2 vectors + half + 5, multiplier 2
]

CASES_2D = [
    ((2, 4, 7, 8), 4, 4, 3, dict(padding=1, stride=2)),
    ((2, 4, 7, 8), 4, 8, (3, 5), dict(padding=(1, 2))),
    ((2, 16, 9, 10), 16, 16, 3, dict(padding=1)),  # whole vectors of channels
    ((2, 24, 9, 11), 24, 24, 7, dict(padding=3)),  # ConvNeXt's 7x7: whole AVX2 vectors, not AVX-512 ones
    ((2, 32, 8, 7), 32, 32, 3, dict(stride=2, padding=1)),
    ((2, 17, 9, 8), 17, 17, 3, dict(padding=1)),  # a vector plus a remainder
    ((1, 70, 6, 7), 70, 70, (3, 2), dict(stride=(2, 1), padding=(1, 0))),  # 4 vectors + 6
    ((2, 24, 6, 5), 24, 48, 3, dict(padding=1)),  # multiplier 2, not a multiple of 16
    ((1, 5, 9, 10), 5, 15, 3, dict(stride=2, dilation=2, padding=2)),  # multiplier 3, dilation with stride
    ((2, 6, 11, 9), 6, 6, 2, dict(stride=(4, 3))),  # stride larger than the kernel
    ((2, 4, 5, 6), 4, 4, 3, dict(padding=(3, 4))),  # zero-padded edges wider than the kernel's reach
    ((2, 4, 9, 9), 4, 4, 3, dict(dilation=(2, 3), padding=(2, 3))),
    ((1, 8, 13, 11), 8, 8, 5, dict(stride=3, dilation=2, padding=3)),
    ((2, 4, 6, 7), 4, 4, (2, 4), dict(padding="same")),
    ((2, 4, 7, 9), 4, 4, 3, dict(padding=(1, 2), padding_mode="reflect")),
    ((2, 4, 7, 9), 4, 8, 3, dict(padding=(2, 1), padding_mode="replicate", stride=2)),
    ((2, 4, 7, 9), 4, 4, 3, dict(padding=(7, 3), padding_mode="circular")),
    ((4, 7, 9), 4, 8, 3, dict(padding=1, stride=2)),  # unbatched
    ((2, 3, 1, 1), 3, 3, 1, {}),
    ((2, 16, 5, 1), 16, 16, (3, 1), dict(padding=(1, 3), stride=(1, 8))),  # a dim that reads only padding
    ((1, 32, 6, 23), 32, 32, (3, 5), dict(padding=(1, 2), stride=(1, 2))),  # tiles of 4 and single outputs
    # the vector width follows the CPU (8 float32 lanes with AVX2, 16 with AVX-512): channel counts that are whole
    # vectors on one and not on the other, and a half vector of 4 (AVX2) plus a remainder
    ((1, 24, 5, 13), 24, 24, 3, dict(padding=1)),
    ((2, 40, 4, 11), 40, 40, (3, 5), dict(padding=(1, 2))),
    ((1, 12, 4, 9), 12, 12, 3, dict(padding=1)),
    ((1, 56, 3, 10), 56, 56, (1, 7), dict(padding=(0, 3))),
    # stride-1 rows of 3/5/7 taps in register tiles of 8 (7 with 7 taps on AVX2) outputs, then 4, then 1, with
    # channel counts past the last whole vector (58 = 7 x 8 + 2, 116 = 14 x 8 + 4 = 7 x 16 + 4)
    ((1, 16, 5, 29), 16, 16, 3, dict(padding=1)),
    ((1, 24, 4, 30), 24, 24, 5, dict(padding=2)),
    ((1, 40, 9, 31), 40, 40, 7, dict(padding=3)),
    ((2, 58, 5, 20), 58, 58, 3, dict(padding=1)),
    ((1, 116, 4, 14), 116, 116, 3, dict(padding=1)),
    ((1, 13, 3, 17), 13, 13, (3, 7), dict(padding=(1, 3))),
    ((1, 16, 5, 30), 16, 16, (2, 3), dict(padding=1, stride=(1, 3), dilation=(1, 2))),
    ((1, 16, 4, 21), 16, 16, (1, 9), dict(padding=(0, 4))),  # more taps along W than the tiled weight gradient
    ((2, 3, 1, 1), 3, 6, 3, dict(padding=1)),
]

CASES_3D = [
    ((1, 4, 5, 5, 5), 4, 4, 3, dict(stride=2)),
    ((1, 4, 5, 6, 7), 4, 8, 3, dict(padding=1)),
    ((2, 16, 4, 5, 6), 16, 16, (2, 3, 3), dict(padding=(0, 1, 1), stride=(1, 2, 1))),
    ((1, 3, 7, 6, 5), 3, 6, 2, dict(dilation=(3, 2, 1), stride=(2, 1, 3), padding=(1, 0, 2))),
    ((1, 4, 4, 5, 6), 4, 4, 3, dict(padding=1, padding_mode="replicate")),
    ((4, 4, 5, 6), 4, 4, 3, dict(padding=2)),  # unbatched, windows on the padding
]


def check_depthwise(nd, x_shape, cin, cout, k, **kwargs):
    check_module(nd, x_shape, cin, cout, k, groups=cin, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_1D)
def test_depthwise_conv1d_module(x_shape, cin, cout, k, kwargs):
    check_depthwise(1, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_2D)
def test_depthwise_conv2d_module(x_shape, cin, cout, k, kwargs):
    check_depthwise(2, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_3D)
def test_depthwise_conv3d_module(x_shape, cin, cout, k, kwargs):
    check_depthwise(3, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "nd, x_shape, cin, cout, k, kwargs",
    [
        (1, (2, 4, 9), 4, 8, 3, dict(padding=1)),
        (2, (2, 4, 7, 6), 4, 8, 3, dict(padding=1)),  # multiplier 2
        (2, (2, 16, 9, 8), 16, 16, 3, dict(padding=1, stride=2)),
        (2, (2, 17, 6, 7), 17, 17, 3, dict(padding=2, dilation=2)),
        (3, (1, 4, 4, 5, 6), 4, 4, 3, dict(stride=2, padding=1)),
    ],
)
def test_depthwise_conv_half_precision(dtype, nd, x_shape, cin, cout, k, kwargs):
    check_module(nd, x_shape, cin, cout, k, dtype=dtype, groups=cin, **kwargs)


# ---------------------------------------------------------------------------------------------------- functional
@pytest.mark.parametrize(
    "nd, x_shape, w_shape, bias, args",
    [
        (1, (2, 4, 9), (8, 1, 3), True, dict(stride=2, padding=1, dilation=2, groups=4)),
        (2, (2, 4, 7, 8), (8, 1, 3, 3), True, dict(stride=(2, 1), padding=(1, 0), groups=4)),
        (2, (3, 6, 7), (3, 1, 2, 2), False, dict(padding="same", groups=3)),
        (3, (1, 4, 5, 6, 7), (4, 1, 3, 2, 3), True, dict(stride=(1, 2, 1), dilation=(1, 1, 2), padding=1, groups=4)),
    ],
)
def test_depthwise_conv_functional(nd, x_shape, w_shape, bias, args):
    check_functional(nd, x_shape, w_shape, bias, args)


@pytest.mark.parametrize("channels, mult", [(6, 2), (16, 1), (10, 1), (12, 1)])
def test_depthwise_conv_float64_matches_torch_closely(channels, mult):
    # float64 runs in float64 on the native path (MLX CPU computes float64 elementwise ops too)
    torch.manual_seed(3)
    x = torch.randn(2, channels, 9, 14, dtype=torch.float64, requires_grad=True)
    w = torch.randn(channels * mult, 1, 3, 3, dtype=torch.float64, requires_grad=True)
    y = F.conv2d(x, w, None, (2, 1), 1, (2, 1), channels)
    g = torch.randn_like(y)
    y.backward(g)
    xm = mx.array(x.detach().movedim(1, -1).numpy(), dtype=mx.float64)
    wm = mx.array(w.detach().movedim(1, -1).numpy(), dtype=mx.float64)
    gm = mx.array(g.movedim(1, -1).numpy(), dtype=mx.float64)
    with mx.stream(mx.cpu):
        out, vjp = mx.vjp(lambda a, b: PF.conv2d(a, b, None, (2, 1), 1, (2, 1), channels), [xm, wm], [gm])
        got = [np.array(a) for a in (out[0], *vjp)]
    for a, t in zip(got, (y, x.grad, w.grad)):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, t.detach().movedim(1, -1).numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("channels, k", [(16, 3), (58, 3), (40, 7), (24, 5)])
def test_depthwise_conv_non_finite_inputs_land_where_torch_puts_them(channels, k):
    # NaN and inf inside the register tiles (and their channel tails): each reaches exactly the outputs that read it
    torch.manual_seed(4)
    x = torch.randn(1, channels, 6, 27)
    x[0, 1, 2, 9] = float("nan")
    x[0, -1, 3, 20] = float("inf")
    x[0, channels // 2, 0, 4] = -float("inf")
    w = torch.randn(channels, 1, k, k)
    y = F.conv2d(x, w, None, 1, k // 2, 1, channels)
    got = PF.conv2d(mx.array(x.movedim(1, -1).numpy()), mx.array(w.movedim(1, -1).numpy()), None, 1, k // 2, 1,
                    channels)
    np.testing.assert_allclose(np.array(got), y.movedim(1, -1).numpy(), rtol=1e-5, atol=1e-5, equal_nan=True)


# ---------------------------------------------------------------------------------------------------- layouts
def _views():
    base = mx.random.normal((2, 11, 13, 24), key=mx.random.key(5))
    return {
        "transposed H/W": mx.swapaxes(base, 1, 2),
        "channel slice": base[..., 3:19],
        "channel step": base[..., ::2],
        "spatial step": base[:, ::2, 1::3],
        "channels-first made last": mx.moveaxis(mx.random.normal((2, 24, 11, 13), key=mx.random.key(6)), 1, -1),
    }


@pytest.mark.parametrize("view", sorted(_views()))
def test_depthwise_conv_non_contiguous_inputs(view):
    x = _views()[view]
    c = x.shape[-1]
    w = mx.random.normal((2 * c, 3, 3, 1), key=mx.random.key(7))
    g = mx.random.normal((x.shape[0], (x.shape[1] + 1) // 2, (x.shape[2] + 1) // 2, 2 * c), key=mx.random.key(8))
    out, (dx, dw) = mx.vjp(lambda a, b: PF.conv2d(a, b, None, 2, 1, 1, c), [x, w], [g])
    out = out[0]
    xt = torch.from_numpy(np.array(x)).movedim(-1, 1).requires_grad_(True)
    wt = torch.from_numpy(np.array(w)).movedim(-1, 1).requires_grad_(True)
    yt = F.conv2d(xt, wt, None, 2, 1, 1, c)
    yt.backward(torch.from_numpy(np.array(g)).movedim(-1, 1))
    np.testing.assert_allclose(np.array(out), yt.detach().movedim(1, -1).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(dx), xt.grad.movedim(1, -1).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(dw), wt.grad.movedim(1, -1).numpy(), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------------- sweep
def _random_depthwise_config(rng: random.Random):
    nd = rng.choice([1, 1, 2, 2, 2, 3])
    cin = rng.choice([2, 3, 5, 8, 16, 17, 32, 33]) if nd < 3 else rng.choice([2, 3, 16, 17])
    cout = cin * rng.choice([1, 1, 2, 3])
    k = tuple(rng.randint(1, 4) for _ in range(nd))
    d = tuple(rng.choice([1, 1, 2, 3]) for _ in range(nd))
    mode = rng.choice(["zeros", "zeros", "zeros", "reflect", "replicate", "circular"])
    if rng.random() < 0.2:
        padding, s = rng.choice(["same", "valid"]), (1,) * nd
    else:
        s = tuple(rng.randint(1, 5) for _ in range(nd))
        padding = tuple(rng.randint(0, 4) for _ in range(nd))
    ext = [dd * (kk - 1) + 1 for kk, dd in zip(k, d)]
    lo = [0] * nd if padding == "valid" else (
        [(e - 1) // 2 for e in ext] if padding == "same" else list(padding))
    hi = [e - 1 - l for e, l in zip(ext, lo)] if padding == "same" else lo
    size = tuple(max(e - l - h, max(l, h) + 1, 1) + rng.randint(0, 5) for e, l, h in zip(ext, lo, hi))
    batch = rng.choice([None, 1, 2, 3])
    x_shape = ((batch,) if batch else ()) + (cin,) + size
    kwargs = dict(stride=s, padding=padding, dilation=d, bias=rng.random() < 0.8, padding_mode=mode)
    return nd, x_shape, cin, cout, k, kwargs


def test_depthwise_conv_random_sweep():
    rng = random.Random(4321)
    for i in range(80):
        nd, x_shape, cin, cout, k, kwargs = _random_depthwise_config(rng)
        try:
            check_depthwise(nd, x_shape, cin, cout, k, seed=i, **kwargs)
        except AssertionError as e:
            raise AssertionError(f"config {i}: nd={nd} x={x_shape} cin={cin} cout={cout} k={k} {kwargs}: {e}") from e
