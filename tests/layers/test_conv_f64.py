"""float64 convolutions and transposed convolutions against torch's float64, to 1e-12: outputs and gradients w.r.t.
input, weight and bias (layers/_conv_f64.py). Includes the configurations MLX's conv refuses in float64 ("unsupported
data type": stride and dilation both > 1, grouped 3-d, depthwise transposed) and a check that float64 never reaches
MLX's conv (float32 inside) or the native kernels. Runs on both backends (the ``backend`` fixture)."""

import random

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.conv_helpers import (
    PORTER_CT_F,
    PORTER_F,
    TORCH_CT_F,
    TORCH_F,
    check_functional,
    check_module,
    check_transpose_module,
    to_mx,
    weight_to_mx,
)
from tests.helpers import check_against_torch

import porter.layers as L
from porter.layers import _native
from porter.layers.conv_weights import mlx_conv_transpose_weight_to_torch, torch_conv_transpose_weight_to_mlx

F64 = torch.float64
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")

# ---------------------------------------------------------------------------------------------------- conv
# (nd, input shape in torch layout, in_channels, out_channels, kernel_size, kwargs)
CONV_CASES = [
    (1, (2, 3, 9), 3, 4, 3, {}),
    (1, (2, 3, 10), 3, 4, 4, dict(stride=3)),
    (1, (2, 3, 11), 3, 4, 3, dict(stride=2, dilation=2, padding=1)),  # stride and dilation: MLX refuses float64
    (1, (2, 4, 9), 4, 6, 3, dict(groups=2, stride=2, dilation=3, padding=2)),
    (1, (2, 4, 9), 4, 8, 3, dict(groups=4, padding=1)),  # depthwise, multiplier 2
    (1, (2, 3, 8), 3, 5, 4, dict(padding="same", dilation=2)),
    (1, (2, 3, 8), 3, 5, 5, dict(padding="valid", bias=False)),
    (1, (3, 9), 3, 4, 3, dict(padding=2, padding_mode="reflect")),  # unbatched
    (1, (2, 3, 9), 3, 4, 3, dict(padding=9, padding_mode="circular", stride=2)),
    (1, (2, 5, 7), 5, 6, 1, dict(stride=2)),  # 1x1: the float32 path's matmul shortcut
    (2, (2, 3, 7, 9), 3, 4, 3, {}),
    (2, (2, 3, 7, 9), 3, 4, (3, 2), dict(stride=(2, 3), padding=(1, 0), dilation=(2, 2))),
    (2, (2, 3, 8, 7), 3, 4, (4, 3), dict(padding="same", dilation=(1, 2))),
    (2, (2, 6, 7, 7), 6, 9, 3, dict(groups=3, padding=1, stride=2, dilation=2)),
    (2, (2, 4, 9, 8), 4, 4, 3, dict(groups=4, stride=2, padding=1)),  # depthwise
    (2, (1, 3, 9, 8), 3, 6, 3, dict(groups=3, dilation=2, stride=(1, 2))),  # depthwise, multiplier 2
    (2, (2, 3, 7, 9), 3, 4, 3, dict(padding=(2, 1), padding_mode="replicate", stride=2, bias=False)),
    (2, (2, 3, 6, 7), 3, 4, (2, 4), dict(padding="same", padding_mode="circular")),
    (2, (3, 7, 9), 3, 4, 3, dict(padding=1, stride=2, padding_mode="reflect")),  # unbatched
    (2, (2, 16, 8, 8), 16, 16, 3, dict(padding=1)),  # a 3x3 conv the float32 path sends to Winograd
    (2, (2, 8, 5, 6), 8, 16, 1, {}),
    (3, (1, 2, 5, 6, 7), 2, 3, 3, {}),
    (3, (2, 2, 5, 6, 7), 2, 3, 3, dict(stride=(1, 2, 2), padding=(0, 1, 1), dilation=(2, 1, 2))),
    (3, (1, 4, 5, 5, 5), 4, 6, 3, dict(groups=2, padding=1, stride=2)),  # grouped 3-d
    (3, (1, 4, 5, 6, 5), 4, 4, (3, 2, 3), dict(groups=4, dilation=2, padding=(2, 0, 1))),  # depthwise 3-d
    (3, (2, 5, 6, 7), 2, 3, (2, 3, 2), dict(padding="same", padding_mode="reflect")),  # unbatched
]


@pytest.mark.parametrize("nd, x_shape, cin, cout, k, kwargs", CONV_CASES)
def test_conv_float64_module(nd, x_shape, cin, cout, k, kwargs):
    check_module(nd, x_shape, cin, cout, k, dtype=F64, seed=3, **kwargs)


