"""The strided 3-d conv's forward as native blocked im2col + GEMM (layers/csrc/conv3d_columns_kernels.h,
``_conv_engine.COLUMNS_3D``) against torch's F.conv3d, run in each test: forward, input and weight gradients (the
strided op's VJP), strides in one to three dims, padding wider than the stride, kernels with taps that read padding
only, odd sizes, row blocks that do not divide the rows and span examples, batch 1 and > 1, one and two threads,
inf/NaN placement, and what does not take it (float16/bfloat16, groups). Stride-1 3-d convs no other path takes
(R(2+1)D's (3, 1, 1) temporal convs, ``COLUMNS_3D_STRIDE1``) run their forward through it too, with MLX's gradient,
and without the whole batch's columns in MLX's memory."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import porter.layers._conv_engine as conv_module
import porter.layers.functional as PF
from porter.layers import _native
from tests.conv_helpers import check_functional

pytestmark = pytest.mark.native_only


class _Spy:
    """Counts calls of the native ``conv3d_columns``."""

    def __init__(self, monkeypatch):
        self.calls = 0
        module = _native.kernels()
        real = module.conv3d_columns

        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, "conv3d_columns", call)


@pytest.fixture
def spy(monkeypatch):
    """Blocks of 5 rows: blocks that cross examples and leave a short last one."""
    monkeypatch.setattr(_native, "CONV3D_COLUMNS_BLOCK_BYTES", 1)
    monkeypatch.setattr(_native, "CONV3D_COLUMNS_MIN_ROWS", 5)
    return _Spy(monkeypatch)


CASES = [
    # x shape (N, C, D, H, W), w shape (C_out, C_in, kD, kH, kW), conv args
    ((2, 3, 5, 17, 15), (8, 3, 3, 7, 7), dict(stride=(1, 2, 2), padding=(1, 3, 3))),  # R3D's stem, odd sizes
    ((1, 3, 4, 9, 11), (5, 3, 3, 7, 7), dict(stride=(1, 2, 2), padding=(1, 3, 3))),  # batch 1, 7 taps > width
    ((2, 6, 7, 9, 8), (7, 6, 3, 3, 3), dict(stride=2, padding=1, bias=None)),  # 3x3x3 s2
    ((3, 4, 5, 6, 7), (6, 4, 1, 1, 1), dict(stride=(1, 2, 2), padding=(0, 1, 0))),  # 1x1x1, padded: not a matmul
    ((2, 4, 6, 7, 5), (5, 4, 2, 3, 2), dict(stride=(2, 3, 1), padding=(0, 2, 1))),  # uneven strides
    ((2, 5, 3, 8, 8), (4, 5, 3, 3, 3), dict(stride=(3, 2, 2), padding=(2, 1, 1))),  # padding-only depth taps
    ((2, 1, 4, 9, 8), (3, 1, 3, 3, 3), dict(stride=2, padding=1)),  # one channel (compile-time width)
    ((2, 2, 4, 9, 8), (3, 2, 1, 5, 5), dict(stride=(1, 3, 2), padding=(0, 2, 2))),  # two channels
]


@pytest.mark.parametrize("x_shape, w_shape, args", CASES)
def test_strided_conv3d_through_the_columns_matches_torch(x_shape, w_shape, args, spy):
    args = dict(args)
    bias = args.pop("bias", True) is not None
    check_functional(3, x_shape, w_shape, bias, args)
    assert spy.calls > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_give_the_same_output(threads, spy):
    torch.manual_seed(3)
    x, w = torch.randn(3, 3, 6, 21, 19), torch.randn(16, 3, 3, 7, 7)
    previous = _native.kernels().num_threads()
    _native.kernels().set_num_threads(threads)
    try:
        y = PF.conv3d(mx.array(x.movedim(1, -1).numpy()), mx.array(w.permute(0, 2, 3, 4, 1).numpy()),
                      stride=(1, 2, 2), padding=(1, 3, 3))
        mx.eval(y)
    finally:
        _native.kernels().set_num_threads(previous)
    ref = TF.conv3d(x, w, stride=(1, 2, 2), padding=(1, 3, 3)).movedim(1, -1).numpy()
    np.testing.assert_allclose(np.array(y), ref, rtol=1e-4, atol=1e-4)
    assert spy.calls == 1


@pytest.mark.parametrize("where", ["nan_inside", "inf_corner"])
def test_non_finite_inputs_spread_as_torch_spreads_them(where, spy):
    """The columns hold zeros for padding (as torch's and MLX's im2col), so an inf next to the border gives inf/NaN
    where torch gives them."""
    torch.manual_seed(4)
    x, w = torch.randn(2, 3, 4, 9, 9), torch.randn(4, 3, 3, 3, 3)
    if where == "nan_inside":
        x[1, 2, 2, 4, 4] = float("nan")
    else:
        x[0, 0, 0, 0, 0] = float("inf")
    y = PF.conv3d(mx.array(x.movedim(1, -1).numpy()), mx.array(w.permute(0, 2, 3, 4, 1).numpy()), stride=2,
                  padding=1)
    ref = TF.conv3d(x, w, stride=2, padding=1).movedim(1, -1).numpy()
    out = np.array(y)
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(out), test(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-4, atol=1e-4)
    assert spy.calls == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_keeps_mlx_conv_and_matches_torch(dtype, spy):
    check_functional(3, (2, 3, 4, 9, 7), (4, 3, 3, 3, 3), True, dict(stride=(1, 2, 2), padding=1), dtype=dtype)
    assert spy.calls == 0


@pytest.mark.parametrize("args", [dict(stride=2, padding=1, groups=2), dict(stride=1, padding=1, groups=2)])
def test_grouped_convs_do_not_take_it(args, spy):
    check_functional(3, (2, 4, 5, 6, 7), (6, 2, 3, 3, 3), False, args)
    assert spy.calls == 0


STRIDE1_CASES = [
    ((2, 6, 7, 9, 8), (5, 6, 3, 1, 1), dict(padding=(1, 0, 0))),  # R(2+1)D's temporal conv
    ((1, 5, 4, 6, 9), (4, 5, 1, 1, 3), dict(padding=(0, 0, 1))),  # a 1-d conv along the width
    ((2, 4, 5, 6, 7), (6, 4, 3, 3, 3), dict(padding=1)),  # too few channels for 3-d Winograd
    ((2, 3, 5, 7, 6), (4, 3, 2, 3, 4), dict(padding="same")),  # even kernels: torch pads more after than before
    ((2, 3, 3, 4, 4), (4, 3, 3, 5, 5), dict(padding=2)),  # taps that read padding only
    ((3, 2, 6, 5, 5), (3, 2, 4, 2, 2), dict(padding=0)),  # no padding, odd output sizes
]


@pytest.mark.parametrize("x_shape, w_shape, args", STRIDE1_CASES)
def test_stride1_conv3d_through_the_columns_matches_torch(x_shape, w_shape, args, spy):
    check_functional(3, x_shape, w_shape, True, args)
    assert spy.calls > 0


def _extra_peak(x, w, padding):
    mx.eval(x, w)
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    y = PF.conv3d(x, w, padding=padding)
    mx.eval(y)
    return mx.get_peak_memory() - base, y


def test_stride1_columns_keep_memory_near_the_output(monkeypatch):
    """MLX's conv holds the whole batch's columns (three times the input here) at once; the blocked columns live
    outside MLX's memory, one block per thread: the op's extra peak is its output. Control: the switch off."""
    x = mx.random.normal((4, 8, 20, 20, 48), key=mx.random.key(0))
    w = mx.random.normal((16, 3, 1, 1, 48), key=mx.random.key(1))
    extra, y = _extra_peak(x, w, (1, 0, 0))
    assert extra <= 1.25 * y.nbytes, (extra, y.nbytes)
    monkeypatch.setattr(conv_module, "COLUMNS_3D_STRIDE1", False)
    extra_mlx, y_mlx = _extra_peak(x, w, (1, 0, 0))
    assert extra_mlx >= 3 * y.nbytes, (extra_mlx, y.nbytes)
    np.testing.assert_allclose(np.array(y), np.array(y_mlx), rtol=1e-4, atol=1e-4)


def test_switch_off_gives_mlx_conv(spy, monkeypatch):
    monkeypatch.setattr(conv_module, "COLUMNS_3D", False)
    check_functional(3, (2, 3, 4, 9, 7), (4, 3, 3, 7, 7), False, dict(stride=(1, 2, 2), padding=(1, 3, 3)))
    assert spy.calls == 0


def test_vmap_and_compile_match_the_plain_call(spy):
    x = mx.random.normal((3, 2, 4, 9, 8, 3), key=mx.random.key(0))
    w = mx.random.normal((5, 3, 3, 3, 3), key=mx.random.key(1))

    def conv(a):
        return PF.conv3d(a, w, stride=(1, 2, 2), padding=1)

    direct = mx.stack([conv(x[i]) for i in range(3)])
    assert mx.allclose(mx.vmap(conv)(x), direct, rtol=1e-5, atol=1e-5)
    assert mx.allclose(mx.compile(conv)(x[0]), direct[0], rtol=1e-5, atol=1e-5)
    assert spy.calls >= 5
