"""The fast 3-d conv paths of issue 15 against torch (run in each test): the native 3-d Winograd op for stride-1
(kD, 3, 3) convs (layers/csrc/conv3d_kernels.h: forward, input and weight gradients, inf/NaN placement, jvp, vmap,
compile, which convs take it) and the strided 3-d convs' gradients (layers/_conv3d_grads.py: stride phases and
chunked im2col GEMMs; pure MLX, so both backends). Odd sizes, uneven ('same') padding, batch > 1, a second input
size, and the dtypes that must not take the float32 paths."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import porter.layers._conv3d_grads as grads_module
import porter.layers._conv_engine as conv_module
import porter.layers.functional as PF
from porter.layers import _native
from tests.conv_helpers import check_functional, check_module


class _Spy:
    """Counts calls of one engine entry point (``_native.winograd_conv3d`` or the strided-gradient helpers)."""

    def __init__(self, monkeypatch, owner, name):
        self.calls = 0
        real = getattr(owner, name)

        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, call)


def _nc(a):  # (N, D, H, W, C) MLX -> torch layout numpy
    return np.moveaxis(np.array(a), -1, 1)


def _cl(t):  # torch (N, C, D, H, W) -> channels-last MLX
    return mx.array(np.ascontiguousarray(np.moveaxis(t.detach().numpy(), 1, -1)))


def _w(t):  # torch weight (C_out, C_in, kD, kH, kW) -> Porter's (C_out, kD, kH, kW, C_in)
    return mx.array(np.ascontiguousarray(np.moveaxis(t.detach().numpy(), 1, -1)))


# ---------------------------------------------------------------------------------------------------- 3-d Winograd
# (input shape in torch layout, in_channels, out_channels, kernel_size, kwargs): every one takes the 3-d Winograd op
WINOGRAD_CASES = [
    ((1, 16, 5, 9, 7), 16, 24, 3, dict(padding=1)),  # odd H, W: cropped edge tiles
    ((2, 16, 4, 8, 10), 16, 16, 3, dict(padding=(1, 1, 0))),  # batch 2, no column padding
    ((1, 16, 5, 7, 6), 16, 20, (2, 3, 3), dict(padding="same")),  # torch pads depth unevenly (0 before, 1 after)
    ((2, 24, 4, 9, 9), 24, 16, (1, 3, 3), dict(padding=(0, 1, 1))),  # MC3 / R(2+1)D spatial conv
    ((1, 16, 6, 8, 8), 16, 16, 3, dict(padding=0, bias=False)),  # valid conv
    ((1, 17, 3, 6, 5), 17, 19, (3, 3, 3), dict(padding=(2, 1, 2))),  # odd channels, padding k-1
]


@pytest.mark.native_only
@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", WINOGRAD_CASES)
def test_winograd3d_matches_torch_with_gradients(monkeypatch, x_shape, cin, cout, k, kwargs):
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES_3D", 1)
    spy = _Spy(monkeypatch, _native, "winograd_conv3d")
    check_module(3, x_shape, cin, cout, k, **kwargs)
    assert spy.calls >= 1


@pytest.mark.native_only
def test_winograd3d_second_input_size_and_r3d_sizes(monkeypatch):
    spy = _Spy(monkeypatch, _native, "winograd_conv3d")
    check_module(3, (1, 16, 4, 15, 13), 16, 16, 3, padding=1, seed=3)  # 4 * 8 * 7 = 224 tiles: the default bar
    check_module(3, (2, 16, 3, 10, 12), 16, 16, 3, padding=1, seed=3)
    assert spy.calls >= 2


@pytest.mark.native_only
@pytest.mark.parametrize("kwargs", [dict(padding=3), dict(stride=(1, 1, 2), padding=1), dict(dilation=(2, 1, 1)),
                                    dict(groups=2, padding=1)])
def test_convs_outside_the_winograd3d_op_do_not_take_it(monkeypatch, kwargs):
    """Padding beyond k - 1, a stride, a dilation or groups: another path, still torch's numbers."""
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES_3D", 1)
    spy = _Spy(monkeypatch, _native, "winograd_conv3d")
    check_module(3, (1, 16, 6, 8, 9), 16, 16, 3, **kwargs)
    assert spy.calls == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes_keep_their_paths(monkeypatch, dtype):
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES_3D", 1)
    spy = _Spy(monkeypatch, _native, "winograd_conv3d")
    check_module(3, (1, 16, 3, 6, 7), 16, 16, 3, dtype=dtype, padding=1)
    assert spy.calls == 0