@pytest.mark.parametrize("size", [(10, 11), (13, 6)])
def test_conv_float64_second_input_size(size):
    """The same layer at sizes that do not divide the stride evenly."""
    check_module(2, (2, 4, *size), 4, 6, 3, dtype=F64, stride=(2, 3), dilation=(2, 1), padding=1, groups=2)


@pytest.mark.parametrize(
    "nd, x_shape, w_shape, bias, args",
    [
        (1, (2, 4, 9), (6, 2, 3), True, dict(stride=2, padding=1, dilation=2, groups=2)),
        (1, (4, 9), (6, 4, 2), False, dict(padding="same", dilation=2)),
        (2, (2, 3, 6, 7), (5, 3, 4, 2), False, dict(padding="same")),
        (2, (3, 6, 7), (6, 1, 3, 3), True, dict(stride=2, dilation=2, groups=3)),
        (3, (1, 2, 5, 6, 7), (4, 2, 3, 2, 3), True, dict(stride=(1, 2, 1), dilation=(1, 1, 2), padding=1)),
        (3, (1, 4, 4, 5, 6), (4, 2, 2, 3, 2), False, dict(padding="same", groups=2)),
    ],
)
def test_conv_float64_functional(nd, x_shape, w_shape, bias, args):
    check_functional(nd, x_shape, w_shape, bias, args, dtype=F64)


# ---------------------------------------------------------------------------------------------------- transposed
TRANSPOSE_CASES = [
    (1, (2, 3, 5), 3, 4, 3, {}),
    (1, (2, 3, 6), 3, 4, 3, dict(stride=3, padding=1, output_padding=2)),
    (1, (2, 3, 5), 3, 4, 3, dict(dilation=2, output_padding=1)),  # output_padding < dilation, stride 1
    (1, (2, 3, 7), 3, 4, 2, dict(padding=3)),  # padding > d*(k-1): a crop
    (1, (2, 4, 5), 4, 8, 3, dict(groups=4, stride=2, output_padding=1)),  # depthwise
    (1, (2, 5, 7), 5, 6, 3, dict(stride=3, dilation=2, padding=2)),
    (1, (3, 5), 3, 4, 3, dict(stride=2, padding=1, bias=False)),  # unbatched
    (1, (2, 3, 5), 3, 4, 3, dict(stride=2, dilation=3, output_padding=2)),  # output_padding >= stride, < dilation
    (2, (2, 3, 4, 5), 3, 4, 3, dict(stride=(2, 3), padding=1, output_padding=(1, 2))),
    (2, (2, 6, 4, 4), 6, 9, 3, dict(groups=3, stride=2, padding=1, output_padding=1)),
    (2, (2, 4, 4, 5), 4, 4, 3, dict(groups=4, dilation=2)),  # depthwise with dilation
    (2, (2, 4, 4, 5), 4, 4, 3, dict(groups=4, stride=2, padding=1)),  # depthwise, strided
    (2, (2, 3, 3, 3), 3, 4, 5, dict(stride=3, padding=2, dilation=2, output_padding=2)),
    (2, (1, 3, 5, 5), 3, 2, 3, dict(padding=(3, 0))),
    (2, (2, 3, 4, 5), 3, 4, 2, dict(stride=2)),  # kernel == stride: the float32 path's patch expansion
    (2, (3, 4, 5), 3, 4, 3, dict(stride=2, padding=1, dilation=(1, 2))),  # unbatched
    (3, (1, 2, 3, 4, 3), 2, 3, (2, 3, 2), dict(stride=(2, 1, 2), padding=(0, 1, 1), output_padding=(1, 0, 0))),
    (3, (1, 4, 3, 3, 3), 4, 6, 3, dict(groups=2, stride=2, padding=1)),
    (3, (1, 4, 3, 3, 3), 4, 4, 2, dict(groups=4, dilation=2, stride=2, bias=False)),
    (3, (2, 3, 3, 4), 2, 3, 3, dict(padding=1, stride=2, output_padding=1)),  # unbatched
]


@pytest.mark.parametrize("nd, x_shape, cin, cout, k, kwargs", TRANSPOSE_CASES)
def test_conv_transpose_float64_module(nd, x_shape, cin, cout, k, kwargs):
    check_transpose_module(nd, x_shape, cin, cout, k, dtype=F64, seed=4, **kwargs)


def test_conv_transpose_float64_output_size():
    check_transpose_module(2, (2, 3, 4, 5), 3, 4, 3, dtype=F64, output_size=(8, 14), stride=(2, 3), padding=1)


