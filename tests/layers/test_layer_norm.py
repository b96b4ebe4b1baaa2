"""LayerNorm / GroupNorm (porter.layers.layer_norm) against torch: values, dtypes, gradients w.r.t. input, weight
and bias, second derivatives, vmap, NaN, errors. Every test runs on the native kernels and the pure-MLX path."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.helpers import check_against_torch, mx_to_numpy, torch_to_mx

import porter.layers as L
import porter.layers.functional as PF

# (value atol, gradient atol) per dtype; a norm's outputs are O(1) and its gradients sums over C or S*C products
TOL = {torch.float32: (1e-5, 1e-4), torch.float64: (1e-12, 1e-11), torch.float16: (4e-3, 1e-2),
       torch.bfloat16: (3e-2, 3e-2)}


def _params(c: int, dtype, affine: bool, bias: bool = True, seed: int = 0):
    """Random weight and bias (never the ones/zeros a fresh layer starts with), torch leaves and MLX twins."""
    if not affine:
        return None, None
    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(c, generator=gen, dtype=torch.float64) + 1.0).to(dtype).requires_grad_(True)
    b = (torch.randn(c, generator=gen, dtype=torch.float64)).to(dtype).requires_grad_(True) if bias else None
    return w, b


def _leaf_to_mx(t):
    return None if t is None else torch_to_mx(t, batched=False, channels_last=False)


def _input(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    # an offset and a spread, so that the mean and the variance both matter
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * 2.5 + 0.7).to(dtype)


def _check(make_torch_fn, porter_fn, x, nd, w, b, dtype, grad_atol=None):
    """``make_torch_fn(w, b)`` builds torch's function. For 16-bit dtypes torch's reference is computed in float64 on
    the same (rounded) values and rounded once: torch's own 16-bit CPU kernels sum weight gradients in 16-bit (off
    by several % against float64), Porter sums them in float32."""
    atol, gatol = TOL[dtype]
    gatol = grad_atol or gatol
    half = dtype in (torch.float16, torch.bfloat16)
    mx_params = {name: _leaf_to_mx(leaf) for name, leaf in (("weight", w), ("bias", b)) if leaf is not None}
    if half:
        w, b = (None if t is None else t.detach().double().requires_grad_(True) for t in (w, b))
        inner = make_torch_fn(w, b)
        torch_fn = lambda a: inner(a.double()).to(dtype)  # noqa: E731
    else:
        torch_fn = make_torch_fn(w, b)
    leaves = {"weight": w, "bias": b}
    params = {name: (leaves[name], arr, None) for name, arr in mx_params.items()}
    if params:
        check_against_torch(torch_fn, lambda xm, p: porter_fn(xm, p.get("weight"), p.get("bias")), x, nd=nd,
                            atol=atol, rtol=atol, grad_atol=gatol, grad_rtol=gatol, params=params)
    else:
        check_against_torch(torch_fn, lambda xm: porter_fn(xm, None, None), x, nd=nd, atol=atol, rtol=atol,
                            grad_atol=gatol, grad_rtol=gatol)


# ---------------------------------------------------------------------------------------------------- LayerNorm
# torch layout (N, C, *S); the LayerNorm runs over C at every position (ConvNeXt's LayerNorm2d, a ViT token's dims)
LN_CASES = [
    ((2, 7, 5, 3), 1e-5, True, True),
    ((3, 33, 9), 1e-6, True, True),
    ((2, 96, 6, 7), 1e-6, True, False),
    ((2, 17, 4, 5), 1e-5, False, False),
    ((1, 768, 13), 1e-6, True, True),
    ((2, 5, 3, 4, 3), 0.1, True, True),
    ((1, 197, 40), 1e-6, True, True),
    # row lengths 1, 3, 95, 97, 1000 (not whole vectors), row counts around the native kernel's blocks of 4 rows
    ((1, 1, 7), 1e-5, True, True),
    ((2, 3, 5), 1e-5, True, False),
    ((1, 95, 9), 1e-5, True, True),
    ((1, 97, 6), 1e-6, False, False),
    ((1, 1000, 5), 1e-5, True, True),
]
# > 1M element-steps: several threads, chunked weight gradients (float32 only; sums of 3136 products per weight)
LN_LARGE = [((1, 96, 56, 56), 1e-6, True, True)]


def _torch_ln(c, w, b, eps):
    def fn(x):
        moved = x.movedim(1, -1)
        return F.layer_norm(moved, (c,), w, b, eps).movedim(-1, 1)
    return fn


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape, eps, affine, bias", LN_CASES)
def test_layer_norm_matches_torch(shape, eps, affine, bias, dtype):
    c = shape[1]
    w, b = _params(c, dtype, affine, bias)
    _check(lambda tw, tb: _torch_ln(c, tw, tb, eps), lambda xm, wm, bm: PF.layer_norm(xm, c, wm, bm, eps),
           _input(shape, dtype), len(shape) - 2, w, b, dtype)


@pytest.mark.parametrize("shape, eps, affine, bias", LN_LARGE)
def test_layer_norm_large_matches_torch(shape, eps, affine, bias):
    c = shape[1]
    w, b = _params(c, torch.float32, affine, bias)
    _check(lambda tw, tb: _torch_ln(c, tw, tb, eps), lambda xm, wm, bm: PF.layer_norm(xm, c, wm, bm, eps),
           _input(shape, torch.float32), len(shape) - 2, w, b, torch.float32, grad_atol=1e-3)


@pytest.mark.parametrize("normalized", [(6, 7), (5, 6, 7)])
def test_layer_norm_over_several_trailing_dims(normalized):
    x = _input((2, 5, 6, 7), torch.float32, seed=3).requires_grad_(True)
    w, b = _params(int(np.prod(normalized)), torch.float32, True)
    w, b = w.detach().reshape(normalized).requires_grad_(True), b.detach().reshape(normalized).requires_grad_(True)
    y = F.layer_norm(x, normalized, w, b, 1e-5)
    g = torch.randn_like(y)
    y.backward(g)
    xm, wm, bm, gm = (torch_to_mx(t, batched=False, channels_last=False) for t in (x, w, b, g))
    fn = lambda a, ww, bb: PF.layer_norm(a, normalized, ww, bb, 1e-5)  # noqa: E731
    ym, grads = mx.vjp(fn, [xm, wm, bm], [gm])
    np.testing.assert_allclose(np.array(ym[0]), y.detach().numpy(), atol=1e-5, rtol=1e-5)
    for got, want in zip(grads, (x.grad, w.grad, b.grad)):
        np.testing.assert_allclose(np.array(got), want.numpy(), atol=1e-4, rtol=1e-4)


def test_layer_norm_module_is_an_mlx_layer_norm_with_torch_names():
    ln = L.LayerNorm(9, eps=1e-6)
    import mlx.nn as nn
    assert isinstance(ln, nn.LayerNorm)
    assert sorted(k for k, _ in __import__("mlx.utils").utils.tree_flatten(ln.parameters())) == ["bias", "weight"]
    tln = torch.nn.LayerNorm(9, eps=1e-6)
    with torch.no_grad():
        tln.weight.normal_(), tln.bias.normal_()
    ln.weight, ln.bias = _leaf_to_mx(tln.weight), _leaf_to_mx(tln.bias)
    x = _input((2, 4, 9), torch.float32)
    np.testing.assert_allclose(np.array(ln(torch_to_mx(x, False, False))), tln(x).detach().numpy(), atol=1e-5)
    assert "weight" not in L.LayerNorm(9, affine=False)
    assert "bias" not in L.LayerNorm(9, bias=False) and "weight" in L.LayerNorm(9, bias=False)


def test_layer_norm_module_over_several_trailing_dims():
    tln = torch.nn.LayerNorm([5, 6, 7], eps=1e-4)
    with torch.no_grad():
        tln.weight.normal_(), tln.bias.normal_()
    ln = L.LayerNorm((5, 6, 7), eps=1e-4)
    assert ln.weight.shape == (5, 6, 7)
    ln.weight, ln.bias = _leaf_to_mx(tln.weight), _leaf_to_mx(tln.bias)
    x = _input((2, 5, 6, 7), torch.float32, seed=6)
    np.testing.assert_allclose(np.array(ln(torch_to_mx(x, False, False))), tln(x).detach().numpy(), atol=1e-5)


# ---------------------------------------------------------------------------------------------------- GroupNorm
GN_CASES = [
    ((2, 6, 5, 7), 3, 1e-5, True),
    ((1, 64, 9, 11), 32, 1e-5, True),
    ((2, 12, 3, 4, 5), 4, 1e-3, True),
    ((3, 10, 7), 5, 1e-5, False),
    ((4, 6), 2, 1e-5, True),
    ((2, 9, 5, 5), 9, 1e-5, True),  # one group per channel: instance norm
    ((2, 15, 4, 3), 1, 0.5, True),  # one group: a layer norm over (C, H, W)
    ((2, 10, 33, 41), 5, 1e-5, True),  # several position chunks per sample
]
# > 1M element-steps: several threads and position chunks (float32 only; sums of 8192 products per weight)
GN_LARGE = [((2, 64, 64, 64), 32, 1e-5, True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape, groups, eps, affine", GN_CASES)
def test_group_norm_matches_torch(shape, groups, eps, affine, dtype):
    c = shape[1]
    w, b = _params(c, dtype, affine)
    _check(lambda tw, tb: (lambda x: F.group_norm(x, groups, tw, tb, eps)),
           lambda xm, wm, bm: PF.group_norm(xm, groups, wm, bm, eps), _input(shape, dtype, seed=1), len(shape) - 2, w,
           b, dtype)


@pytest.mark.parametrize("shape, groups, eps, affine", GN_LARGE)
def test_group_norm_large_matches_torch(shape, groups, eps, affine):
    c = shape[1]
    w, b = _params(c, torch.float32, affine)
    _check(lambda tw, tb: (lambda x: F.group_norm(x, groups, tw, tb, eps)),
           lambda xm, wm, bm: PF.group_norm(xm, groups, wm, bm, eps), _input(shape, torch.float32, seed=1),
           len(shape) - 2, w, b, torch.float32, grad_atol=1e-3)


def test_group_norm_module_matches_torch():
    tgn = torch.nn.GroupNorm(4, 12, eps=1e-4)
    with torch.no_grad():
        tgn.weight.normal_(), tgn.bias.normal_()
    gn = L.GroupNorm(4, 12, eps=1e-4)
    gn.weight, gn.bias = _leaf_to_mx(tgn.weight), _leaf_to_mx(tgn.bias)
    x = _input((2, 12, 5, 6), torch.float32)
    np.testing.assert_allclose(mx_to_numpy(gn(torch_to_mx(x, True)), True), tgn(x).detach().numpy(), atol=1e-5)


@pytest.mark.parametrize("shape, groups", [((2, 8, 1, 1), 8), ((4, 6), 6), ((3, 6, 1), 6), ((2, 4, 1, 1, 1), 4)])
def test_group_norm_of_one_value_per_group_gives_the_bias(shape, groups):
    """A group holding one value is its own mean: torch's formula ``(x - mean) * rstd * w + b`` is the bias itself
    (torch in float64, rounded to float32, says so). The native kernel centres before it scales; folded into
    ``x * s + (b - mean * s)`` (``s = w / sqrt(eps)``, about 300 here) it was off by the products' roundings, 1e-4
    at values near 5, as is torch's own float32 CPU kernel, which folds."""
    torch.manual_seed(0)
    x = torch.randn(*shape) * 3 + 5
    w, b = torch.randn(shape[1]), torch.randn(shape[1])
    exact = F.group_norm(x.double(), groups, w.double(), b.double(), 1e-5).float()
    assert torch.equal(exact, b.view(1, -1, *[1] * (len(shape) - 2)).expand(shape))
    got = PF.group_norm(torch_to_mx(x, True), groups, mx.array(w.numpy()), mx.array(b.numpy()), 1e-5)
    np.testing.assert_array_equal(mx_to_numpy(got, True), exact.numpy())


