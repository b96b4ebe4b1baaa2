"""porter.layers.functional.matmul against torch.matmul, on both backends (the conftest runs every test with the
native kernels on and off): float32 operands with two or more batch entries run as one native node splitting the
entries over Porter's threads (csrc/matmul_ops.cpp); operands that are transposed views or broadcast over the batch
are read in place; everything else is MLX's ``@``."""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import _native
from porter.layers import matmul as matmul_module
from porter.layers.functional import matmul

from tests.layers.blas_count import blas_count_at_two


class _Spy:
    def __init__(self, monkeypatch):
        self.calls = 0
        module = _native.kernels()
        if module is None:
            return
        real = module.batched_matmul

        class Wrapped:
            def __getattr__(_, name):
                return getattr(module, name)

            def batched_matmul(_, a, b):
                self.calls += 1
                return real(a, b)

        monkeypatch.setattr(_native, "kernels", lambda: Wrapped())


def _native_on() -> bool:
    return _native.active() and _native._fused_blas()


def _view(t: torch.Tensor, transposed: bool) -> mx.array:
    """``t`` as an MLX array, stored row-major or as the transposed view of its transpose's copy."""
    if not transposed:
        return mx.array(t.numpy())
    return mx.array(np.ascontiguousarray(np.swapaxes(t.numpy(), -1, -2))).swapaxes(-1, -2)


SHAPES = [
    ((64, 3, 49, 32), (64, 3, 32, 49)),  # Swin-T's window attention scores
    ((2, 12, 17, 8), (2, 12, 8, 17)),
    ((2, 3, 5, 7), (7, 4)),  # a weight broadcast over the batch
    ((5, 7), (2, 3, 7, 4)),
    ((2, 1, 5, 7), (1, 3, 7, 4)),  # both broadcast
    ((3, 5, 7), (3, 7, 1)),  # one column
    ((3, 1, 7), (3, 7, 4)),  # one row
    ((4, 1, 1), (4, 1, 6)),  # K = 1
    ((2, 2, 33, 65), (2, 2, 65, 31)),  # odd sizes
]


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matches_torch_with_gradients(monkeypatch, sa, sb, ta, tb):
    spy = _Spy(monkeypatch)
    torch.manual_seed(0)
    a, b = torch.randn(sa, requires_grad=True), torch.randn(sb, requires_grad=True)
    y = torch.matmul(a, b)
    g = torch.randn(y.shape)
    y.backward(g)
    ma, mb, mg = _view(a.detach(), ta), _view(b.detach(), tb), mx.array(g.numpy())
    out, vjps = mx.vjp(lambda p, q: matmul(p, q), [ma, mb], [mg])
    np.testing.assert_allclose(np.array(out[0]), y.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(vjps[0]), a.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(vjps[1]), b.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert vjps[0].shape == tuple(sa) and vjps[1].shape == tuple(sb)
    assert spy.calls == (1 if _native_on() else 0)  # the gradients are the same op, built in C++


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_give_the_same_numbers(threads):
    """Many small entries (split over the pool) and few large ones (each GEMM threaded by the BLAS)."""
    if not _native_on():
        pytest.skip("native kernels only")
    before = _native.kernels().num_threads()
    _native.set_num_threads(threads)
    try:
        for sa, sb in [((64, 3, 49, 32), (64, 3, 32, 49)), ((2, 300, 200), (2, 200, 250))]:
            torch.manual_seed(1)
            a, b = torch.randn(sa), torch.randn(sb)
            y = matmul(mx.array(a.numpy()), mx.array(b.numpy()))
            np.testing.assert_allclose(np.array(y), torch.matmul(a, b).numpy(), rtol=1e-4, atol=1e-4)
    finally:
        _native.set_num_threads(before)


def test_nan_and_inf_propagate_as_torch():
    torch.manual_seed(2)
    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 6)
    a[0, 1, 2] = float("nan")
    b[1, 0, 3] = float("inf")
    b[2, 4, 0] = -float("inf")
    y = np.array(matmul(mx.array(a.numpy()), mx.array(b.numpy())))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(torch.matmul(a, b).numpy()))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(torch.matmul(a, b).numpy()))


def test_jvp_vmap_and_compile_match_mlx():
    rng = np.random.default_rng(3)
    a = mx.array(rng.standard_normal((2, 3, 5, 7)).astype(np.float32))
    b = mx.array(rng.standard_normal((3, 7, 4)).astype(np.float32))
    c = mx.array(rng.standard_normal((5, 7, 4)).astype(np.float32))
    ref = lambda p, q: p @ q  # noqa: E731
    for got, want in [
        (mx.jvp(matmul, [a, b], [a * 0.5, b])[1][0], mx.jvp(ref, [a, b], [a * 0.5, b])[1][0]),
        (mx.vmap(matmul, in_axes=(0, None))(a, b), mx.vmap(ref, in_axes=(0, None))(a, b)),
        (mx.vmap(matmul, in_axes=(2, 0))(a, c), mx.vmap(ref, in_axes=(2, 0))(a, c)),
        (mx.compile(matmul)(a, b), a @ b),
        (mx.grad(lambda p: (mx.grad(lambda q: (matmul(q, b) ** 2).sum())(p) ** 2).sum())(a),
         mx.grad(lambda p: (mx.grad(lambda q: ((q @ b) ** 2).sum())(p) ** 2).sum())(a)),
    ]:
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-4)


