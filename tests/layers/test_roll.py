"""porter.layers.functional.roll against torch.roll, on both backends (the conftest runs every test with the native
kernels on and off): one threaded pass on the CPU (csrc/roll_ops.cpp)."""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import _native
from porter.layers import roll as roll_module
from porter.layers.functional import roll

CASES = [
    ((1, 56, 56, 96), (-3, -3), (1, 2)),  # Swin's shift
    ((1, 56, 56, 96), (3, 3), (1, 2)),  # and back
    ((2, 7, 9, 5), (4,), (-1,)),  # the last axis: two pieces per row
    ((2, 7, 9, 5), (13, -20, 7), (0, 1, 3)),  # shifts past the size, every sign
    ((4, 6), (2, 3), (1, 1)),  # a repeated axis: shifts add up
    ((5,), (0,), (0,)),
    ((3, 1, 4), (5, 2), (1, 2)),
]


@pytest.mark.parametrize("shape,shifts,axes", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int64", "bool"])
def test_matches_torch(shape, shifts, axes, dtype):
    torch.manual_seed(0)
    base = torch.randn(shape, dtype=torch.float64) * 10
    t = base > 0 if dtype == "bool" else base.to(getattr(torch, dtype))
    mdtype = mx.bool_ if dtype == "bool" else getattr(mx, dtype)
    src = t.float().numpy() if dtype == "bfloat16" else t.numpy()
    got = roll(mx.array(src, dtype=mdtype), shifts, axes)
    want = torch.roll(t, shifts, axes)
    assert got.dtype == mdtype
    if dtype == "bfloat16":
        got, want = got.astype(mx.float32), want.float()
    np.testing.assert_array_equal(np.array(got), want.numpy())


def test_strided_input_gradients_jvp_vmap_and_compile():
    torch.manual_seed(1)
    x = torch.randn(2, 9, 8, 6, requires_grad=True)
    w = torch.randn(2, 8, 9, 6)
    (torch.roll(x.transpose(1, 2), (-3, 2), (1, 2)) * w).square().sum().backward()
    mw = mx.array(w.numpy())

    def loss(z):
        return (roll(z.swapaxes(1, 2), (-3, 2), (1, 2)) * mw).square().sum()

    mxx = mx.array(x.detach().numpy())
    np.testing.assert_allclose(np.array(mx.grad(loss)(mxx)), x.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(mx.compile(mx.grad(loss))(mxx)), x.grad.numpy(), rtol=1e-5, atol=1e-5)
    a = mx.array(torch.randn(4, 5, 6).numpy())
    tangent = mx.array(torch.randn(4, 5, 6).numpy())
    got = mx.jvp(lambda z: roll(z, (2, -1), (0, 2)), [a], [tangent])[1][0]
    np.testing.assert_array_equal(np.array(got), np.array(mx.roll(tangent, (2, -1), axis=(0, 2))))
    for axis in (0, 1, 2):
        got = mx.vmap(lambda z: roll(z, (1, -2), (0, 1)), in_axes=axis)(a)
        want = mx.vmap(lambda z: mx.roll(z, (1, -2), axis=(0, 1)), in_axes=axis)(a)
        np.testing.assert_array_equal(np.array(got), np.array(want))


@pytest.mark.parametrize("threads", [1, 2])
def test_large_rolls_on_threads(threads):
    if not _native.active():
        pytest.skip("native kernels only")
    before = _native.kernels().num_threads()
    _native.set_num_threads(threads)
    try:
        t = torch.randn(4, 56, 56, 96)
        got = roll(mx.array(t.numpy()), (-3, 5), (1, 2))
        np.testing.assert_array_equal(np.array(got), torch.roll(t, (-3, 5), (1, 2)).numpy())
    finally:
        _native.set_num_threads(before)


def test_bad_arguments_and_the_switch(monkeypatch):
    x = mx.zeros((2, 3))
    with pytest.raises(ValueError, match="same length"):
        roll(x, (1, 2), (0,))
    with pytest.raises(IndexError, match="axis 2 is out of range"):
        roll(x, (1,), (2,))
    assert roll(mx.zeros((0, 3)), (1,), (1,)).shape == (0, 3)
    monkeypatch.setattr(roll_module, "NATIVE_ROLL", False)
    np.testing.assert_array_equal(np.array(roll(mx.arange(5), (2,), (0,))), [3, 4, 0, 1, 2])
