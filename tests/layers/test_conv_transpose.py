"""ConvTranspose1d/2d/3d and conv_transpose1d/2d/3d against torch: outputs and gradients w.r.t. input, weight, bias."""

import math
import random

import mlx.core as mx
import numpy as np
import pytest
import torch
from tests.conv_helpers import PORTER_CT, TORCH_CT, check_transpose_functional
from tests.conv_helpers import check_transpose_module as check_module

import porter.layers as L
import porter.layers.functional as PF
from porter.layers.conv_weights import (
    mlx_conv_transpose_weight_to_torch,
    mlx_conv_weight_to_torch,
    torch_conv_transpose_weight_to_mlx,
    torch_conv_weight_to_mlx,
)


# ---------------------------------------------------------------------------------------------------- modules
# (input shape in torch layout, in_channels, out_channels, kernel_size, kwargs)
CASES_1D = [
    ((2, 3, 5), 3, 4, 3, {}),
    ((2, 3, 5), 3, 4, 3, dict(stride=2)),
    ((2, 3, 5), 3, 4, 4, dict(stride=2, padding=1)),
    ((2, 3, 6), 3, 4, 3, dict(stride=3, padding=1, output_padding=2)),
    ((2, 3, 5), 3, 4, 3, dict(dilation=2, padding=1)),
    ((2, 3, 5), 3, 4, 3, dict(dilation=2, output_padding=1)),  # op < dilation with stride 1 is legal
    ((2, 3, 7), 3, 4, 2, dict(padding=3)),  # padding > d*(k-1): where mx.conv_transpose1d goes wrong
    ((2, 3, 7), 3, 4, 3, dict(stride=2, padding=4, output_padding=1)),
    ((2, 4, 5), 4, 6, 3, dict(groups=2, stride=2)),
    ((2, 4, 5), 4, 4, 3, dict(groups=4, padding=1)),
    ((2, 4, 5), 4, 8, 3, dict(groups=4, stride=2, output_padding=1)),
    ((2, 3, 5), 3, 4, 3, dict(bias=False, stride=2)),
    ((3, 5), 3, 4, 3, dict(stride=2, padding=1)),
    ((2, 5, 7), 5, 6, 1, {}),
    ((2, 5, 7), 5, 6, 1, dict(stride=2)),
    ((2, 5, 7), 5, 6, 3, dict(stride=3)),
    ((2, 5, 7), 5, 6, 3, dict(stride=3, dilation=2)),
    ((1, 2, 1), 2, 3, 1, {}),
]

