"""Transcendental activations and softmax (layers/activation.py, csrc/activation_kernels.h) against torch, on both
paths (native kernels and pure MLX, via the `backend` fixture): values over the whole float range with inf, NaN,
underflow and overflow, float32/float16/bfloat16 (and float64), gradients, second derivatives and vmap.

The native float32 path is also held to an accuracy bound against an exact float64 reference (a few ulp), because
torch's own float32 GELU loses all digits for x < -5 (1 + erf cancels): there, "close to torch" is not enough.
"""

import math

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import GELU, Sigmoid, SiLU, Softmax, Tanh, _native
from porter.layers import functional as F

TF = torch.nn.functional
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _gelu_tanh_ref(d):
    u = math.sqrt(2 / math.pi) * (d + 0.044715 * d**3)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(np.isneginf(d), np.nan, d / (1 + np.exp(-2 * u)))


# name: (porter function, torch function, exact float64 reference without cancellation)
KINDS = {
    "exp": (F.exp, torch.exp, np.exp),
    "sigmoid": (F.sigmoid, torch.sigmoid, lambda d: 1 / (1 + np.exp(-d))),
    "silu": (F.silu, TF.silu, lambda d: d / (1 + np.exp(-d))),
    "tanh": (F.tanh, torch.tanh, np.tanh),
    "gelu": (F.gelu, TF.gelu, lambda d: 0.5 * d * _erfc(-d / math.sqrt(2))),
    "gelu_tanh": (lambda x: F.gelu(x, "tanh"), lambda t: TF.gelu(t, approximate="tanh"), _gelu_tanh_ref),
}
DTYPES = {"float32": (mx.float32, torch.float32), "float16": (mx.float16, torch.float16),
          "bfloat16": (mx.bfloat16, torch.bfloat16)}
SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 1e-8, 0.6249, 0.625, -0.625, 0.63, 9.0, -9.0, 20.0, -20.0, 50.0, -50.0,
           -87.3, 88.72, 88.73, -103.9, -104.5, 1e4, -1e4, math.inf, -math.inf, math.nan,
           1e-40, -1e-40, -13.3, -14.1, -14.3, 39.9, -39.9, 40.5, -40.5]  # subnormal in and (GELU) out


def sample(n: int, seed: int = 0) -> np.ndarray:
    """n values (n > len(SPECIAL)): normals, a wide uniform range (over- and underflow), small values, specials."""
    rng = np.random.default_rng(seed)
    k = (n - len(SPECIAL)) // 3
    parts = [rng.standard_normal(k) * 3, rng.uniform(-110, 100, k), rng.uniform(-1, 1, n - len(SPECIAL) - 2 * k),
             np.array(SPECIAL)]
    return rng.permutation(np.concatenate(parts)).astype(np.float32)


def _np(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32) if a.dtype in (mx.float16, mx.bfloat16) else a).astype(np.float64)


def _torch_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


def _spacing(ref: np.ndarray, dtype: str) -> np.ndarray:
    """One ulp of ``ref`` in ``dtype`` (bfloat16: 8 significant bits)."""
    if dtype == "bfloat16":
        return np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64) * 2.0**16
    return np.spacing(np.abs(ref).astype(np.float16 if dtype == "float16" else np.float32)).astype(np.float64)


def _same_specials(ours, expected, what):
    assert np.array_equal(np.isnan(ours), np.isnan(expected)), f"{what}: NaN positions differ"
    inf = np.isinf(expected)
    assert np.array_equal(np.isinf(ours), inf) and np.array_equal(ours[inf], expected[inf]), f"{what}: inf differ"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("n", [1037, 70001])  # a chunk tail; enough elements for the kernel to use threads
