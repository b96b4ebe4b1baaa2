"""Transposed convs through one GEMM and the native col2im (``layers/_conv_transpose_engine.py::COLUMNS``,
``layers/csrc/col2im_kernels.h``) against torch: values and gradients to input, weight and bias, odd sizes,
padding / output_padding / dilation, batch 1 and > 1, half dtypes, NaN; the kernels' adjointness, jvp and vmap.

Every parity test runs in both backend variants (``tests/layers/conftest.py``): the native one takes the columns
path, the pure-MLX one the phase convs, and both must match torch.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.conv_helpers import check_transpose_functional, check_transpose_module

import porter.layers.functional as PF
from porter.layers import _conv_transpose_engine as engine
from porter.layers import _native
from porter.layers.conv_weights import torch_conv_transpose_weight_to_mlx

# torch layout; torch weight (C_in, C_out, *k); args after the bias: stride, padding, output_padding, groups, dilation
CASES = [
    (2, (2, 5, 7, 9), (5, 3, 3, 3), (2, 1, 1, 1, 1)),  # the k3 s2 p1 op1, odd sizes
    (2, (1, 5, 6, 5), (5, 3, 3, 3), (2, 1, 0, 1, 2)),  # the dilated k3 s2 d2, batch 1
    (2, (3, 4, 5, 4), (4, 6, 4, 4), (2, 1, 0, 1, 1)),  # k4 s2 p1 (DCGAN / U-Net decoders)
    (2, (2, 3, 4, 5), (3, 2, 3, 2), ((3, 2), (4, 0), (2, 1), 1, (2, 1))),  # asymmetric, op < stride
    (2, (2, 3, 5, 4), (3, 4, 5, 3), ((1, 3), (2, 1), (1, 2), 1, (2, 1))),  # stride 1 along H, dilation 2: op < d
    (2, (1, 2, 3, 3), (2, 3, 2, 2), (3, 0, 2, 1, 1)),  # kernel < stride: output_padding positions no tap writes
    (2, (2, 3, 4, 4), (3, 2, 3, 3), (2, 4, 1, 1, 1)),  # padding > d*(k-1): the columns crop more than a tap
    (2, (2, 4, 6, 6), (4, 4, 3, 3), (1, 2, 0, 1, 2)),  # stride 1 with dilation: a dilated conv's transpose
    (1, (2, 6, 11), (6, 5, 4), (2, 1, 0, 1, 1)),
    (1, (1, 3, 7), (3, 4, 3), (3, 2, 2, 1, 2)),
]


@pytest.mark.parametrize("nd, x_shape, w_shape, args", CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_columns_match_torch(nd, x_shape, w_shape, args, bias):
    check_transpose_functional(nd, x_shape, w_shape, bias, 1, args)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "nd, x_shape, cin, cout, k, kwargs",
    [
        (2, (2, 4, 5, 7), 4, 3, 3, dict(stride=2, padding=1, output_padding=1)),
        (2, (1, 4, 6, 5), 4, 3, 3, dict(stride=2, padding=1, dilation=2)),
        (1, (2, 4, 9), 4, 6, 4, dict(stride=2, padding=1)),
    ],
)
def test_columns_half_precision(dtype, nd, x_shape, cin, cout, k, kwargs):
    check_transpose_module(nd, x_shape, cin, cout, k, dtype=dtype, **kwargs)


def _pair(x_shape, w_shape, seed=0):
    torch.manual_seed(seed)
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(w_shape[1])
    xm = mx.array(x.permute(0, *range(2, x.ndim), 1).numpy())
    return x, w, b, xm, mx.array(torch_conv_transpose_weight_to_mlx(w.numpy(), 1)), mx.array(b.numpy())


def test_nan_lands_where_torch_puts_it():
    """A NaN input pixel spreads over exactly the outputs its taps reach (the GEMM puts it in its own column row)."""
    x, w, b, xm, wm, bm = _pair((2, 4, 6, 5), (4, 3, 3, 3))
    x[1, 2, 3, 1] = float("nan")
    xm = mx.array(x.permute(0, 2, 3, 1).numpy())
    for kwargs in (dict(stride=2, padding=1, output_padding=1), dict(stride=2, padding=1, dilation=2)):
        expected = F.conv_transpose2d(x, w, b, **kwargs).permute(0, 2, 3, 1).numpy()
        got = np.array(PF.conv_transpose2d(xm, wm, bm, **kwargs))
        assert np.isnan(expected).any()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_vmap_matches_a_loop():
    _, _, _, xm, wm, bm = _pair((3, 4, 5, 6), (4, 3, 3, 3))
    fn = lambda a: PF.conv_transpose2d(a, wm, bm, stride=2, padding=1, output_padding=1)  # noqa: E731
    batched = mx.vmap(fn)(xm[:, None])
    looped = mx.stack([fn(xm[i : i + 1]) for i in range(3)])
    np.testing.assert_allclose(np.array(batched), np.array(looped), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------- native only
class _Counter:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.mark.native_only
def test_columns_path_is_taken_and_off_switches_agree(monkeypatch):
    """COLUMNS on: the native col2im runs; off, or columns past COLUMNS_MAX_BYTES: the phase convs, same values."""
    x, w, b, xm, wm, bm = _pair((2, 5, 7, 9), (5, 3, 3, 3))
    counter = _Counter(_native.col2im)
    monkeypatch.setattr(_native, "col2im", counter)
    kwargs = dict(stride=2, padding=1, output_padding=1)
    expected = F.conv_transpose2d(x, w, b, **kwargs).permute(0, 2, 3, 1).numpy()
    on = np.array(PF.conv_transpose2d(xm, wm, bm, **kwargs))
    assert counter.calls == 1
    monkeypatch.setattr(engine, "COLUMNS_MAX_BYTES", 0)
    capped = np.array(PF.conv_transpose2d(xm, wm, bm, **kwargs))
    monkeypatch.setattr(engine, "COLUMNS_MAX_BYTES", 256 << 20)
    monkeypatch.setattr(engine, "COLUMNS", False)
    off = np.array(PF.conv_transpose2d(xm, wm, bm, **kwargs))
    assert counter.calls == 1
    for got in (on, capped, off):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.native_only
def test_grouped_and_stride1_keep_their_paths(monkeypatch):
    counter = _Counter(_native.col2im)
    monkeypatch.setattr(_native, "col2im", counter)
    x = mx.zeros((1, 5, 5, 4))
    PF.conv_transpose2d(x, mx.zeros((6, 3, 3, 2)), stride=2, groups=2)  # grouped: phase convs
    PF.conv_transpose2d(x, mx.zeros((3, 3, 3, 4)), padding=1)  # stride 1, undilated: a plain conv (Winograd)
    PF.conv_transpose2d(x, mx.zeros((3, 2, 2, 4)), stride=2)  # kernel == stride: one matmul
    assert counter.calls == 0


GEOMETRIES = [
    ((2, -1, 1, 2, -1, 1), (3, 4), (3, 3), (6, 8)),
    ((2, -2, 3, 3, 1, -1), (4, 3), (3, 2), (9, 8)),
    ((1, 2, -2, 2, -1, 2), (5, 2), (2, 4), (4, 5)),
]


@pytest.mark.native_only
@pytest.mark.parametrize("geometry, in_size, kernel, out_size", GEOMETRIES)
def test_col2im_and_im2col_are_adjoint(geometry, in_size, kernel, out_size):
    """<col2im(c), y> == <c, im2col(y)>, and col2im matches a scatter-add written out in numpy."""
    rng = np.random.default_rng(1)
    cols = rng.standard_normal((2, *in_size, *kernel, 5)).astype(np.float32)
    image = rng.standard_normal((2, *out_size, 5)).astype(np.float32)
    got = np.array(_native.col2im(mx.array(cols), out_size, geometry))
    expected = np.zeros_like(image)
    (sh, th, oh), (sw, tw, ow) = geometry[:3], geometry[3:]
    for i in range(in_size[0]):
        for j in range(in_size[1]):
            for a in range(kernel[0]):
                for c in range(kernel[1]):
                    r, q = sh * i + th * a + oh, sw * j + tw * c + ow
                    if 0 <= r < out_size[0] and 0 <= q < out_size[1]:
                        expected[:, r, q] += cols[:, i, j, a, c]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    gathered = np.array(_native.im2col(mx.array(image), in_size, kernel, geometry))
    np.testing.assert_allclose(float((got * image).sum()), float((cols * gathered).sum()), rtol=1e-4)


@pytest.mark.native_only
def test_col2im_gradient_jvp_and_vmap():
    rng = np.random.default_rng(2)
    geometry, out_size = (2, -1, 1, 2, -1, 1), (6, 8)
    cols = mx.array(rng.standard_normal((3, 3, 4, 3, 3, 4)).astype(np.float32))
    cot = mx.array(rng.standard_normal((3, *out_size, 4)).astype(np.float32))
    fn = lambda c: _native.col2im(c, out_size, geometry)  # noqa: E731
    _, (vjp,) = mx.vjp(fn, [cols], [cot])
    np.testing.assert_array_equal(np.array(vjp), np.array(_native.im2col(cot, (3, 4), (3, 3), geometry)))
    _, (jvp,) = mx.jvp(fn, [cols], [cols * 2])
    np.testing.assert_allclose(np.array(jvp), 2 * np.array(fn(cols)), rtol=1e-6, atol=1e-6)
    mapped = mx.vmap(fn)(cols[:, None])
    np.testing.assert_allclose(np.array(mapped)[:, 0], np.array(fn(cols)), rtol=1e-6, atol=1e-6)
    # second order: im2col's own VJP is col2im
    _, (back,) = mx.vjp(lambda y: _native.im2col(y, (3, 4), (3, 3), geometry), [cot], [cols])
    np.testing.assert_allclose(np.array(back), np.array(fn(cols)), rtol=1e-6, atol=1e-6)


@pytest.mark.native_only
def test_col2im_half_rounds_once():
    """16-bit columns sum in float32 and round once: equal to the float32 sum rounded."""
    rng = np.random.default_rng(3)
    cols = rng.standard_normal((2, 4, 4, 3, 3, 8)).astype(np.float32)
    geometry = (2, -1, 1, 2, -1, 1)
    for dtype in (mx.float16, mx.bfloat16):
        c16 = mx.array(cols).astype(dtype)
        got = _native.col2im(c16, (8, 8), geometry)
        assert got.dtype == dtype
        expected = _native.col2im(c16.astype(mx.float32), (8, 8), geometry).astype(dtype)
        np.testing.assert_array_equal(np.array(got.astype(mx.float32)), np.array(expected.astype(mx.float32)))


@pytest.mark.native_only
@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: _native.col2im(mx.zeros((1, 2, 2, 3, 3)), (4, 4), (2, -1, 1, 2, -1, 1)), "cols must be"),
        (lambda: _native.col2im(mx.zeros((1, 2, 2, 3, 3, 1)), (4, 4), (0, -1, 1, 2, -1, 1)), "strides must be"),
        (lambda: _native.col2im(mx.zeros((1, 2, 2, 3, 3, 1), dtype=mx.int32), (4, 4), (2, 1, 0, 2, 1, 0)), "cols must be"),
        (lambda: _native.im2col(mx.zeros((1, 4, 4)), (2, 2), (3, 3), (2, -1, 1, 2, -1, 1)), "image must be"),
        (lambda: _native.im2col(mx.zeros((1, 4, 4, 1)), (2, 2), (3, 3), (2, -1, 1)), "geometry must be"),
    ],
)
def test_col2im_rejects_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()
