"""The native CPU kernels themselves: inputs the parity tables do not produce (strided and broadcast views, other
thread counts), that each layer family really takes the native path, the kernels' own argument checks, and the
build and load machinery (clear errors, nothing half-written, a clean fallback).

Values are checked against torch in the test itself, or against the pure-MLX path where the point is that both
paths agree on an input torch cannot express (a broadcast view)."""

import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import porter.layers.functional as PF
from porter.layers import _native, _native_build

pytestmark = pytest.mark.native_only  # tests/layers/conftest.py: the native variant only (deselected by PORTER_NATIVE=0)


def _nchw(a: mx.array) -> torch.Tensor:
    return torch.from_numpy(np.array(a)).movedim(-1, 1)


def _nhwc(t: torch.Tensor) -> np.ndarray:
    return t.movedim(1, -1).numpy()


# ---------------------------------------------------------------------------------------------------- dispatch
class _Counter:
    def __init__(self, monkeypatch):
        self.calls = []
        module = _native.kernels()
        for name in ("window_max", "fractional_max", "window_sum", "plane_scatter", "depthwise_conv"):
            real = getattr(module, name)
            monkeypatch.setattr(module, name, self._wrap(name, real))

    def _wrap(self, name, real):
        def call(*args, **kwargs):
            self.calls.append(name)
            return real(*args, **kwargs)

        return call