@pytest.mark.parametrize("groups", [4, 2])
def test_group_norm_sums_over_a_large_volume_with_few_channels_are_accurate(groups, backend):
    """Instance/group norm over a 3-d volume of 148 Ki positions with 4 channels (MONAI's small nets), a one-signed
    cotangent (running sums grow with the count: a float accumulator's worst case): the native kernel's gradients
    within 3e-5 of torch's float64 ones (it once summed 8192 positions per float accumulator: the weight gradient 7e-5
    off, BasicUNet's input gradient 1% off torch's). Without the kernels the gradients are MLX's autograd over
    ``mx.mean`` and broadcasting, whose sums run in one float accumulator: held to 10x torch's own float32 error."""
    torch.manual_seed(0)
    x = torch.randn(1, 4, 67, 69, 32) * 2 + 0.5
    g = torch.randn(x.shape) * 0.5 + 2
    w, b = torch.randn(4), torch.randn(4)
    grads = {}
    for dtype in (torch.float64, torch.float32):
        xd, wd, bd = (t.to(dtype).clone().requires_grad_(True) for t in (x, w, b))
        F.group_norm(xd, groups, wd, bd, 1e-5).backward(g.to(dtype))
        grads[dtype] = {"input": xd.grad.double().numpy(), "weight": wd.grad.double().numpy(),
                        "bias": bd.grad.double().numpy()}
    fn = lambda a, ww, bb: (PF.group_norm(a, groups, ww, bb, 1e-5) * torch_to_mx(g, True)).sum()  # noqa: E731
    gx, gw, gb = mx.grad(fn, argnums=(0, 1, 2))(torch_to_mx(x, True), mx.array(w.numpy()), mx.array(b.numpy()))
    ours = {"input": mx_to_numpy(gx, True), "weight": np.array(gw), "bias": np.array(gb)}
    for name, want in grads[torch.float64].items():
        scale = np.abs(want).max()
        torch_err = np.abs(grads[torch.float32][name] - want).max() / scale
        bar = 3e-5 if backend == "native" else max(3e-5, 10 * torch_err)
        assert np.abs(ours[name] - want).max() <= bar * scale, (name, torch_err)