@pytest.mark.parametrize(
    "nd, x_shape, w_shape, bias, groups, args",
    [
        # torch weight (C_in, C_out/groups, *k); args in torch's order:
        # stride, padding, output_padding, groups, dilation
        (1, (2, 4, 5), (4, 3, 3), True, 2, (2, 1, 1, 2, 2)),
        (2, (2, 4, 4, 5), (4, 1, 3, 3), True, 4, ((2, 1), (1, 0), (1, 0), 4, 1)),
        (2, (3, 4, 5), (3, 5, 2, 4), False, 1, (2, (0, 3), 0, 1, (1, 2))),
        (3, (1, 4, 3, 3, 3), (4, 2, 3, 3, 3), True, 2, (2, 1, 1, 2, 1)),
    ],
)
def test_conv_transpose_float64_functional(nd, x_shape, w_shape, bias, groups, args):
    torch.manual_seed(5)
    x = torch.randn(x_shape, dtype=F64)
    w = torch.randn(w_shape, dtype=F64, requires_grad=True)
    b = torch.randn(w_shape[1] * groups, dtype=F64, requires_grad=True) if bias else None
    w_m = weight_to_mx(torch_conv_transpose_weight_to_mlx(w.detach().numpy(), groups), F64)
    params = {"weight": (w, w_m, lambda g: mlx_conv_transpose_weight_to_torch(g, groups))}
    if bias:
        params["bias"] = (b, to_mx(b), None)
    check_against_torch(
        lambda xt: TORCH_CT_F[nd](xt, w, b, *args),
        lambda xm, p: PORTER_CT_F[nd](xm, p["weight"], p.get("bias"), *args),
        x,
        nd=nd,
        params=params,
    )


# ---------------------------------------------------------------------------------------------------- non-finite
@pytest.mark.parametrize("transposed", [False, True])
def test_float64_nan_and_inf_land_where_torch_puts_them(transposed):
    torch.manual_seed(6)
    x = torch.randn(2, 4, 7, 8, dtype=F64)
    # odd positions: the strided, dilated conv below reads only those
    x[0, 1, 3, 3], x[1, 0, 5, 1], x[1, 3, 1, 5] = float("nan"), float("inf"), -float("inf")
    if transposed:
        w = torch.randn(4, 3, 3, 3, dtype=F64)
        args = (2, 1, 1, 1, 1)
        torch_fn, porter_fn = TORCH_CT_F[2], PORTER_CT_F[2]
        w_m = weight_to_mx(torch_conv_transpose_weight_to_mlx(w.numpy()), F64)
    else:
        w = torch.randn(6, 2, 3, 3, dtype=F64)
        args = (2, 1, 2, 2)  # stride, padding, dilation, groups
        torch_fn, porter_fn = TORCH_F[2], PORTER_F[2]
        w_m = weight_to_mx(np.moveaxis(w.numpy(), 1, -1), F64)
    want = torch_fn(x, w, None, *args)
    got = np.moveaxis(np.array(porter_fn(mx.array(np.moveaxis(x.numpy(), 1, -1), dtype=mx.float64), w_m, None,
                                          *args)), -1, 1)
    assert got.dtype == np.float64
    assert np.isnan(want.numpy()).any() and np.isinf(want.numpy()).any()  # the case is not vacuous
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12, equal_nan=True)


# ---------------------------------------------------------------------------------------------------- dispatch
def test_float64_never_reaches_mlx_conv_or_the_native_kernels(monkeypatch):
    """MLX's conv computes float64 in float32 and the native kernels are float32 kernels: float64 takes neither."""
    calls = []

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(mx, "conv_general", spy("mx.conv_general", mx.conv_general))
    for name in ("depthwise_conv", "winograd_conv3x3"):
        monkeypatch.setattr(_native, name, spy(name, getattr(_native, name)))
    x = mx.random.normal((2, 9, 9, 16)).astype(mx.float64)
    convs = [
        L.Conv2d(16, 16, 3, padding=1),  # Winograd-sized in float32
        L.Conv2d(16, 16, 3, groups=16, stride=2),  # depthwise
        L.Conv2d(16, 8, 3, stride=2, dilation=2),
        L.ConvTranspose2d(16, 8, 3, stride=2),
        L.ConvTranspose2d(16, 16, 3, groups=16, dilation=2),
    ]
    for conv in convs:
        conv.set_dtype(mx.float64)

        def loss(params, a):
            conv.update(params)
            return (conv(a) ** 2).sum()

        out, (g_params, g_x) = mx.value_and_grad(loss, argnums=(0, 1))(conv.trainable_parameters(), x)
        mx.eval(out, g_params, g_x)
        assert out.dtype == g_x.dtype == g_params["weight"].dtype == g_params["bias"].dtype == mx.float64
    assert calls == []


