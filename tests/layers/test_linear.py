"""porter.layers.Linear / functional.linear against torch's nn.Linear / F.linear, on both backends (the conftest
runs every test with the native kernels on and off): the native paths take float32 inputs with one row, or many rows
with in_features <= SMALL_K_MAX (the short-K GEMM: tiles of 6 rows x two vectors of outputs, so odd row and output
counts leave partial tiles)."""

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import Linear
from porter.layers import _native
from porter.layers import linear as linear_module
from porter.layers.functional import linear


@pytest.fixture()
def few_rows(monkeypatch):
    """The short-K GEMM for 2 rows and up (its thresholds are sized for speed; the kernel's tiles are what is
    tested here)."""
    monkeypatch.setattr(linear_module, "SMALL_K_MIN_ROWS", 2)
    monkeypatch.setattr(linear_module, "SMALL_K_LONG_ROWS", 2)


def _torch_linear(k, o, bias):
    layer = torch.nn.Linear(k, o, bias=bias)
    with torch.no_grad():
        if bias:
            layer.bias.uniform_(-1, 1)  # away from torch's small init so a dropped bias shows
    return layer


def _port(layer):
    ported = Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    ported.weight = mx.array(layer.weight.detach().numpy())
    if layer.bias is not None:
        ported.bias = mx.array(layer.bias.detach().numpy())
    return ported


# K not a multiple of the kernel's 16 lanes, O not a multiple of its 4-row blocks, leading dims of size 1, many rows;
# short K (<= 128, with the row thresholds lowered): rows not a multiple of 6, outputs not of 16, K = 1, 3, 95, 96,
# 97, 128; K = 129 and 384 into few outputs (the long-K rule); K = 385 and 200 -> 130 (MLX's addmm)
@pytest.mark.parametrize("shape,o,bias", [((1, 37), 13, True), ((1, 1, 1000), 1001, True), ((37,), 6, False),
                                          ((1, 2048), 1000, True), ((3, 37), 13, True), ((2, 5, 40), 7, False),
                                          ((37, 96), 288, True), ((5, 7, 1), 17, True), ((2, 13, 3), 40, False),
                                          ((23, 95), 33, True), ((19, 97), 1, True), ((4, 6, 128), 70, True),
                                          ((2, 96), 16, True), ((61, 96), 384, False), ((3, 129), 5, True),
                                          ((7, 384), 96, True), ((3, 385), 5, True), ((4, 200), 130, False)])
def test_linear_matches_torch_with_gradients(shape, o, bias, few_rows):
    layer = _torch_linear(shape[-1], o, bias)
    x = torch.randn(*shape, requires_grad=True)
    y = layer(x)
    g = torch.randn_like(y)
    y.backward(g)
    ported = _port(layer)
    xm = mx.array(x.detach().numpy())
    out = ported(xm)
    assert out.shape == tuple(y.shape) and out.dtype == mx.float32
    np.testing.assert_allclose(np.array(out), y.detach().numpy(), rtol=1e-5, atol=1e-5)

    def loss(params, xin):
        ported.update(params)
        return (ported(xin) * mx.array(g.numpy())).sum()

    grads, dx = mx.grad(loss, argnums=(0, 1))(ported.trainable_parameters(), xm)
    np.testing.assert_allclose(np.array(dx), x.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(grads["weight"]), layer.weight.grad.numpy(), rtol=1e-5, atol=1e-5)
    if bias:
        np.testing.assert_allclose(np.array(grads["bias"]), layer.bias.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_one_row_takes_the_native_kernel(backend, monkeypatch):
    calls = []
    if _native.available():
        real = _native.kernels()

        class Spy:
            def __getattr__(self, name):
                if name == "small_linear":
                    calls.append(name)
                return getattr(real, name)

        monkeypatch.setattr(_native, "kernels", lambda: Spy())
    w, b = mx.random.normal((5, 33)), mx.random.normal((5,))
    linear(mx.random.normal((1, 33)), w, b)
    assert calls == (["small_linear"] if backend == "native" else [])
    linear(mx.random.normal((2, 33)), w, b)  # more rows: MLX's addmm
    linear(mx.random.normal((1, 33)).astype(mx.float16), w.astype(mx.float16))  # float16: MLX's
    assert len(calls) == (1 if backend == "native" else 0)


def test_short_k_rows_take_the_native_gemm(backend, monkeypatch):
    calls = []
    if _native.available():
        real = _native.kernels()

        class Spy:
            def __getattr__(self, name):
                calls.append(name)
                return getattr(real, name)

        monkeypatch.setattr(_native, "kernels", lambda: Spy())
    w, b = mx.random.normal((50, 96)), mx.random.normal((50,))
    x = mx.random.normal((3, 100, 96))  # 300 rows: over SMALL_K_MIN_ROWS
    y = linear(x, w, b)
    np.testing.assert_allclose(np.array(y), np.array(mx.addmm(b, x, w.T)), rtol=1e-5, atol=1e-5)
    assert calls == (["small_k_linear"] if backend == "native" else [])
    linear(mx.random.normal((300, 129)), mx.random.normal((5, 129)))  # K past SMALL_K_MAX, rows < 2048: BLAS
    linear(mx.random.normal((20, 96)), w, b)  # 20 rows: BLAS
    linear(x.astype(mx.float16), w.astype(mx.float16), b.astype(mx.float16))  # float16: MLX's
    monkeypatch.setattr(linear_module, "SMALL_K", False)  # the switch: the BLAS node
    linear(x, w, b)
    assert calls == (["small_k_linear"] + ["blas_linear"] * 3 if backend == "native" else [])


@pytest.mark.parametrize("rows", [1, 13], ids=["one row", "short-K GEMM"])
def test_nan_and_inf_propagate_like_torch(rows, few_rows):
    layer = _torch_linear(40, 19, True)
    x = torch.randn(rows, 40)
    x[0, 3], x[0, 17] = float("nan"), float("inf")
    x[rows - 1, 5] = float("-inf")
    x[rows // 2, 7] = 3e38  # products overflow to inf in a few outputs
    with torch.no_grad():
        layer.weight[2].zero_()  # inf * 0 = nan in that output as in torch
        ref = layer(x).numpy()
    out = np.array(_port(layer)(mx.array(x.numpy())))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(ref))
    np.testing.assert_array_equal(np.sign(out[np.isinf(out)]), np.sign(ref[np.isinf(ref)]))
    finite = np.isfinite(ref)
    if finite.any():  # (one row: the NaN reaches every output)
        np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-4, atol=1e-4 * np.abs(ref[finite]).max())


