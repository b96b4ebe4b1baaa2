"""Stride-1 3x3 convolutions through the native Winograd F(2x2, 3x3) kernels (layers/csrc/winograd_kernels.h)
against torch: values, gradients, inf/NaN placement, vmap/jvp/compile, the weight-transform cache, and which convs
take the path at all. Torch runs in each test; the pure-MLX conv path is covered by test_conv.py."""

import gc
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from tests.conv_helpers import check_functional, check_module

import porter.layers._conv_engine as conv_module
import porter.layers.functional as PF
from porter.layers import _native

pytestmark = pytest.mark.native_only  # tests/layers/conftest.py: the native variant only (deselected by PORTER_NATIVE=0)


@pytest.fixture(autouse=True, params=["unfused", "fused"])
def forward_pass(request, monkeypatch):
    """Every test twice: the forward as the three passes (input transform, GEMMs, output transform) and as the 3-d
    fused pass with one frame (``_native.WINOGRAD_FUSED_2D``), whatever the conv's size."""
    if request.param == "fused":
        monkeypatch.setattr(_native, "WINOGRAD_FUSED_MIN_BYTES", 0)
        monkeypatch.setattr(_native, "WINOGRAD3D_FUSED_MIN_ROWS", 1)
    else:
        monkeypatch.setattr(_native, "WINOGRAD_FUSED_2D", False)
    return request.param


class _Spy:
    """Counts calls of the Winograd conv (and lets every conv size take it when ``all_sizes``)."""

    def __init__(self, monkeypatch, all_sizes=True):
        self.calls = 0
        real = _native.winograd_conv3x3

        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(_native, "winograd_conv3x3", call)
        if all_sizes:
            monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES", 1)
            monkeypatch.setattr(conv_module, "WINOGRAD_MIN_CHANNELS", 1)


def _nhwc(t: torch.Tensor) -> mx.array:
    return mx.array(t.detach().movedim(1, -1).contiguous().numpy())


def _w(t: torch.Tensor) -> mx.array:
    return mx.array(t.detach().permute(0, 2, 3, 1).contiguous().numpy())


def _nchw(a: mx.array) -> np.ndarray:
    return np.moveaxis(np.array(a), -1, 1)


# ---------------------------------------------------------------------------------------------------- parity
# (input shape in torch layout, in_channels, out_channels, kwargs): odd and even sizes (cropped edge tiles),
# channel counts with and without a 16-lane remainder, padding 0/1/2 and per-dim, unbatched, no bias
MODULE_CASES = [
    ((1, 64, 20, 20), 64, 64, dict(padding=1)),
    ((2, 16, 9, 7), 16, 32, dict(padding=1)),
    ((2, 17, 8, 11), 17, 33, dict(padding=1)),
    ((3, 20, 5, 6), 20, 3, dict(padding=0)),
    ((1, 32, 7, 7), 32, 48, dict(padding=2)),
    ((1, 16, 5, 6), 16, 16, dict(padding=3)),  # input gradient through MLX (padding > 2)
    ((2, 24, 10, 9), 24, 24, dict(padding=(0, 1))),
    ((2, 24, 10, 9), 24, 24, dict(padding=(2, 1), bias=False)),
    ((16, 6, 6), 16, 16, dict(padding=1)),  # unbatched
    ((2, 16, 3, 3), 16, 16, dict(padding=0)),  # one output pixel
    ((1, 16, 8, 8), 16, 16, dict(padding="same")),
    ((2, 16, 8, 8), 16, 16, dict(padding=1, padding_mode="reflect")),
]