CASES_2D = [
    ((2, 3, 4, 5), 3, 4, 3, {}),
    ((2, 3, 4, 5), 3, 4, (3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ((2, 3, 4, 5), 3, 4, 4, dict(stride=2, padding=1)),
    ((2, 3, 4, 5), 3, 4, 3, dict(stride=(2, 3), padding=1, output_padding=(1, 2))),
    ((1, 3, 5, 5), 3, 2, 3, dict(padding=(3, 0))),  # padding beyond d*(k-1) on one axis
    ((2, 6, 4, 4), 6, 9, 3, dict(groups=3, stride=2, padding=1, output_padding=1)),
    ((2, 4, 4, 5), 4, 4, 3, dict(groups=4, dilation=2)),
    ((2, 3, 4, 5), 3, 4, 2, dict(stride=2, bias=False)),
    ((3, 4, 5), 3, 4, 3, dict(stride=2, padding=1)),
    ((2, 8, 3, 4), 8, 6, 1, {}),
    ((2, 3, 3, 3), 3, 4, 5, dict(stride=3, padding=2, dilation=2, output_padding=2)),
]

CASES_3D = [
    ((1, 2, 3, 4, 5), 2, 3, 3, {}),
    ((1, 2, 3, 4, 3), 2, 3, (2, 3, 2), dict(stride=(2, 1, 2), padding=(0, 1, 1), output_padding=(1, 0, 0))),
    ((1, 4, 3, 3, 3), 4, 6, 3, dict(groups=2, stride=2, padding=1)),
    ((1, 4, 3, 3, 3), 4, 4, 2, dict(groups=4, dilation=2, bias=False)),
    ((2, 3, 3, 4), 2, 3, 3, dict(padding=1, stride=2)),
    ((1, 2, 4, 4, 5), 2, 3, 2, dict(padding=2)),
    ((1, 2, 2, 3, 4), 2, 3, (2, 1, 3), dict(stride=(2, 1, 3))),  # kernel == stride: the patch-expand path
    ((1, 2, 2, 3, 4), 2, 3, (2, 1, 3), dict(stride=(2, 1, 3), dilation=(2, 3, 1), output_padding=(1, 0, 0))),
]


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_1D)
def test_conv_transpose1d_module(x_shape, cin, cout, k, kwargs):
    check_module(1, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_2D)
def test_conv_transpose2d_module(x_shape, cin, cout, k, kwargs):
    check_module(2, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES_3D)
def test_conv_transpose3d_module(x_shape, cin, cout, k, kwargs):
    check_module(3, x_shape, cin, cout, k, **kwargs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "nd, x_shape, cin, cout, k, kwargs",
    [
        (1, (2, 4, 5), 4, 6, 3, dict(stride=2, groups=2)),
        (2, (2, 3, 4, 5), 3, 4, 4, dict(stride=2, padding=1)),
        (3, (1, 2, 3, 3, 3), 2, 3, 3, dict(stride=2, output_padding=1)),
    ],
)
def test_conv_transpose_half_precision(dtype, nd, x_shape, cin, cout, k, kwargs):
    check_module(nd, x_shape, cin, cout, k, dtype=dtype, **kwargs)


@pytest.mark.parametrize(
    "nd, x_shape, k, kwargs, output_size",
    [
        (1, (2, 3, 5), 3, dict(stride=2), [12]),
        (1, (2, 3, 5), 3, dict(stride=2), [11]),
        (1, (3, 5), 3, dict(stride=3, padding=1), [15]),
        (2, (2, 3, 4, 5), 3, dict(stride=2, padding=1), (8, 10)),
        # output_size overrides the module's output_padding
        (2, (2, 3, 4, 5), 3, dict(stride=(2, 3), padding=1, output_padding=(1, 0)), (7, 15)),
        (3, (1, 3, 2, 3, 4), 2, dict(stride=2), [5, 6, 9]),
    ],
)
def test_conv_transpose_output_size(nd, x_shape, k, kwargs, output_size):
    check_module(nd, x_shape, x_shape[-nd - 1], 4, k, output_size=output_size, **kwargs)


def test_conv_transpose_output_size_full_shape_is_channels_last():
    """A full-length ``output_size`` is read in Porter's layout: ``(N, *spatial, C)`` or ``(*spatial, C)``."""
    pm = L.ConvTranspose2d(3, 4, 3, stride=2)
    assert pm(mx.zeros((2, 4, 5, 3)), output_size=(2, 10, 12, 4)).shape == (2, 10, 12, 4)
    assert pm(mx.zeros((4, 5, 3)), output_size=(10, 11, 4)).shape == (10, 11, 4)


# ---------------------------------------------------------------------------------------------------- functional
@pytest.mark.parametrize(
    "nd, x_shape, w_shape, bias, groups, args",
    [
        # torch weight (C_in, C_out/groups, *k); args after bias in torch's order: stride, padding, output_padding,
        # groups, dilation
        (1, (2, 4, 5), (4, 3, 3), True, 2, (2, 1, 1, 2, 1)),
        (1, (4, 5), (4, 3, 2), False, 1, (1, 2, 0, 1, 2)),
        (2, (2, 4, 4, 5), (4, 1, 3, 3), True, 4, ((2, 1), (1, 0), (1, 0), 4, 1)),
        (2, (2, 3, 4, 5), (3, 5, 2, 4), False, 1, (2, (0, 3), 0, 1, (1, 2))),
        (3, (1, 2, 3, 3, 4), (2, 3, 2, 3, 2), True, 1, ((1, 2, 1), 1, (0, 1, 0), 1, (2, 1, 1))),
        (3, (1, 4, 3, 3, 3), (4, 2, 3, 3, 3), True, 2, (2, 1, 1, 2, 1)),
    ],
)
def test_conv_transpose_functional(nd, x_shape, w_shape, bias, groups, args):
    check_transpose_functional(nd, x_shape, w_shape, bias, groups, args)


def test_conv_transpose_is_adjoint_of_conv():
    """<conv(x), y> == <x, conv_transpose(y)> with the same Porter weight: the layouts agree."""
    rng = np.random.default_rng(0)
    w = mx.array(rng.standard_normal((6, 3, 2, 2)).astype(np.float32))  # (C_out, kH, kW, C_in/groups), groups=2
    x = mx.array(rng.standard_normal((1, 9, 8, 4)).astype(np.float32))
    cx = PF.conv2d(x, w, stride=2, padding=1, groups=2)
    y = mx.array(rng.standard_normal(cx.shape).astype(np.float32))
    # the transpose of conv(C_in -> C_out) maps C_out -> C_in: its Porter weight is the regrouped torch conv weight
    w_t = torch_conv_transpose_weight_to_mlx(mlx_conv_weight_to_torch(np.array(w)), 2)
    ty = PF.conv_transpose2d(y, mx.array(w_t), stride=2, padding=1, groups=2)
    np.testing.assert_allclose(float((cx * y).sum()), float((x * ty).sum()), rtol=1e-4)


def test_conv_transpose_zero_batch():
    y = PF.conv_transpose1d(mx.zeros((0, 5, 2)), mx.zeros((3, 3, 2)), mx.ones(3), stride=2)
    assert y.shape == (0, 11, 3)


# ---------------------------------------------------------------------------------------------------- module API
def test_conv_transpose_attributes_like_torch():
    for nd, kwargs in [(1, dict(stride=2, output_padding=1)), (2, dict(padding=(1, 2), groups=2, bias=False)),
                       (3, dict(dilation=2, output_padding=1))]:
        tm = TORCH_CT[nd](4, 6, 3, **kwargs)
        pm = PORTER_CT[nd](4, 6, 3, **kwargs)
        for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "output_padding", "dilation",
                     "groups", "padding_mode"):
            assert getattr(pm, name) == getattr(tm, name), name
        assert (pm.bias is None) == (tm.bias is None)
        assert pm.weight.shape == torch_conv_transpose_weight_to_mlx(tm.weight.detach().numpy(), tm.groups).shape