def test_activation_matches_torch(kind, dtype, n, backend):
    fn, tfn, ref_fn = KINDS[kind]
    mdt, tdt = DTYPES[dtype]
    x = torch.from_numpy(sample(n)).to(tdt)
    ours = fn(mx.array(x.float().numpy()).astype(mdt))
    assert ours.dtype == mdt and ours.shape == (n,)
    got, theirs = _np(ours), _torch_np(tfn(x))
    with np.errstate(over="ignore", invalid="ignore"):
        exact = ref_fn(x.to(torch.float64).numpy())
    ref = exact.astype(np.float32 if dtype == "float32" else np.float16 if dtype == "float16" else np.float32)
    ref = ref.astype(np.float64) if dtype != "bfloat16" else _torch_np(torch.from_numpy(exact).to(tdt))
    # Specials: exactly where an exact computation puts them. torch agrees, except that its vectorized float32 and
    # bfloat16 GELU gives NaN at +inf on AVX-512 CPUs (its AVX2 path, scalar path, float64 and float16 give inf, as
    # here). MLX's own float32
    # ops (the pure path) overflow a little early: e^88.72 is inf there.
    xs = x.float().numpy()
    near = (np.abs(xs) > 88) & np.isfinite(xs) if backend == "mlx" else np.zeros(n, bool)
    _same_specials(got[~near], ref[~near], f"{kind} {dtype}")
    mask = np.isfinite(theirs) & np.isfinite(ref) & np.isfinite(got)
    if kind == "gelu" and dtype in ("float32", "bfloat16"):
        at_inf = theirs[np.isposinf(ref)]
        assert np.all(np.isnan(at_inf) | np.isposinf(at_inf))
    else:
        keep = np.isfinite(ref) | ~np.isfinite(theirs)
        _same_specials(theirs[keep], ref[keep], "torch itself")
    ulp = _spacing(ref[mask], dtype)
    # flush-to-zero of subnormal results (MLX's float32 sigmoid flushes its subnormal intermediates)
    tiny = {"float32": 1e-37, "float16": 6e-8, "bfloat16": 1e-37}[dtype] * (10 if backend == "mlx" else 1)
    # Never further from the exact value than torch is, plus a little. GELU's erfc (native: a fitted t Q(t) e^{-x^2/2},
    # up to ~6 ulp near 0 and in [-2, -1.5], where torch's erf is ~1 ulp; test_native_gelu_accuracy_dense_sweep).
    gelu = kind in ("gelu", "gelu_tanh")
    slack = (6 if gelu else 3) * ulp + tiny if dtype == "float32" else ulp + tiny
    if backend == "mlx" and dtype == "float32":
        slack = 64 * ulp + 1e-6 * np.maximum(1, np.abs(ref[mask]))  # MLX's ops (sigmoid is ~60 ulp in the tails)
    err_ours, err_torch = np.abs(got[mask] - exact[mask]), np.abs(theirs[mask] - exact[mask])
    bad = err_ours > err_torch + slack
    assert not bad.any(), (f"{kind} {dtype}: {bad.sum()} values off, e.g. x={xs[mask][bad][:3]} "
                           f"ours={got[mask][bad][:3]} torch={theirs[mask][bad][:3]} exact={exact[mask][bad][:3]}")
    if backend == "native" and dtype == "float32":  # accuracy in its own right, over the activations' working range
        core = (np.abs(exact[mask]) > 1e-30) & (np.abs(xs[mask]) <= 2)
        assert np.all(err_ours[core] <= (7 if gelu else 4) * ulp[core]), (kind, (err_ours[core] / ulp[core]).max())