@pytest.mark.parametrize("x_shape, cin, cout, kwargs", MODULE_CASES)
def test_conv2d_module_matches_torch_through_winograd(x_shape, cin, cout, kwargs, monkeypatch):
    spy = _Spy(monkeypatch)
    check_module(2, x_shape, cin, cout, 3, **kwargs)
    assert spy.calls > 0


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("x_shape, w_shape, args", [
    ((2, 32, 13, 11), (48, 32, 3, 3), dict(padding=1)),
    ((1, 64, 16, 16), (64, 64, 3, 3), dict(padding=1)),
    ((2, 16, 6, 9), (16, 16, 3, 3), dict(padding=(2, 0))),
])
def test_functional_conv2d_and_gradients_match_torch_through_winograd(x_shape, w_shape, args, bias, monkeypatch):
    spy = _Spy(monkeypatch)
    check_functional(2, x_shape, w_shape, bias, args)
    assert spy.calls > 0


def test_large_values_keep_float32_accuracy(monkeypatch):
    """The transforms only add, subtract and halve: error stays at a direct conv's level relative to the output."""
    _Spy(monkeypatch)
    torch.manual_seed(3)
    x = torch.randn(2, 64, 20, 20) * 1e4 + 3e3
    w = torch.randn(96, 64, 3, 3) * 1e-2
    want = TF.conv2d(x.double(), w.double(), padding=1).numpy()
    got = _nchw(PF.conv2d(_nhwc(x), _w(w), padding=1)).astype(np.float64)
    direct = TF.conv2d(x, w, padding=1).double().numpy()
    scale = np.abs(want).max()
    assert np.abs(got - want).max() / scale < 4 * max(np.abs(direct - want).max() / scale, 1e-7)


# ---------------------------------------------------------------------------------------------------- inf / NaN
@pytest.mark.parametrize("where", ["nan", "inf", "-inf", "weight_inf", "weight_nan", "overflow"])
def test_non_finite_values_reach_the_outputs_torch_gives_them(where, monkeypatch):
    """An inf or NaN reaches exactly the outputs whose window holds it (tiles with non-finite outputs are redone
    directly), weights with inf/NaN spoil exactly their output channel, and an overflow inside the transforms of
    finite values is redone: torch's pattern of NaN, +inf and -inf, and its finite values."""
    spy = _Spy(monkeypatch)
    torch.manual_seed(0)
    x = torch.randn(2, 20, 10, 9)
    w = torch.randn(24, 20, 3, 3)
    if where in ("nan", "inf", "-inf"):
        value = float(where)
        x[0, 0, 3, 3] = value
        x[1, 19, 0, 8] = value
        x[1, 5, 9, 0] = -value if where != "nan" else value
    elif where == "weight_inf":
        w[3, 0, 1, 1] = float("inf")
    elif where == "weight_nan":
        w[7, 19, 2, 0] = float("nan")
    else:  # 3e38 - (-3e38) overflows inside the input transform; the direct sums stay finite
        x[0, 2, 4, 4], x[0, 2, 6, 4] = 3e38, -3e38
        w = w * 1e-3
    want = TF.conv2d(x, w, padding=1).numpy()
    got = _nchw(PF.conv2d(_nhwc(x), _w(w), padding=1))
    assert spy.calls == 1
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4 * np.abs(want[finite]).max())


# ---------------------------------------------------------------------------------------------------- transforms
def test_vmap_over_input_weight_or_both_matches_a_torch_loop(monkeypatch):
    _Spy(monkeypatch)
    torch.manual_seed(0)
    xs = torch.randn(3, 2, 16, 8, 8)
    ws = torch.randn(3, 24, 16, 3, 3)
    xm = mx.stack([_nhwc(x) for x in xs])
    wm = mx.stack([_w(w) for w in ws])

    def f(x, w):
        return PF.conv2d(x, w, padding=1)

    cases = {(0, None): (xm, wm[1]), (None, 0): (xm[2], wm), (0, 0): (xm, wm)}
    for axes, args in cases.items():
        got = mx.vmap(f, in_axes=axes)(*args)
        for v in range(3):
            x = xs[v] if axes[0] is not None else xs[2]
            w = ws[v] if axes[1] is not None else ws[1]
            np.testing.assert_allclose(_nchw(got[v]), TF.conv2d(x, w, padding=1).numpy(), rtol=1e-4, atol=1e-4)


