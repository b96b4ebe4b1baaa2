"""porter.layers.functional add/subtract/multiply/divide against torch, on both backends (the conftest runs every
test with the native kernels on and off): large float32 operands run one native node over Porter's threads
(csrc/binary_ops.cpp) with numpy broadcasting read through stride-0 dims; the same IEEE operation per element, so
the values equal torch's bit for bit."""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import _native
from porter.layers import binary as binary_module
from porter.layers.functional import add, divide, multiply, subtract

OPS = {"add": (add, torch.add), "subtract": (subtract, torch.sub), "multiply": (multiply, torch.mul),
       "divide": (divide, torch.div)}
SHAPES = [
    ((64, 3, 49, 49), (3, 49, 49)),  # Swin's relative-position bias
    ((1, 16, 3, 49, 49), (1, 16, 1, 49, 49)),  # Swin's shifted-window mask
    ((2, 56, 56, 96), (2, 56, 56, 96)),  # a residual add
    ((2, 56, 56, 96), (96,)),
    ((2, 1, 56, 96), (1, 56, 1, 96)),  # both broadcast
    ((300, 200), ()),  # a 0-d operand
    ((7, 5000), (7, 1)),
    ((40000,), (40000,)),  # one long row: chunked
]


@pytest.fixture()
def small(monkeypatch):
    monkeypatch.setattr(binary_module, "MIN_ELEMENTS", 1)


def _spy(monkeypatch):
    calls = []
    module = _native.kernels()
    if module is None:
        return calls

    class Spy:
        def __getattr__(self, name):
            return getattr(module, name)

        def binary(self, *args):
            calls.append(args[2])
            return module.binary(*args)

    monkeypatch.setattr(_native, "kernels", lambda: Spy())
    return calls


