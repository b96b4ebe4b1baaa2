"""Conv1d/2d/3d, conv1d/2d/3d and pad against torch: outputs and gradients w.r.t. input, weight and bias."""

import math
import random

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.conv_helpers import PORTER_CONV, PORTER_F, TORCH_CONV, TORCH_F, check_functional, check_module, to_mx
from tests.helpers import check_against_torch

import porter.layers as L
import porter.layers._conv_engine as conv_module
import porter.layers.linear as linear_module
import porter.layers.functional as PF
from porter.layers.conv_weights import torch_conv_weight_to_mlx


# torch warns that it copies the input for an even 'same' kernel; that is torch's business
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")

# ---------------------------------------------------------------------------------------------------- modules
# (input shape in torch layout, in_channels, out_channels, kernel_size, kwargs)
CASES_1D = [
    ((2, 3, 9), 3, 4, 3, {}),
    ((2, 3, 10), 3, 4, 4, dict(stride=3)),
    ((2, 3, 9), 3, 4, 3, dict(stride=2, padding=1)),
    ((1, 2, 11), 2, 3, 3, dict(dilation=2, padding=2)),
    ((2, 3, 8), 3, 5, 4, dict(padding="same")),
    ((2, 3, 8), 3, 5, 2, dict(padding="same", dilation=3)),
    ((2, 3, 8), 3, 5, 5, dict(padding="valid")),
    ((2, 4, 9), 4, 6, 3, dict(groups=2)),
    ((2, 3, 9), 3, 4, 3, dict(bias=False)),
    ((2, 3, 9), 3, 4, 3, dict(padding=2, padding_mode="reflect")),
    ((2, 3, 9), 3, 4, 3, dict(padding=(8,), padding_mode="reflect")),
    ((2, 3, 9), 3, 4, 3, dict(padding=4, padding_mode="replicate", stride=2)),
    ((2, 3, 9), 3, 4, 3, dict(padding=9, padding_mode="circular")),
    ((2, 3, 8), 3, 4, 4, dict(padding="same", padding_mode="reflect")),
    ((2, 3, 8), 3, 4, 4, dict(padding="same", padding_mode="circular", dilation=2)),
    ((2, 3, 8), 3, 4, 2, dict(padding="same", padding_mode="replicate")),
    ((3, 9), 3, 4, 3, dict(padding=1)),
    ((3, 9), 3, 4, 3, dict(padding=2, padding_mode="reflect")),
    ((2, 5, 7), 5, 6, 1, {}),
    ((2, 5, 7), 5, 6, 1, dict(stride=2)),
    ((2, 3, 5), 3, 2, 5, {}),
    ((1, 2, 4), 2, 2, 3, dict(dilation=2, padding=1, stride=2)),
]