def test_inner_passes_vmap_on_their_own():
    """MLX maps a custom function's inner graph too: each Winograd pass maps correctly by itself, per-example
    weights included."""
    k = _native.kernels()
    x = mx.random.normal((3, 2, 6, 7, 16))
    w = mx.random.normal((3, 8, 3, 3, 16))

    def raw(x1, w1):
        v = k.winograd_input(x1, 1, 1, 6, 7)
        return k.winograd_output(v @ k.winograd_weight(w1, cache=False), x1, w1, 1, 1, 6, 7)

    got = mx.vmap(raw)(x, w)
    for v in range(3):
        want = mx.conv_general(x[v], w[v], padding=1)
        np.testing.assert_allclose(np.array(got[v]), np.array(want), rtol=1e-4, atol=1e-4)


def test_jvp_is_the_conv_bilinear_rule_checked_against_torch(monkeypatch):
    _Spy(monkeypatch)
    torch.manual_seed(0)
    x, w = torch.randn(2, 16, 7, 6), torch.randn(16, 16, 3, 3)
    tx, tw = torch.randn_like(x), torch.randn_like(w)
    _, (tangent,) = mx.jvp(lambda a, b: PF.conv2d(a, b, padding=1), [_nhwc(x), _w(w)], [_nhwc(tx), _w(tw)])
    _, want = torch.func.jvp(lambda a, b: TF.conv2d(a, b, padding=1), (x, w), (tx, tw))
    np.testing.assert_allclose(_nchw(tangent), want.numpy(), rtol=1e-4, atol=1e-4)


def test_compile_matches_eager_and_torch(monkeypatch):
    _Spy(monkeypatch)
    torch.manual_seed(0)
    x, w = torch.randn(2, 16, 9, 9), torch.randn(32, 16, 3, 3)
    f = mx.compile(lambda a, b: PF.conv2d(a, b, padding=1))
    got = f(_nhwc(x), _w(w))
    np.testing.assert_allclose(_nchw(got), TF.conv2d(x, w, padding=1).numpy(), rtol=1e-4, atol=1e-4)