def test_native_gelu_accuracy_dense_sweep():
    """The native float32 GELU (Numerical Recipes' erfc with one exponential) within 8 ulp of the exact value
    over a dense sweep of [-15, 9] (the negative tail included, down to subnormal results, where torch's 1 + erf
    cancels) and exactly torch's specials; float16/bfloat16 round the float32 result once, so within one ulp there."""
    if not _native.available():
        pytest.fail(f"native kernels unavailable: {_native.status()['reason']}", pytrace=False)
    rng = np.random.default_rng(7)
    near0 = np.concatenate([np.linspace(-0.02, 0.02, 200001), rng.uniform(-1e-3, 1e-3, 20000)])
    x = np.concatenate([np.linspace(-15, 9, 1_000_003), rng.uniform(-3, 3, 300001), near0]).astype(np.float32)
    with _native.use_native(True):
        got = np.array(F.gelu(mx.array(x))).astype(np.float64)
    d = x.astype(np.float64)
    exact = 0.5 * d * _erfc(-d / math.sqrt(2))
    keep = np.abs(exact) > 1.2e-38  # normal results (a subnormal one is allowed its double rounding)
    ulps = np.abs(got[keep] - exact[keep]) / _spacing(exact[keep], "float32")
    assert ulps.max() <= 8, (ulps.max(), x[keep][ulps.argmax()])
    assert np.all(np.abs(got[~keep]) <= 2e-38)
    specials = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 20.0, -20.0, -40.0], np.float32)
    with _native.use_native(True):
        ours = np.array(F.gelu(mx.array(specials)))
    theirs = TF.gelu(torch.from_numpy(specials)).numpy()
    np.testing.assert_array_equal(ours[1:], theirs[1:])  # torch's AVX-512 path gives NaN at +inf (see above)
    assert ours[0] == np.inf
    for mdt, tdt in ((mx.float16, torch.float16), (mx.bfloat16, torch.bfloat16)):
        xs = torch.from_numpy(x[::97].copy()).to(tdt)
        with _native.use_native(True):
            low = _np(F.gelu(mx.array(xs.float().numpy()).astype(mdt)))
        ref = torch.from_numpy(0.5 * xs.double().numpy() * _erfc(-xs.double().numpy() / math.sqrt(2))).to(tdt)
        ok = np.abs(low - _torch_np(ref)) <= _spacing(_torch_np(ref), "bfloat16" if tdt == torch.bfloat16 else
                                                        "float16") + 6e-8
        assert ok.all(), xs.float().numpy()[~ok][:5]


