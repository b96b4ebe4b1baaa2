"""The converter's ``MultiheadAttention`` layer (``converters/layer_types.py``) against ``torch.nn.MultiheadAttention``,
run in the test on the same data: both computations (``MHA_PACKED``: the packed in-projection and the previous
three-projection one), both array orders, self/key-is-value/cross attention, with and without biases, odd sizes,
gradients of the input and every parameter, 16-bit dtypes and non-finite inputs."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch

from porter.converters import layer_types
from porter.layers import _native


@pytest.fixture(params=[True, False], ids=["packed", "unpacked"])
def packed(request, monkeypatch):
    monkeypatch.setattr(layer_types, "MHA_PACKED", request.param)
    return request.param


def _pair(e, h, bias=True, batch_first=True, seed=0):
    torch.manual_seed(seed)
    ref = torch.nn.MultiheadAttention(e, h, bias=bias, batch_first=batch_first)
    if bias:
        with torch.no_grad():
            ref.in_proj_bias.uniform_(-0.5, 0.5)
            ref.out_proj.bias.uniform_(-0.5, 0.5)
    layer = layer_types.MultiheadAttention(e, h, bias=bias, batch_first=batch_first)
    layer.load_weights([(k, mx.array(v.detach().numpy())) for k, v in ref.state_dict().items()])
    return ref, layer


def _inputs(kind, n, lq, lk, e, batch_first, seed=1):
    g = torch.Generator().manual_seed(seed)
    shape = (lambda length: (n, length, e)) if batch_first else (lambda length: (length, n, e))
    q = torch.randn(shape(lq), generator=g)
    if kind == "self":
        return (q,), (q, q, q)
    k = torch.randn(shape(lk), generator=g)
    if kind == "key_is_value":
        return (q, k), (q, k, k)
    v = torch.randn(shape(lk), generator=g)
    return (q, k, v), (q, k, v)


CASES = [  # (embed_dim, heads, batch, query length, key length)
    (16, 4, 2, 5, 7),
    (24, 3, 1, 13, 13),   # batch 1, head dim 8, odd length
    (40, 5, 3, 1, 9),     # a single query
]


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
@pytest.mark.parametrize("kind", ["self", "key_is_value", "cross"])
@pytest.mark.parametrize("e,h,n,lq,lk", CASES)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_forward_matches_torch(packed, batch_first, kind, e, h, n, lq, lk, bias):
    ref, layer = _pair(e, h, bias=bias, batch_first=batch_first)
    layer.eval()
    if kind == "self":
        lk = lq
    mine, theirs = _inputs(kind, n, lq, lk, e, batch_first)
    with torch.no_grad():
        want = ref(*theirs, need_weights=False)[0].numpy()
    got = layer(*(mx.array(t.numpy()) for t in mine))
    assert got.shape == want.shape and got.dtype == mx.float32
    np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_gradients_match_torch(packed, batch_first, kind):
    e, h, n, lq, lk = 24, 4, 2, 6, 6 if kind == "self" else 9
    ref, layer = _pair(e, h, batch_first=batch_first, seed=3)
    ref.train()  # dropout 0: train mode only changes the path torch takes
    layer.train()
    mine, theirs = _inputs(kind, n, lq, lk, e, batch_first, seed=4)
    theirs = [t.clone().requires_grad_(True) for t in theirs]
    if kind == "self":
        theirs = [theirs[0]] * 3
    g = torch.randn(ref(*theirs, need_weights=False)[0].shape, generator=torch.Generator().manual_seed(5))
    (ref(*theirs, need_weights=False)[0] * g).sum().backward()

    def loss(params, *xs):
        layer.update(params)
        return (layer(*xs) * mx.array(g.numpy())).sum()

    xs = [mx.array(t.detach().numpy()) for t in mine]
    grads = mx.grad(loss, argnums=list(range(len(xs) + 1)))(layer.trainable_parameters(), *xs)
    params = dict(mnn.utils.tree_flatten(grads[0]))
    for name, tensor in ref.named_parameters():
        np.testing.assert_allclose(np.array(params[name]), tensor.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(np.array(grads[1]), theirs[0].grad.numpy(), rtol=1e-4, atol=1e-5)
    if kind == "cross":
        for mine_grad, t in zip(grads[2:], theirs[1:]):
            np.testing.assert_allclose(np.array(mine_grad), t.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_follows_torch_float32(packed, dtype):
    ref, layer = _pair(32, 4)
    layer.eval()
    layer.set_dtype(getattr(mx, dtype))
    (x,), theirs = _inputs("self", 2, 11, 11, 32, True)
    with torch.no_grad():
        want = ref(*theirs, need_weights=False)[0].numpy()
    got = layer(mx.array(x.numpy()).astype(getattr(mx, dtype)))
    assert got.dtype == getattr(mx, dtype)
    tol = 2e-2 if dtype == "float16" else 8e-2
    np.testing.assert_allclose(np.array(got.astype(mx.float32)), want, rtol=tol, atol=tol)


def test_non_finite_inputs_land_where_torch_puts_them(packed):
    ref, layer = _pair(16, 2)
    layer.eval()
    (x,), _ = _inputs("self", 3, 5, 5, 16, True)
    x[0, 2, 3] = float("nan")
    x[1, 0, 0] = float("inf")
    with torch.no_grad():
        want = ref(x, x, x, need_weights=False)[0].numpy()
    got = np.array(layer(mx.array(x.numpy())))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    assert finite[2].all()  # the untouched example stays finite
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=2e-6)


def _relative_error(got: mx.array, want: torch.Tensor) -> float:
    want = want.detach().numpy()
    return float(np.abs(np.array(got) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("native", [True, False], ids=["native", "mlx_ops"])
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_float64_is_float64_accurate(packed, native, kind):
    """A float64 layer computes in float64: output, input and parameter gradients within 1e-12 (relative to the
    largest) of torch's float64, with the native kernels and with MLX ops only (export mode's path, where MLX's own
    softmax is float32-accurate in float64: 3e-8 off); a float32-accurate step anywhere fails this by 4 orders."""
    e, h, n, lq, lk = 24, 4, 2, 7, 7 if kind == "self" else 10
    ref, layer = _pair(e, h, seed=6)
    ref.double().train()
    layer.set_dtype(mx.float64)
    layer.train()
    mine, theirs = _inputs(kind, n, lq, lk, e, True, seed=7)
    theirs = [t.double().clone().requires_grad_(True) for t in theirs]
    if kind == "self":
        theirs = [theirs[0]] * 3
    out = ref(*theirs, need_weights=False)[0]
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    (out * g).sum().backward()
    gm = mx.array(g.numpy(), dtype=mx.float64)

    def loss(params, *xs):
        layer.update(params)
        return (layer(*xs) * gm).sum()

    xs = [mx.array(t.numpy(), dtype=mx.float64) for t in mine]
    with _native.use_native(native):
        got = layer(*xs)
        grads = mx.grad(loss, argnums=list(range(len(xs) + 1)))(layer.trainable_parameters(), *xs)
    assert got.dtype == mx.float64
    assert _relative_error(got, out) <= 1e-12
    params = dict(mnn.utils.tree_flatten(grads[0]))
    for name, tensor in ref.named_parameters():
        assert _relative_error(params[name], tensor.grad) <= 1e-12, name
    for mine_grad, t in zip(grads[1:], theirs if kind == "cross" else theirs[:1]):
        assert _relative_error(mine_grad, t.grad) <= 1e-12


@pytest.mark.parametrize("native", [True, False], ids=["native", "mlx_ops"])
def test_float64_dropout_is_float64_accurate(packed, native):
    """Training with attention dropout in float64: torch's math (softmax, drop, rescale, @ v) in float64 with the
    mask the layer drew (the same seed, drawn again), to 1e-12: the unpacked path took MLX's float32-accurate
    softmax here."""
    e, h, n, length, p = 16, 2, 2, 9, 0.3
    ref, layer = _pair(e, h, seed=9)
    ref.double()
    layer.dropout = p
    layer.set_dtype(mx.float64)
    layer.train()
    (x,), _ = _inputs("self", n, length, length, e, True, seed=10)
    with _native.use_native(native):
        mx.random.seed(11)
        got = layer(mx.array(x.numpy(), dtype=mx.float64))
    mx.random.seed(11)
    keep = torch.from_numpy(np.array(mx.random.bernoulli(1 - p, (n, h, length, length))))
    xd = x.double()
    q, k, v = torch.nn.functional.linear(xd, ref.in_proj_weight, ref.in_proj_bias).chunk(3, dim=-1)
    q, k, v = (t.reshape(n, length, h, e // h).transpose(1, 2) for t in (q, k, v))
    probs = torch.softmax(q @ k.transpose(-1, -2) / (e // h) ** 0.5, dim=-1) * keep / (1 - p)
    want = ref.out_proj(((probs @ v).transpose(1, 2)).reshape(n, length, e))
    assert _relative_error(got, want) <= 1e-12
