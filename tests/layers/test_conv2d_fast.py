"""The fast 2-d conv gradients of layers/_conv_grads.py against torch: the natively flipped kernel of stride-1 input
gradients (Winograd's VJP, the MLX-conv stride-1 path, strided convs' folded conv), the im2col weight gradient of
strided convs, the blocked Winograd weight transform; forward and both gradients, odd sizes, padding wider than the
kernel, groups, batch > 1, a second input size, float16/bfloat16/float64 routing, NaN. Both backends (conftest)."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import porter.layers._conv_engine as conv_module
import porter.layers.functional as PF
from porter.layers import _conv_grads, _native
from tests.helpers import assert_close

_TOL = {torch.float32: (2e-4, 2e-4), torch.float64: (1e-10, 1e-10), torch.float16: (3e-2, 3e-2),
        torch.bfloat16: (1.5e-1, 5e-2)}
_MX = {torch.float32: mx.float32, torch.float64: mx.float64, torch.float16: mx.float16, torch.bfloat16: mx.bfloat16}


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


def _check(x_shape, c_out, k, *, stride=1, padding=0, groups=1, dtype=torch.float32, seed=0, nan_at=None):
    """Forward, input and weight gradient of PF.conv2d against torch's F.conv2d (cotangent random, not ones)."""
    g = torch.Generator().manual_seed(seed)
    kh, kw = (k, k) if isinstance(k, int) else k
    x = torch.randn(*x_shape, generator=g, dtype=torch.float64)
    if nan_at is not None:
        x[nan_at] = float("nan")
    w = torch.randn(c_out, x_shape[1] // groups, kh, kw, generator=g, dtype=torch.float64) * 0.3
    x, w = x.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
    y = TF.conv2d(x, w, stride=stride, padding=padding, groups=groups)
    cot = torch.randn(y.shape, generator=g, dtype=torch.float64).to(dtype)
    y.backward(cot)

    xm = mx.array(_np(x).transpose(0, 2, 3, 1), dtype=mx.float64).astype(_MX[dtype])  # exact: dtype's values
    wm = mx.array(_np(w).transpose(0, 2, 3, 1), dtype=mx.float64).astype(_MX[dtype])
    cm = mx.array(_np(cot).transpose(0, 2, 3, 1), dtype=mx.float64).astype(_MX[dtype])

    def f(xm, wm):
        return PF.conv2d(xm, wm, stride=stride, padding=padding, groups=groups)

    ym, (gx, gw) = mx.vjp(f, [xm, wm], [cm])
    ym, gx, gw = ym[0], gx, gw
    assert ym.dtype == _MX[dtype] and gx.dtype == _MX[dtype] and gw.dtype == _MX[dtype]
    atol, rtol = _TOL[dtype]
    scale = max(1.0, float(np.nanmax(np.abs(_np(w.grad)))))  # weight gradients sum many products
    assert_close(np.array(ym.astype(mx.float64)).transpose(0, 3, 1, 2), _np(y), atol=atol, rtol=rtol, what="output")
    assert_close(np.array(gx.astype(mx.float64)).transpose(0, 3, 1, 2), _np(x.grad), atol=atol, rtol=rtol,
                 what="input grad")
    assert_close(np.array(gw.astype(mx.float64)).transpose(0, 3, 1, 2), _np(w.grad), atol=atol * scale,
                 rtol=rtol, what="weight grad")


# ------------------------------------------------------------------------------------------------ the paths taken
class _Count:
    def __init__(self, monkeypatch, module, name):
        self.calls = 0
        real = getattr(module, name)

        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, call)


def test_gradients_take_the_fast_paths(monkeypatch, backend):
    """With the kernels: the flipped kernel is native, strided weight gradients are the im2col GEMM; without, the
    conv still differentiates (pure-MLX flip, MLX's gradients)."""
    flips = _Count(monkeypatch, _native, "flip_conv_weight")
    im2col = _Count(monkeypatch, _conv_grads, "weight_grad_im2col")
    phases = []
    strided = _conv_grads.input_grad_strided
    monkeypatch.setattr(_conv_grads, "input_grad_strided", lambda *a: phases.append(strided(*a)) or phases[-1])
    _check((2, 16, 9, 11), 24, 3, stride=2, padding=1)  # by phases
    _check((1, 8, 5, 6), 12, 3, padding=1)  # 9 tiles: not Winograd, MLX-conv stride-1 path
    _check((2, 3, 11, 10), 8, 5, stride=2, padding=2)  # 3 input channels: the folded conv's input gradient
    expected = (3, 2, [True, False]) if backend == "native" else (0, 0, [])
    assert (flips.calls, im2col.calls, [p is not None for p in phases]) == expected