@pytest.mark.parametrize("kind", list(KINDS))
def test_activation_gradient_matches_torch(kind, backend):
    fn, tfn, _ = KINDS[kind]
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 7, 9, 33)) * 3).astype(np.float32)
    x.flat[:6] = [0.0, -0.625, 0.625, 20.0, -20.0, 9.5]
    g = rng.standard_normal(x.shape).astype(np.float32)
    (ours,) = mx.vjp(fn, [mx.array(x)], [mx.array(g)])[1]
    tx = torch.from_numpy(x).requires_grad_()
    tfn(tx).backward(torch.from_numpy(g))
    np.testing.assert_allclose(np.array(ours), tx.grad.numpy(), rtol=2e-5, atol=2e-6)
    # 16-bit: computed in float32 and rounded once, as torch does
    for mdt, tdt in ((mx.float16, torch.float16), (mx.bfloat16, torch.bfloat16)):
        (low,) = mx.vjp(fn, [mx.array(x).astype(mdt)], [mx.array(g).astype(mdt)])[1]
        th = torch.from_numpy(x).to(tdt).requires_grad_()
        tfn(th).backward(torch.from_numpy(g).to(tdt))
        assert low.dtype == mdt
        # two ulp at 1: torch's tanh/sigmoid/exp backward read the stored 16-bit result (1 - y^2 is 0 once y
        # rounds to 1), so near saturation the gradient is only known to the output's rounding
        tol = 2.0**-6 if tdt == torch.bfloat16 else 2.0**-9
        np.testing.assert_allclose(_np(low), _torch_np(th.grad), rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", list(KINDS))
def test_activation_second_derivative_and_float64(kind, backend):
    fn, tfn, _ = KINDS[kind]
    x = np.random.default_rng(2).standard_normal((5, 17)) * 2
    tx = torch.from_numpy(x).requires_grad_()
    (g1,) = torch.autograd.grad(tfn(tx).sum(), tx, create_graph=True)
    (g2,) = torch.autograd.grad(g1.sum(), tx)
    xm = mx.array(x, dtype=mx.float64)
    # float64: the native kernels use libm (double precision); MLX's own CPU exp/sigmoid/erf are float32-accurate
    # even for float64, so the pure path builds them from float64-exact MLX ops and float64 tables
    # (layers/_float64.py, layers/_erf64.py); the native second derivative (MLX ops) takes the native exp/sigmoid.
    rtol = 1e-12
    out = fn(xm)
    assert out.dtype == mx.float64
    atol = rtol * 1e-2
    np.testing.assert_allclose(np.array(out), tfn(torch.from_numpy(x)).numpy(), rtol=rtol, atol=atol)
    first = mx.grad(lambda a: fn(a).sum())
    np.testing.assert_allclose(np.array(first(xm)), g1.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(np.array(mx.grad(lambda a: first(a).sum())(xm)), g2.numpy(), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("kind", list(KINDS))
def test_activation_vmap_jvp_and_views(kind, backend):
    fn = KINDS[kind][0]
    x = mx.random.normal((4, 6, 10), key=mx.random.key(3))
    direct = fn(x)
    assert mx.allclose(mx.vmap(fn, in_axes=1, out_axes=1)(x), direct, rtol=1e-6, atol=1e-7)
    assert mx.allclose(fn(x.transpose(2, 0, 1)), direct.transpose(2, 0, 1), rtol=1e-6, atol=1e-7)  # strided input
    t = mx.random.normal(x.shape, key=mx.random.key(4))
    _, (jv,) = mx.jvp(fn, [x], [t])
    _, (vj,) = mx.vjp(fn, [x], [t])
    assert mx.allclose(jv, vj, rtol=1e-6, atol=1e-7)  # elementwise: the Jacobian is diagonal


def test_modules_and_errors():
    x = mx.random.normal((2, 5, 5, 8))
    assert mx.array_equal(Sigmoid()(x), F.sigmoid(x)) and mx.array_equal(SiLU()(x), F.silu(x))
    assert mx.array_equal(Tanh()(x), F.tanh(x)) and mx.array_equal(GELU("tanh")(x), F.gelu(x, "tanh"))
    assert mx.array_equal(Softmax(axis=1)(x), F.softmax(x, 1))
    with pytest.raises(ValueError, match=r"\[gelu\] 'approximate' must be 'none' or 'tanh' but got 'erf'"):
        F.gelu(x, "erf")
    with pytest.raises(ValueError, match=r"\[GELU\] 'approximate'"):
        GELU("fast")
    with pytest.raises(ValueError, match=r"\[softmax\] 'axis' must be in \[-4, 3\] for a 4-d input but got 4"):
        F.softmax(x, 4)
    with pytest.raises(TypeError, match=r"\[softmax\] 'axis' must be an int"):
        F.softmax(x, 1.0)
    with pytest.raises(TypeError, match=r"\[sigmoid\] 'x' must be an mx.array"):
        F.sigmoid(np.ones(3))


# ------------------------------------------------------------------------------------------------ softmax
SOFTMAX_CASES = [((2, 7, 5, 33), -1), ((2, 7, 5, 33), 1), ((2, 7, 5, 33), 0), ((3, 9, 70), 1), ((2, 4, 130, 70), 2),
                 ((4, 20000), -1), ((1, 3, 197, 197), -1), ((37,), 0)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape, axis", SOFTMAX_CASES)
def test_softmax_matches_torch(shape, axis, dtype, backend):
    mdt, tdt = DTYPES[dtype]
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    if x.size > 64:  # masked entries (attention), an overflowing logit
        x.flat[rng.choice(x.size, x.size // 7, replace=False)] = -np.inf
        x.flat[3] = 1e30
    tx = torch.from_numpy(x).to(tdt)
    ours = F.softmax(mx.array(x).astype(mdt), axis)
    theirs = torch.softmax(tx, axis) if dtype == "float32" else torch.softmax(tx.float(), axis).to(tdt)
    assert ours.dtype == mdt and ours.shape == tuple(shape)
    got, want = _np(ours), _torch_np(theirs)
    _same_specials(got, want, f"softmax {shape} axis {axis}")
    tol = {"float32": (2e-6 if backend == "native" else 5e-5, 1e-7), "float16": (1e-3, 1e-6),
           "bfloat16": (8e-3, 1e-6)}[dtype]
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=tol[0], atol=tol[1])


def test_softmax_fully_masked_row_and_nan(backend):
    x = np.random.default_rng(6).standard_normal((4, 9)).astype(np.float32)
    x[1] = -np.inf
    x[2, 3] = np.nan
    x[3, 4] = np.inf
    for axis in (-1, 0):
        got, want = np.array(F.softmax(mx.array(x), axis)), torch.softmax(torch.from_numpy(x), axis).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("shape, axis", [((2, 7, 5, 33), -1), ((2, 7, 5, 33), 2), ((3, 200, 70), 1), ((2, 3000), 1)])
def test_softmax_gradients_match_torch(shape, axis, backend):
    rng = np.random.default_rng(7)
    x, g = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    (ours,) = mx.vjp(lambda a: F.softmax(a, axis), [mx.array(x)], [mx.array(g)])[1]
    tx = torch.from_numpy(x).requires_grad_()
    torch.softmax(tx, axis).backward(torch.from_numpy(g))
    np.testing.assert_allclose(np.array(ours), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
    # second derivative (float64) and vmap
    xd = x.astype(np.float64)[..., :5] if len(shape) > 2 else x.astype(np.float64)[:, :50]
    w = np.linspace(-1, 1, xd.size).reshape(xd.shape)
    td = torch.from_numpy(xd).requires_grad_()
    (g1,) = torch.autograd.grad((torch.softmax(td, axis) * torch.from_numpy(w)).sum() ** 2, td, create_graph=True)
    (g2,) = torch.autograd.grad((g1 * torch.from_numpy(w)).sum(), td)
    wm, xdm = mx.array(w, dtype=mx.float64), mx.array(xd, dtype=mx.float64)
    first = mx.grad(lambda a: (F.softmax(a, axis) * wm).sum() ** 2)
    # both paths float64-accurate: the native kernel in double, the MLX path through layers/_float64.py (MLX's own
    # CPU exp is float32-accurate even in float64: 3e-8 off)
    rtol = 1e-10
    np.testing.assert_allclose(np.array(first(xdm)), g1.detach().numpy(), rtol=rtol, atol=rtol * 1e-2)
    second = mx.grad(lambda a: (first(a) * wm).sum())(xdm)
    np.testing.assert_allclose(np.array(second), g2.numpy(), rtol=max(rtol, 1e-6), atol=1e-9)
    xm = mx.array(x)
    assert mx.allclose(mx.vmap(lambda a: F.softmax(a, axis - 1 if axis > 0 else axis))(xm), F.softmax(xm, axis),
                       rtol=1e-6, atol=1e-8)


# Last-axis rows (csrc/softmax_kernels.h): shorter than a vector, whole vectors, an overlapping last vector, Swin's
# 49 and ViT's 197 keys; masked (-inf) entries, fully masked rows (NaN, as torch), NaN and +inf rows.
ROW_LENGTHS = [1, 2, 5, 7, 8, 9, 15, 16, 17, 31, 49, 197, 1000]


def _attention_rows(n: int, rows: int = 6, seed: int = 11) -> np.ndarray:
    rng = np.random.default_rng(seed + n)
    x = (rng.standard_normal((rows, n)) * 6).astype(np.float32)
    x[1, rng.choice(n, max(1, n // 3), replace=False)] = -np.inf  # a masked row
    x[2] = -np.inf  # fully masked: torch gives NaN
    x[3, n // 2] = np.nan
    x[4, n - 1] = np.inf
    x[5, 0] = 80.0  # one dominant logit: the others underflow
    return x


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_softmax_rows_match_torch(n, dtype, backend):
    mdt, tdt = DTYPES[dtype]
    x = _attention_rows(n)
    tx = torch.from_numpy(x).to(tdt)
    ours = F.softmax(mx.array(x).astype(mdt), -1)
    theirs = torch.softmax(tx, -1)  # torch's 16-bit CPU softmax computes in float and rounds once
    assert ours.dtype == mdt and ours.shape == x.shape
    got, want = _np(ours), _torch_np(theirs)
    _same_specials(got, want, f"softmax rows of {n}")
    fin = ~np.isnan(want)
    # float32: a few ulp of the largest entry; 16-bit: one rounding of the same float value (at most one ulp apart)
    rtol, atol = {"float32": (4e-7 * 4, 1e-9), "float16": (1e-3, 6e-8), "bfloat16": (8e-3, 1e-9)}[dtype]
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n", [1, 7, 8, 9, 49, 197])
def test_softmax_rows_gradients_match_torch(n, dtype, backend):
    mdt, tdt = DTYPES[dtype]
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((5, n)) * 3).astype(np.float32)
    x[1, : max(1, n // 2)] = -np.inf
    g = rng.standard_normal((5, n)).astype(np.float32)
    (ours,) = mx.vjp(lambda a: F.softmax(a, -1), [mx.array(x).astype(mdt)], [mx.array(g).astype(mdt)])[1]
    tx = torch.from_numpy(x).to(tdt).requires_grad_()
    torch.softmax(tx, -1).backward(torch.from_numpy(g).to(tdt))
    assert ours.dtype == mdt
    rtol, atol = {"float32": (1e-5, 1e-7), "float16": (2e-3, 1e-4), "bfloat16": (1.6e-2, 1e-3)}[dtype]
    np.testing.assert_allclose(_np(ours), _torch_np(tx.grad), rtol=rtol, atol=atol)


@pytest.mark.native_only
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softmax_rows_kernel_agrees_with_any_axis_kernel_and_runs_in_place(dtype, monkeypatch):
    """The rows kernel and the any-axis kernel it replaces for the last axis (switch SOFTMAX_ROWS) give the same
    values to float rounding; a donated input (a temporary) is overwritten in place with the right values."""
    from porter.layers import activation

    mdt = DTYPES[dtype][0]
    x = mx.array(np.concatenate([_attention_rows(49), _attention_rows(49, seed=3)])).astype(mdt)
    monkeypatch.setattr(activation, "SOFTMAX_ROWS", False)
    old = _np(F.softmax(x, -1))
    monkeypatch.setattr(activation, "SOFTMAX_ROWS", True)
    new = _np(F.softmax(x, -1))
    donated = _np(F.softmax(x * 1, -1))  # x * 1 has no other reader: the kernel may write over it
    _same_specials(new, old, "rows vs any-axis")
    fin = ~np.isnan(old)
    tol = {"float32": 2e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    np.testing.assert_allclose(new[fin], old[fin], rtol=tol, atol=1e-8)
    np.testing.assert_array_equal(donated, new)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_of_strided_input_and_broadcast_cotangent(dtype, backend):
    """A transposed input (rows strided in memory) and a broadcast cotangent, as torch."""
    mdt, tdt = DTYPES[dtype]
    x = (np.random.default_rng(12).standard_normal((3, 49, 20)) * 4).astype(np.float32)
    g = np.random.default_rng(13).standard_normal((20,)).astype(np.float32)
    xm = mx.array(x).astype(mdt).transpose(0, 2, 1)  # (3, 20, 49): last axis strided
    y, (dx,) = mx.vjp(lambda a: F.softmax(a, -1), [xm], [mx.broadcast_to(mx.array(g).astype(mdt)[:, None], xm.shape)])
    xt = torch.from_numpy(x).to(tdt).transpose(1, 2).detach().requires_grad_()
    yt = torch.softmax(xt, -1)
    yt.backward(torch.from_numpy(g).to(tdt)[:, None].expand_as(yt))
    # atol: g - sum(g y) cancels where g is near the row's weighted mean (sums in another order than torch's)
    rtol, atol = {"float32": (1e-5, 1e-6), "bfloat16": (1.6e-2, 1e-2)}[dtype]  # bfloat16: ~1 ulp at 1
    np.testing.assert_allclose(_np(y[0]), _torch_np(yt), rtol=rtol, atol=atol)
    np.testing.assert_allclose(_np(dx), _torch_np(xt.grad), rtol=rtol, atol=atol)


@pytest.mark.native_only
def test_native_path_is_one_kernel_each_way(tmp_path):
    """On the native path, forward and backward are one Porter primitive each (not chains of MLX ops)."""
    assert _native.active()
    x = mx.random.normal((2, 8))
    for fn, name in ((F.gelu, "PorterActivation"), (lambda a: F.softmax(a, 0), "PorterSoftmax")):
        grad = mx.grad(lambda a: (fn(a) * a).sum())(x)
        mx.export_to_dot(str(tmp_path / "g.dot"), grad)
        dot = (tmp_path / "g.dot").read_text()
        assert name in dot and name + "Grad" in dot, dot[:500]
    with pytest.raises(ValueError, match=r"\[porter.activation\] 'kind' must be one of"):
        _native.activation(x, "erf")
    with pytest.raises(ValueError, match=r"\[porter.softmax\] 'axis' 2 is out of range"):
        _native.softmax(x, 2)