CASES_2D = [
    ((2, 3, 7, 9), 3, 4, 3, {}),
    ((2, 3, 7, 9), 3, 4, (3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ((2, 2, 11, 6), 2, 3, 3, dict(stride=3)),
    ((2, 3, 8, 7), 3, 4, (4, 3), dict(padding="same", dilation=(1, 2))),
    ((1, 3, 6, 6), 3, 4, (2, 2), dict(padding="same")),
    ((1, 3, 6, 6), 3, 4, 3, dict(padding="valid", stride=2)),
    ((2, 6, 7, 7), 6, 9, 3, dict(groups=3, padding=1)),
    ((2, 3, 7, 9), 3, 4, 3, dict(bias=False, padding=1)),
    ((2, 3, 7, 9), 3, 4, 3, dict(padding=(1, 2), padding_mode="reflect")),
    ((2, 3, 7, 9), 3, 4, 3, dict(padding=(2, 1), padding_mode="replicate", stride=2)),
    ((2, 3, 7, 9), 3, 4, 3, dict(padding=(7, 3), padding_mode="circular")),
    ((2, 3, 6, 7), 3, 4, (2, 4), dict(padding="same", padding_mode="reflect")),
    ((2, 3, 6, 7), 3, 4, (2, 4), dict(padding="same", padding_mode="circular")),
    ((3, 7, 9), 3, 4, 3, dict(padding=1, stride=2)),
    ((3, 7, 9), 3, 4, 3, dict(padding=1, padding_mode="circular")),
    ((2, 8, 5, 6), 8, 16, 1, {}),
    ((2, 8, 5, 6), 8, 16, 1, dict(stride=2, bias=False)),
    ((2, 8, 5, 6), 8, 16, 1, dict(stride=(1, 3))),
    ((8, 5, 6), 8, 16, 1, {}),
    ((2, 8, 5, 6), 8, 16, 1, dict(padding=1)),
    ((2, 8, 5, 6), 8, 16, 1, dict(groups=2)),
    ((1, 2, 5, 5), 2, 3, 5, dict(dilation=1)),
]

CASES_3D = [
    ((1, 2, 5, 6, 7), 2, 3, 3, {}),
    ((2, 2, 5, 6, 7), 2, 3, 3, dict(stride=(1, 2, 2), padding=(0, 1, 1), dilation=(2, 1, 1))),
    ((1, 2, 5, 6, 7), 2, 3, (2, 3, 4), dict(padding="same")),
    ((1, 4, 5, 5, 5), 4, 6, 3, dict(groups=2, padding=1)),
    ((1, 2, 5, 6, 7), 2, 3, 3, dict(padding=1, padding_mode="reflect", bias=False)),
    ((1, 2, 5, 6, 7), 2, 3, 3, dict(padding=(1, 2, 0), padding_mode="replicate")),
    ((1, 2, 5, 6, 7), 2, 3, 3, dict(padding=2, padding_mode="circular")),
    ((1, 2, 4, 5, 6), 2, 3, (2, 2, 3), dict(padding="same", padding_mode="reflect")),
    ((2, 5, 6, 7), 2, 3, 3, dict(padding=1)),
    ((1, 6, 3, 4, 5), 6, 5, 1, {}),
    ((1, 6, 3, 4, 5), 6, 5, 1, dict(stride=2)),
]


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_1D)
def test_conv1d_module(x_shape, cin, cout, k, kwargs):
    check_module(1, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_2D)
def test_conv2d_module(x_shape, cin, cout, k, kwargs):
    check_module(2, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_3D)
def test_conv3d_module(x_shape, cin, cout, k, kwargs):
    check_module(3, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "nd, x_shape, cin, cout, k, kwargs",
    [
        (1, (2, 4, 9), 4, 6, 3, dict(padding=1, groups=2)),
        (2, (2, 3, 7, 8), 3, 4, 3, dict(padding="same", padding_mode="reflect")),
        (2, (2, 8, 5, 6), 8, 16, 1, {}),
        (3, (1, 2, 4, 5, 6), 2, 3, 3, dict(stride=2, padding=1)),
    ],
)
def test_conv_half_precision(dtype, nd, x_shape, cin, cout, k, kwargs):
    check_module(nd, x_shape, cin, cout, k, dtype=dtype, **kwargs)


@pytest.mark.parametrize("matmul", [True, False])
@pytest.mark.parametrize("kwargs", [{}, dict(stride=2), dict(bias=False)])
@pytest.mark.parametrize("cin, cout", [(8, 12), (64, 40), (129, 7)])
def test_conv2d_1x1_both_paths(monkeypatch, matmul, kwargs, cin, cout):
    """The 1x1 matmul shortcut (float32 with <= 128 input channels, or <= 384 into <= 128 outputs: the native short-K
    GEMM, whose tiles of 6 rows x 16 outputs these sizes leave partial) and the generic conv path give torch's numbers
    and gradients."""
    monkeypatch.setattr(conv_module, "MATMUL_1X1", matmul)
    monkeypatch.setattr(linear_module, "SMALL_K_MIN_ROWS", 2)  # the GEMM at these sizes (its tiles are tested)
    monkeypatch.setattr(linear_module, "SMALL_K_LONG_ROWS", 2)
    check_module(2, (2, cin, 5, 7), cin, cout, 1, **kwargs)


# ---------------------------------------------------------------------------------------------------- functional
@pytest.mark.parametrize(
    "nd, x_shape, w_shape, bias, args",
    [
        (1, (2, 4, 9), (6, 2, 3), True, dict(stride=2, padding=1, dilation=1, groups=2)),
        (1, (4, 9), (6, 4, 2), False, dict(padding="same", dilation=2)),
        (1, (2, 4, 9), (6, 4, 3), True, dict(padding="valid")),
        (2, (2, 3, 6, 7), (5, 3, 4, 2), False, dict(padding="same")),
        (2, (3, 6, 7), (5, 3, 1, 1), True, {}),
        (3, (1, 2, 5, 6, 7), (4, 2, 3, 2, 3), True, dict(stride=(1, 2, 1), dilation=(1, 1, 2), padding=1)),
        (3, (1, 4, 4, 5, 6), (4, 2, 2, 3, 2), False, dict(padding="same", groups=2)),
    ],
)
def test_conv_functional(nd, x_shape, w_shape, bias, args):
    check_functional(nd, x_shape, w_shape, bias, args)


def test_conv_functional_positional_order():
    """torch's order: (input, weight, bias, stride, padding, dilation, groups)."""
    x = torch.randn(1, 4, 9)
    w = torch.randn(6, 2, 3)
    b = torch.randn(6)
    expected = F.conv1d(x, w, b, 2, 1, 2, 2).numpy()
    got = PF.conv1d(to_mx(x).transpose(0, 2, 1), mx.array(torch_conv_weight_to_mlx(w.numpy())), to_mx(b), 2, 1, 2, 2)
    np.testing.assert_allclose(np.array(got).transpose(0, 2, 1), expected, atol=1e-5, rtol=1e-5)


def test_conv_zero_batch():
    x = mx.zeros((0, 7, 3))
    y = PF.conv1d(x, mx.ones((4, 3, 3)), mx.ones(4), padding=1)
    assert y.shape == (0, 7, 4)


# ---------------------------------------------------------------------------------------------------- module API
def test_conv_attributes_like_torch():
    for nd, kwargs in [(1, dict(padding="same")), (2, dict(stride=2, padding=(1, 2), groups=2, bias=False)),
                       (3, dict(dilation=2, padding_mode="circular", padding=1))]:
        tm = TORCH_CONV[nd](4, 6, 3, **kwargs)
        pm = PORTER_CONV[nd](4, 6, 3, **kwargs)
        for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups",
                     "padding_mode"):
            assert getattr(pm, name) == getattr(tm, name), name
        assert (pm.bias is None) == (tm.bias is None)
        assert pm.weight.shape == tuple(torch_conv_weight_to_mlx(tm.weight.detach().numpy()).shape)