# ------------------------------------------------------------------------------------------------ stride 1
@pytest.mark.parametrize("x_shape, c_out, k, padding", [
    ((2, 16, 11, 13), 24, 3, 1),      # Winograd (2*6*7 tiles), odd sizes, batch 2
    ((1, 32, 14, 14), 16, 3, 1),      # Winograd, a second size
    ((1, 24, 7, 7), 20, 3, 1),        # 16 tiles: MLX's conv forward, native-flip input gradient
    ((3, 5, 6, 9), 7, 3, 0),          # few channels, no padding
    ((2, 6, 8, 7), 4, (2, 4), (1, 2)),  # non-square kernel
    ((2, 6, 8, 7), 5, (2, 4), "same"),  # even kernel: lo != hi
    ((1, 4, 6, 6), 5, 3, 4),          # padding wider than the kernel: cropped cotangent in the input gradient
    ((2, 4, 9, 10), 6, 1, 0),         # 1x1 (matmul path)
])
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # torch's note on its own copy
def test_stride1_gradients(x_shape, c_out, k, padding):
    _check(x_shape, c_out, k, padding=padding)


def test_stride1_winograd_every_size(monkeypatch):
    """Winograd on every size (its VJP's input gradient is a Winograd conv with the natively flipped kernel)."""
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_TILES", 1)
    monkeypatch.setattr(conv_module, "WINOGRAD_MIN_CHANNELS", 1)
    for shape in [(1, 3, 5, 4), (2, 17, 7, 9)]:
        _check(shape, 19, 3, padding=1, seed=shape[1])
    _check((1, 8, 6, 7), 8, 3, padding=2)  # padding 2: input gradient padded 0


# ------------------------------------------------------------------------------------------------ strided
@pytest.mark.parametrize("x_shape, c_out, k, stride, padding", [
    ((2, 16, 9, 11), 24, 3, 2, 1),      # ResNet's downsampling 3x3, odd sizes
    ((1, 16, 14, 14), 32, 3, 2, 1),     # a second size
    ((2, 3, 23, 21), 8, 7, 2, 3),       # the stem: 7x7 / 2
    ((1, 5, 10, 13), 6, 3, (2, 3), (0, 1)),  # per-dim stride and padding, trailing input unread
    ((2, 6, 9, 9), 4, (3, 2), 3, 0),    # stride larger than the kernel
    ((1, 16, 10, 13), 6, 3, (2, 3), (0, 1)),  # the same through the sub-pixel phases (>= 16 input channels)
    ((2, 16, 9, 9), 4, (3, 2), 3, 0),
    ((1, 16, 8, 8), 8, 3, 2, (2, 0)),   # wide padding before: transposed conv's padding 2, extra output padding
])
def test_strided_gradients(x_shape, c_out, k, stride, padding):
    _check(x_shape, c_out, k, stride=stride, padding=padding)


@pytest.mark.parametrize("examples_per_chunk", [1, 2])
def test_strided_weight_gradient_in_chunks(monkeypatch, examples_per_chunk):
    """The weight gradient's im2col over chunks of examples (one each; two, with a remainder of one at batch 3),
    accumulated: the stem's 7x7/s2 on 3 channels and a 3x3/s2 with trailing input no output reads."""
    per_example = {(3, 7): 12 * 11 * 7 * 7 * 3 * 4, (16, 3): 4 * 5 * 3 * 3 * 16 * 4}
    for (c_in, k), x_shape, padding in [((3, 7), (3, 3, 23, 21), 3), ((16, 3), (3, 16, 10, 12), 0)]:
        monkeypatch.setattr(_conv_grads, "WEIGHT_GRAD_COLS_BYTES", examples_per_chunk * per_example[c_in, k])
        _check(x_shape, 8, k, stride=2, padding=padding, seed=examples_per_chunk)


def test_strided_gradient_with_nan():
    _check((1, 8, 9, 9), 8, 3, stride=2, padding=1, nan_at=(0, 3, 4, 4))


# ------------------------------------------------------------------------------------------------ dtypes, groups
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("stride", [1, 2])
def test_dtypes(dtype, stride):
    _check((2, 8, 7, 9), 12, 3, stride=stride, padding=1, dtype=dtype)


@pytest.mark.parametrize("stride", [1, 2])
def test_groups_half(stride):
    """float16 grouped convs (the native grouped kernel is float32/64): grouped flip and folded grouped conv."""
    _check((2, 8, 9, 7), 12, 3, stride=stride, padding=1, groups=2, dtype=torch.float16)


def test_wide_groups_float32():
    """Groups wider than the native grouped kernel takes (MLX's grouped conv, grouped flip in the VJP)."""
    _check((1, 130, 5, 5), 130, 3, padding=1, groups=2)


