"""Small ops a hand-written op hunt found refused: ``swapdims``, ``ldexp``, ``frexp``, ``nextafter``, ``gcd``/``lcm``,
``put_``, ``diagonal_scatter``, ``index_reduce``, ``mode``; against torch on the same data at two sizes, exactly where
torch is exact (bits, integers, indices, moves), with edge values (0, -0, subnormals, inf, NaN, ties), several
dtypes and gradients."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from porter.compare import assert_close
from porter.converters.ops import numeric
from tests.converter_check import assert_matches, check_converted

torch.manual_seed(0)


def _edges(x):
    """``x`` with 0, -0, a subnormal, +-inf, NaN, huge and exact powers of two in its first entries."""
    tiny = torch.finfo(x.dtype).tiny / 8
    flat = x.reshape(-1)
    values = [0.0, -0.0, tiny, -tiny, float("inf"), -float("inf"), float("nan"), 1e30, 0.5, 1.0, -3.0,
              torch.finfo(x.dtype).max]
    flat[:len(values)] = torch.tensor(values, dtype=torch.float64).to(x.dtype)
    return x


class Bits(nn.Module):
    def forward(self, x):
        mantissa, exponent = torch.frexp(x)
        return (mantissa, exponent, torch.nextafter(x, x.flip(-1)), torch.nextafter(x, torch.zeros_like(x)),
                torch.nextafter(x, torch.full_like(x, float("inf"))), torch.nextafter(x, x),
                torch.ldexp(x, torch.where(torch.isfinite(x.flip(-1)), x.flip(-1) * 3, 0.0).clamp(-60, 60).long()),
                torch.ldexp(x, torch.tensor([3, -2, 0, 1])[: x.shape[-1]].repeat(x.shape[-1])[: x.shape[-1]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_float_bit_ops_are_exact(dtype):
    model = Bits().eval()
    ported = porter.convert(model, _edges(torch.randn(3, 4, dtype=dtype) * 10), io_layout="torch")
    for x in (_edges(torch.randn(3, 4, dtype=dtype) * 10), _edges(torch.randn(2, 5, 4, dtype=dtype)[0] * 1e-3)):
        assert_matches(ported, model, (x,), rel=0)


def test_float_bit_ops_in_bfloat16_are_exact():
    """bfloat16 (numpy has none): the kernels on MLX bfloat16 against torch's bfloat16, compared as float32."""
    x = _edges(torch.randn(3, 4, dtype=torch.bfloat16) * 10)
    y = x.flip(-1)
    mxx, mxy = (mx.array(t.float().numpy()).astype(mx.bfloat16) for t in (x, y))
    mantissa, exponent = numeric.frexp(mxx)
    expected = torch.frexp(x)
    np.testing.assert_array_equal(np.array(mantissa.astype(mx.float32)), expected.mantissa.float().numpy())
    np.testing.assert_array_equal(np.array(exponent), expected.exponent.numpy())
    np.testing.assert_array_equal(np.array(numeric.nextafter(mxx, mxy).astype(mx.float32)),
                                  torch.nextafter(x, y).float().numpy())


def test_ldexp_gradient():
    """torch's gradient for non-negative exponents; for negative ones torch computes ``2 ** other`` in integers and
    gives 0, where the port keeps the true ``2 ** other``."""
    x = torch.randn(2, 5)
    e = torch.tensor([[3, 1, 0, 2, 5], [1, 1, 4, 0, 2]])
    model = _Fn(lambda x, e: torch.ldexp(x, e))
    ported = porter.convert(model, (x, e), io_layout="torch")
    leaf = x.clone().requires_grad_()
    w = torch.randn(2, 5)
    (torch.ldexp(leaf, e) * w).sum().backward()
    mw = mx.array(w.numpy())
    g = mx.grad(lambda v, e: (ported(v, e) * mw).sum())(mx.array(x.numpy()), mx.array(e.numpy()))
    assert_close(np.array(g), leaf.grad.numpy(), what="gradient to x")
    g = mx.grad(lambda v, e: (ported(v, e) * mw).sum())(mx.array(x.numpy()), mx.array(-e.numpy()))
    assert_close(np.array(g), (w * 2.0 ** -e).numpy(), what="gradient to x, negative exponents")


class _Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_gcd_lcm_match_torch_exactly(dtype):
    model = _Fn(lambda a, b: (torch.gcd(a, b), torch.lcm(a, b), torch.gcd(a, torch.tensor(6, dtype=dtype))))
    lo = 0 if dtype == torch.uint8 else -90

    def pair(*shape):
        a = torch.randint(lo, 90, shape).to(dtype)
        b = torch.randint(lo, 90, shape).to(dtype)
        a.view(-1)[:3] = torch.tensor([0, 0, 89]).to(dtype)  # gcd(0, 0) = 0, lcm 0; Fibonacci neighbours 89, 55
        b.view(-1)[:3] = torch.tensor([0, 7, 55]).to(dtype)
        return a, b

    check_converted(model, pair(3, 4), pair(2, 7), rel=0)