@pytest.mark.parametrize("sa,sb", SHAPES)
@pytest.mark.parametrize("op", list(OPS))
def test_matches_torch_bit_for_bit_with_gradients(monkeypatch, small, op, sa, sb):
    calls = _spy(monkeypatch)
    ours, theirs = OPS[op]
    torch.manual_seed(0)
    a, b = torch.randn(sa, requires_grad=True), torch.randn(sb, requires_grad=True)
    with torch.no_grad():
        b += torch.sign(b) * 0.5  # away from 0 for divide
    for x, y in ((a, b), (b, a)):
        want = theirs(x, y)
        got = ours(mx.array(x.detach().numpy()), mx.array(y.detach().numpy()))
        np.testing.assert_array_equal(np.array(got), want.detach().numpy())
    want = theirs(a, b)
    g = torch.randn(want.shape)
    want.backward(g)
    out, grads = mx.vjp(lambda p, q: [ours(p, q)], [mx.array(a.detach().numpy()), mx.array(b.detach().numpy())],
                        [mx.array(g.numpy())])
    np.testing.assert_allclose(np.array(grads[0]), a.grad.numpy(), rtol=1e-5, atol=1e-5)
    # summed over the broadcast dims (up to 6272 terms here): MLX's sum, as mx.add's own VJP
    np.testing.assert_allclose(np.array(grads[1]), b.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert grads[0].shape == tuple(sa) and grads[1].shape == tuple(sb)
    assert len(calls) == (3 if _native.active() else 0)


def test_transposed_and_strided_operands(small):
    torch.manual_seed(1)
    a, b = torch.randn(4, 6, 8, 10), torch.randn(10, 8, 6)
    want = a + b.permute(2, 1, 0)
    got = add(mx.array(a.numpy()), mx.array(b.numpy()).transpose(2, 1, 0))
    np.testing.assert_array_equal(np.array(got), want.numpy())
    want = a[:, ::2, 1:] * b.permute(2, 1, 0)[::2, 1:, :][None]
    got = multiply(mx.array(a.numpy())[:, ::2, 1:], mx.array(b.numpy()).transpose(2, 1, 0)[::2, 1:, :][None])
    np.testing.assert_array_equal(np.array(got), want.numpy())
    x = mx.broadcast_to(mx.array(b.numpy())[:1], (3, 8, 6))  # a stride-0 view
    np.testing.assert_array_equal(np.array(subtract(x, 1.5 * x)), np.array(x - 1.5 * x))


def test_nan_inf_and_zero_division_as_torch(small):
    a = torch.tensor([[1.0, -1.0, 0.0, float("nan"), float("inf"), -float("inf")]] * 3)
    b = torch.tensor([[0.0, 0.0, 0.0, 1.0, float("inf"), 2.0]] * 3)
    for op, (ours, theirs) in OPS.items():
        got = np.array(ours(mx.array(a.numpy()), mx.array(b.numpy())))
        np.testing.assert_array_equal(got, theirs(a, b).numpy(), err_msg=op)


@pytest.mark.parametrize("threads", [1, 2])
def test_default_threshold_threads_and_in_place(monkeypatch, threads):
    """At the default threshold a (2, 56, 56, 96) residual add runs native; a small one stays MLX's; 1 or 2
    threads give the same bits; a donated operand's buffer is reused (the result is still right when the other
    operand is a view of different data)."""
    if not _native.active():
        pytest.skip("native kernels only")
    calls = _spy(monkeypatch)
    before = _native.kernels().num_threads()
    _native.set_num_threads(threads)
    try:
        torch.manual_seed(2)
        a, b = torch.randn(2, 56, 56, 96), torch.randn(2, 56, 56, 96)
        got = add(mx.array(a.numpy()) * 2.0, mx.array(b.numpy()))  # the product is donatable
        np.testing.assert_array_equal(np.array(got), (a * 2.0 + b).numpy())
        add(mx.ones((4, 5)), mx.ones((4, 5)))
        assert calls == [0]
    finally:
        _native.set_num_threads(before)


def test_jvp_vmap_compile_and_other_dtypes(monkeypatch, small):
    rng = np.random.default_rng(3)
    a = mx.array(rng.standard_normal((2, 3, 5, 7)).astype(np.float32))
    b = mx.array(rng.standard_normal((5, 7)).astype(np.float32)) + 3.0
    c = mx.array(rng.standard_normal((5, 7)).astype(np.float32))
    for ours, ref in [(add, mx.add), (subtract, mx.subtract), (multiply, mx.multiply), (divide, mx.divide)]:
        for got, want in [
            (mx.jvp(ours, [a, b], [a * 0.5, b])[1][0], mx.jvp(ref, [a, b], [a * 0.5, b])[1][0]),
            (mx.vmap(ours, in_axes=(0, None))(a, b), mx.vmap(ref, in_axes=(0, None))(a, b)),
            (mx.vmap(ours, in_axes=(3, 1))(a, c), mx.vmap(ref, in_axes=(3, 1))(a, c)),
            (mx.vmap(ours, in_axes=(None, 0))(b, c), mx.vmap(ref, in_axes=(None, 0))(b, c)),
            (mx.compile(ours)(a, b), ref(a, b)),
        ]:
            assert got.shape == want.shape
            np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6, atol=1e-6)
    calls = _spy(monkeypatch)
    for dtype in (mx.float16, mx.bfloat16, mx.float64, mx.int32):
        with mx.stream(mx.cpu):
            x = mx.arange(12, dtype=dtype).reshape(3, 4)
            np.testing.assert_array_equal(np.array(add(x, x).astype(mx.float32)), np.arange(12).reshape(3, 4) * 2)
    assert np.array(add(mx.ones((3, 4)), 2)).tolist() == [[3.0] * 4] * 3  # a Python number: MLX's op
    assert calls == []


def test_op_checks_its_arguments():
    if not _native.active():
        pytest.skip("native kernels only")
    op = _native.kernels().binary
    with pytest.raises(ValueError, match="float32"):
        op(mx.ones((2, 3), dtype=mx.float16), mx.ones((2, 3), dtype=mx.float16), 0)
    with pytest.raises(ValueError, match="do not broadcast"):
        op(mx.ones((2, 3)), mx.ones((3, 2)), 0)
    with pytest.raises(ValueError, match="op must be"):
        op(mx.ones((2, 3)), mx.ones((2, 3)), 7)