def test_float64_conv_under_compile_vmap_and_second_order_grad():
    """Plain MLX ops: ``mx.compile`` and ``mx.vmap`` give the eager numbers; the double backward matches torch's."""
    torch.manual_seed(7)
    x = torch.randn(3, 2, 4, 9, 8, dtype=F64)  # vmapped axis first: 3 batches of (2, 4, 9, 8)
    w = torch.randn(6, 2, 3, 3, dtype=F64)  # groups=2
    args = (2, 1, 2, 2)
    xm = mx.array(np.moveaxis(x.numpy(), 2, -1), dtype=mx.float64)
    wm = weight_to_mx(np.moveaxis(w.numpy(), 1, -1), F64)
    conv = lambda a, b: PORTER_F[2](a, b, None, *args)
    eager = conv(xm[0], wm)
    np.testing.assert_array_equal(np.array(mx.compile(conv)(xm[0], wm)), np.array(eager))
    want = torch.stack([TORCH_F[2](x[i], w, None, *args) for i in range(3)])
    got = np.moveaxis(np.array(mx.vmap(conv, in_axes=(0, None))(xm, wm)), -1, 2)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
    # d/dw of sum((d/dx sum(conv(x, w)^2))^2): second order through both operands
    xt, wt = x[0].clone().requires_grad_(), w.clone().requires_grad_()
    (gx,) = torch.autograd.grad((TORCH_F[2](xt, wt, None, *args) ** 2).sum(), xt, create_graph=True)
    (gw_t,) = torch.autograd.grad((gx ** 2).sum(), wt)
    inner = mx.grad(lambda a, b: (conv(a, b) ** 2).sum())
    gw = mx.grad(lambda b: (inner(xm[0], b) ** 2).sum())(wm)
    np.testing.assert_allclose(np.moveaxis(np.array(gw), -1, 1), gw_t.numpy(), rtol=1e-12, atol=1e-12)


def test_float64_zero_batch():
    conv = L.Conv2d(3, 4, 3, stride=2, dilation=2)
    conv.set_dtype(mx.float64)
    out = conv(mx.zeros((0, 9, 9, 3), dtype=mx.float64))
    assert out.shape == (0, 3, 3, 4) and out.dtype == mx.float64


# ---------------------------------------------------------------------------------------------------- sweep
def _random_config(rng: random.Random, transposed: bool):
    nd = rng.choice([1, 1, 2, 2, 3])
    groups = rng.choice([1, 1, 2, 3])
    cin = groups * rng.randint(1, 2)
    cout = groups * rng.randint(1, 2)
    k = tuple(rng.randint(1, 3) for _ in range(nd))
    s = tuple(rng.randint(1, 3) for _ in range(nd))
    d = tuple(rng.choice([1, 1, 2]) for _ in range(nd))
    p = tuple(rng.randint(0, 2) for _ in range(nd))
    batch = rng.choice([None, 1, 2])
    if transposed:
        op = tuple(rng.randint(0, max(a, b) - 1) for a, b in zip(s, d))
        # the shortest input with a non-empty output, plus 0-3
        least = [max(1, -(-(2 * pp - dd * (kk - 1) - oo) // ss) + 1) for pp, dd, kk, oo, ss in zip(p, d, k, op, s)]
        size = tuple(m + rng.randint(0, 3) for m in least)
        kwargs = dict(stride=s, padding=p, output_padding=op, dilation=d, groups=groups, bias=rng.random() < 0.8)
    else:
        mode = rng.choice(["zeros", "zeros", "reflect", "replicate", "circular"])
        ext = [dd * (kk - 1) + 1 for kk, dd in zip(k, d)]
        size = tuple(max(e - 2 * pp, pp + 1, 1) + rng.randint(0, 3) for e, pp in zip(ext, p))
        kwargs = dict(stride=s, padding=p, dilation=d, groups=groups, bias=rng.random() < 0.8, padding_mode=mode)
    x_shape = ((batch,) if batch else ()) + (cin,) + size
    return nd, x_shape, cin, cout, k, kwargs


@pytest.mark.parametrize("transposed", [False, True])
def test_float64_random_sweep(transposed):
    rng = random.Random(64 + transposed)
    check = check_transpose_module if transposed else check_module
    for i in range(40):
        nd, x_shape, cin, cout, k, kwargs = _random_config(rng, transposed)
        try:
            check(nd, x_shape, cin, cout, k, dtype=F64, seed=i, **kwargs)
        except AssertionError as e:
            raise AssertionError(f"config {i}: nd={nd} x={x_shape} cin={cin} cout={cout} k={k} {kwargs}: {e}") from e
