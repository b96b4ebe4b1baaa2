"""Dilated stride-1 2-d convs whose taps mostly read zero padding (DeepLabV3's ASPP) run as one GEMM per tap over the
outputs that tap reads inside the image (``_conv_engine.DILATED_TAPS``): forward, input and weight gradients against
torch's F.conv2d, odd sizes, asymmetric and 'same' padding, non-square kernels, taps reading only padding, half
dtypes; and which path a conv takes."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import porter.layers._conv_engine as engine
import porter.layers.functional as PF
from tests.helpers import assert_close

_MX = {torch.float32: mx.float32, torch.float16: mx.float16, torch.bfloat16: mx.bfloat16}
_TOL = {torch.float32: (2e-4, 2e-4), torch.float16: (3e-2, 3e-2), torch.bfloat16: (1.5e-1, 5e-2)}

# (x shape NCHW, C_out, kernel, padding, dilation): every case has a valid-tap share <= DILATED_TAPS_MAX_SHARE
CASES = [
    ((1, 16, 9, 9), 8, 3, 12, 12),             # ASPP-like: rate past the map, side taps read 0 rows or a few
    ((2, 8, 11, 7), 6, 3, 6, 6),               # uneven sides, batch 2
    ((1, 8, 10, 13), 4, (3, 2), (7, 5), (5, 9)),  # non-square kernel, per-dim padding and dilation
    ((1, 4, 6, 6), 5, 3, 20, 10),              # padding much wider than the map: most taps read padding only
    ((2, 6, 8, 5), 3, 3, "same", 7),           # 'same' padding
]


def _run(x_shape, c_out, k, padding, dilation, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    kh, kw = (k, k) if isinstance(k, int) else k
    x = torch.randn(*x_shape, generator=g, dtype=torch.float64)
    w = torch.randn(c_out, x_shape[1], kh, kw, generator=g, dtype=torch.float64) * 0.3
    x, w = x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
    y = TF.conv2d(x, w, padding=padding, dilation=dilation)
    cot = torch.randn(y.shape, generator=g, dtype=torch.float64).to(dtype)
    y.backward(cot)

    def m(t):
        return mx.array(t.detach().to(torch.float64).numpy().transpose(0, 2, 3, 1), dtype=mx.float64).astype(_MX[dtype])

    ym, (gx, gw) = mx.vjp(lambda a, b: PF.conv2d(a, b, padding=padding, dilation=dilation), [m(x), m(w)], [m(cot)])
    atol, rtol = _TOL[dtype]

    def back(a):
        return np.array(a.astype(mx.float64)).transpose(0, 3, 1, 2)

    scale = max(1.0, float(np.abs(w.grad.double().numpy()).max()))
    assert_close(back(ym[0]), y.detach().double().numpy(), atol=atol, rtol=rtol, what="output")
    assert_close(back(gx), x.grad.double().numpy(), atol=atol, rtol=rtol, what="input grad")
    assert_close(back(gw), w.grad.double().numpy(), atol=atol * scale, rtol=rtol, what="weight grad")


class _Count:
    def __init__(self, monkeypatch):
        self.calls = 0
        real = engine._dilated_taps_conv

        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(engine, "_dilated_taps_conv", call)


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_sparse_dilated_conv_matches_torch_and_takes_the_tap_path(case, monkeypatch):
    count = _Count(monkeypatch)
    _run(*case)
    assert count.calls >= 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes(dtype):
    _run(*CASES[0], dtype=dtype)


def test_dense_dilated_conv_keeps_the_phases(monkeypatch):
    count = _Count(monkeypatch)
    _run((1, 8, 12, 12), 4, 3, 2, 2)  # every tap reads mostly the image: share ~0.8
    assert count.calls == 0


def test_switch_off_gives_the_same_numbers(monkeypatch):
    x = mx.random.normal((2, 9, 9, 16), key=mx.random.key(1))
    w = mx.random.normal((8, 3, 3, 16), key=mx.random.key(2))
    on = PF.conv2d(x, w, padding=12, dilation=12)
    monkeypatch.setattr(engine, "DILATED_TAPS", False)
    off = PF.conv2d(x, w, padding=12, dilation=12)
    np.testing.assert_allclose(np.array(on), np.array(off), rtol=1e-5, atol=1e-5)


def test_every_tap_reading_padding_gives_zeros_like_torch():
    """Output 0 reads -7, -2 and 3 along each dim of a 2-pixel image: no tap touches it (a transposed conv's
    dilated formulation can ask for this)."""
    x = torch.randn(1, 3, 2, 2)
    w = torch.randn(4, 3, 3, 3)
    expected = TF.conv2d(TF.pad(x, (7, 2, 7, 2)), w, dilation=5)
    xm, wm = mx.array(x.numpy().transpose(0, 2, 3, 1)), mx.array(w.numpy().transpose(0, 2, 3, 1))
    y = engine.conv_core(xm, wm, (1, 1), (7, 7), (2, 2), (5, 5), 1)
    assert y.dtype == mx.float32
    np.testing.assert_array_equal(np.array(y).transpose(0, 3, 1, 2), expected.numpy())
    _, (gx,) = mx.vjp(lambda a: engine.conv_core(a, wm, (1, 1), (7, 7), (2, 2), (5, 5), 1), [xm], [mx.ones(y.shape)])
    np.testing.assert_array_equal(np.array(gx), np.zeros(xm.shape, np.float32))