def test_bad_arguments_name_them():
    with pytest.raises(ValueError, match=r"\[linear\] 'weight' must be"):
        linear(mx.zeros((1, 3)), mx.zeros((3,)))
    with pytest.raises(ValueError, match=r"\[linear\] 'input' must end in in_features=4"):
        linear(mx.zeros((1, 3)), mx.zeros((2, 4)))


@pytest.mark.parametrize("rows", [1, 9], ids=["one row", "short-K GEMM"])
def test_vmap_and_compile(rows, few_rows):
    w, b = mx.random.normal((6, 20)), mx.random.normal((6,))
    xs = mx.random.normal((4, rows, 20))
    expected = mx.stack([x @ w.T + b for x in xs])
    np.testing.assert_allclose(np.array(mx.vmap(lambda x: linear(x, w, b))(xs)), np.array(expected), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(np.array(mx.compile(linear)(xs[0], w, b)), np.array(expected[0]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_blas_node_matches_torch_with_gradients_vmap_and_its_switch(backend, bias, monkeypatch):
    """Float32 products no other kernel takes are one native node over MLX's BLAS (``linear.BLAS_NODE``): an (..., K)
    input, torch's numbers and gradients for x, weight and bias, MLX's own addmm bit for bit, vmap over the input or
    the weight, and the switch off giving MLX's ops."""
    g = torch.Generator().manual_seed(3)
    tx = torch.randn(2, 3, 7, 40, generator=g, requires_grad=True)
    tw = torch.randn(24, 40, generator=g, requires_grad=True)
    tb = torch.randn(24, generator=g, requires_grad=True) if bias else None
    ty = torch.nn.functional.linear(tx, tw, tb)
    (ty * torch.linspace(-1, 1, 24)).sum().backward()
    x, w = mx.array(tx.detach().numpy()), mx.array(tw.detach().numpy())
    b = mx.array(tb.detach().numpy()) if bias else None
    cot = mx.array(np.linspace(-1, 1, 24, dtype=np.float32))

    def loss(x, w, b):
        return (linear(x, w, b) * cot).sum()

    y = linear(x, w, b)
    assert y.shape == (2, 3, 7, 24)
    np.testing.assert_allclose(np.array(y), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    mlx_own = mx.addmm(b, x, w.T) if bias else x @ w.T
    np.testing.assert_array_equal(np.array(y), np.array(mlx_own))
    grads = mx.grad(loss, argnums=(0, 1, 2) if bias else (0, 1))(x, w, b)
    for got, want in zip(grads, (tx.grad, tw.grad) + ((tb.grad,) if bias else ())):
        np.testing.assert_allclose(np.array(got), want.numpy(), rtol=1e-4, atol=1e-4)
    stacked_w = mx.stack([w, 2 * w])
    by_weight = mx.vmap(lambda v: linear(x, v, b))(stacked_w)
    np.testing.assert_allclose(np.array(by_weight[1]), 2 * np.array(y) - (np.array(b) if bias else 0),
                               rtol=1e-5, atol=1e-4)
    by_input = mx.vmap(lambda v: linear(v, w, b), in_axes=2)(x)
    np.testing.assert_allclose(np.array(by_input), np.array(y).transpose(2, 0, 1, 3), rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(linear_module, "BLAS_NODE", False)
    np.testing.assert_array_equal(np.array(linear(x, w, b)), np.array(y))


@pytest.mark.parametrize("x_shape,w_shape", [((1, 0), (8, 0)), ((300, 0), (8, 0)), ((1, 1, 0), (4, 0)),
                                              ((1, 16), (0, 16)), ((300, 16), (0, 16)), ((2, 0, 16), (8, 16))])
@pytest.mark.parametrize("bias", [True, False])
def test_empty_products_match_torch(x_shape, w_shape, bias, few_rows):
    """Zero-size dims (session 18, a crafted weight of in_features 0 in a graph.json): with in_features 0 the
    one-row kernel took every input (its size equals its last dim, 0) and returned memory it never wrote (-1.5e13,
    denormals) where torch gives the bias; out_features 0 on one row was refused; MLX's addmm could not reshape a
    3-d product of in_features 0. Gradients to the bias too."""
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, w_shape[:1]))
    tb = torch.tensor(b, requires_grad=True) if bias else None
    want = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w), tb)
    got = linear(mx.array(x), mx.array(w), mx.array(b) if bias else None)
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(np.array(got), want.detach().numpy())
    if bias and want.numel():
        want.sum().backward()
        grad = mx.grad(lambda bb: linear(mx.array(x), mx.array(w), bb).sum())(mx.array(b))
        np.testing.assert_array_equal(np.array(grad), tb.grad.numpy())
