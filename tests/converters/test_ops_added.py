"""Ops added after hand-converting small forwards found them refused: ``addbmm``, ``pdist``, grouped-query
``scaled_dot_product_attention`` (``enable_gqa``), and integer shifts (``<<``, ``>>``, ``bitwise_*_shift``).
Against torch on the same data at two input sizes (the second not seen at conversion); shifts compare exactly
(counts past the width included), the float ops to float32 rounding; gradients for the float ops."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from tests.converter_check import run_ported

torch.manual_seed(0)


class Products(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 16)  # 4 query heads of 4
        self.kv = nn.Linear(8, 16)  # 2 key and 2 value heads of 4

    def forward(self, x):  # x: (B, L, 8)
        b, n, _ = x.shape
        q = self.q(x).view(b, n, 4, 4).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, 2, 4).permute(2, 0, 3, 1, 4)
        gqa = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        causal = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True, scale=0.3)
        bmm = torch.addbmm(x[0, :1, :5], x.transpose(1, 2), x[:, :, :5], beta=0.5, alpha=2.0)  # (8, 5)
        nan_self = torch.addbmm(torch.full((8, 5), float("nan")), x.transpose(1, 2), x[:, :, :5],
                                beta=0.0)  # beta 0 ignores self, NaN included
        bmm_ = x[0, :1, :5].expand(8, 5).clone().addbmm_(x.transpose(1, 2), x[:, :, :5], alpha=0.5)
        rows = x.flatten(0, 1)
        dists = (F.pdist(rows), F.pdist(rows, p=1.0), F.pdist(rows, p=float("inf")), F.pdist(rows[:1]))
        return gqa, causal, bmm, nan_self, dists, bmm_


@pytest.fixture(scope="module")
def products():
    model = Products().eval()
    return model, porter.convert(model, torch.randn(2, 5, 8), io_layout="torch")


def _leaves(tree):
    return torch.utils._pytree.tree_leaves(tree)


@pytest.mark.parametrize("shape", [(2, 5, 8), (3, 7, 8)])
def test_products_match_torch(products, shape):
    model, port = products
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = [t.numpy() for t in _leaves(model(x))]
    actual = run_ported(port, (x,))
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, (i, a.shape, e.shape)
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


def test_products_gradients_match_torch(products):
    model, port = products
    x = torch.randn(2, 5, 8, requires_grad=True)
    outputs = _leaves(model(x))[:3] + _leaves(model(x))[4:7]  # not the NaN one, nor pdist of one row (empty)
    weights = [torch.randn_like(t) for t in outputs]
    sum((t * w).sum() for t, w in zip(outputs, weights)).backward()
    ws = [mx.array(w.numpy()) for w in weights]

    def loss(inp):
        gqa, causal, bmm, _, dists, _ = port(inp)
        return sum((o * w).sum() for o, w in zip([gqa, causal, bmm, *dists[:3]], ws))

    grad = mx.grad(loss)(mx.array(x.detach().numpy()))
    np.testing.assert_allclose(np.array(grad), x.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_gqa_with_heads_that_do_not_divide_is_refused_at_run():
    from porter.converters.ops.linear import k_sdpa

    with pytest.raises(ValueError, match="multiple of the key's 2"):
        k_sdpa(mx.zeros((1, 3, 4, 4)), mx.zeros((1, 2, 4, 4)), mx.zeros((1, 2, 4, 4)), gqa=True)


class Shifts(nn.Module):
    def forward(self, x, n):  # x: int32 values, n: int32 shift counts (some negative or past the width)
        y, z = x.clone(), x.clone()
        y <<= n
        y >>= 1
        z <<= 2
        z >>= n
        w = x.clone().bitwise_left_shift_(n).bitwise_right_shift_(2).bitwise_left_shift_(1).bitwise_right_shift_(n)
        return (x << 3, x >> 2, x << n, x >> n, torch.bitwise_left_shift(x, n), torch.bitwise_right_shift(x, 1),
                torch.bitwise_left_shift(x, 5), torch.bitwise_right_shift(x, n), y, z, w,
                x.to(torch.uint8) << 1, x.to(torch.uint8) >> n.clamp(0, 7).to(torch.uint8), x.long() << 40)


@pytest.mark.parametrize("size", [6, 11])
def test_shifts_match_torch_exactly(size):
    model = Shifts()
    g = torch.Generator().manual_seed(size)
    example = (torch.randint(-300, 300, (2, 6), dtype=torch.int32, generator=g),
               torch.randint(-3, 40, (2, 6), dtype=torch.int32, generator=g))
    port = porter.convert(model, example, io_layout="torch")
    x = torch.randint(-2 ** 31, 2 ** 31 - 1, (2, size), dtype=torch.int32, generator=g)
    n = torch.randint(-40, 70, (2, size), dtype=torch.int32, generator=g)
    n[0, :4] = torch.tensor([0, 31, 32, -1], dtype=torch.int32)
    expected = [t.numpy() for t in model(x, n)]
    actual = run_ported(port, (x, n))
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype, (i, a.dtype, e.dtype)
        np.testing.assert_array_equal(a, e, err_msg=f"output {i}")


def test_a_generator_in_the_forward_is_refused_by_name():
    class Noisy(nn.Module):
        def forward(self, x):
            return x + torch.randn(x.shape, generator=torch.Generator().manual_seed(1))

    with pytest.raises(porter.converters.CaptureError, match="CUSTOM_OBJ.*torch.Generator.*pass them in"):
        porter.convert(Noisy(), torch.randn(2, 3), dynamic="static")


@pytest.mark.parametrize("fn", [lambda x: torch.nonzero(x > 0), lambda x: torch.masked_select(x, x > 0)])
def test_value_sized_ops_say_why(fn):
    class ValueSized(nn.Module):
        def forward(self, x):
            return fn(x)

    with pytest.raises(porter.converters.UnsupportedOpsError, match="size depends on the tensor's values"):
        porter.convert(ValueSized(), torch.randn(2, 3), dynamic="static")


class FreeChannels(nn.Module):
    """Norms with no weight to fix the channel count: torch keeps it dynamic (was refused: 'the channel count must
    be static')."""

    def forward(self, x):
        return F.instance_norm(x), F.instance_norm(x.flip(1), eps=1e-3) * 2


@pytest.mark.parametrize("shape", [(2, 4, 6, 7), (3, 5, 9, 4), (1, 1, 3, 3)])
def test_instance_norm_over_a_dynamic_channel_count(shape):
    model = FreeChannels()
    port = porter.convert(model, torch.randn(2, 4, 6, 7), io_layout="torch", dynamic="all")
    x = torch.randn(*shape)
    expected = [t.numpy() for t in model(x)]
    for a, e in zip(run_ported(port, (x,)), expected):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5)