CASES = {
    "max_pool2d": lambda x: PF.max_pool2d(x, 3, 2, 1),
    "max_pool3d": lambda x: PF.max_pool3d(x[:, None], 1, 1),
    "adaptive_max_pool2d": lambda x: PF.adaptive_max_pool2d(x, 3),
    "fractional_max_pool2d": lambda x: PF.fractional_max_pool2d(x, 2, output_size=4),
    "avg_pool2d": lambda x: PF.avg_pool2d(x, 3, 2, 1),
    "adaptive_avg_pool2d": lambda x: PF.adaptive_avg_pool2d(x, 3),
    "lp_pool2d": lambda x: PF.lp_pool2d(x, 2, 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_family_takes_the_native_path_and_its_gradient_matches_the_pure_path(name, monkeypatch):
    counter = _Counter(monkeypatch)
    x = mx.random.normal((2, 9, 9, 4))
    samples = mx.random.uniform(shape=(2, 4, 2))

    def run():
        fn = CASES[name]
        if name.startswith("fractional"):
            fn = lambda a: PF.fractional_max_pool2d(a, 2, output_size=4, random_samples=samples)  # noqa: E731
        return [np.array(v) for v in mx.value_and_grad(lambda a: (fn(a) * fn(a)).sum())(x)]

    native = run()
    forward = {"max_pool2d": "window_max", "max_pool3d": "window_max", "adaptive_max_pool2d": "window_max",
               "fractional_max_pool2d": "fractional_max"}.get(name, "window_sum")
    assert forward in counter.calls  # the backward runs inside the primitive's own VJP (C++)
    with _native.use_native(False):
        pure = run()
    np.testing.assert_allclose(native[0], pure[0], rtol=1e-5)
    np.testing.assert_allclose(native[1], pure[1], rtol=1e-5, atol=1e-6)


def test_unpool_takes_the_native_path(monkeypatch):
    counter = _Counter(monkeypatch)
    y, idx = PF.max_pool2d(mx.random.normal((1, 4, 4, 2)), 2, return_indices=True)
    mx.eval(mx.grad(lambda a: PF.max_unpool2d(a, idx, 2).sum())(y))
    assert "plane_scatter" in counter.calls


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_depthwise_conv_takes_the_native_path_and_its_gradients_match_the_pure_path(nd, monkeypatch):
    counter = _Counter(monkeypatch)
    x = mx.random.normal((2, *(7,) * nd, 5))
    w = mx.random.normal((10, *(3,) * nd, 1))
    b = mx.random.normal((10,))
    conv = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}[nd]

    def run():
        f = lambda a, k, c: (conv(a, k, c, 2, 1, 1, 5) ** 2).sum()  # noqa: E731
        value, grads = mx.value_and_grad(f, argnums=(0, 1, 2))(x, w, b)
        return [np.array(value)] + [np.array(g) for g in grads]

    native = run()
    assert counter.calls == ["depthwise_conv"]
    with _native.use_native(False):
        pure = run()
    assert counter.calls == ["depthwise_conv"]
    for a, p in zip(native, pure):
        # two float32 summation orders of the same products: errors scale with the largest value (a weight-gradient
        # element that nearly cancels can miss a fixed 1e-5 by a few ulps of the others)
        np.testing.assert_allclose(a, p, rtol=1e-5, atol=1e-5 + 1e-6 * np.abs(p).max())


def test_grouped_but_not_depthwise_conv_stays_pure(monkeypatch):
    counter = _Counter(monkeypatch)
    mx.eval(PF.conv2d(mx.random.normal((1, 6, 6, 4)), mx.random.normal((4, 3, 3, 2)), groups=2))
    assert counter.calls == []


def test_pure_mlx_path_when_disabled(monkeypatch):
    counter = _Counter(monkeypatch)
    with _native.use_native(False):
        mx.eval(PF.max_pool2d(mx.random.normal((1, 6, 6, 2)), 2), PF.avg_pool2d(mx.random.normal((1, 6, 6, 2)), 2))
    assert counter.calls == []


# ---------------------------------------------------------------------------------------------------- layouts
def _strided_views():
    base = mx.random.normal((2, 11, 13, 6))
    return {
        "transposed H/W": mx.swapaxes(base, 1, 2),
        "channel slice": base[..., 1:5],
        "channel step": base[..., ::2],
        "spatial step": base[:, ::2, 1::3],
        "channels-first made last": mx.moveaxis(mx.random.normal((2, 6, 11, 13)), 1, -1),
    }


@pytest.mark.parametrize("view", sorted(_strided_views()))
@pytest.mark.parametrize("op", ["max", "max_indices", "avg", "adaptive_avg", "adaptive_max", "fractional"])
def test_non_contiguous_inputs_match_torch(view, op):
    x = _strided_views()[view]
    xt = _nchw(x).contiguous()
    if op == "max":
        got, want = PF.max_pool2d(x, 3, 2, 1, ceil_mode=True), TF.max_pool2d(xt, 3, 2, 1, ceil_mode=True)
    elif op == "max_indices":
        got = PF.max_pool2d(x, 2, 1, dilation=2, return_indices=True)[1]
        want = TF.max_pool2d(xt, 2, 1, dilation=2, return_indices=True)[1]
    elif op == "avg":
        got, want = PF.avg_pool2d(x, 3, 2, 1, count_include_pad=False), TF.avg_pool2d(xt, 3, 2, 1, count_include_pad=False)
    elif op == "adaptive_avg":
        got, want = PF.adaptive_avg_pool2d(x, (3, 4)), TF.adaptive_avg_pool2d(xt, (3, 4))
    elif op == "adaptive_max":
        got = PF.adaptive_max_pool2d(x, (3, 4), return_indices=True)[1]
        want = TF.adaptive_max_pool2d(xt, (3, 4), return_indices=True)[1]
    else:
        samples = torch.rand(x.shape[0], x.shape[-1], 2)
        got = PF.fractional_max_pool2d(x, 2, output_size=(4, 3), return_indices=True,
                                       random_samples=mx.array(samples.numpy()))[1]
        want = TF.fractional_max_pool2d(xt, 2, output_size=(4, 3), return_indices=True, _random_samples=samples)[1]
    if want.dtype == torch.int64:
        np.testing.assert_array_equal(np.array(got), _nhwc(want))
    else:
        np.testing.assert_allclose(np.array(got), _nhwc(want), rtol=1e-6, atol=1e-6)


def test_broadcast_input_and_cotangent_agree_with_the_pure_path():
    # a zero-stride input (torch has no such layout for its kernels to see) and mx.grad's broadcast cotangent
    x = mx.broadcast_to(mx.random.normal((1, 7, 1, 3)), (2, 7, 9, 3))

    def run():
        f = lambda a: (PF.max_pool2d(a, 3, 2, 1) * 2).sum() + PF.avg_pool2d(a, 2, 1).sum()  # noqa: E731
        value, grad = mx.value_and_grad(f)(x)
        return np.array(value), np.array(grad)

    native = run()
    with _native.use_native(False):
        pure = run()
    np.testing.assert_allclose(native[0], pure[0], rtol=1e-6)
    np.testing.assert_allclose(native[1], pure[1], rtol=1e-6)


# ---------------------------------------------------------------------------------------------------- threads
def _assert_same_at(threads, run):
    """``run()`` (a list of numpy arrays) gives bit-identical results with 1 and with ``threads`` kernel threads: the
    same order of operations whatever the split."""
    before = _native.kernels().num_threads()
    try:
        _native.set_num_threads(1)
        serial = run()
        _native.set_num_threads(threads)
        parallel = run()
    finally:
        _native.set_num_threads(before)
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("threads", [1, 3, 8])
def test_results_do_not_depend_on_the_thread_count(threads):
    x = mx.array(np.random.default_rng(0).standard_normal((5, 37, 29, 40)).astype(np.float32))
    grad_out = mx.array(np.random.default_rng(1).standard_normal((5, 19, 15, 40)).astype(np.float32))

    def run():
        values, index = PF.max_pool2d(x, 3, 2, 1, return_indices=True)
        avg = PF.avg_pool2d(x, 3, 2, 1)
        _, vjp = mx.vjp(lambda a: PF.max_pool2d(a, 3, 2, 1), [x], [grad_out])
        _, avg_vjp = mx.vjp(lambda a: PF.avg_pool2d(a, 3, 2, 1), [x], [grad_out])
        return [np.array(a) for a in (values, index, avg, vjp[0], avg_vjp[0])]

    _assert_same_at(threads, run)


@pytest.mark.parametrize("threads", [1, 3, 8])
@pytest.mark.parametrize("channels, mult", [(64, 1), (24, 2)])
def test_depthwise_conv_does_not_depend_on_the_thread_count(threads, channels, mult):
    # large enough for the pool to split rows (forward, input gradient) and chunks (weight gradient)
    rng = np.random.default_rng(channels)
    x = mx.array(rng.standard_normal((6, 41, 37, channels)).astype(np.float32))
    w = mx.array(rng.standard_normal((channels * mult, 3, 3, 1)).astype(np.float32))
    g = mx.array(rng.standard_normal((6, 21, 19, channels * mult)).astype(np.float32))

    def run():
        out, (dx, dw) = mx.vjp(lambda a, k: PF.conv2d(a, k, None, 2, 1, 1, channels), [x, w], [g])
        return [np.array(a) for a in (out[0], dx, dw)]

    _assert_same_at(threads, run)


def test_set_num_threads_names_the_argument():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="'n' must be a positive int"):
            _native.set_num_threads(bad)