@pytest.mark.parametrize("nd, cin, cout, k, groups", [(1, 4, 6, 3, 1), (2, 8, 16, (3, 5), 2), (3, 3, 6, 2, 3)])
def test_conv_transpose_init_bounds_like_torch(nd, cin, cout, k, groups):
    """torch's transposed fan_in counts C_out/groups (its weight is (C_in, C_out/groups, *k))."""
    mx.random.seed(0)
    pm = PORTER_CT[nd](cin, cout, k, groups=groups)
    tm = TORCH_CT[nd](cin, cout, k, groups=groups)
    bound = 1 / math.sqrt(tm.weight[0].numel())
    for p_m, p_t in ((pm.weight, tm.weight), (pm.bias, tm.bias)):
        a = np.abs(np.array(p_m))
        assert a.max() <= bound and float(p_t.detach().abs().max()) <= bound
        assert a.max() > 0.6 * bound


@pytest.mark.parametrize("groups, shape", [(1, (4, 6, 3)), (2, (4, 3, 3, 2)), (4, (8, 1, 2, 2, 2)), (3, (6, 5, 1))])
def test_weight_transforms_round_trip(groups, shape):
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    m = torch_conv_transpose_weight_to_mlx(w, groups)
    assert m.shape == (shape[1] * groups, *shape[2:], shape[0] // groups)
    np.testing.assert_array_equal(mlx_conv_transpose_weight_to_torch(m, groups), w)
    np.testing.assert_array_equal(mlx_conv_weight_to_torch(torch_conv_weight_to_mlx(w)), w)
    assert torch_conv_weight_to_mlx(w).shape == (shape[0], *shape[2:], shape[1])


@pytest.mark.parametrize(
    "func, w, groups, match",
    [
        (torch_conv_transpose_weight_to_mlx, np.zeros((3, 2, 2)), 2,
         r"dimension 0 \(C_in\) of size 3 is not divisible"),
        (torch_conv_transpose_weight_to_mlx, np.zeros((4, 2, 2)), 0, r"'groups' must be a positive int"),
        (mlx_conv_transpose_weight_to_torch, np.zeros((3, 2, 2)), 2, r"dimension 0 \(C_out\) of size 3"),
        (torch_conv_transpose_weight_to_mlx, np.zeros((4, 2)), 1, r"rank 3 to 5"),
    ],
)
def test_weight_transform_errors(func, w, groups, match):
    with pytest.raises(ValueError, match=match):
        func(w, groups)


# ---------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "cls, args, kwargs, exc, match",
    [
        (L.ConvTranspose1d, (2, 4, 3), dict(padding_mode="reflect"), ValueError,
         r'Only "zeros" padding mode is supported for ConvTranspose1d'),
        (L.ConvTranspose2d, (2, 4, 3), dict(padding="same"), TypeError, r"'padding' must be an int"),
        (L.ConvTranspose2d, (2, 4, 3), dict(output_padding=1), ValueError,
         r"output padding must be smaller than either stride or dilation"),
        (L.ConvTranspose2d, (2, 4, 3), dict(output_padding=(0, 2), stride=(1, 2)), ValueError,
         r"output padding must be smaller than either stride or dilation"),
        (L.ConvTranspose2d, (4, 6, 3), dict(groups=3), ValueError, r"in_channels must be divisible by groups"),
        (L.ConvTranspose2d, (4, 6, 3), dict(groups=4), ValueError, r"out_channels must be divisible by groups"),
        (L.ConvTranspose2d, (4, 6, 3), dict(groups=0), ValueError, r"groups must be a positive integer"),
        (L.ConvTranspose3d, (4, 6, 3), dict(stride=0), ValueError, r"non-positive stride is not supported"),
        (L.ConvTranspose1d, (4, 6, 3), dict(padding=-1), ValueError, r"negative padding is not supported"),
        (L.ConvTranspose1d, (4, 6, 3), dict(dilation=0), ValueError, r"dilation should be greater than zero"),
        (L.ConvTranspose2d, (4, 6, (3, 3, 3)), {}, ValueError, r"'kernel_size' must either be a single int"),
    ],
)
def test_conv_transpose_module_errors(cls, args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cls(*args, **kwargs)


@pytest.mark.parametrize(
    "output_size, x_shape, match",
    [
        ([14], (1, 5, 2), r"requested an output size of \[14\], but valid sizes range from \[11\] to \[12\]"),
        ([10], (1, 5, 2), r"valid sizes range from \[11\] to \[12\] \(for an input of \(5,\)\)"),
        ([1, 2, 3, 4], (1, 5, 2), r"ConvTranspose1D: for 3D input, output_size must have 1 or 3 elements \(got 4\)"),
        ([1, 2, 3], (5, 2), r"for 2D input, output_size must have 1 or 2 elements \(got 3\)"),
    ],
)
def test_conv_transpose_output_size_errors(output_size, x_shape, match):
    with pytest.raises(ValueError, match=match):
        L.ConvTranspose1d(2, 4, 3, stride=2)(mx.zeros(x_shape), output_size=output_size)


def test_conv_transpose_output_size_errors_match_torch():
    match = r"requested an output size of \[14\], but valid sizes range from \[11\] to \[12\]"
    with pytest.raises(ValueError, match=match):
        torch.nn.ConvTranspose1d(2, 4, 3, stride=2)(torch.zeros(1, 2, 5), output_size=[14])


@pytest.mark.parametrize(
    "func, x_shape, w_shape, b_shape, kwargs, match",
    [
        (PF.conv_transpose1d, (1, 5, 2), (3, 3, 2), None, dict(padding=4),
         r"Given input size per channel: \(5\)\. Calculated output size per channel: \(-1\)\. "
         r"Output size is too small"),
        (PF.conv_transpose1d, (1, 2, 2), (3, 1, 2), None, dict(padding=1),
         r"Calculated output size per channel: \(0\)\. Output size is too small"),
        (PF.conv_transpose1d, (1, 5, 2), (3, 3, 3), None, {},
         r"Given transposed=1, groups=1, weight of size \[3, 3, 3\], expected input\[1, 5, 2\] to have 3 channels, "
         r"but got 2 channels instead"),
        (PF.conv_transpose1d, (1, 5, 2), (3, 3, 2), (2,), {},
         r"Given transposed=1, weight of size \[3, 3, 2\], expected bias to be 1-dimensional with 3 elements"),
        (PF.conv_transpose1d, (1, 5, 2), (3, 3, 2), None, dict(output_padding=1),
         r"output padding must be smaller than either stride or dilation"),
        (PF.conv_transpose1d, (1, 5, 2), (3, 3, 2), None, dict(output_padding=-1),
         r"negative output_padding is not supported"),
        (PF.conv_transpose1d, (1, 5, 2), (3, 3, 2), None, dict(padding=-1), r"negative padding is not supported"),
        (PF.conv_transpose1d, (1, 5, 2), (3, 3, 2), None, dict(stride=0), r"non-positive stride is not supported"),
        (PF.conv_transpose2d, (1, 5, 5, 2), (3, 3, 3, 2), None, dict(dilation=(1, 0)),
         r"dilation should be greater than zero"),
        (PF.conv_transpose1d, (1, 5, 2), (3, 3, 2), None, dict(groups=0), r"non-positive groups is not supported"),
        (PF.conv_transpose1d, (1, 5, 4), (3, 3, 2), None, dict(groups=2),
         r"expected weight \(C_out, \*kernel, C_in/groups\) to be divisible by 2 at dimension 0"),
        (PF.conv_transpose2d, (5, 2), (3, 3, 3, 2), None, {},
         r"Expected 3D \(unbatched\) or 4D \(batched\) input to conv_transpose2d"),
    ],
)
def test_conv_transpose_functional_errors(func, x_shape, w_shape, b_shape, kwargs, match):
    b = None if b_shape is None else mx.zeros(b_shape)
    with pytest.raises(ValueError, match=match):
        func(mx.zeros(x_shape), mx.zeros(w_shape), b, **kwargs)


def test_conv_transpose_padding_string_is_type_error():
    with pytest.raises(TypeError, match=r"'padding' must be an int"):
        PF.conv_transpose1d(mx.zeros((1, 5, 2)), mx.zeros((3, 3, 2)), padding="same")


# ---------------------------------------------------------------------------------------------------- sweep
def _random_config(rng: random.Random):
    nd = rng.choice([1, 1, 2, 2, 3])
    groups = rng.choice([1, 1, 2, 3])
    cin, cout = groups * rng.randint(1, 3), groups * rng.randint(1, 3)
    k = tuple(rng.randint(1, 4) for _ in range(nd))
    s = tuple(rng.randint(1, 3) for _ in range(nd))
    d = tuple(rng.choice([1, 1, 2]) for _ in range(nd))
    p = tuple(rng.randint(0, dd * (kk - 1) + 2) for kk, dd in zip(k, d))  # includes p > d*(k-1)
    op = tuple(rng.randint(0, max(ss, dd) - 1) for ss, dd in zip(s, d))
    # input long enough for a positive output: (L-1)*s - 2p + d*(k-1) + 1 >= 1
    size = tuple(
        max(1, -(-(2 * pp - dd * (kk - 1)) // ss) + 1) + rng.randint(0, 3)
        for kk, ss, pp, dd in zip(k, s, p, d)
    )
    batch = rng.choice([None, 1, 2])
    x_shape = ((batch,) if batch else ()) + (cin,) + size
    kwargs = dict(stride=s, padding=p, output_padding=op, groups=groups, dilation=d, bias=rng.random() < 0.8)
    output_size = None
    if rng.random() < 0.2:  # pick the output through output_size instead
        output_size = [
            (n - 1) * ss - 2 * pp + dd * (kk - 1) + 1 + rng.randint(0, ss - 1)
            for n, kk, ss, pp, dd in zip(size, k, s, p, d)
        ]
    return nd, x_shape, cin, cout, k, output_size, kwargs


def test_conv_transpose_random_sweep():
    rng = random.Random(4321)
    for i in range(120):
        nd, x_shape, cin, cout, k, output_size, kwargs = _random_config(rng)
        try:
            check_module(nd, x_shape, cin, cout, k, seed=i, output_size=output_size, **kwargs)
        except AssertionError as e:
            raise AssertionError(
                f"config {i}: nd={nd} x={x_shape} cin={cin} cout={cout} k={k} output_size={output_size} {kwargs}: {e}"
            ) from e