class _ClampBySize(nn.Module):
    def forward(self, x):
        labels = (x.abs() * 3).long()
        return (labels.clamp(max=x.shape[1] - 1).float() + x.clamp(min=-x.shape[0] * 0.1, max=x.shape[1] / 10)
                + labels.clamp_max(x.shape[1] - 2).float() + x.clamp_min(-(x.shape[0] // 2)))


def test_clamp_bounds_computed_from_dynamic_sizes():
    """``labels.clamp(max=x.shape[1] - 1)`` (multi-margin and NLL-style label clipping) was refused with "a
    tensor-valued argument is not supported here" when the dim is dynamic: the bound is a size computed at run
    time; it goes the tensor-bound way now, exact, and the dims stay dynamic."""
    model = _ClampBySize()
    ported = porter.convert(model, torch.randn(4, 7), io_layout="torch")
    assert {(d["input"], d["axis"]) for d in ported.dynamic_dims} == {(0, 0), (0, 1)}
    for shape in ((4, 7), (2, 9), (3, 5)):
        x = torch.randn(*shape) * 2
        np.testing.assert_array_equal(run_ported(ported, (x,))[0], model(x).numpy())


_SWEEP_CASES = {  # refused (or crashed) in the OpInfo sweep; each forward of a (2, 3, 4) input
    "prod_all": lambda x: x.prod() + (x > 0).prod() + x.prod(dtype=torch.float64).float(),
    "norm_neg_inf": lambda x: torch.linalg.vector_norm(x, float("-inf"), dim=-1) + x.norm(float("-inf")),
    "norm_dtype": lambda x: torch.linalg.vector_norm(x, 3, dim=(0, 2), dtype=torch.float64).float(),
    "matrix_H": lambda x: x.mH + x.adjoint() + x[0].H,
    "linalg_diagonal": lambda x: torch.linalg.diagonal(x) + torch.linalg.diagonal(x, offset=1, dim1=0, dim2=2).sum(),
    "squeeze_no_dims": lambda x: torch.squeeze(x[:, :1], ()) * 2 + torch.squeeze(x[:1, :1], (0, 1)),
}


class SweepCase(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        return _SWEEP_CASES[self.name](x)


@pytest.mark.parametrize("name", sorted(_SWEEP_CASES))
def test_ops_the_opinfo_sweep_found_refused(name):
    """``x.prod()`` (no dim), ``vector_norm`` with ``ord=-inf`` or a ``dtype``, ``matrix_H``, ``linalg.diagonal``,
    and ``squeeze(x, ())`` (squeezes nothing; was refused as a "dynamic dim"), each at two sizes against torch."""
    model = SweepCase(name)
    ported = porter.convert(model, torch.randn(2, 3, 4), io_layout="torch")
    for shape in ((2, 3, 4), (3, 3, 5)):
        x = torch.randn(*shape)
        want = model(x)
        got = run_ported(ported, (x,))[0]
        assert got.shape == tuple(want.shape) and str(got.dtype) == str(want.dtype).replace("torch.", "")
        np.testing.assert_allclose(got, want.numpy(), rtol=2e-6, atol=1e-6)


_ZERO_D = {  # reductions over dim 0 / -1 of a 0-d tensor (torch accepts them); were internal errors
    "sum_mean": lambda x: torch.sum(x, 0) + torch.sum(x, -1, keepdim=True) + torch.mean(x, (0,)),
    "amax_amin_logsumexp": lambda x: torch.amax(x, 0) + torch.amin(x, (-1,), keepdim=True) + torch.logsumexp(x, 0),
    "any_all_count": lambda x: (torch.any(x > 0, 0) | torch.all(x > 1, -1)).float() + torch.count_nonzero(x, 0),
    "argmax_max_dim": lambda x: (torch.argmax(x, 0) + torch.argmin(x, -1, keepdim=True)).float()
    + torch.max(x, 0).values + torch.min(x, -1, keepdim=True).indices.float(),
    "prod_var_norm": lambda x: x.prod(0) + x.var(0, correction=0) + x.norm(dim=0),
}


class ZeroD(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        return _ZERO_D[self.name](x)


@pytest.mark.parametrize("name", sorted(_ZERO_D))
def test_reductions_over_a_0d_tensors_dim(name):
    model = ZeroD(name)
    ported = porter.convert(model, torch.tensor(1.5), io_layout="torch")
    for value in (1.5, -0.25, 0.0):
        x = torch.tensor(value)
        got, want = run_ported(ported, (x,))[0], model(x).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_dim_of_a_0d_tensor_where_an_axis_is_needed_is_refused_clearly():
    class Softmax0d(nn.Module):
        def forward(self, x):
            return x.softmax(0)

    with pytest.raises(NotImplementedError, match="dim 0 of a 0-d tensor"):
        porter.convert(Softmax0d(), torch.tensor(1.5), io_layout="torch")
