"""The cache-blocked 3-d Winograd forward (layers/csrc/conv3d_fused_kernels.h, ``_native.WINOGRAD3D_FUSED``) against
torch's F.conv3d, run in each test: forward, input and weight gradients (the input gradient is the fused forward of
the flipped conv), row blocks that do not divide the rows and span examples, kD 1/2/3, uneven and k-1 padding, odd
sizes, batch 1 and > 1, one and two threads, inf/NaN placement, jvp/vmap/compile, and what does not take it."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import porter.layers._conv_engine as conv_module
import porter.layers.functional as PF
from porter.layers import _native
from tests.conv_helpers import check_module
from tests.layers.blas_count import blas_count_at_two

pytestmark = pytest.mark.native_only


class _FusedSpy:
    """Counts calls of the native fused forward (``winograd3d_fused``) and weight-gradient (``winograd3d_fused_du``)
    passes of the extension module."""

    def __init__(self, monkeypatch):
        self.calls = self.grad_calls = 0
        module = _native.kernels()
        for name, counter in (("winograd3d_fused", "calls"), ("winograd3d_fused_du", "grad_calls")):
            monkeypatch.setattr(module, name, self._counted(getattr(module, name), counter))

    def _counted(self, real, counter):
        def call(*args, **kwargs):
            setattr(self, counter, getattr(self, counter) + 1)
            return real(*args, **kwargs)

        return call


@pytest.fixture
def fused(monkeypatch):
    """Every 3-d Winograd conv fused, in blocks of 5 rows (blocks that cross examples and leave a short last one)."""
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES_3D", 1)
    monkeypatch.setattr(_native, "WINOGRAD3D_FUSED", True)
    monkeypatch.setattr(_native, "WINOGRAD3D_FUSED_MIN_ROWS", 1)
    monkeypatch.setattr(_native, "WINOGRAD3D_FUSED_BLOCK", 5)
    monkeypatch.setattr(_native, "_fused_weight_grad", lambda *shape: True)  # at any size
    return _FusedSpy(monkeypatch)


def _nc(a):  # (N, D, H, W, C) MLX -> torch layout numpy
    return np.moveaxis(np.array(a), -1, 1)


def _cl(t):  # torch (N, C, D, H, W) -> channels-last MLX
    return mx.array(np.ascontiguousarray(np.moveaxis(t.detach().numpy(), 1, -1)))


# (input shape in torch layout, in_channels, out_channels, kernel_size, kwargs)
CASES = [
    ((1, 16, 5, 9, 7), 16, 24, 3, dict(padding=1)),  # odd H, W: cropped edge tiles
    ((3, 16, 4, 8, 10), 16, 16, 3, dict(padding=(1, 1, 0))),  # batch 3: blocks span examples
    ((2, 16, 5, 7, 6), 16, 20, (2, 3, 3), dict(padding="same")),  # depth padded unevenly (0 before, 1 after)
    ((2, 24, 4, 9, 9), 24, 16, (1, 3, 3), dict(padding=(0, 1, 1))),  # MC3 / R(2+1)D spatial conv: a ring of 1
    ((1, 16, 6, 8, 8), 16, 16, 3, dict(padding=0, bias=False)),  # valid conv
    ((2, 17, 3, 6, 5), 17, 19, (3, 3, 3), dict(padding=(2, 1, 2))),  # odd channels, padding k-1 (all-zero frames)
]


@pytest.mark.parametrize("x_shape, cin, cout, k, kwargs", CASES)
def test_fused_matches_torch_with_gradients(fused, x_shape, cin, cout, k, kwargs):
    check_module(3, x_shape, cin, cout, k, **kwargs)
    assert fused.calls >= 2  # the forward and the input gradient's conv
    assert fused.grad_calls >= 1


def test_fused_weight_gradient_on_two_threads(fused):
    """Each thread sums its own copy of the Winograd-domain gradient; the copies are added up."""
    before = _native.kernels().num_threads()
    _native.set_num_threads(2)
    try:
        check_module(3, (3, 16, 6, 9, 11), 16, 24, 3, padding=1, seed=4)
        check_module(3, (2, 16, 5, 8, 8), 16, 16, (1, 3, 3), padding=(0, 1, 1), seed=5)
    finally:
        _native.set_num_threads(before)
    assert fused.grad_calls >= 2


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_one_and_two_threads_and_default_thresholds(monkeypatch, threads):
    """Default settings: a conv with 64 (example, tile) rows per frame is fused; 1 or 2 threads, torch's numbers, and
    the same numbers as the unfused GEMMs."""
    spy = _FusedSpy(monkeypatch)
    before = _native.kernels().num_threads()
    _native.set_num_threads(threads)
    try:
        check_module(3, (2, 16, 5, 11, 16), 16, 24, 3, padding=1, seed=7)  # 2 * 6 * 8 = 96 rows per frame
        assert spy.calls >= 1
        torch.manual_seed(1)
        x, w = torch.randn(2, 16, 5, 11, 16), torch.randn(24, 16, 3, 3, 3) * 0.1
        fused = PF.conv3d(_cl(x), _cl(w), padding=1)
        monkeypatch.setattr(_native, "WINOGRAD3D_FUSED", False)
        unfused = PF.conv3d(_cl(x), _cl(w), padding=1)
        np.testing.assert_allclose(np.array(fused), np.array(unfused), rtol=1e-5, atol=1e-5)
    finally:
        _native.set_num_threads(before)


def test_small_convs_and_other_dtypes_are_not_fused(monkeypatch):
    """Fewer rows per frame than WINOGRAD3D_FUSED_MIN_ROWS keep the unfused GEMMs; 16-bit inputs never reach the
    float32 op. Both still give torch's numbers."""
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES_3D", 1)
    spy = _FusedSpy(monkeypatch)
    check_module(3, (1, 16, 4, 8, 8), 16, 16, 3, padding=1)  # 16 rows per frame
    check_module(3, (1, 16, 3, 16, 16), 16, 16, 3, dtype=torch.float16, padding=1)
    assert spy.calls == 0