def test_second_derivative_matches_torch(monkeypatch):
    _Spy(monkeypatch)
    torch.manual_seed(0)
    x = torch.randn(1, 16, 6, 6, requires_grad=True)
    w = torch.randn(16, 16, 3, 3, requires_grad=True)
    (gx,) = torch.autograd.grad(TF.conv2d(x, w, padding=1).pow(2).sum(), x, create_graph=True)
    (gw,) = torch.autograd.grad(gx.pow(2).sum(), w)

    def inner(a, b):
        return mx.grad(lambda a_: (PF.conv2d(a_, b, padding=1) ** 2).sum())(a)

    got = mx.grad(lambda b: (inner(_nhwc(x), b) ** 2).sum())(_w(w))
    np.testing.assert_allclose(np.array(got).transpose(0, 3, 1, 2), gw.numpy(), rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------------------------------- cache
def test_weight_transform_is_cached_per_weight_and_dropped_with_it(monkeypatch):
    _Spy(monkeypatch)
    _native.clear_winograd_cache()
    x = mx.random.normal((1, 8, 8, 16))
    ws = [mx.random.normal((16, 3, 3, 16)) for _ in range(3)]
    for _ in range(2):
        for w in ws:
            mx.eval(PF.conv2d(x, w, padding=1))
    info = _native.winograd_cache_info()
    assert info["entries"] == 3 and info["bytes"] == 3 * 16 * 16 * 16 * 4
    k = _native.kernels()
    assert k.winograd_weight(ws[0]) is not None
    del w
    ws.pop()
    gc.collect()
    assert _native.winograd_cache_info()["entries"] == 2
    ws.clear()
    gc.collect()
    assert _native.winograd_cache_info()["entries"] == 0


def test_only_calls_with_few_tiles_keep_the_weight_transform(monkeypatch):
    """Issue 15: a large call (batch 8 of ResNet's 7x7 convs) holding 16/9 of its weights as cached transforms put
    wide_resnet50_2's peak above torch's; the transform's time is a small share of a call with many tiles."""
    spy = _Spy(monkeypatch)
    monkeypatch.setattr(_native, "WINOGRAD_FUSED_2D", False)
    _native.clear_winograd_cache()
    torch.manual_seed(0)
    w = torch.randn(24, 16, 3, 3)
    small, large = torch.randn(1, 16, 15, 15), torch.randn(3, 16, 13, 11)
    assert _native._winograd_tiles((1, 15, 15, 16), (1, 1), (1, 1)) == 64 == _native.WINOGRAD_CACHE_MAX_TILES
    assert _native._winograd_tiles((3, 13, 11, 16), (1, 1), (1, 1)) == 3 * 7 * 6
    wm = _w(w)
    for x in (large, large):
        np.testing.assert_allclose(_nchw(PF.conv2d(_nhwc(x), wm, padding=1)), TF.conv2d(x, w, padding=1).numpy(),
                                   rtol=1e-4, atol=1e-4)
    assert _native.winograd_cache_info()["entries"] == 0
    np.testing.assert_allclose(_nchw(PF.conv2d(_nhwc(small), wm, padding=1)), TF.conv2d(small, w, padding=1).numpy(),
                               rtol=1e-4, atol=1e-4)
    info = _native.winograd_cache_info()
    assert info["entries"] == 1 and info["bytes"] == 16 * 16 * 24 * 4
    np.testing.assert_allclose(_nchw(PF.conv2d(_nhwc(large), wm, padding=1)), TF.conv2d(large, w, padding=1).numpy(),
                               rtol=1e-4, atol=1e-4)  # a large call after a small one: still right
    assert spy.calls == 4


def test_weight_changed_in_place_is_transformed_again():
    torch.manual_seed(0)
    x, w = torch.randn(1, 16, 10, 10), torch.randn(16, 16, 3, 3)
    wm, xm = _w(w), _nhwc(x)
    mx.eval(PF.conv2d(xm, wm, padding=1))
    w[2] = 5.0
    wm[2] = 5.0  # same Python object, new MLX array
    np.testing.assert_allclose(_nchw(PF.conv2d(xm, wm, padding=1)), TF.conv2d(x, w, padding=1).numpy(),
                               rtol=1e-4, atol=1e-4)


def test_traced_weights_are_not_cached(monkeypatch):
    _Spy(monkeypatch)
    _native.clear_winograd_cache()
    x, w = mx.random.normal((1, 8, 8, 16)), mx.random.normal((16, 3, 3, 16))
    mx.eval(mx.grad(lambda b: PF.conv2d(x, b, padding=1).sum())(w))
    mx.eval(mx.compile(lambda b: PF.conv2d(x, b, padding=1))(w))
    assert _native.winograd_cache_info()["entries"] == 0


def test_cache_limit_evicts_least_recently_used_and_zero_disables(monkeypatch):
    _Spy(monkeypatch)
    _native.clear_winograd_cache()
    x = mx.random.normal((1, 8, 8, 16))
    ws = [mx.random.normal((16, 3, 3, 16)) for _ in range(3)]
    one = 16 * 16 * 16 * 4
    try:
        _native.set_winograd_cache_limit(2 * one)
        for w in ws:
            mx.eval(PF.conv2d(x, w, padding=1))
        assert _native.winograd_cache_info() == {"entries": 2, "bytes": 2 * one, "limit": 2 * one}
        _native.set_winograd_cache_limit(0)
        assert _native.winograd_cache_info()["entries"] == 0
        mx.eval(PF.conv2d(x, ws[0], padding=1))
        assert _native.winograd_cache_info()["entries"] == 0
    finally:
        _native.set_winograd_cache_limit(None)
    default = int(os.environ.get("PORTER_WINOGRAD_CACHE_MB", "512"))
    assert _native.winograd_cache_info()["limit"] == default << 20
    with pytest.raises(ValueError, match="limit"):
        _native.set_winograd_cache_limit(-1)


def test_doctor_reports_the_cache(monkeypatch):
    from click.testing import CliRunner

    from porter.cli.main import main

    _Spy(monkeypatch)
    _native.clear_winograd_cache()
    w = mx.random.normal((16, 3, 3, 16))
    mx.eval(PF.conv2d(mx.random.normal((1, 8, 8, 16)), w, padding=1))
    cache = _native.status()["winograd_cache"]
    assert cache["entries"] == 1 and cache["bytes"] == 16 * 16 * 16 * 4
    result = CliRunner().invoke(main, ["doctor"])
    assert result.exit_code == 0, result.output
    assert f"winograd cache  1 weights, 0.0 MB held, limit {cache['limit'] >> 20} MB" in result.output


def test_cache_limit_from_the_environment():
    code = ("import porter.layers._native as n; import mlx.core as mx; "
            "print(n.winograd_cache_info()['limit'])")
    env = dict(os.environ, PORTER_WINOGRAD_CACHE_MB="7")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == str(7 << 20)


# ---------------------------------------------------------------------------------------------------- dispatch
@pytest.mark.parametrize("case", ["stride", "dilation", "groups", "kernel", "float16", "bfloat16", "float64",
                                  "few_tiles", "few_channels", "switched_off"])
def test_convs_the_path_does_not_suit_stay_on_mlx_and_match_torch(case, monkeypatch):
    spy = _Spy(monkeypatch, all_sizes=False)
    torch.manual_seed(0)
    shape, w_shape, args, dtype = (2, 32, 16, 16), (32, 32, 3, 3), dict(padding=1), torch.float32
    if case == "stride":
        args["stride"] = 2
    elif case == "dilation":
        args["dilation"] = 2
    elif case == "groups":
        w_shape, args["groups"] = (32, 16, 3, 3), 2
    elif case == "kernel":
        w_shape = (32, 32, 5, 5)
    elif case in ("float16", "bfloat16", "float64"):
        dtype = getattr(torch, case)
    elif case == "few_tiles":
        shape = (1, 32, 4, 4)  # 4 tiles
    elif case == "few_channels":
        shape, w_shape = (2, 8, 16, 16), (32, 8, 3, 3)
    else:
        monkeypatch.setattr(conv_module, "WINOGRAD", False)
    x, w = torch.randn(shape).to(dtype), torch.randn(w_shape).to(dtype)
    mx_dtype = getattr(mx, str(dtype).split(".")[1])
    got = PF.conv2d(_nhwc(x.float()).astype(mx_dtype), _w(w.float()).astype(mx_dtype), **args)
    want = TF.conv2d(x.float(), w.float(), **args).numpy()
    tol = 1e-4 if dtype in (torch.float32, torch.float64) else 5e-2
    np.testing.assert_allclose(_nchw(got.astype(mx.float32)), want, rtol=tol, atol=tol * np.abs(want).max())
    assert spy.calls == 0


def test_resnet_sized_convs_take_the_path(monkeypatch):
    spy = _Spy(monkeypatch, all_sizes=False)
    for shape in [(1, 56, 56, 64), (1, 28, 28, 128), (8, 7, 7, 512)]:
        PF.conv2d(mx.zeros(shape), mx.zeros((shape[-1], 3, 3, shape[-1])), padding=1)
    assert spy.calls == 3


def test_winograd_kernel_argument_checks_raise_clear_errors():
    k = _native.kernels()
    x, w = mx.zeros((1, 6, 6, 4)), mx.zeros((8, 3, 3, 4))
    with pytest.raises(ValueError, match=r"winograd_weight\] w must be \(C_out, 3, 3, C_in\)"):
        k.winograd_weight(mx.zeros((8, 5, 5, 4)))
    with pytest.raises(ValueError, match=r"winograd_weight\] w must be float32"):
        k.winograd_weight(w.astype(mx.float16))
    with pytest.raises(ValueError, match=r"winograd_input\] x must be \(N, H, W, C\)"):
        k.winograd_input(mx.zeros((6, 6, 4)), 1, 1, 6, 6)
    with pytest.raises(ValueError, match=r"winograd_input\] padding must be non-negative"):
        k.winograd_input(x, -1, 1, 6, 6)
    v = k.winograd_input(x, 1, 1, 6, 6)
    m = v @ k.winograd_weight(w, cache=False)
    with pytest.raises(ValueError, match=r"winograd_output\] m's tile count"):
        k.winograd_output(m, x, w, 1, 1, 8, 8)
    with pytest.raises(ValueError, match=r"winograd_output\] w must be \(C_out, 3, 3, C_in\) matching"):
        k.winograd_output(m, x, mx.zeros((9, 3, 3, 4)), 1, 1, 6, 6)
    np.testing.assert_allclose(np.array(k.winograd_output(m, x, w, 1, 1, 6, 6)), 0.0)


def test_fused_forward_is_taken_by_large_convs_and_matches_torch(forward_pass, monkeypatch):
    """With Porter's defaults a conv whose transformed input and products reach WINOGRAD_FUSED_MIN_BYTES runs as the
    fused pass (batch 3, odd sizes: cropped edge tiles, examples spanning GEMM blocks), a small one does not; with the
    switch off neither does. Forward and both gradients against torch either way."""
    monkeypatch.undo()  # Porter's defaults; the unfused variant then turns the switch off
    if forward_pass == "unfused":
        monkeypatch.setattr(_native, "WINOGRAD_FUSED_2D", False)
    module, calls = _native.kernels(), []
    real = module.winograd3d_fused
    monkeypatch.setattr(module, "winograd3d_fused", lambda *args, **kw: calls.append(args[0].shape) or real(*args, **kw))
    torch.manual_seed(0)
    x = torch.randn(3, 24, 81, 83, dtype=torch.float64)
    w = torch.randn(40, 24, 3, 3, dtype=torch.float64) * 0.1
    assert _native._winograd_fused_2d((3, 81, 83, 24), 40, (1, 1), (1, 1)) == (forward_pass == "fused")
    assert not _native._winograd_fused_2d((1, 9, 9, 24), 40, (1, 1), (1, 1))
    xt, wt = x.float().requires_grad_(), w.float().requires_grad_()
    ref = TF.conv2d(xt, wt, padding=1)
    g = torch.randn_like(ref)
    ref.backward(g)

    def f(xm, wm):
        return PF.conv2d(xm, wm, padding=1)

    xm, wm = _nhwc(x.float()), _w(w.float())
    out, vjp = mx.vjp(f, [xm, wm], [_nhwc(g)])
    assert calls[:1] == ([(3, 1, 81, 83, 24)] if forward_pass == "fused" else [])
    np.testing.assert_allclose(_nchw(out[0]), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_nchw(vjp[0]), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.array(vjp[1]).transpose(0, 3, 1, 2), wt.grad.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("c_out,c_in", [(1, 1), (64, 16), (70, 19), (130, 33)])
def test_weight_transform_is_g_w_gt_exactly(c_out, c_in):
    """The blocked weight transform (64 output x 16 input channels a block, partial blocks at both edges) against
    ``G g G^T`` written out in float32 in the kernel's order of operations: equal to the bit."""
    w = np.random.default_rng(c_out).standard_normal((c_out, 3, 3, c_in)).astype(np.float32)
    u = np.array(_native.kernels().winograd_weight(mx.array(w), cache=False))
    g, h = w.reshape(c_out, 9, c_in), np.float32(0.5)
    r0, r1, r2 = g[:, 0:3], g[:, 3:6], g[:, 6:9]  # kernel rows: (C_out, 3 columns, C_in) each
    t = [r0, h * (r0 + r1 + r2), h * (r0 - r1 + r2), r2]  # G g
    want = np.empty((16, c_in, c_out), np.float32)
    for a in range(4):
        c0, c1, c2 = t[a][:, 0], t[a][:, 1], t[a][:, 2]
        for b, v in enumerate([c0, h * (c0 + c1 + c2), h * (c0 - c1 + c2), c2]):
            want[4 * a + b] = v.T
    np.testing.assert_array_equal(u, want)
