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