@pytest.mark.native_only
@pytest.mark.parametrize("where", ["x_inf", "x_nan", "weight_nan", "overflow"])
def test_winograd3d_puts_inf_and_nan_where_torch_does(monkeypatch, where):
    """Forward and weight gradient: non-finite tiles are redone as a direct conv, a non-finite weight gradient as
    a direct sum, so the pattern of inf and NaN is torch's."""
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES_3D", 1)
    spy = _Spy(monkeypatch, _native, "winograd_conv3d")
    torch.manual_seed(0)
    x, w = torch.randn(1, 16, 4, 8, 8), torch.randn(16, 16, 3, 3, 3) * 0.1
    if where == "x_inf":
        x[0, 3, 1, 2, 5] = float("inf")
    elif where == "x_nan":
        x[0, 0, 2, 7, 7] = float("nan")
    elif where == "weight_nan":
        w[5, 2, 1, 0, 2] = float("nan")
    else:  # 3e38 - (-3e38) overflows in the input transform; the direct sums stay finite
        x[0, 2, 1, 4, 4], x[0, 2, 1, 6, 4] = 3e38, -3e38
        w = w * 1e-3
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = TF.conv3d(x, w, padding=1)
    g = torch.rand_like(y) + 0.5  # positive: an inf input gives an inf weight gradient in torch
    y.backward(g)
    xm, wm, gm = _cl(x), _w(w), _cl(g)
    got, (gx, gw) = mx.vjp(lambda a, b: PF.conv3d(a, b, padding=1), [xm, wm], [gm])
    assert spy.calls >= 1
    for mine, theirs in ((_nc(got[0]), y.detach().numpy()), (_nc(gw), w.grad.numpy())):
        for test in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(test(mine), test(theirs))
        finite = np.isfinite(theirs)
        np.testing.assert_allclose(mine[finite], theirs[finite], rtol=1e-4, atol=1e-4 * np.abs(theirs[finite]).max())


@pytest.mark.native_only
def test_winograd3d_jvp_vmap_and_compile(monkeypatch):
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES_3D", 1)
    spy = _Spy(monkeypatch, _native, "winograd_conv3d")
    torch.manual_seed(0)
    x, w = torch.randn(2, 16, 3, 6, 5), torch.randn(16, 16, 3, 3, 3)
    tx, tw = torch.randn_like(x), torch.randn_like(w)
    _, (tangent,) = mx.jvp(lambda a, b: PF.conv3d(a, b, padding=1), [_cl(x), _w(w)], [_cl(tx), _w(tw)])
    _, want = torch.func.jvp(lambda a, b: TF.conv3d(a, b, padding=1), (x, w), (tx, tw))
    np.testing.assert_allclose(_nc(tangent), want.numpy(), rtol=1e-4, atol=1e-4)

    xs = torch.randn(3, 1, 16, 3, 6, 5)
    got = mx.vmap(lambda a: PF.conv3d(a, _w(w), padding=1))(mx.stack([_cl(v) for v in xs]))
    for v in range(3):
        np.testing.assert_allclose(_nc(got[v]), TF.conv3d(xs[v], w, padding=1).numpy(), rtol=1e-4, atol=1e-4)

    f = mx.compile(lambda a, b: PF.conv3d(a, b, padding=1))
    np.testing.assert_allclose(_nc(f(_cl(x), _w(w))), TF.conv3d(x, w, padding=1).numpy(), rtol=1e-4, atol=1e-4)
    assert spy.calls >= 1


@pytest.mark.native_only
def test_winograd3d_weight_transform_is_cached_by_the_weight():
    _native.clear_winograd_cache()
    w = mx.random.normal((16, 3, 3, 3, 16), key=mx.random.key(0))
    x = mx.random.normal((1, 4, 16, 16, 16), key=mx.random.key(1))
    first = PF.conv3d(x, w, padding=1)
    mx.eval(first)
    assert _native.winograd_cache_info()["entries"] == 1
    for _ in range(3):
        assert mx.array_equal(PF.conv3d(x, w, padding=1), first).item()
    assert _native.winograd_cache_info()["entries"] == 1