# ---------------------------------------------------------------------------------------------------- kernel checks
def test_kernel_argument_checks_raise_clear_errors():
    k = _native.kernels()
    x = mx.zeros((1, 4, 4, 2))
    with pytest.raises(ValueError, match=r"\[porter.window_max\] window tables must give one entry per spatial dim"):
        k.window_max(x, [[0]], [[1]], [1], False)
    with pytest.raises(ValueError, match="reads outside the input"):
        k.window_max(x, [[0], [0]], [[1], [5]], [1, 1], False)
    with pytest.raises(ValueError, match="must be batched channels-last"):
        k.window_sum(mx.zeros((4, 2)), [[0]], [[1]], [[1]], 0, False)
    with pytest.raises(ValueError, match=r"samples must be \(N, C, nd\)"):
        k.fractional_max(x, mx.zeros((1, 2, 2), dtype=mx.float16), [2, 2], [2, 2], [1, 0])
    with pytest.raises(ValueError, match="index must have the shape of src"):
        k.plane_scatter(x, mx.zeros((1, 4, 4, 1), dtype=mx.int64), [4, 4], True)


# ---------------------------------------------------------------------------------------------------- build / load
def test_depthwise_conv_kernel_argument_checks_raise_clear_errors():
    k = _native.kernels()
    x, w = mx.zeros((1, 6, 6, 4)), mx.zeros((8, 3, 3, 1))
    with pytest.raises(ValueError, match=r"\[porter.depthwise_conv\] w must be \(C\*m, \*kernel, 1\)"):
        k.depthwise_conv(x, mx.zeros((8, 3, 3, 2)), [1, 1], [0, 0], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="C_out must be a multiple of C"):
        k.depthwise_conv(x, mx.zeros((6, 3, 3, 1)), [1, 1], [0, 0], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="one entry per spatial dim"):
        k.depthwise_conv(x, w, [1], [0, 0], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="must be positive and padding non-negative"):
        k.depthwise_conv(x, w, [0, 1], [0, 0], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="larger than the padded input"):
        k.depthwise_conv(x, w, [1, 1], [0, 0], [0, 0], [3, 1])
    with pytest.raises(ValueError, match="floating point"):
        k.depthwise_conv(x.astype(mx.int32), w.astype(mx.int32), [1, 1], [0, 0], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="must be batched channels-last"):
        k.depthwise_conv(mx.zeros((6, 4)), mx.zeros((4, 3, 1)), [1], [0], [0], [1])