def test_other_dtypes_one_entry_and_1d_use_mlx(monkeypatch):
    spy = _Spy(monkeypatch)
    torch.manual_seed(4)
    for dtype, tol in [(torch.float16, 2e-2), (torch.bfloat16, 1e-1), (torch.float64, 1e-12)]:
        a, b = torch.randn(2, 3, 5, 7, dtype=dtype), torch.randn(2, 3, 7, 4, dtype=dtype)
        mdt = {torch.float16: mx.float16, torch.bfloat16: mx.bfloat16, torch.float64: mx.float64}[dtype]
        with mx.stream(mx.cpu):
            # half values are exact in float32; float64 ones go over as they are
            src = (lambda t: t.numpy()) if dtype == torch.float64 else (lambda t: t.float().numpy())
            y = matmul(mx.array(src(a), dtype=mdt), mx.array(src(b), dtype=mdt))
            np.testing.assert_allclose(np.array(y.astype(mx.float32)), torch.matmul(a, b).float().numpy(), rtol=tol,
                                       atol=tol)
    a, b = torch.randn(1, 5, 7), torch.randn(7)
    np.testing.assert_allclose(np.array(matmul(mx.array(a.numpy()), mx.array(b.numpy()))),
                               torch.matmul(a, b).numpy(), rtol=1e-5, atol=1e-5)
    a, b = torch.randn(1, 5, 7), torch.randn(1, 7, 3)  # one entry: one GEMM, MLX's node
    np.testing.assert_allclose(np.array(matmul(mx.array(a.numpy()), mx.array(b.numpy()))),
                               torch.matmul(a, b).numpy(), rtol=1e-5, atol=1e-5)
    assert spy.calls == 0


def test_empty_products_and_the_switch(monkeypatch):
    """Zero-size batch, rows or K give torch's (empty, or zeros for K = 0) through MLX's ``@``; the native op itself
    writes zeros for K = 0. BATCHED_NODE False keeps MLX's ``@``."""
    for sa, sb in [((0, 3, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 5)), ((2, 3, 0), (2, 0, 5))]:
        a, b = torch.randn(sa), torch.randn(sb)
        y = matmul(mx.array(a.numpy()), mx.array(b.numpy()))
        assert y.shape == tuple(torch.matmul(a, b).shape)
        np.testing.assert_array_equal(np.array(y), torch.matmul(a, b).numpy())
    if _native_on():
        y = _native.kernels().batched_matmul(mx.ones((2, 3, 0)), mx.ones((2, 0, 5)))
        np.testing.assert_array_equal(np.array(y), np.zeros((2, 3, 5), np.float32))
    spy = _Spy(monkeypatch)
    monkeypatch.setattr(matmul_module, "BATCHED_NODE", False)
    matmul(mx.ones((2, 3, 4)), mx.ones((2, 4, 5)))
    assert spy.calls == 0


def test_strided_operands_are_copied_or_read_in_place():
    """Batch-strided views (a slice of heads, a permuted batch) are read in place; matrices with no unit stride
    (every other column) are copied first. Both give torch's numbers. Each case takes the same view of the same
    data in torch and in MLX."""
    torch.manual_seed(5)
    a, b = torch.randn(4, 6, 8, 10), torch.randn(6, 4, 10, 3)
    c, d = torch.randn(5, 2), torch.randn(4, 6, 5, 10)
    ma, mb, mc, md = (mx.array(t.numpy()) for t in (a, b, c, d))
    cases = [
        (lambda a, b, c, d, perm: (a[:, 1:5], perm(b, (1, 0, 2, 3))[:, 1:5])),
        (lambda a, b, c, d, perm: (perm(a, (1, 0, 2, 3)), b)),
        (lambda a, b, c, d, perm: (a[:, :, :, ::2], c)),
        (lambda a, b, c, d, perm: (a[:, :, ::3], perm(d, (0, 1, 3, 2))[:, :, :, ::2])),
    ]
    for case in cases:
        want = torch.matmul(*case(a, b, c, d, lambda t, p: t.permute(*p)))
        got = matmul(*case(ma, mb, mc, md, lambda t, p: t.transpose(*p)))
        np.testing.assert_allclose(np.array(got), want.numpy(), rtol=1e-5, atol=1e-5)


def test_op_checks_its_arguments():
    if not _native_on():
        pytest.skip("native kernels only")
    op = _native.kernels().batched_matmul
    with pytest.raises(ValueError, match="float32"):
        op(mx.ones((2, 3, 4), dtype=mx.float16), mx.ones((2, 4, 5), dtype=mx.float16))
    with pytest.raises(ValueError, match="second-to-last"):
        op(mx.ones((2, 3, 4)), mx.ones((2, 5, 5)))
    with pytest.raises(ValueError, match="do not broadcast"):
        op(mx.ones((2, 3, 4)), mx.ones((3, 4, 5)))
    with pytest.raises(ValueError, match="at least 2 dims"):
        op(mx.ones((4,)), mx.ones((2, 4, 5)))


def test_leaves_the_blas_thread_count_as_it_found_it():
    if not _native_on():
        pytest.skip("native kernels only")
    with blas_count_at_two() as count:
        for _ in range(3):
            mx.eval(matmul(mx.ones((64, 3, 49, 32)), mx.ones((64, 3, 32, 49))))
            assert count() == 2