# ---------------------------------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("c", [1, 3, 95, 96, 97, 1000])
def test_layer_norm_non_finite_and_large_rows_match_torch(c):
    """Nine rows (two of the native kernel's blocks of four and one more): NaN, +-inf, huge magnitudes and a
    constant row, each in its own row, against torch's float32 kernel."""
    gen = torch.Generator().manual_seed(c)
    x = torch.randn(9, c, generator=gen) * 3 + 1
    x[1, c // 2] = float("nan")
    x[2, 0] = float("inf")
    x[4, c - 1] = float("-inf")
    x[5] = x[5] * 1e15  # squares near 1e30: no overflow in float sums of up to 1000
    x[6] = 2.5  # zero variance: rstd = 1/sqrt(eps)
    x[8] = x[8] * 1e-20
    w, b = torch.randn(c, generator=gen), torch.randn(c, generator=gen)
    ref = F.layer_norm(x, (c,), w, b, 1e-5).numpy()
    out = np.array(PF.layer_norm(mx.array(x.numpy()), c, mx.array(w.numpy()), mx.array(b.numpy()), 1e-5))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_nan_stays_in_its_row_and_group():
    x = _input((2, 8, 3, 4), torch.float32)
    x[0, 2, 1, 1] = float("nan")
    xm = torch_to_mx(x, True)
    ln_t = _torch_ln(8, None, None, 1e-5)(x)
    np.testing.assert_allclose(mx_to_numpy(PF.layer_norm(xm, 8), True), ln_t.numpy(), atol=1e-5, equal_nan=True)
    gn_t = F.group_norm(x, 2, None, None, 1e-5)
    gn_m = mx_to_numpy(PF.group_norm(xm, 2), True)
    np.testing.assert_allclose(gn_m, gn_t.numpy(), atol=1e-5, equal_nan=True)
    assert np.isnan(gn_m[0, :4]).all() and not np.isnan(gn_m[0, 4:]).any() and not np.isnan(gn_m[1]).any()


@pytest.mark.parametrize("kind", ["layer", "group"])
def test_second_derivative_matches_torch(kind):
    """Gradient of (gradient . v) w.r.t. input and weight: the gradient kernel's own VJP."""
    x = _input((2, 6, 3, 4), torch.float64).requires_grad_(True)
    w, b = _params(6, torch.float64, True)
    g = torch.randn(2, 6, 3, 4, dtype=torch.float64)
    v = torch.randn(2, 6, 3, 4, dtype=torch.float64)
    tfn = _torch_ln(6, w, b, 1e-5) if kind == "layer" else (lambda a: F.group_norm(a, 3, w, b, 1e-5))
    gx, gw = torch.autograd.grad((tfn(x) * g).sum(), [x, w], create_graph=True)
    hx, hw = torch.autograd.grad((gx * v).sum() + gw.sum(), [x, w])
    xm, gm, vm = (torch_to_mx(t, True) for t in (x, g, v))
    wm, bm = _leaf_to_mx(w), _leaf_to_mx(b)

    def pfn(a, ww):
        return PF.layer_norm(a, 6, ww, bm) if kind == "layer" else PF.group_norm(a, 3, ww, bm)

    def outer(a, ww):
        dx, dw = mx.grad(lambda a_, w_: (pfn(a_, w_) * gm).sum(), argnums=(0, 1))(a, ww)
        return (dx * vm).sum() + dw.sum()

    mhx, mhw = mx.grad(outer, argnums=(0, 1))(xm, wm)
    np.testing.assert_allclose(mx_to_numpy(mhx, True), hx.numpy(), atol=1e-9, rtol=1e-9)
    np.testing.assert_allclose(np.array(mhw), hw.numpy(), atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("kind", ["layer", "group"])
def test_vmap_matches_a_loop(kind):
    xs = mx.random.normal((3, 2, 4, 5, 6), key=mx.random.key(0)) * 2 + 1
    w, b = mx.random.normal((6,), key=mx.random.key(1)), mx.random.normal((6,), key=mx.random.key(2))
    fn = (lambda a: PF.layer_norm(a, 6, w, b)) if kind == "layer" else (lambda a: PF.group_norm(a, 2, w, b))
    for axis in (0, 1):
        mapped = mx.vmap(fn, in_axes=axis)(xs)
        looped = mx.stack([fn(xs[i] if axis == 0 else xs[:, i]) for i in range(xs.shape[axis])])
        np.testing.assert_allclose(np.array(mapped), np.array(looped), atol=1e-5)


def test_zero_size_input():
    assert PF.layer_norm(mx.zeros((0, 4)), 4).shape == (0, 4)
    assert PF.group_norm(mx.zeros((0, 3, 4)), 2).shape == (0, 3, 4)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: PF.group_norm(mx.zeros((2, 3, 6)), 4), ValueError, "divisible by num_groups"),
    (lambda: PF.group_norm(mx.zeros((2, 3, 6)), 0), ValueError, "'num_groups'"),
    (lambda: PF.group_norm(mx.zeros((6,)), 2), ValueError, "at least 2 dimensions"),
    (lambda: PF.group_norm(mx.zeros((2, 6)), 2, mx.ones((5,))), ValueError, "'weight'"),
    (lambda: PF.layer_norm(mx.zeros((2, 6)), 5), ValueError, "normalized_shape"),
    (lambda: PF.layer_norm(mx.zeros((2, 6)), 6, None, mx.ones((6, 1))), ValueError, "'bias'"),
    (lambda: PF.layer_norm(mx.zeros((2, 6)), 6, eps=-1.0), ValueError, "'eps'"),
    (lambda: PF.layer_norm(mx.zeros((2, 6), dtype=mx.int32), 6), TypeError, "'input'"),
    (lambda: PF.layer_norm([1.0], 1), TypeError, "'input'"),
    (lambda: L.GroupNorm(4, 6), ValueError, "divisible"),
    (lambda: L.LayerNorm(0), ValueError, "'dims'"),
    (lambda: L.LayerNorm(4, eps=0.0), ValueError, "'eps'"),
    (lambda: L.LayerNorm(4)(mx.zeros((2, 5))), ValueError, "normalized_shape"),
    (lambda: L.GroupNorm(2, 6)(mx.zeros((2, 3, 4))), ValueError, r"\[GroupNorm\]"),
])
def test_bad_arguments_name_themselves(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.native_only
@pytest.mark.parametrize("threads", [2, 3])
def test_results_do_not_depend_on_the_thread_count(threads):
    """Large enough to split over threads (rows, position chunks, chunked weight-gradient sums): bit-identical
    results with 1 and with ``threads`` kernel threads (the chunks and the order of their sums are fixed)."""
    from porter.layers import _native

    x = mx.random.normal((2, 64, 64, 64), key=mx.random.key(4)) * 3 + 1
    w, b = mx.random.normal((64,), key=mx.random.key(5)), mx.random.normal((64,), key=mx.random.key(6))
    g = mx.random.normal(x.shape, key=mx.random.key(7))

    def run():
        out = []
        for fn in (lambda a, ww, bb: PF.layer_norm(a, 64, ww, bb), lambda a, ww, bb: PF.group_norm(a, 8, ww, bb)):
            y, grads = mx.vjp(fn, [x, w, b], [g])
            out += [np.array(v) for v in (y[0], *grads)]
        return out

    before = _native.kernels().num_threads()
    try:
        _native.set_num_threads(1)
        serial = run()
        _native.set_num_threads(threads)
        parallel = run()
    finally:
        _native.set_num_threads(before)
    for a, b_ in zip(serial, parallel):
        np.testing.assert_array_equal(a, b_)


def test_non_contiguous_input_matches_torch():
    x = _input((2, 5, 6, 7), torch.float32, seed=5)
    xm = torch_to_mx(x, True).transpose(0, 2, 1, 3)  # (N, W, H, C): a strided view
    xt = x.permute(0, 3, 2, 1)  # the same values as (N, W, H, C)
    np.testing.assert_allclose(np.array(PF.layer_norm(xm, 5)), F.layer_norm(xt, (5,)).numpy(), atol=1e-5)
    want = F.group_norm(xt.permute(0, 3, 1, 2), 5).permute(0, 2, 3, 1)
    np.testing.assert_allclose(np.array(PF.group_norm(xm, 5)), want.numpy(), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_strided_input_weight_and_cotangent_match_torch(dtype):
    """The primitives take strided views and broadcasts as they are (no contiguous node; the kernel's own copy):
    a transposed input, a stepped weight and bias, a broadcast cotangent; values and gradients as torch's."""
    x = _input((3, 8, 4, 5), dtype, seed=6)  # channels-last (3, 4, 5, 8)
    wide = torch.randn(16, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    xm = torch_to_mx(x, True).transpose(0, 2, 1, 3)  # (N, W, H, C) strided
    # 16-bit: torch's reference in float64 on the same rounded values (its own bfloat16 kernel sums the weight gradient
    # in 16-bit, and the result depends on its thread count: -13.94 or -13.44 for one entry here)
    ref = torch.float64 if dtype == torch.bfloat16 else dtype
    xt = x.permute(0, 3, 2, 1).detach().to(ref).requires_grad_()
    wm, bm = torch_to_mx(wide, False, False)[::2], torch_to_mx(wide, False, False)[1::2]
    wt, bt = wide[::2].clone().to(ref).requires_grad_(), wide[1::2].clone().to(ref).requires_grad_()
    g = torch.randn(8, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
    y, grads = mx.vjp(lambda a, w, b: PF.layer_norm(a, 8, w, b), [xm, wm, bm],
                      [mx.broadcast_to(torch_to_mx(g, False, False), xm.shape)])
    yt = F.layer_norm(xt, (8,), wt, bt)
    yt.backward(g.to(ref).expand_as(yt))
    tol = {torch.float32: 1e-5, torch.bfloat16: 3e-2, torch.float64: 1e-10}[dtype]
    for ours, theirs in zip((y[0], *grads), (yt, xt.grad, wt.grad, bt.grad)):
        expected = theirs.detach().to(torch.float64).numpy()
        np.testing.assert_allclose(mx_to_numpy(ours, False, False).astype(np.float64), expected, rtol=tol,
                                   atol=tol * max(1.0, float(np.abs(expected).max())))


def test_mx_compile_matches_eager():
    x = mx.random.normal((2, 6, 7, 12), key=mx.random.key(8))
    w = mx.random.normal((12,), key=mx.random.key(9))

    def f(a):
        return PF.group_norm(PF.layer_norm(a, 12, w), 3, w)

    grad = mx.grad(lambda a: (f(a) * a).sum())
    np.testing.assert_allclose(np.array(mx.compile(f)(x)), np.array(f(x)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.array(mx.compile(grad)(x)), np.array(grad(x)), rtol=1e-5, atol=1e-5)