def test_status_reports_the_kernels_in_use():
    info = _native.status()
    assert info["available"] and info["enabled"] and info["reason"] is None
    assert info["threads"] >= 1 and os.path.isdir(info["directory"])


def _python(code: str, **env) -> subprocess.CompletedProcess:
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def test_disabled_by_environment_falls_back_silently():
    run = _python(
        "import warnings; warnings.simplefilter('error')\n"
        "import porter, mlx.core as mx\n"
        "from porter.layers import _native, functional as F\n"
        "mx.eval(F.max_pool2d(mx.ones((1, 4, 4, 1)), 2))\n"
        "print(_native.status()['reason'])",
        PORTER_NATIVE="0",
    )
    assert run.returncode == 0, run.stderr
    assert "disabled by PORTER_NATIVE=0" in run.stdout


def test_missing_build_warns_once_and_falls_back(tmp_path):
    run = _python(
        "import warnings\n"
        "import porter, mlx.core as mx\n"
        "from porter.layers import _native, functional as F\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    a = F.max_pool2d(mx.arange(16.0).reshape(1, 4, 4, 1), 2)\n"
        "    b = F.avg_pool2d(mx.ones((1, 4, 4, 1)), 2)\n"
        "print(len([w for w in seen if 'porter build-kernels' in str(w.message)]), a.reshape(-1).tolist())",
        PORTER_KERNEL_DIR=str(tmp_path / "empty"),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[0] == "1"
    assert "[5.0, 7.0, 13.0, 15.0]" in run.stdout


def test_build_reports_a_missing_tool_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_KERNEL_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(_native_build, "_tool", lambda name: None)
    with pytest.raises(_native_build.BuildError, match="needs CMake"):
        _native_build.build()
    assert not (tmp_path / "kernels").exists() or not any((tmp_path / "kernels").rglob("*.so"))


def test_build_reports_a_failed_compile_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_KERNEL_DIR", str(tmp_path / "kernels"))
    broken = tmp_path / "csrc"
    broken.mkdir()
    for name in _native_build.SOURCES:
        (broken / name).write_text((_native_build.SOURCE_DIR / name).read_text())
    (broken / "bindings.cpp").write_text((broken / "bindings.cpp").read_text() + "\nthis is not C++;\n")
    monkeypatch.setattr(_native_build, "SOURCE_DIR", broken)
    with pytest.raises(_native_build.BuildError, match="the (configure|compile) step failed"):
        _native_build.build()
    leftovers = [p for p in (tmp_path / "kernels").rglob("*") if p.is_file()]
    assert leftovers == []


def test_build_tag_tracks_mlx_sources_and_cpu(monkeypatch):
    tag = _native_build.build_tag()
    assert tag.startswith(f"mlx{mx.__version__}-")
    monkeypatch.setattr(_native_build, "_cpu_fingerprint", lambda: "another cpu")
    assert _native_build.build_tag() != tag


def test_cli_build_kernels_is_a_no_op_when_built():
    from click.testing import CliRunner

    from porter.cli.main import main

    result = CliRunner().invoke(main, ["build-kernels"])
    assert result.exit_code == 0, result.output
    assert "native kernels ready:" in result.output


def test_second_derivative_of_average_pooling_and_a_clear_error_for_max():
    x = mx.random.normal((1, 6, 6, 3))
    v = mx.random.normal((1, 6, 6, 3))

    def hvp():  # d/dx <grad f(x), v> with f(x) = sum(avg_pool(x)^2): linear pieces composed
        g = lambda a: mx.grad(lambda b: (PF.avg_pool2d(b, 3, 1, 1) ** 2).sum())(a)  # noqa: E731
        return np.array(mx.grad(lambda a: (g(a) * v).sum())(x))

    native = hvp()
    with _native.use_native(False):
        pure = hvp()
    np.testing.assert_allclose(native, pure, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="second derivatives of max pooling are not supported"):
        mx.eval(mx.grad(lambda a: (mx.grad(lambda b: (PF.max_pool2d(b, 2) ** 2).sum())(a) * v).sum())(x))


@pytest.mark.parametrize("mult, stride", [(1, 1), (2, 2)])
def test_second_derivatives_of_depthwise_conv_match_torch(mult, stride):
    # the three kernels are each other's adjoints: d/d(x, w) of <grad_x sum(conv(x, w)^2), v> and of <grad_w ..., u>
    rng = np.random.default_rng(mult)
    x_np = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    w_np = rng.standard_normal((3 * mult, 3, 3, 1)).astype(np.float32)
    v_np = rng.standard_normal(x_np.shape).astype(np.float32)
    u_np = rng.standard_normal(w_np.shape).astype(np.float32)
    conv = lambda a, k: PF.conv2d(a, k, None, stride, 1, 1, 3)  # noqa: E731
    first = mx.grad(lambda a, k: (conv(a, k) ** 2).sum(), argnums=(0, 1))
    inner = lambda a, k: (first(a, k)[0] * mx.array(v_np)).sum() + (first(a, k)[1] * mx.array(u_np)).sum()  # noqa: E731
    got = mx.grad(inner, argnums=(0, 1))(mx.array(x_np), mx.array(w_np))

    xt = torch.from_numpy(x_np).movedim(-1, 1).requires_grad_(True)
    wt = torch.from_numpy(w_np).movedim(-1, 1).requires_grad_(True)
    gx, gw = torch.autograd.grad((TF.conv2d(xt, wt, None, stride, 1, 1, 3) ** 2).sum(), (xt, wt), create_graph=True)
    total = (gx * torch.from_numpy(v_np).movedim(-1, 1)).sum() + (gw * torch.from_numpy(u_np).movedim(-1, 1)).sum()
    want = torch.autograd.grad(total, (xt, wt))
    for a, t in zip(got, want):
        np.testing.assert_allclose(np.array(a), t.movedim(1, -1).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels", [16, 48, 256, 272])
def test_vector_register_paths_match_torch(channels):
    # float32 with channels in multiples of 16 takes the register kernels: NaN, ties and -inf on purpose
    rng = np.random.default_rng(channels)
    data = rng.integers(-3, 3, size=(2, 9, 11, channels)).astype(np.float32)  # many ties
    data[0, 1, 2, :5] = np.nan
    data[1, 4, :, 7] = -np.inf
    x = mx.array(data)
    xt = torch.from_numpy(data).movedim(-1, 1)
    got = PF.max_pool2d(x, 3, 2, 1, dilation=2, ceil_mode=True)
    want = TF.max_pool2d(xt, 3, 2, 1, dilation=2, ceil_mode=True)
    np.testing.assert_array_equal(np.array(got), _nhwc(want))
    got = PF.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    want = TF.avg_pool2d(xt, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    np.testing.assert_allclose(np.array(got), _nhwc(want), rtol=1e-6, atol=1e-6)
    got = PF.adaptive_avg_pool2d(x, 1)
    want = TF.adaptive_avg_pool2d(xt, 1)
    np.testing.assert_allclose(np.array(got), _nhwc(want), rtol=1e-5, atol=1e-6)
    _, grad = mx.value_and_grad(lambda a: (PF.max_pool2d(a, 3, 2, 1) ** 2).sum())(mx.array(np.nan_to_num(data)))
    xg = torch.from_numpy(np.nan_to_num(data)).movedim(-1, 1).requires_grad_(True)
    (TF.max_pool2d(xg, 3, 2, 1) ** 2).sum().backward()
    np.testing.assert_allclose(np.array(grad), _nhwc(xg.grad), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------- elementwise
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("relu", [False, True])
def test_channel_affine_is_torchs_eval_batch_norm_with_gradients(dtype, relu):
    c = 19
    rng = np.random.default_rng(3)
    data = rng.standard_normal((3, 5, 7, c)).astype(np.float32)
    data[0, 0, 0, 0] = np.nan
    w, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
    tdt = getattr(torch, dtype)
    xt = torch.from_numpy(data).movedim(-1, 1).to(tdt).requires_grad_(True)
    wt, bt = torch.from_numpy(w).requires_grad_(True), torch.from_numpy(b).requires_grad_(True)
    yt = TF.batch_norm(xt.float(), torch.from_numpy(mean), torch.from_numpy(var), wt, bt, False, 0.1, 1e-5)
    yt = (TF.relu(yt) if relu else yt).to(tdt)
    (yt.float().nan_to_num() ** 2).sum().backward()

    x = mx.array(data).astype(getattr(mx, dtype))

    def f(x, w, b):
        alpha = mx.rsqrt(mx.array(var) + 1e-5) * w
        y = _native.channel_affine(x, alpha, b - mx.array(mean) * alpha, relu)
        return y, (mx.nan_to_num(y.astype(mx.float32)) ** 2).sum()

    y, _ = f(x, mx.array(w), mx.array(b))
    grads = mx.grad(lambda *a: f(*a)[1], argnums=(0, 1, 2))(x, mx.array(w), mx.array(b))
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    np.testing.assert_allclose(np.array(y.astype(mx.float32)), _nhwc(yt.detach().float()), rtol=tol, atol=tol)
    np.testing.assert_allclose(np.array(grads[0].astype(mx.float32)), _nhwc(xt.grad.float()), rtol=tol * 10,
                               atol=tol * 10)
    np.testing.assert_allclose(np.array(grads[1]), wt.grad.numpy(), rtol=tol * 10, atol=tol * 10)
    np.testing.assert_allclose(np.array(grads[2]), bt.grad.numpy(), rtol=tol * 10, atol=tol * 10)


def test_relu_matches_torch_values_nan_and_gradient_at_zero():
    data = np.array([[-2.0, -0.0, 0.0, 0.5, np.nan, np.inf, -np.inf, 3.0]], dtype=np.float32)
    xt = torch.from_numpy(data).requires_grad_(True)
    TF.relu(xt).nan_to_num().sum().backward()
    x = mx.array(data)
    np.testing.assert_array_equal(np.array(_native.relu(x)), TF.relu(torch.from_numpy(data)).numpy())
    grad = mx.grad(lambda a: mx.nan_to_num(_native.relu(a)).sum())(x)
    np.testing.assert_array_equal(np.array(grad), xt.grad.numpy())
    big = mx.array(np.random.default_rng(0).standard_normal((3, 300, 301)).astype(np.float32))  # threaded chunks
    np.testing.assert_array_equal(np.array(_native.relu(big)), np.maximum(np.array(big), 0))


# ---------------------------------------------------------------------------------------------------- vmap
VMAP_CASES = {
    "max_pool2d": lambda a: PF.max_pool2d(a, 3, 2, 1),
    "max_pool2d indices": lambda a: PF.max_pool2d(a, 2, return_indices=True)[1],
    "avg_pool2d": lambda a: PF.avg_pool2d(a, 3, 2, 1, ceil_mode=True),
    "adaptive_avg_pool2d": lambda a: PF.adaptive_avg_pool2d(a, (2, 3)),
    "adaptive_max_pool2d": lambda a: PF.adaptive_max_pool2d(a, 3),
    "lp_pool2d": lambda a: PF.lp_pool2d(a, 2, 2),
    "relu": lambda a: _native.relu(a),
    "channel_affine": lambda a: _native.channel_affine(a, mx.arange(3.0), mx.ones(3), True),
}


@pytest.mark.parametrize("name", sorted(VMAP_CASES))
@pytest.mark.parametrize("axis", [0, 2])
def test_vmap_matches_a_loop_over_torch(name, axis):
    # per-example gradients are what vmap is for: values and the vmapped gradient, against torch per example
    fn = VMAP_CASES[name]
    data = np.random.default_rng(5).standard_normal((4, 2, 7, 6, 3)).astype(np.float32)
    stacked = mx.array(np.moveaxis(data, 0, axis))
    got = mx.vmap(fn, in_axes=axis)(stacked)
    want = np.stack([np.array(fn(mx.array(d))) for d in data])  # the single-example path, checked against torch
    np.testing.assert_allclose(np.array(got), want, rtol=1e-6, atol=1e-6)
    if "indices" not in name:
        grads = mx.vmap(mx.grad(lambda a: (fn(a) ** 2).sum()), in_axes=axis)(stacked)
        want = np.stack([np.array(mx.grad(lambda a: (fn(a) ** 2).sum())(mx.array(d))) for d in data])
        np.testing.assert_allclose(np.moveaxis(np.array(grads), 0, 0), want, rtol=1e-5, atol=1e-6)
    torch_first = {"max_pool2d": lambda t: TF.max_pool2d(t, 3, 2, 1), "avg_pool2d":
                   lambda t: TF.avg_pool2d(t, 3, 2, 1, ceil_mode=True)}.get(name)
    if torch_first is not None:
        ref = torch_first(torch.from_numpy(data[1]).movedim(-1, 1))
        np.testing.assert_allclose(np.array(fn(mx.array(data[1]))), _nhwc(ref), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis", [0, 2])
def test_vmap_of_depthwise_conv_matches_a_loop(axis):
    # per-example forward and input gradients (the weight is shared); per-example weight gradients raise clearly
    data = np.random.default_rng(6).standard_normal((3, 2, 7, 6, 16)).astype(np.float32)
    w = mx.array(np.random.default_rng(7).standard_normal((32, 3, 3, 1)).astype(np.float32))
    fn = lambda a: PF.conv2d(a, w, None, 2, 1, 1, 16)  # noqa: E731
    stacked = mx.array(np.moveaxis(data, 0, axis))
    got = mx.vmap(fn, in_axes=axis)(stacked)
    want = np.stack([np.array(fn(mx.array(d))) for d in data])
    np.testing.assert_allclose(np.array(got), want, rtol=1e-6, atol=1e-6)
    loss = lambda a: (fn(a) ** 2).sum()  # noqa: E731
    grads = mx.vmap(mx.grad(loss), in_axes=axis)(stacked)
    want = np.stack([np.array(mx.grad(loss)(mx.array(d))) for d in data])
    np.testing.assert_allclose(np.array(grads), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="per-example weight gradients"):
        mx.eval(mx.vmap(lambda a: mx.grad(lambda k: (PF.conv2d(a, k, groups=16) ** 2).sum())(w))(stacked))


def test_vmap_of_fractional_and_unpool_kernels():
    k = _native.kernels()
    x = mx.random.normal((3, 2, 8, 8, 4))
    samples = mx.random.uniform(shape=(3, 2, 4, 2))
    got = mx.vmap(lambda a, u: k.fractional_max(a, u, [2, 2], [3, 3], [1, 0])[0])(x, samples)
    want = mx.stack([k.fractional_max(x[i], samples[i], [2, 2], [3, 3], [1, 0])[0] for i in range(3)])
    np.testing.assert_array_equal(np.array(got), np.array(want))
    y, idx = PF.max_pool2d(x[0], 2, return_indices=True)
    ys = mx.stack([y, y * 2])
    got = mx.vmap(lambda a: k.plane_scatter(a, idx, [8, 8], True)[0])(ys)
    want = mx.stack([k.plane_scatter(v, idx, [8, 8], True)[0] for v in (y, y * 2)])
    np.testing.assert_array_equal(np.array(got), np.array(want))


@pytest.mark.parametrize("edited", _native_build.SOURCES)
def test_build_tag_changes_with_every_source_file(edited, tmp_path, monkeypatch):
    # an edit to any file the build reads (a family's .cpp, a shared header, CMakeLists.txt) must give a new tag
    for name in _native_build.SOURCES:
        (tmp_path / name).write_bytes((_native_build.SOURCE_DIR / name).read_bytes())
    monkeypatch.setattr(_native_build, "SOURCE_DIR", tmp_path)
    tag = _native_build.build_tag()
    (tmp_path / edited).write_bytes((tmp_path / edited).read_bytes() + b"\n")
    assert _native_build.build_tag() != tag


def test_build_tag_covers_every_source_file():
    # a source missing from SOURCES would not change the tag: an old build would load after an edit to it
    on_disk = {p.name for p in _native_build.SOURCE_DIR.iterdir() if p.suffix in (".h", ".cpp", ".txt")}
    assert on_disk == set(_native_build.SOURCES)


def test_mx_compile_of_native_layers_matches_eager():
    x = mx.random.normal((2, 9, 9, 16))
    w = mx.random.normal((16, 3, 3, 1))

    def f(a):
        crop = (slice(None), slice(0, 4), slice(0, 4))
        return (PF.max_pool2d(a, 3, 2, 1)[crop] + PF.avg_pool2d(a, 3, 2, 1)[crop]
                + PF.lp_pool2d(mx.abs(a), 2, 3, 2, True)[crop] + PF.conv2d(a, w, None, 2, 1, 1, 16)[crop])

    np.testing.assert_allclose(np.array(mx.compile(f)(x)), np.array(f(x)), rtol=1e-6, atol=1e-6)
    grad = mx.grad(lambda a: (f(a) ** 2).sum())
    np.testing.assert_allclose(np.array(mx.compile(grad)(x)), np.array(grad(x)), rtol=1e-5, atol=1e-6)
