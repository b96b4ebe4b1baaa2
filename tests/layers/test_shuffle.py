"""``porter.layers.functional.channel_shuffle`` (torch's ``F.channel_shuffle`` along the last axis; a native copy on
the CPU, ``layers/csrc/shuffle_kernels.h``) against torch: values exactly for every group count the kernel
specializes (2-4) and the general loop, dtypes of 1-8 bytes, NaN/inf bits, unbatched and 1-d rows, gradients,
vmap and jvp, errors.

Runs in both backend variants (``tests/layers/conftest.py``): the native one shuffles natively above
``NATIVE_MIN_ELEMENTS`` (set to 1 here), the pure-MLX one is the reshape-swapaxes-reshape.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from porter.layers import _native
from porter.layers import shuffle as shuffle_module
from porter.layers.functional import channel_shuffle

TORCH_DTYPES = {mx.float32: torch.float32, mx.float16: torch.float16, mx.bfloat16: torch.bfloat16,
                mx.float64: torch.float64, mx.int32: torch.int32, mx.uint8: torch.uint8, mx.int64: torch.int64}


@pytest.fixture(autouse=True)
def _small_inputs_native(monkeypatch):
    monkeypatch.setattr(shuffle_module, "NATIVE_MIN_ELEMENTS", 1)


def _nchw(shape_nhwc, dtype, seed=0):
    """A torch (N, C, *S) tensor and the same values as MLX (N, *S, C)."""
    gen = torch.Generator().manual_seed(seed)
    n, *spatial, c = shape_nhwc
    t = (torch.randn((n, c, *spatial), generator=gen, dtype=torch.float64) * 50).to(TORCH_DTYPES[dtype])
    a = t.movedim(1, -1).contiguous()
    arr = mx.array(a.double().numpy(), dtype=mx.float64) if dtype == mx.float64 else \
        mx.array(a.double().numpy().astype(np.float32)).astype(dtype)
    return t, arr


def _to_nhwc(t):
    return t.movedim(1, -1).double().numpy()


# (channels-last shape, groups): ShuffleNetV2's 2 groups at its widths, 3 and 4 (specialized), 5 and 6 (general
# loop), groups == C, one group, odd sizes
CASES = [((2, 7, 9, 116), 2), ((1, 5, 3, 232), 2), ((3, 4, 5, 12), 3), ((2, 3, 3, 20), 4), ((1, 6, 5, 35), 5),
         ((2, 3, 4, 24), 6), ((1, 3, 3, 7), 7), ((2, 2, 3, 9), 1), ((4, 2, 10), 2)]


@pytest.mark.parametrize("shape, groups", CASES)
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16, mx.float64, mx.int32, mx.uint8, mx.int64])
def test_channel_shuffle_matches_torch_exactly(shape, groups, dtype):
    t, x = _nchw(shape, dtype)
    expected = F.channel_shuffle(t, groups)
    got = channel_shuffle(x, groups)
    assert got.dtype == dtype and tuple(got.shape) == tuple(x.shape)
    np.testing.assert_array_equal(np.array(got.astype(mx.float64)), _to_nhwc(expected))


def test_channel_shuffle_keeps_nan_and_inf_bits():
    t, x = _nchw((2, 4, 4, 10), mx.float32)
    t[0, 1, 2, 3], t[1, 6, 0, 0], t[1, 9, 3, 1] = float("nan"), float("inf"), -float("inf")
    x = mx.array(t.movedim(1, -1).contiguous().numpy())
    np.testing.assert_array_equal(np.array(channel_shuffle(x, 2)), _to_nhwc(F.channel_shuffle(t, 2)))


def test_channel_shuffle_unbatched_and_rows():
    t, x = _nchw((1, 5, 6, 12), mx.float32)
    np.testing.assert_array_equal(np.array(channel_shuffle(x[0], 3)), _to_nhwc(F.channel_shuffle(t, 3))[0])
    row = mx.arange(12)  # one row of 12 channels: [0, 4, 8, 1, 5, 9, ...]
    assert channel_shuffle(row, 3).tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]


@pytest.mark.parametrize("shape, groups", [((2, 5, 7, 58), 2), ((1, 3, 4, 12), 3), ((2, 3, 3, 30), 5)])
def test_channel_shuffle_gradient_matches_torch(shape, groups):
    t, x = _nchw(shape, mx.float32, seed=1)
    t.requires_grad_()
    out = F.channel_shuffle(t, groups)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (out * weight).sum().backward()
    w = mx.array(weight.movedim(1, -1).contiguous().numpy())
    grad = mx.grad(lambda a: (channel_shuffle(a, groups) * w).sum())(x)
    np.testing.assert_array_equal(np.array(grad), _to_nhwc(t.grad))


def test_channel_shuffle_vmap_and_jvp():
    _, x = _nchw((3, 4, 5, 12), mx.float32, seed=3)
    reference = np.stack([np.array(channel_shuffle(x[i], 3)) for i in range(3)])
    np.testing.assert_array_equal(np.array(mx.vmap(lambda a: channel_shuffle(a, 3))(x)), reference)
    _, y = _nchw((3, 4, 5, 6), mx.float32, seed=4)  # mapped along the last axis: the op shuffles axis 2 (of 6)
    by_last = mx.vmap(lambda a: channel_shuffle(a, 2), in_axes=3, out_axes=3)(y.swapaxes(2, 3))
    np.testing.assert_array_equal(np.array(by_last), np.array(channel_shuffle(y, 2).swapaxes(2, 3)))
    _, (tangent,) = mx.jvp(lambda a: channel_shuffle(a, 4), [x], [x * 2])
    np.testing.assert_array_equal(np.array(tangent), np.array(channel_shuffle(x * 2, 4)))


@pytest.mark.native_only
def test_native_kernel_runs(monkeypatch):
    calls = []
    real = _native.channel_shuffle
    monkeypatch.setattr(_native, "channel_shuffle", lambda x, g: calls.append(g) or real(x, g))
    channel_shuffle(mx.zeros((2, 8, 8, 16)), 2)
    assert calls == [2]
    with pytest.raises(ValueError, match=r"\[porter.channel_shuffle\] groups must divide the last dim"):
        real(mx.zeros((2, 9)), 2)


@pytest.mark.parametrize(
    "x, groups, message",
    [
        (mx.zeros((2, 3, 6)), 4, "'groups' \\(4\\) must divide the 6 channels"),
        (mx.zeros((2, 6)), 0, "'groups' must be a positive int"),
        (mx.zeros((2, 6)), 2.0, "'groups' must be a positive int"),
        (mx.zeros((2, 6)), True, "'groups' must be a positive int"),
        (mx.array(1.0), 1, "'x' must be an mx.array with at least one dim"),
    ],
)
def test_channel_shuffle_rejects_bad_arguments(x, groups, message):
    with pytest.raises(ValueError, match=r"\[channel_shuffle\] " + message):
        channel_shuffle(x, groups)
