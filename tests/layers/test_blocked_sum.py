"""Sums over many positions as accurate as torch's (layers/_blocked_sum.py): the blocked sum itself against float64,
and the gradients that use it (conv and linear biases, batch norm in training, the pure-MLX norm affines) against
torch's float64 gradients, each within 5x torch's own float32 error, with one-signed cotangents (where one float
accumulator over the whole extent drifts most: MLX's own sum erred ~100x torch's on a 64^3 volume)."""

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch

from porter.layers import BatchNorm2d, Conv3d, GroupNorm, LayerNorm, Linear, RMSNorm, _blocked_sum

RNG = np.random.default_rng(0)


def _rel(a, ref):
    return float(np.abs(np.asarray(a, np.float64) - ref).max() / np.abs(ref).max())


# shape, axes: leading axes, a remainder at every level, a middle run with outer axes (a strided block view)
SUMS = [((4096, 3), (0,)), ((64 * 64 * 3 + 17, 5), (0,)), ((2, 33, 257, 4), (0, 1, 2)), ((3, 70, 90, 2), (1, 2)),
        ((2, 9000), (1,)), ((5, 4100, 3), (1,)), ((2, 4099, 3), (1,))]  # 4099: prime, no block divides it


@pytest.mark.parametrize("shape, axes", SUMS)
@pytest.mark.parametrize("keepdims", [False, True])
def test_blocked_sum_matches_float64(shape, axes, keepdims):
    x = RNG.uniform(0, 1, shape).astype(np.float32)
    exact = x.astype(np.float64).sum(axis=axes, keepdims=keepdims)
    got = _blocked_sum.blocked_sum(mx.array(x), axes, keepdims=keepdims)
    assert got.shape == exact.shape and got.dtype == mx.float32
    assert _rel(got, exact) < 1e-6, _rel(got, exact)


def test_blocked_sum_of_a_transposed_view():
    x = RNG.uniform(0, 1, (6, 9000)).astype(np.float32)
    got = _blocked_sum.blocked_sum(mx.array(x).T, 0)
    assert _rel(got, x.astype(np.float64).sum(axis=1)) < 1e-6


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_types_accumulate_in_float32_and_round_once(dtype):
    x = mx.array(RNG.uniform(0, 1, (20000, 4)).astype(np.float32)).astype(dtype)
    exact = np.array(x.astype(mx.float32)).astype(np.float64).sum(axis=0)
    got = _blocked_sum.blocked_sum(x, 0)
    assert got.dtype == dtype
    rounded = np.array(mx.array(exact.astype(np.float32)).astype(dtype).astype(mx.float32))
    np.testing.assert_array_equal(np.array(got.astype(mx.float32)), rounded)


@pytest.mark.parametrize("shape, dtype", [((4095, 3), mx.float32), ((9000, 3), mx.float64),
                                          ((9000, 3), mx.int32)])
def test_short_extents_float64_and_integers_are_mlxs_own_sum(shape, dtype):
    x = mx.array(RNG.uniform(0, 100, shape)).astype(dtype)
    np.testing.assert_array_equal(np.array(_blocked_sum.blocked_sum(x, 0)), np.array(x.sum(axis=0)))


def _torch_errors(make, x, cotangent, names):
    """torch's float64 gradients (per parameter and for the input) and its float32 error against them."""
    grads = {}
    for dtype in (torch.float64, torch.float32):
        module = make().to(dtype)
        xt = x.to(dtype).clone().requires_grad_()
        (module(xt) * cotangent.to(dtype)).sum().backward()
        grads[dtype] = {**{n: getattr(module, n).grad.double().numpy() for n in names}, "input": xt.grad.double()}
    expected = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in grads[torch.float64].items()}
    return expected, {k: _rel(v, expected[k]) for k, v in grads[torch.float32].items()}


def _channels_last(t):
    return mx.array(t.permute(0, *range(2, t.ndim), 1).numpy()) if t.ndim > 2 else mx.array(t.numpy())