# ---------------------------------------------------------------------------------------------------- strided grads
# R3D's stem and stride-2 convs, MC3's (1, 2, 2) convs, R(2+1)D's temporal stride; odd sizes so that trailing input
# is not read; both backends (the gradients are MLX ops)
STRIDED_CASES = [
    ((1, 16, 5, 9, 7), 16, 24, 3, dict(stride=2, padding=1)),
    ((2, 8, 6, 8, 11), 8, 12, 3, dict(stride=(2, 3, 2), padding=(1, 0, 1))),
    ((1, 3, 4, 13, 12), 3, 8, (3, 7, 7), dict(stride=(1, 2, 2), padding=(1, 3, 3))),  # the stem
    ((2, 16, 3, 9, 10), 16, 16, (1, 3, 3), dict(stride=(1, 2, 2), padding=(0, 1, 1))),
    ((1, 12, 7, 5, 5), 12, 8, (3, 1, 1), dict(stride=(2, 1, 1), padding=(1, 0, 0))),
    ((1, 8, 5, 7, 9), 8, 16, 1, dict(stride=2, bias=False)),  # 1x1x1 downsample (the matmul path)
    ((1, 4, 6, 7, 8), 4, 6, (2, 4, 3), dict(stride=(2, 2, 3), padding=(0, 2, 1))),  # even kernels: empty phases
]


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", STRIDED_CASES)
def test_strided_conv3d_gradients_match_torch(monkeypatch, x_shape, cin, cout, k, kwargs):
    spy = _Spy(monkeypatch, conv_module, "strided_weight_grad")
    check_module(3, x_shape, cin, cout, k, **kwargs)
    assert spy.calls == (0 if k == 1 else 1)


def test_strided_weight_gradient_in_chunks_of_frames(monkeypatch):
    """A tiny im2col budget: one output frame per GEMM, accumulated; the same numbers as torch."""
    monkeypatch.setattr(grads_module, "COLS_BYTES", 1)
    check_functional(3, (2, 6, 7, 6, 5), (8, 6, 3, 3, 3), True, dict(stride=2, padding=1))
    check_module(3, (1, 3, 5, 9, 9), 3, 8, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2))


def test_strided_gradients_of_16_bit_inputs(backend):
    for dtype in (torch.float16, torch.bfloat16):
        check_module(3, (1, 8, 4, 7, 6), 8, 8, 3, dtype=dtype, stride=2, padding=1)


@pytest.mark.native_only
def test_winograd3d_forward_in_chunks_of_examples(monkeypatch):
    """A tiny chunk budget: one example per chunk, each waiting for the previous; torch's values and gradients."""
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES_3D", 1)
    monkeypatch.setattr(_native, "WINOGRAD3D_CHUNK_BYTES", 1)
    spy = _Spy(monkeypatch, _native, "winograd_conv3d")
    check_module(3, (3, 16, 4, 7, 9), 16, 16, 3, padding=1, seed=5)
    assert spy.calls >= 1


def test_strided_weight_gradient_in_chunks_of_examples(monkeypatch):
    """A budget of all frames of two examples: three examples in two GEMMs, accumulated; torch's numbers."""
    per_example = 2 * 3 * 4 * (1 * 3 * 3) * 3 * 4  # output frames x H x W x taps x C_in x float32 bytes
    monkeypatch.setattr(grads_module, "COLS_BYTES", 2 * per_example)
    check_module(3, (3, 3, 2, 6, 8), 3, 8, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))


@pytest.mark.native_only
@pytest.mark.parametrize("budget", [1 << 20, 1 << 30])
def test_strided_weight_gradient_memory_is_bounded(budget, monkeypatch):
    """R3D-18's stem (3x7x7, stride (1, 2, 2), 3 channels): its weight gradient's im2col is 9x the output. In chunks
    of COLS_BYTES the peak above the input stays near the cotangent, the gradient's own buffers and a few chunks
    (MLX's eval loop allocates a few tasks ahead); one chunk of everything (a budget of 1 GiB) holds the whole im2col."""
    from porter.layers import Conv3d

    monkeypatch.setattr(grads_module, "COLS_BYTES", budget)
    x = mx.random.normal((2, 8, 56, 56, 3), key=mx.random.key(0))
    conv = Conv3d(3, 64, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False)
    conv.train()
    cot = mx.random.normal((2, 8, 28, 28, 64), key=mx.random.key(1))
    mx.eval(x, cot, conv.parameters())
    grad = nn.value_and_grad(conv, lambda m, x: (m(x) * cot).sum())
    mx.eval(grad(conv, x))
    mx.synchronize()
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    mx.eval(grad(conv, x))
    cols = 2 * 8 * 28 * 28 * (3 * 7 * 7 * 3) * 4
    peak = mx.get_peak_memory() - base
    if budget < cols:
        assert peak <= 3 * cot.nbytes + 6 * budget, (peak / 2**20, cot.nbytes / 2**20)
    else:
        assert peak >= cols, (peak / 2**20, cols / 2**20)  # the measure sees the im2col
