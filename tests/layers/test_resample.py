"""Linear resampling (layers/resample.py; the 2-d native kernel in csrc/resample_kernels.h) against torch's
F.interpolate on both paths (`backend` fixture): 1-d/2-d/3-d, align_corners both ways, scale factors, up and down,
sizes that do not divide, unchanged dims, batch 1 and 3, 16-bit and float64; inf/NaN placement; gradients,
second derivatives (linear: the gradient of the gradient), vmap, and arguments named in errors.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.compare import assert_close
from porter.layers import _native
from porter.layers.functional import interpolate_linear

TF = torch.nn.functional
MODES = {1: "linear", 2: "bilinear", 3: "trilinear"}


def _cl(a: np.ndarray) -> np.ndarray:  # NC... -> N...C
    return np.moveaxis(a, 1, -1)


def _cf(a) -> np.ndarray:  # N...C -> NC...
    return np.moveaxis(np.array(a.astype(mx.float32) if a.dtype in (mx.float16, mx.bfloat16) else a), -1, 1)


def _torch(x: np.ndarray, size, align_corners, scale_factors=None, dtype=torch.float32):
    nd = x.ndim - 2
    t = torch.tensor(x).to(dtype)
    if scale_factors is not None:
        return TF.interpolate(t, scale_factor=scale_factors, mode=MODES[nd], align_corners=align_corners)
    return TF.interpolate(t, size=size, mode=MODES[nd], align_corners=align_corners)


CASES = [  # (N, C, spatial in, size out)
    (1, 3, (4, 4), (8, 8)),
    (3, 5, (7, 5), (13, 3)),  # up one dim, down the other, sizes that do not divide
    (2, 21, (28, 28), (224, 224)),  # LR-ASPP's final upsample, at batch 2
    (1, 4, (5, 6), (5, 11)),  # one dim unchanged
    (2, 3, (9, 6), (4, 4)),  # downsample
    (1, 2, (1, 1), (4, 5)),
    (2, 3, (3, 3), (1, 1)),
    (2, 3, (6,), (11,)),
    (1, 2, (3, 4, 5), (5, 3, 7)),
]


@pytest.mark.parametrize("n,c,spatial,size", CASES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_values_match_torch(n, c, spatial, size, align_corners, backend):
    x = np.random.default_rng(len(spatial) * 7 + n).standard_normal((n, c, *spatial)).astype(np.float32)
    want = _torch(x, size, align_corners).numpy()
    got = interpolate_linear(mx.array(_cl(x)), size, align_corners=align_corners)
    assert got.shape == (n, *size, c) and got.dtype == mx.float32
    assert_close(_cf(got), want, rtol=1e-6)


@pytest.mark.parametrize("scale_factors", [(2.0, 2.0), (1.7, 0.6), (0.5, 3.0)])
def test_scale_factors_set_the_coordinate_scale(scale_factors, backend):
    x = np.random.default_rng(1).standard_normal((2, 3, 7, 9)).astype(np.float32)
    want = _torch(x, None, False, scale_factors).numpy()
    got = interpolate_linear(mx.array(_cl(x)), want.shape[2:], scale_factors=scale_factors)
    assert_close(_cf(got), want, rtol=1e-6)
    if scale_factors == (1.7, 0.6):  # in / out differs from 1 / scale here: the scale given must be used
        plain = interpolate_linear(mx.array(_cl(x)), want.shape[2:])
        assert not np.allclose(_cf(plain), want, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("spatial,size", [((7, 5), (13, 3)), ((6,), (11,))])
def test_other_dtypes(dtype, spatial, size, backend):
    mdt, tdt = {"float16": (mx.float16, torch.float16), "bfloat16": (mx.bfloat16, torch.bfloat16),
                "float64": (mx.float64, torch.float64)}[dtype]
    x = np.random.default_rng(2).standard_normal((2, 3, *spatial))
    t = torch.tensor(x).to(tdt)
    want = _torch(t.to(torch.float64).numpy(), size, False, dtype=tdt).to(torch.float64).numpy()
    xm = mx.array(_cl(t.to(torch.float64).numpy()), dtype=mx.float64).astype(mdt)
    got = interpolate_linear(xm, size)
    assert got.dtype == mdt
    # 16-bit: computed in float32 and rounded once, as torch: at most one rounding apart
    rtol = {"float16": 1e-3, "bfloat16": 8e-3, "float64": 1e-12}[dtype]
    assert_close(_cf(got).astype(np.float64), want, rtol=rtol)


@pytest.mark.parametrize("size", [(4, 8), (8, 8), (4, 4), (3, 2), (9, 7)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_inf_and_nan_land_where_torch_puts_them(size, align_corners, backend):
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 4)).astype(np.float32)
    x[0, 0, 1, 1] = np.inf
    x[0, 1, 2, 0] = np.nan
    x[0, 1, 0, 3] = -np.inf
    want = _torch(x, size, align_corners).numpy()
    got = _cf(interpolate_linear(mx.array(_cl(x)), size, align_corners=align_corners))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)]) and np.isinf(got).sum() == np.isinf(want).sum()
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n,c,spatial,size", [CASES[1], CASES[2], CASES[3], CASES[4], CASES[7], CASES[8]])
@pytest.mark.parametrize("align_corners", [False, True])
def test_gradient_matches_torch(n, c, spatial, size, align_corners, backend):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, c, *spatial)).astype(np.float32)
    g = rng.standard_normal((n, c, *size)).astype(np.float32)
    t = torch.tensor(x, requires_grad=True)
    _torch_out = TF.interpolate(t, size=size, mode=MODES[len(spatial)], align_corners=align_corners)
    _torch_out.backward(torch.tensor(g))
    _, vjp = mx.vjp(lambda a: interpolate_linear(a, size, align_corners=align_corners), [mx.array(_cl(x))],
                    [mx.array(_cl(g))])
    assert_close(_cf(vjp[0]), t.grad.numpy(), rtol=1e-6, what="input gradient")


def test_gradient_of_gradient_and_jvp(backend):
    # linear in x: the VJP's own VJP maps a cotangent back through the forward, and the JVP is the forward itself
    rng = np.random.default_rng(5)
    x = mx.array(rng.standard_normal((2, 5, 7, 3)).astype(np.float32))
    g = mx.array(rng.standard_normal((2, 9, 4, 3)).astype(np.float32))
    h = mx.array(rng.standard_normal((2, 5, 7, 3)).astype(np.float32))
    f = lambda a: interpolate_linear(a, (9, 4))  # noqa: E731
    back = lambda cot: mx.vjp(f, [x], [cot])[1][0]  # noqa: E731
    _, second = mx.vjp(back, [g], [h])
    assert_close(np.array(second[0]), np.array(f(h)), rtol=1e-6, what="vjp of the vjp")
    _, tangent = mx.jvp(f, [x], [h])
    assert_close(np.array(tangent[0]), np.array(f(h)), rtol=1e-6, what="jvp")
    # <f(h), g> == <h, f^T(g)>
    lhs = float((f(h) * g).sum())
    rhs = float((h * back(g)).sum())
    assert abs(lhs - rhs) <= 1e-4 * abs(lhs) + 1e-4


def test_vmap_and_strided_input(backend):
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((3, 2, 5, 6, 4)).astype(np.float32)
    out = mx.vmap(lambda a: interpolate_linear(a, (7, 3)), in_axes=1, out_axes=1)(mx.array(xs))
    for i in range(2):
        want = _torch(np.moveaxis(xs[:, i], -1, 1), (7, 3), False).numpy()
        assert_close(_cf(out[:, i]), want, rtol=1e-6)
    view = mx.array(xs[:, 0]).transpose(0, 2, 1, 3)  # a non-contiguous (N, W, H, C) view
    want = _torch(np.moveaxis(xs[:, 0], -1, 1).transpose(0, 1, 3, 2), (4, 9), True).numpy()
    assert_close(_cf(interpolate_linear(view, (4, 9), align_corners=True)), want, rtol=1e-6)


@pytest.mark.native_only
def test_native_path_is_one_kernel_each_way(tmp_path):
    """2-d on the CPU: the forward and its gradient are one Porter primitive each, not gathers and products."""
    x = mx.random.normal((1, 6, 6, 3))
    grad = mx.grad(lambda a: (interpolate_linear(a, (12, 9)) * 2).sum())(x)
    mx.export_to_dot(str(tmp_path / "g.dot"), grad)
    dot = (tmp_path / "g.dot").read_text()
    assert "PorterBilinear2dAdjoint" in dot and "Scatter" not in dot, dot[:500]  # take's VJP is a Scatter
    with pytest.raises(ValueError, match=r"\[porter.bilinear2d\] 'h' index out of range"):
        _native.bilinear2d(x, [0, 9], [1, 1], [0.5, 0.5], [0], [0], [0.0])
    with pytest.raises(ValueError, match=r"'h' weights must lie in \[0, 1\]"):
        _native.bilinear2d(x, [0], [1], [1.5], [0], [0], [0.0])
    with pytest.raises(ValueError, match=r"'w' tables must be non-empty and of one length"):
        _native.bilinear2d(x, [0], [1], [0.5], [0, 1], [0], [0.0])


@pytest.mark.parametrize("args,kwargs,error,match", [
    ((np.zeros((1, 4, 4, 2), np.float32), (8, 8)), {}, TypeError, "'x' must be an mx.array"),
    ((mx.zeros((4, 4)), (8,)), {}, ValueError, "'x' must be channels-last"),
    ((mx.zeros((1, 4, 4, 2), dtype=mx.int32), (8, 8)), {}, TypeError, "'x' must be a floating-point"),
    ((mx.zeros((1, 4, 4, 2)), (8,)), {}, ValueError, "'size' must be 2 positive ints"),
    ((mx.zeros((1, 4, 4, 2)), (8, 0)), {}, ValueError, "'size' must be 2 positive ints"),
    ((mx.zeros((1, 4, 4, 2)), (8, 8)), {"scale_factors": [2.0]}, ValueError, "'scale_factors' must have 2"),
    ((mx.zeros((1, 0, 4, 2)), (8, 8)), {}, ValueError, "non-empty spatial dims"),
])
def test_bad_arguments_are_named(args, kwargs, error, match, backend):
    with pytest.raises(error, match=match):
        interpolate_linear(*args, **kwargs)