@pytest.mark.parametrize("where", ["x_inf", "x_nan", "weight_nan", "overflow"])
def test_fused_puts_inf_and_nan_where_torch_does(fused, where):
    torch.manual_seed(0)
    x, w = torch.randn(2, 16, 4, 8, 8), torch.randn(16, 16, 3, 3, 3) * 0.1
    if where == "x_inf":
        x[1, 3, 1, 2, 5] = float("inf")
    elif where == "x_nan":
        x[0, 0, 2, 7, 7] = float("nan")
    elif where == "weight_nan":  # batch 1: torch's batch-2 conv3d skips padding taps (no 0 * NaN there), im2col not
        x = x[:1]
        w[5, 2, 1, 0, 2] = float("nan")
    else:  # 3e38 - (-3e38) overflows in the input transform; the direct sums stay finite
        x[1, 2, 1, 4, 4], x[1, 2, 1, 6, 4] = 3e38, -3e38
        w = w * 1e-3
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = TF.conv3d(x, w, padding=1)
    g = torch.rand_like(y) + 0.5  # positive: an inf input gives an inf weight gradient in torch
    y.backward(g)
    out, (_, gw) = mx.vjp(lambda a, b: PF.conv3d(a, b, padding=1), [_cl(x), _cl(w)], [_cl(g)])
    assert fused.calls >= 1 and fused.grad_calls == 1
    for got, want in ((_nc(out[0]), y.detach().numpy()), (_nc(gw), w.grad.numpy())):
        for test in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(test(got), test(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4 * np.abs(want[finite]).max())


def test_fused_jvp_vmap_and_compile(fused):
    torch.manual_seed(0)
    x, w = torch.randn(2, 16, 3, 6, 5), torch.randn(16, 16, 3, 3, 3)
    tx, tw = torch.randn_like(x), torch.randn_like(w)
    _, (tangent,) = mx.jvp(lambda a, b: PF.conv3d(a, b, padding=1), [_cl(x), _cl(w)], [_cl(tx), _cl(tw)])
    _, want = torch.func.jvp(lambda a, b: TF.conv3d(a, b, padding=1), (x, w), (tx, tw))
    np.testing.assert_allclose(_nc(tangent), want.numpy(), rtol=1e-4, atol=1e-4)

    xs = torch.randn(3, 1, 16, 3, 6, 5)
    got = mx.vmap(lambda a: PF.conv3d(a, _cl(w), padding=1))(mx.stack([_cl(v) for v in xs]))
    for v in range(3):
        np.testing.assert_allclose(_nc(got[v]), TF.conv3d(xs[v], w, padding=1).numpy(), rtol=1e-4, atol=1e-4)

    f = mx.compile(lambda a, b: PF.conv3d(a, b, padding=1))
    np.testing.assert_allclose(_nc(f(_cl(x), _cl(w))), TF.conv3d(x, w, padding=1).numpy(), rtol=1e-4, atol=1e-4)
    assert fused.calls >= 1


def test_fused_op_checks_its_arguments():
    # The op refuses to run before it has been handed MLX's sgemm; every caller goes through _fused_blas() first. Run
    # alone (or first in an xdist worker), nothing else has done it yet.
    assert _native._fused_blas(), "the fused 3-d Winograd pass found no cblas_sgemm to call"
    module = _native.kernels()
    x = mx.zeros((1, 4, 6, 6, 16))
    w = mx.zeros((8, 3, 3, 3, 16))
    u = module.winograd3d_weight(w, False)
    with pytest.raises(ValueError, match="block"):
        module.winograd3d_fused(x, u, w, 1, 1, 1, 4, 6, 6, 0)
    with pytest.raises(ValueError, match="u must be"):
        module.winograd3d_fused(x, u[:, :, :8], w, 1, 1, 1, 4, 6, 6, 16)
    with pytest.raises(ValueError, match="gy must be"):
        module.winograd3d_fused_du(x, mx.zeros((2, 4, 6, 6, 8)), 3, 1, 1, 1, 16)
    with pytest.raises(ValueError, match="block"):
        module.winograd3d_fused_du(x, mx.zeros((1, 4, 6, 6, 8)), 3, 1, 1, 1, 0)


def test_fused_passes_leave_the_blas_thread_count_as_they_found_it():
    """The fused passes set the BLAS's thread count to 1 while Porter's threads run their GEMMs and restore it after:
    the 3-d forward and weight gradient, a large 2-d 3x3 (the fused 2-d pass) and R(2+1)D's temporal conv (the blocked
    columns) on two threads leave the library's count at 2, and give torch's numbers. OpenBLAS's "local" setter is
    process-wide, and each pool thread saving and restoring it left the count at 1 for the rest of the process."""
    assert _native._fused_blas()
    with blas_count_at_two() as getter:
        for _ in range(3):
            check_module(3, (2, 16, 5, 11, 16), 16, 24, 3, padding=1, seed=9)
            assert getter() == 2
            x = mx.random.normal((4, 40, 40, 32), key=mx.random.key(0))
            w = mx.random.normal((32, 3, 3, 32), key=mx.random.key(1)) * 0.1
            mx.eval(mx.grad(lambda w: PF.conv2d(x, w, padding=1).sum())(w))
            x = mx.random.normal((1, 192, 192, 24), key=mx.random.key(2))
            mx.eval(PF.conv2d(x, mx.random.normal((24, 3, 3, 24), key=mx.random.key(3)), padding=1))
            x = mx.random.normal((2, 8, 20, 20, 48), key=mx.random.key(4))
            mx.eval(PF.conv3d(x, mx.random.normal((16, 3, 1, 1, 48), key=mx.random.key(5)), padding=(1, 0, 0)))
            assert getter() == 2