@pytest.mark.parametrize("nd, cin, cout, k, groups", [(1, 4, 6, 3, 1), (2, 8, 16, (3, 5), 2), (3, 3, 6, 2, 3)])
def test_conv_init_bounds_like_torch(nd, cin, cout, k, groups):
    """Kaiming-uniform(a=sqrt(5)): weight and bias uniform in +-1/sqrt(fan_in), as torch's reset_parameters."""
    mx.random.seed(0)
    pm = PORTER_CONV[nd](cin, cout, k, groups=groups)
    tm = TORCH_CONV[nd](cin, cout, k, groups=groups)
    bound = 1 / math.sqrt(tm.weight[0].numel())
    for p_m, p_t in ((pm.weight, tm.weight), (pm.bias, tm.bias)):
        assert p_m.dtype == mx.float32
        a = np.abs(np.array(p_m))
        assert a.max() <= bound and float(p_t.detach().abs().max()) <= bound
        assert a.max() > 0.6 * bound  # spread over the whole interval, not a narrower one
    assert len(pm.trainable_parameters()) == 2
    assert "bias" not in PORTER_CONV[nd](cin, cout, k, groups=groups, bias=False).parameters()


# ---------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "cls, args, kwargs, exc, match",
    [
        (L.Conv2d, (4, 6, 3), dict(groups=0), ValueError, r"\[Conv2d\] groups must be a positive integer"),
        (L.Conv2d, (4, 6, 3), dict(groups=3), ValueError, r"in_channels must be divisible by groups"),
        (L.Conv1d, (4, 6, 3), dict(groups=4), ValueError, r"out_channels must be divisible by groups"),
        (L.Conv2d, (4, 6, 3), dict(padding="full"), ValueError, r"Invalid padding string 'full', should be one of"),
        (L.Conv1d, (4, 6, 3), dict(padding="same", stride=2), ValueError,
         r"padding='same' is not supported for strided convolutions"),
        (L.Conv3d, (4, 6, 3), dict(padding="same", stride=(1, 1, 2)), ValueError, r"not supported for strided"),
        (L.Conv2d, (4, 6, 3), dict(padding_mode="zero"), ValueError,
         r"padding_mode must be one of .*, but got padding_mode='zero'"),
        (L.Conv2d, (4, 6, 3), dict(stride=0), ValueError, r"\[Conv2d\] non-positive stride is not supported"),
        (L.Conv2d, (4, 6, 3), dict(dilation=(1, 0)), ValueError, r"dilation should be greater than zero"),
        (L.Conv2d, (4, 6, 3), dict(padding=-1), ValueError, r"negative padding is not supported"),
        (L.Conv2d, (4, 6, 0), {}, ValueError, r"'kernel_size' must be positive"),
        (L.Conv2d, (4, 6, (3, 3, 3)), {}, ValueError,
         r"\[Conv2d\] 'kernel_size' must either be a single int, or a tuple of two"),
        (L.Conv1d, (4, 6, 3), dict(stride=(1, 1)), ValueError, r"'stride' must either be a single int"),
        (L.Conv2d, (4, 6, 3.0), {}, TypeError, r"'kernel_size' must be an int"),
        (L.Conv2d, (4, 6, 3), dict(padding=1.5), TypeError, r"'padding' must be an int"),
        (L.Conv2d, (4.0, 6, 3), {}, TypeError, r"'in_channels'"),
    ],
)
def test_conv_module_errors(cls, args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cls(*args, **kwargs)


@pytest.mark.parametrize(
    "func, x_shape, w_shape, b_shape, kwargs, exc, match",
    [
        (PF.conv1d, (1, 5, 2), (4, 7, 2), None, {}, ValueError,
         r"Calculated padded input size per channel: \(5\)\. Kernel size: \(7\)\. Kernel size can't be greater"),
        (PF.conv2d, (1, 5, 5, 2), (4, 3, 3, 2), None, dict(dilation=3), ValueError,
         r"padded input size per channel: \(5 x 5\)\. Kernel size: \(7 x 7\)"),
        (PF.conv1d, (1, 5, 2), (4, 3, 2), None, dict(stride=0), ValueError, r"non-positive stride is not supported"),
        (PF.conv2d, (1, 5, 5, 2), (4, 3, 3, 2), None, dict(dilation=(1, 0)), ValueError,
         r"dilation should be greater than zero, but got \[1, 0\]"),
        (PF.conv1d, (1, 5, 2), (4, 3, 2), None, dict(padding=-1), ValueError, r"negative padding is not supported"),
        (PF.conv1d, (1, 5, 2), (4, 3, 2), None, dict(groups=0), ValueError, r"non-positive groups is not supported"),
        (PF.conv1d, (1, 5, 2), (4, 3, 2), None, dict(padding="full"), ValueError, r"Invalid padding string: 'full'"),
        (PF.conv1d, (1, 5, 2), (4, 3, 2), None, dict(padding="same", stride=2), ValueError,
         r"padding='same' is not supported for strided convolutions"),
        (PF.conv1d, (1, 5, 2), (4, 3, 3), None, {}, ValueError,
         r"Given groups=1, weight of size \[4, 3, 3\], expected input\[1, 5, 2\] to have 3 channels, but got 2"),
        (PF.conv1d, (1, 5, 2), (3, 3, 1), None, dict(groups=2), ValueError,
         r"Given groups=2, expected weight to be divisible by 2 at dimension 0"),
        (PF.conv1d, (1, 5, 2), (4, 3, 2), (3,), {}, ValueError,
         r"expected bias to be 1-dimensional with 4 elements, but got bias of size \[3\]"),
        (PF.conv1d, (1, 2, 3, 2), (4, 3, 2), None, {}, ValueError,
         r"Expected 2D \(unbatched\) or 3D \(batched\) input to conv1d, but got input of size: \[1, 2, 3, 2\]"),
        (PF.conv1d, (1, 5, 2), (4, 3, 3, 2), None, {}, ValueError, r"Expected 3-dimensional weight"),
        (PF.conv2d, (1, 5, 5, 2), (4, 3, 3, 2), None, dict(stride=(1, 1, 1)), ValueError,
         r"'stride' must either be a single int, or a tuple of two ints"),
        (PF.conv1d, (1, 0, 2), (4, 3, 2), None, dict(padding=2), ValueError,
         r"Only zero batch or zero channel inputs are supported"),
        (PF.conv1d, (1, 5, 2), (4, 3, 2), None, dict(stride=1.5), TypeError, r"'stride' must be an int"),
    ],
)
def test_conv_functional_errors(func, x_shape, w_shape, b_shape, kwargs, exc, match):
    b = None if b_shape is None else mx.zeros(b_shape)
    with pytest.raises(exc, match=match):
        func(mx.zeros(x_shape), mx.zeros(w_shape), b, **kwargs)


def test_conv_dtype_mismatch_and_types():
    with pytest.raises(TypeError, match=r"expected scalar type"):
        PF.conv1d(mx.zeros((1, 5, 2)), mx.zeros((4, 3, 2), dtype=mx.float16))
    with pytest.raises(TypeError, match=r"'input' must be an mx.array"):
        PF.conv1d(np.zeros((1, 5, 2)), mx.zeros((4, 3, 2)))


@pytest.mark.parametrize(
    "kwargs, x_shape, match",
    [
        (dict(padding=5, padding_mode="reflect"), (1, 5, 2),
         r"Padding size should be less than the corresponding input dimension, but got: padding \(5, 5\)"),
        (dict(padding=6, padding_mode="circular"), (1, 5, 2), r"Padding value causes wrapping around more than once"),
    ],
)
def test_conv_padding_mode_limits(kwargs, x_shape, match):
    with pytest.raises(ValueError, match=match):
        L.Conv1d(2, 4, 3, **kwargs)(mx.zeros(x_shape))
    # torch raises too, at the same sizes
    with pytest.raises(RuntimeError, match=match.split(",")[0]):
        torch.nn.Conv1d(2, 4, 3, **kwargs)(torch.zeros(x_shape[0], x_shape[2], x_shape[1]))


def test_conv_module_wrong_rank():
    with pytest.raises(ValueError, match=r"\[Conv2d\] Expected 3D \(unbatched\) or 4D \(batched\) input"):
        L.Conv2d(2, 4, 3, padding=1, padding_mode="reflect")(mx.zeros((5, 2)))


# ---------------------------------------------------------------------------------------------------- pad
@pytest.mark.parametrize(
    "shape, pads, mode",
    [
        ((2, 3, 7), (2, 1), "reflect"),
        ((2, 3, 7), (6, 6), "reflect"),
        ((2, 3, 7), (4, -2), "reflect"),
        ((2, 3, 7), (-2, 3), "replicate"),
        ((2, 3, 7), (7, 7), "circular"),
        ((2, 3, 7), (2, -1), "circular"),
        ((3, 7), (3, 2), "replicate"),
        ((2, 3, 5, 6), (1, 2, 3, 0), "reflect"),
        ((2, 3, 5, 6), (5, 5, 4, 4), "circular"),
        ((3, 5, 6), (2, 2, 1, 3), "replicate"),
        ((1, 2, 3, 4, 5), (1, 2, 2, 1, 1, 0), "reflect"),
        ((2, 3, 4, 5), (1, 1, 2, 2, 1, 1), "circular"),
        ((2, 3, 4, 5), (1, 2), "constant"),
        ((2, 3, 4, 5), (1, 2, -1, 3), "constant"),
        ((2, 3, 7), (-7, 0), "constant"),
        ((3, 4, 5, 6), (3, 0, 0, 2, 1, 1), "constant"),
    ],
)
def test_pad_against_torch(shape, pads, mode):
    x = torch.randn(shape)
    value = 1.5 if mode == "constant" else None
    kw = {} if value is None else {"value": value}
    nd = len(shape) - 2 if len(shape) - 2 >= len(pads) // 2 else len(shape) - 1  # batched unless it cannot be
    check_against_torch(
        lambda t: F.pad(t, pads, mode=mode, **kw), lambda m: PF.pad(m, pads, mode, value), x, nd=nd, exact=True
    )


def test_pad_channels_first_any_rank():
    x = torch.randn(2, 3, 4, 5)
    got = PF.pad(to_mx(x), (1, 2, 0, 1, 2, 0), value=-1.0, channels_last=False)
    np.testing.assert_array_equal(np.array(got), F.pad(x, (1, 2, 0, 1, 2, 0), value=-1.0).numpy())


@pytest.mark.parametrize(
    "shape, pads, mode, value, match",
    [
        ((1, 5, 2), (5, 5), "reflect", None, r"Padding size should be less than the corresponding input dimension"),
        ((1, 5, 2), (6, 0), "circular", None, r"Padding value causes wrapping around more than once"),
        ((1, 5, 2), (1,), "reflect", None, r"Padding length must be divisible by 2"),
        ((1, 5, 2), (1, 1), "foo", None, r"Unrecognised padding mode foo"),
        ((5, 2), (1, 1, 1, 1), "reflect", None, r"Padding size 4 is not supported for 2D input tensor"),
        ((1, 5, 2), (1, 1), "reflect", 2.0, r"Padding mode \"reflect\" doesn't take in value argument"),
        ((1, 5, 2), (1, 1, 1, 1, 1, 1), "constant", None, r"Padding length should be less than or equal to two times"),
        ((1, 5, 2), (-6, 1), "replicate", None, r"leaves an output size of 0"),
    ],
)
def test_pad_errors(shape, pads, mode, value, match):
    with pytest.raises(ValueError, match=match):
        PF.pad(mx.zeros(shape), pads, mode, value)


# ---------------------------------------------------------------------------------------------------- sweep
def _random_conv_config(rng: random.Random):
    nd = rng.choice([1, 1, 2, 2, 3])
    groups = rng.choice([1, 1, 2, 3])
    cin = groups * rng.randint(1, 3)
    cout = groups * rng.randint(1, 3)
    k = tuple(rng.randint(1, 4) for _ in range(nd))
    d = tuple(rng.choice([1, 1, 2]) for _ in range(nd))
    mode = rng.choice(["zeros", "zeros", "reflect", "replicate", "circular"])
    if rng.random() < 0.3:
        padding, s = rng.choice(["same", "valid"]), (1,) * nd
    else:
        s = tuple(rng.randint(1, 3) for _ in range(nd))
        padding = tuple(rng.randint(0, 3) for _ in range(nd))
    ext = [dd * (kk - 1) + 1 for kk, dd in zip(k, d)]
    lo = [0] * nd if padding == "valid" else (
        [(e - 1) // 2 for e in ext] if padding == "same" else list(padding))
    hi = [e - 1 - l for e, l in zip(ext, lo)] if padding == "same" else lo
    # sizes large enough for the kernel and for reflect's pad < L
    size = tuple(max(e - l - h, max(l, h) + 1, 1) + rng.randint(0, 4) for e, l, h in zip(ext, lo, hi))
    batch = rng.choice([None, 1, 2])
    x_shape = ((batch,) if batch else ()) + (cin,) + size
    kwargs = dict(stride=s, padding=padding, dilation=d, groups=groups, bias=rng.random() < 0.8, padding_mode=mode)
    return nd, x_shape, cin, cout, k, kwargs


def test_conv_random_sweep():
    rng = random.Random(1234)
    for i in range(120):
        nd, x_shape, cin, cout, k, kwargs = _random_conv_config(rng)
        try:
            check_module(nd, x_shape, cin, cout, k, seed=i, **kwargs)
        except AssertionError as e:
            raise AssertionError(f"config {i}: nd={nd} x={x_shape} cin={cin} cout={cout} k={k} {kwargs}: {e}") from e


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("value", [0.0, -0.0, 0])
def test_pad_non_constant_modes_take_an_explicit_zero_value(mode, value):
    """torch refuses a fill value for reflect/replicate/circular padding unless it is 0 (transformers' EnCodec
    calls ``F.pad(x, pads, "reflect", 0.0)``); a non-zero one stays refused (test_pad_errors)."""
    x = torch.randn(2, 3, 7)
    got = PF.pad(to_mx(x), (3, 2), mode=mode, value=value, channels_last=False)
    np.testing.assert_array_equal(np.array(got), F.pad(x, (3, 2), mode, value).numpy())


# (input shape in torch layout, weight shape in torch layout, groups): no input channels, batched or not, or no batch
EMPTY_CASES = [
    ((2, 0, 7), (4, 0, 3), 1),
    ((2, 0, 6, 5), (4, 0, 3, 3), 1),
    ((0, 5, 5), (4, 0, 3, 3), 1),  # unbatched
    ((2, 0, 6, 5), (4, 0, 3, 3), 2),
    ((1, 0, 4, 5, 3), (6, 0, 2, 3, 1), 1),
    ((0, 3, 6, 5), (4, 3, 3, 3), 1),  # no batch: C_out channels, no values
]


@pytest.mark.parametrize("x_shape,w_shape,groups", EMPTY_CASES)
def test_conv_of_an_empty_input_has_torchs_shape(x_shape, w_shape, groups):
    """Zero input channels: torch 2.13 returns ``(N, 0, *spatial)``, no output channel (session 18's port returned
    the bias broadcast over C_out: values torch never gives); zero batch: ``(0, C_out, *spatial)``. Gradients to the
    bias are zeros in both."""
    nd = len(w_shape) - 2
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    b = torch.randn(w_shape[0], requires_grad=True)
    want = TORCH_F[nd](x, w, b, stride=2, padding=1, groups=groups)
    want.sum().backward()
    bias, xm = to_mx(b.detach()), mx.array(np.moveaxis(x.numpy(), 1 if len(x_shape) == nd + 2 else 0, -1))
    wm = mx.array(np.moveaxis(w.numpy(), 1, -1))

    def run(bias):
        return PORTER_F[nd](xm, wm, bias, stride=2, padding=1, groups=groups)

    got = run(bias)
    assert got.shape == tuple(np.moveaxis(np.empty(want.shape), 1 if len(x_shape) == nd + 2 else 0, -1).shape)
    assert got.dtype == mx.float32 and got.size == 0
    grad = mx.grad(lambda b: run(b).sum())(bias)
    np.testing.assert_array_equal(np.array(grad), b.grad.numpy())