# ------------------------------------------------------------------------------------------------ the kernels
@pytest.mark.parametrize("shape, groups", [((7, 3, 3, 5), 1), ((12, 3, 5, 4), 3), ((6, 2, 4), 2), ((4, 2, 3, 2, 6), 1)])
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16, mx.float64])
def test_flipped_weight(shape, groups, dtype, backend):
    w = mx.array(np.random.default_rng(1).standard_normal(shape), dtype=mx.float64).astype(dtype)
    nd = len(shape) - 2
    c_out, c_in_g = shape[0], shape[-1]
    ref = np.array(w.astype(mx.float64))[(slice(None),) + (slice(None, None, -1),) * nd]
    ref = ref.reshape(groups, c_out // groups, *shape[1:-1], c_in_g)
    ref = ref.transpose([0, nd + 2] + list(range(2, nd + 2)) + [1]).reshape(groups * c_in_g, *shape[1:-1], -1)
    got = _conv_grads.flipped_weight(w, groups)
    assert got.dtype == dtype and got.shape == ref.shape
    np.testing.assert_array_equal(np.array(got.astype(mx.float64)), ref)
    back = _conv_grads.flipped_weight(got, groups)
    np.testing.assert_array_equal(np.array(back.astype(mx.float64)), np.array(w.astype(mx.float64)))


@pytest.mark.native_only  # the native kernel itself (the pure-MLX flip is checked in test_flipped_weight)
def test_flip_conv_weight_gradients_vmap_and_errors():
    rng = np.random.default_rng(2)
    w = mx.array(rng.standard_normal((6, 3, 2, 4)).astype(np.float32))
    c = mx.array(rng.standard_normal((8, 3, 2, 3)).astype(np.float32))
    gw = mx.grad(lambda w: (_native.flip_conv_weight(w, 2) * c).sum())(w)
    np.testing.assert_array_equal(np.array(gw), np.array(_native.flip_conv_weight(c, 2)))
    jv = mx.jvp(lambda w: _native.flip_conv_weight(w, 2), [w], [w * 2])[1][0]
    np.testing.assert_array_equal(np.array(jv), 2 * np.array(_native.flip_conv_weight(w, 2)))
    ws = mx.array(rng.standard_normal((3, 6, 3, 2, 4)).astype(np.float32))
    mapped = mx.vmap(lambda w: _native.flip_conv_weight(w, 2), in_axes=1)(ws.transpose(1, 0, 2, 3, 4))
    for i in range(3):
        np.testing.assert_array_equal(np.array(mapped[i]), np.array(_native.flip_conv_weight(ws[i], 2)))
    with pytest.raises(ValueError, match="groups"):
        _native.flip_conv_weight(w, 4)
    with pytest.raises(ValueError, match="weight"):
        _native.flip_conv_weight(mx.zeros((3, 4)))


@pytest.mark.native_only
def test_winograd_weight_transform_odd_channels():
    """The blocked transform against G g G^T in float64, channel counts not multiples of its 16-wide blocks."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((19, 3, 3, 37)).astype(np.float32)
    G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    ref = np.einsum("ak,bl,oklc->abco", G, G, w.astype(np.float64)).reshape(16, 37, 19)
    got = np.array(_native.kernels().winograd_weight(mx.array(w), False))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_training_step_matches_torch():
    """A tiny ResNet-style stack (strided 3x3, Winograd 3x3, 1x1) trained one SGD step: same loss and weights."""
    g = torch.Generator().manual_seed(4)
    ws = [torch.randn(16, 3, 3, 3, generator=g) * 0.3, torch.randn(16, 16, 3, 3, generator=g) * 0.1,
          torch.randn(8, 16, 1, 1, generator=g) * 0.2]
    x = torch.randn(2, 3, 17, 15, generator=g)

    def torch_loss(ws):
        h = TF.relu(TF.conv2d(x, ws[0], stride=2, padding=1))
        h = TF.relu(TF.conv2d(h, ws[1], padding=1))
        return (TF.conv2d(h, ws[2]) ** 2).mean()

    tws = [w.clone().requires_grad_() for w in ws]
    loss = torch_loss(tws)
    loss.backward()
    xm = mx.array(x.numpy().transpose(0, 2, 3, 1))

    def mx_loss(ws):
        h = mx.maximum(PF.conv2d(xm, ws[0], stride=2, padding=1), 0)
        h = mx.maximum(PF.conv2d(h, ws[1], padding=1), 0)
        return (PF.conv2d(h, ws[2]) ** 2).mean()

    mws = [mx.array(w.numpy().transpose(0, 2, 3, 1)) for w in ws]
    mloss, grads = mx.value_and_grad(mx_loss)(mws)
    np.testing.assert_allclose(float(mloss), loss.item(), rtol=1e-5)
    for gm, tw in zip(grads, tws):
        np.testing.assert_allclose(np.array(gm).transpose(0, 3, 1, 2), tw.grad.numpy(), rtol=2e-4, atol=2e-5)