def _check_parity(ref, port, x, cotangent, names, factor=5):
    """Port and torch on the same data: every named parameter's gradient within ``factor`` times torch's own float32
    error of torch's float64 gradients, the input's within 5x."""
    def make():
        module = type(ref)(*ARGS[type(ref)])
        module.load_state_dict(ref.state_dict())
        return module.train()

    expected, torch_err = _torch_errors(make, x, cotangent, names)
    for name, value in ref.named_parameters():
        value = value.detach()
        port[name] = mx.array((value.permute(0, *range(2, value.ndim), 1) if value.ndim > 2 else value).numpy())
    port.train()
    cm = _channels_last(cotangent)

    def loss(params, xm):
        port.update(params)
        return (port(xm) * cm).sum()

    params, dx = mx.grad(loss, argnums=(0, 1))(port.trainable_parameters(), _channels_last(x))
    dx = np.array(dx)
    got = {n: np.array(params[n]) for n in names}
    got = {n: v.transpose(0, v.ndim - 1, *range(1, v.ndim - 1)) if v.ndim > 2 else v for n, v in got.items()}
    got["input"] = dx.transpose(0, dx.ndim - 1, *range(1, dx.ndim - 1)) if dx.ndim > 2 else dx
    for name, value in got.items():
        err = _rel(value, expected[name])
        assert err <= (5 if name == "input" else factor) * torch_err[name], (name, err, torch_err[name])


ARGS = {torch.nn.Conv3d: (2, 4, 3, 1, 1), torch.nn.Linear: (32, 64), torch.nn.BatchNorm2d: (8,),
        torch.nn.GroupNorm: (2, 8), torch.nn.LayerNorm: (64,), torch.nn.RMSNorm: (64,)}


def _randomised(module):
    """Seeded random affine parameters (1 and 0 would hide a wrong weight gradient)."""
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5)
        if getattr(module, "bias", None) is not None:
            module.bias.normal_()
    return module


def test_conv3d_bias_gradient_over_a_64_cubed_volume():
    torch.manual_seed(0)
    _check_parity(torch.nn.Conv3d(*ARGS[torch.nn.Conv3d]), Conv3d(2, 4, 3, padding=1), torch.randn(1, 2, 64, 64, 64),
                  torch.rand(1, 4, 64, 64, 64), ("bias",))


def test_linear_bias_gradient_over_many_tokens():
    torch.manual_seed(1)
    _check_parity(torch.nn.Linear(32, 64), Linear(32, 64), torch.randn(65536, 32), torch.rand(65536, 64), ("bias",))


@pytest.mark.parametrize("ref, port", [(lambda: torch.nn.BatchNorm2d(8), lambda: BatchNorm2d(8)),
                                       (lambda: torch.nn.GroupNorm(2, 8), lambda: GroupNorm(2, 8))],
                         ids=["batch_norm", "group_norm"])
def test_norm_gradients_in_training_over_a_large_map(ref, port, backend):
    """Batch norm's statistics and sums (its Python VJP on both backends) and group norm's pure-MLX path: the
    statistics' error shifts every normalised value, so the weight gradient (sum of cotangent x xhat) shows it most."""
    torch.manual_seed(2)
    x = torch.randn(2, 8, 96, 96) * 2 + 1
    _check_parity(_randomised(ref()), port(), x, torch.rand(2, 8, 96, 96), ("weight", "bias"))


def test_per_example_bias_gradients_under_vmap_and_compile():
    """The routed bias gradient maps (``mx.vmap`` of ``mx.grad``: per-example gradients) and compiles; each example's
    is its own blocked sum, against float64."""
    from porter.layers.linear import linear

    w, b = mx.array(RNG.normal(size=(8, 16)).astype(np.float32)), mx.array(RNG.normal(size=8).astype(np.float32))
    x = mx.array(RNG.normal(size=(3, 5000, 16)).astype(np.float32))

    def loss(bias, xs):
        return (linear(xs, w, bias) ** 2).sum()

    xn, wn, bn = (np.array(a).astype(np.float64) for a in (x, w, b))
    exact = np.stack([2 * (xn[i] @ wn.T + bn).sum(axis=0) for i in range(3)])
    assert _rel(mx.vmap(mx.grad(loss), in_axes=(None, 0))(b, x), exact) < 1e-6
    assert _rel(mx.compile(mx.grad(loss))(b, x[1]), exact[1]) < 1e-6


@pytest.mark.parametrize("ref, port, names, factor", [
    (lambda: torch.nn.LayerNorm(64), lambda: LayerNorm(64), ("weight", "bias"), 1),  # torch's own is 3e-6 here
    (lambda: torch.nn.RMSNorm(64), lambda: RMSNorm(64), ("weight",), 5)], ids=["layer_norm", "rms_norm"])
def test_token_norm_gradients_over_many_rows(ref, port, names, factor, backend):
    """LayerNorm's pure-MLX path (MLX's fused kernel, whose VJP sums the affine over the rows in one accumulator)
    and RMSNorm's weight, over 65536 tokens."""
    torch.manual_seed(3)
    _check_parity(_randomised(ref()), port(), torch.randn(65536, 64) * 2 + 1, torch.rand(65536, 64), names, factor)
