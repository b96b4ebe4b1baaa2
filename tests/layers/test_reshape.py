"""porter.layers.functional.reshape against torch's reshape of the same views, on both backends (the conftest runs
every test with the native kernels on and off): row-contiguous inputs and views MLX can reshape without a copy share
the input's buffer; other views (permuted windows, slices) are copied on Porter's threads (csrc/strided_copy.h),
every dtype width."""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import _native
from porter.layers import reshape as reshape_module
from porter.layers.functional import reshape

# (input shape, view taken in both frameworks as (permutation, slices), new shape)
CASES = [
    ((1, 56, 56, 96), None, (64, 49, 96)),  # contiguous: a view
    ((1, 8, 7, 8, 7, 96), ((0, 1, 3, 2, 4, 5), None), (-1, 49, 96)),  # Swin's window partition
    ((2, 4, 3, 5, 6), ((0, 2, 1, 3, 4), None), (2, 3, -1)),  # heads merged back
    ((2, 6, 5, 4), ((0, 3, 1, 2), None), (2, 4, 2, 3, 5)),  # a dim split: MLX's view
    ((2, 6, 5, 4), ((0, 3, 1, 2), None), (8, 30)),
    ((3, 10, 12, 4), (None, (slice(None), slice(None, None, 2), slice(1, None))), (-1,)),  # a strided slice
    ((7, 1, 5), ((2, 1, 0), None), (5, 7)),  # a size-1 dim
    ((2, 3, 1, 1), ((3, 2, 1, 0), None), (1, 6, 1)),
]


def _take(t, view, perm_fn):
    if view is None:
        return t
    perm, slices = view
    if perm is not None:
        t = perm_fn(t, perm)
    if slices is not None:
        t = t[slices]
    return t


@pytest.mark.parametrize("shape,view,new", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8", "int64", "bool", "complex64"])
def test_matches_torch(shape, view, new, dtype):
    torch.manual_seed(0)
    base = torch.randn(shape, dtype=torch.float64) * 10
    tt = {"bool": base > 0, "complex64": torch.complex(base.float(), -base.float())}.get(dtype)
    if tt is None:
        tt = base.to(getattr(torch, dtype))
    src = tt.float().numpy() if dtype == "bfloat16" else tt.numpy()
    mdtype = mx.bool_ if dtype == "bool" else getattr(mx, dtype)
    mt = mx.array(src, dtype=mdtype)
    want = _take(tt, view, lambda t, p: t.permute(*p)).reshape(new)
    got = reshape(_take(mt, view, lambda t, p: t.transpose(*p)), new)
    assert got.shape == tuple(want.shape) and got.dtype == mdtype
    got_np = np.array(got.astype(mx.float32)) if dtype == "bfloat16" else np.array(got)
    want_np = want.float().numpy() if dtype == "bfloat16" else want.numpy()
    np.testing.assert_array_equal(got_np, want_np)


def test_gradients_jvp_vmap_and_compile():
    torch.manual_seed(1)
    x = torch.randn(1, 8, 7, 8, 7, 12, requires_grad=True)
    w = torch.randn(64, 49, 12)
    (torch.permute(x, (0, 1, 3, 2, 4, 5)).reshape(-1, 49, 12) * w).square().sum().backward()
    mw = mx.array(w.numpy())

    def loss(z):
        return (reshape(z.transpose(0, 1, 3, 2, 4, 5), (-1, 49, 12)) * mw).square().sum()

    mxx = mx.array(x.detach().numpy())
    np.testing.assert_allclose(np.array(mx.grad(loss)(mxx)), x.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(mx.compile(mx.grad(loss))(mxx)), x.grad.numpy(), rtol=1e-5, atol=1e-5)
    a = mx.array(torch.randn(4, 5, 6).numpy())
    tangent = mx.array(torch.randn(4, 5, 6).numpy())
    got = mx.jvp(lambda z: reshape(z.transpose(2, 0, 1), (6, 20)), [a], [tangent])[1][0]
    np.testing.assert_array_equal(np.array(got), np.array(tangent.transpose(2, 0, 1).reshape(6, 20)))
    for axis in (0, 1, 2):
        got = mx.vmap(lambda z: reshape(z.T, (-1,)), in_axes=axis)(a)
        want = mx.vmap(lambda z: z.T.reshape(-1), in_axes=axis)(a)
        np.testing.assert_array_equal(np.array(got), np.array(want))


@pytest.mark.parametrize("threads", [1, 2])
def test_large_copies_on_threads(threads):
    """Past parallel_for's threshold the rows are split over the pool: the same bytes as torch on 1 or 2 threads."""
    if not _native.active():
        pytest.skip("native kernels only")
    before = _native.kernels().num_threads()
    _native.set_num_threads(threads)
    try:
        t = torch.randn(2, 16, 7, 16, 7, 96)
        got = reshape(mx.array(t.numpy()).transpose(0, 1, 3, 2, 4, 5), (-1, 49, 96))
        np.testing.assert_array_equal(np.array(got), t.permute(0, 1, 3, 2, 4, 5).reshape(-1, 49, 96).numpy())
        t = torch.randn(64, 3, 49, 49)  # a transpose of the last two dims: a gather per element
        got = reshape(mx.array(t.numpy()).swapaxes(-1, -2), (192, -1))
        np.testing.assert_array_equal(np.array(got), t.transpose(-1, -2).reshape(192, -1).numpy())
    finally:
        _native.set_num_threads(before)


def test_bad_shapes_raise_as_mlx_and_the_switch(monkeypatch):
    x = mx.zeros((2, 3, 4)).transpose(2, 0, 1)
    for shape in [(5, -1), (-1, -1), (7, 3), (-2, 12)]:
        with pytest.raises(ValueError):
            reshape(x, shape)
    assert reshape(mx.zeros((0, 3)), (3, 0)).shape == (3, 0)
    assert reshape(x, (4, 2, 3)) is x or reshape(x, (4, 2, 3)).shape == (4, 2, 3)
    if _native.active():
        with pytest.raises(ValueError, match="cannot reshape 24 elements into 25"):
            _native.kernels().reshape(x, [5, 5])
        calls = []
        real = _native.kernels

        class Spy:
            def __getattr__(self, name):
                return getattr(real(), name)

            def reshape(self, *args):
                calls.append(args)
                return real().reshape(*args)

        monkeypatch.setattr(_native, "kernels", lambda: Spy())
        reshape(x, (4, 6))
        assert len(calls) == 1
        monkeypatch.setattr(reshape_module, "NATIVE_RESHAPE", False)
        reshape(x, (6, 4))
        assert len(calls) == 1


def test_compile_keeps_two_reshapes_of_one_input_apart():
    """Two reshapes of the same view to different shapes are different nodes under mx.compile (its merge of equal
    nodes compares the primitives: the target shape is part of the native reshape's identity)."""
    x = mx.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))

    def two(z):
        v = z.transpose(2, 0, 1)
        return reshape(v, (4, 6)), reshape(v, (6, 4)), reshape(v, (24,))

    for got, want in zip(mx.compile(two)(x), two(x)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.array(got), np.array(want))