def test_gcd_of_the_worst_case_needs_every_round():
    """Consecutive Fibonacci numbers take the most Euclid rounds: the largest int64 pair still gives torch's 1."""
    a = torch.tensor([7540113804746346429, 4660046610375530309], dtype=torch.int64)
    b = torch.tensor([4660046610375530309, 2880067194370816120], dtype=torch.int64)
    got = np.array(numeric.gcd(mx.array(a.numpy()), mx.array(b.numpy())))
    np.testing.assert_array_equal(got, torch.gcd(a, b).numpy())


def test_swapdims_and_swapaxes_are_moves():
    model = _Fn(lambda x: (x.swapdims(1, 3).contiguous().flatten(1), torch.swapaxes(x, 0, -1) * 2,
                           nn.functional.relu(x).swapdims(-1, -2)))
    check_converted(model, torch.randn(2, 3, 4, 5), torch.randn(3, 2, 6, 4), rel=0)


def test_put_writes_and_accumulates_at_flat_positions():
    def fn(x):
        y = x.clone()
        y.put_(torch.tensor([0, 5, -1]), torch.tensor([1.0, 2.0, 3.0]))
        z = x.put(torch.tensor([[1, 1], [4, 0]]), torch.tensor([[1.0, 2.0], [3.0, 4.0]]), accumulate=True)
        return y * 2, z

    check_converted(_Fn(fn), torch.randn(2, 3, 4), torch.randn(3, 3, 5), rel=0)


def test_put_gradient_and_out_of_range_index():
    model = _Fn(lambda x: x.put(torch.tensor([0, 2]), x[:2, 0] * 3))
    x = torch.randn(3, 4)
    ported = porter.convert(model, x, io_layout="torch")
    leaf = x.clone().requires_grad_()
    w = torch.randn(3, 4)
    (model(leaf) * w).sum().backward()
    g = mx.grad(lambda v: (ported(v) * mx.array(w.numpy())).sum())(mx.array(x.numpy()))
    assert_close(np.array(g), leaf.grad.numpy(), what="gradient to x")
    with pytest.raises(ValueError, match="index 11 is out of range"):
        mx.eval(porter.convert(_Fn(lambda x: x.put(torch.tensor([0, 11]), x[0, :2])), torch.randn(3, 4),
                               io_layout="torch")(mx.zeros((2, 4))))


@pytest.mark.parametrize("offset, dims", [(0, (0, 1)), (1, (1, 2)), (-2, (2, 0)), (3, (-1, -2))])
def test_diagonal_scatter_matches_torch(offset, dims):
    def fn(x):
        src = torch.diagonal(x, offset, *dims) * 10 + 1
        return torch.diagonal_scatter(x, src, offset, *dims)

    x = torch.randn(3, 4, 5)
    check_converted(_Fn(fn), x, torch.randn(4, 6, 5), rel=0)
    ported = porter.convert(_Fn(fn), x, io_layout="torch")
    leaf = x.clone().requires_grad_()
    w = torch.randn(3, 4, 5)
    (fn(leaf) * w).sum().backward()
    g = mx.grad(lambda v: (ported(v) * mx.array(w.numpy())).sum())(mx.array(x.numpy()))
    assert_close(np.array(g), leaf.grad.numpy(), what="gradient to x")


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce_matches_torch(reduce, include_self):
    index = torch.tensor([0, 2, 2, 4, 0])

    def fn(x):
        base = x[:6].flip(0) * 0.5
        return (base.index_reduce(0, index, x[:5], reduce, include_self=include_self),
                x.index_reduce(1, index[:3], x[:, :3] * 2, reduce, include_self=include_self))

    check_converted(_Fn(fn), torch.randn(6, 4), torch.randn(7, 5))


def test_mode_values_and_indices_match_torch():
    """The smallest of the most frequent values and its last position (torch's CPU kernel on rows up to 16)."""
    def ints(*shape):
        return torch.randint(-2, 3, shape)

    model = _Fn(lambda x, i: (*torch.mode(x, -1), *torch.mode(x, 1, keepdim=True), *torch.mode(i, 0)))
    x = (torch.randn(3, 4, 9) * 2).round()
    x[0, 0] = torch.tensor([3.0, 1, 3, 1, 2, 0, 5, 6, 7])  # tie between 1 and 3
    check_converted(model, (x, ints(6, 5)), ((torch.randn(2, 5, 11) * 2).round(), ints(9, 3)), rel=0)


def test_isin_keeps_every_dim_dynamic():
    """Kept whole (torch's decomposition guards on the sizes): a second batch size converts the same port."""
    test_set = torch.tensor([0, 2, -1, 7])

    def fn(x, f):
        ints = (x * 3).long()
        return (torch.isin(ints, test_set), torch.isin(ints, test_set, invert=True), torch.isin(ints, 2),
                torch.isin(f, torch.tensor([0.5, float("nan"), 1.0])), torch.isin(3, ints))

    def inputs(*shape):
        f = torch.randn(*shape)
        f.view(-1)[:3] = torch.tensor([0.5, float("nan"), 1.0])
        return torch.randn(*shape), f

    check_converted(_Fn(fn), inputs(2, 4, 5), inputs(3, 6, 2), rel=0)
