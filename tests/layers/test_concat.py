"""``porter.layers.functional.concatenate`` (torch's ``cat``; native multi-threaded copy on the CPU,
``layers/csrc/concat_kernels.h``) against torch: values, gradients to every input, axes, dtypes, vmap, jvp, errors.

Runs in both backend variants (``tests/layers/conftest.py``): the native one copies rows natively above
``NATIVE_MIN_ELEMENTS``, the pure-MLX one is ``mx.concatenate``.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import _native
from porter.layers import concat as concat_module
from porter.layers.functional import concatenate

TORCH_DTYPES = {mx.float32: torch.float32, mx.float16: torch.float16, mx.bfloat16: torch.bfloat16,
                mx.int32: torch.int32, mx.bool_: torch.bool}


def _inputs(shapes, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for shape in shapes:
        t = torch.randn(shape, generator=gen) * 10
        t = t > 0 if dtype == mx.bool_ else t.to(TORCH_DTYPES[dtype])
        tensors.append(t)
    return tensors, [mx.array(t.float().numpy()).astype(dtype) for t in tensors]


CASES = [
    ([(2, 9, 11, 64), (2, 9, 11, 32), (2, 9, 11, 32)], -1),  # DenseNet-style channel growth, channels-last
    ([(3, 8, 7, 5), (3, 8, 7, 13)], 3),
    ([(2, 64, 10), (2, 3, 10), (2, 100, 10)], 1),  # a middle axis: rows of several dims
    ([(40, 33), (1, 33), (300, 33)], 0),  # axis 0: one row
    ([(4, 0, 5), (4, 7, 5)], -2),  # an empty input
]


@pytest.mark.parametrize("shapes, axis", CASES)
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16, mx.int32, mx.bool_])
def test_concatenate_matches_torch(shapes, axis, dtype, monkeypatch):
    monkeypatch.setattr(concat_module, "NATIVE_MIN_ELEMENTS", 1)  # the small cases too
    tensors, arrays = _inputs(shapes, dtype)
    expected = torch.cat(tensors, dim=axis)
    got = concatenate(arrays, axis=axis)
    assert got.dtype == dtype and tuple(got.shape) == tuple(expected.shape)
    np.testing.assert_array_equal(np.array(got.astype(mx.float32)), expected.float().numpy())


@pytest.mark.parametrize("shapes, axis", CASES[:3])
def test_concatenate_gradients_match_torch(shapes, axis, monkeypatch):
    monkeypatch.setattr(concat_module, "NATIVE_MIN_ELEMENTS", 1)
    tensors, arrays = _inputs(shapes, mx.float32, seed=1)
    tensors = [t.requires_grad_() for t in tensors]
    out = torch.cat(tensors, dim=axis)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (out * weight).sum().backward()
    w = mx.array(weight.numpy())
    grads = mx.grad(lambda *a: (concatenate(a, axis=axis) * w).sum(), argnums=tuple(range(len(arrays))))(*arrays)
    for g, t in zip(grads, tensors):
        np.testing.assert_array_equal(np.array(g), t.grad.numpy())


def test_concatenate_mixed_dtypes_promote_as_mlx():
    a, b = mx.ones((4, 5000), dtype=mx.float16), mx.ones((4, 5000), dtype=mx.float32)
    assert concatenate([a, b], axis=0).dtype == mx.float32


def test_concatenate_vmap_and_jvp(monkeypatch):
    monkeypatch.setattr(concat_module, "NATIVE_MIN_ELEMENTS", 1)
    _, (a, b) = _inputs([(3, 4, 6), (3, 4, 2)], mx.float32, seed=3)
    mapped = mx.vmap(lambda x, y: concatenate([x, y], axis=-1))(a, b)
    np.testing.assert_array_equal(np.array(mapped), np.array(mx.concatenate([a, b], axis=-1)))
    half = mx.vmap(lambda x: concatenate([x, b[:, 0]], axis=-1), in_axes=1)(a)  # b not mapped: broadcast
    expected = mx.stack([mx.concatenate([a[:, i], b[:, 0]], axis=-1) for i in range(4)])
    np.testing.assert_array_equal(np.array(half), np.array(expected))
    _, (tangent,) = mx.jvp(lambda x: concatenate([x, b], axis=-1), [a], [a * 2])
    np.testing.assert_array_equal(np.array(tangent), np.array(mx.concatenate([a * 2, mx.zeros_like(b)], axis=-1)))


@pytest.mark.native_only
def test_native_kernel_runs_above_the_threshold(monkeypatch):
    calls = []
    real = _native.concat
    monkeypatch.setattr(_native, "concat", lambda arrays, axis: calls.append(axis) or real(arrays, axis))
    concatenate([mx.zeros((2, 8, 8, 16)), mx.zeros((2, 8, 8, 16))], axis=-1)  # 4096 elements: MLX's
    assert calls == []
    big = [mx.ones((4, 32, 32, 16)), mx.zeros((4, 32, 32, 8))]
    np.testing.assert_array_equal(np.array(concatenate(big, axis=-1)), np.array(mx.concatenate(big, axis=-1)))
    assert calls == [-1]


@pytest.mark.parametrize(
    "arrays, axis, message",
    [
        ([], 0, "'arrays' must hold"),
        ([mx.zeros((2, 3))], 2, "'axis' must be an int"),
        ([mx.zeros((2, 3))], 1.0, "'axis' must be an int"),
    ],
)
def test_concatenate_rejects_bad_arguments(arrays, axis, message):
    with pytest.raises(ValueError, match=message):
        concatenate(arrays, axis=axis)


@pytest.mark.native_only
def test_native_concat_checks_shapes():
    with pytest.raises(ValueError, match="match in every dim but the axis"):
        _native.concat([mx.zeros((2, 3)), mx.zeros((3, 3))], 1)
    with pytest.raises(ValueError, match="share rank and dtype"):
        _native.concat([mx.zeros((2, 3)), mx.zeros((2, 3), dtype=mx.int32)], 1)


@pytest.mark.parametrize("case", ["split halves", "swapped", "strided rows", "transposed", "broadcast", "one row"])
def test_concat_of_views_matches_torch(case, monkeypatch):
    """Views join without a copy node: a channel slice (ShuffleNet's split) is read in place, one step per row, by the
    threaded copy; other strided layouts are copied first inside the op. torch.cat of the same views is the oracle,
    bit for bit."""
    monkeypatch.setattr(concat_module, "NATIVE_MIN_ELEMENTS", 0)  # the native kernel whenever it runs
    x = torch.randn(4, 6, 5, 10, generator=torch.Generator().manual_seed(0))
    m = mx.array(x.numpy())
    views = {
        "split halves": (lambda t: [t[..., :4], t[..., 4:]], -1),
        "swapped": (lambda t: [t[..., 4:], t[..., :4], t[..., 2:3]], -1),
        "strided rows": (lambda t: [t[::2, :, 1::2, 3:7], t[1::2, :, 1::2, :2]], -1),
        "transposed": (lambda t: [t.transpose(1, 2), t[..., :3].transpose(1, 2)], -1),
        "broadcast": (lambda t: [t[:, :1].expand(4, 3, 5, 10), t[:, 2:4]], 1),
        "one row": (lambda t: [t[:1, :1, :1], t[:1, :1, 2:4]], 2),
    }
    pick, axis = views[case]
    torch_views = pick(x)
    mlx_views = [mx.array(v.contiguous().numpy()) for v in torch_views] if case == "broadcast" else None
    if case == "transposed":
        mlx_views = [m.transpose(0, 2, 1, 3), m[..., :3].transpose(0, 2, 1, 3)]
    elif case == "broadcast":
        mlx_views = [mx.broadcast_to(m[:, :1], (4, 3, 5, 10)), m[:, 2:4]]
    elif mlx_views is None:
        mlx_views = pick(m)
    got = concatenate(mlx_views, axis)
    np.testing.assert_array_equal(np.array(got), torch.cat(torch_views, axis).numpy())
