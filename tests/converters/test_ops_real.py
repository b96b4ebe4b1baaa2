"""Ops real models use (issue 11): bitwise/logical mask ops, prelu, ``scalar ** t``, reshape_as/expand_as, diff,
min/max of two tensors, where with scalar branches, weight norm; torch run on the same data in every test.

Exact ops (masks, integer bits, min/max, where, prelu, diff) compare exactly; the rest at 1e-6 relative.
"""

import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import weight_norm
from torch.nn.utils.parametrizations import weight_norm as param_weight_norm

import porter
from tests.converter_check import assert_matches, check_converted

torch.manual_seed(0)


def _x(*shape, nan=False):
    x = torch.randn(*shape)
    if nan:
        x.view(-1)[::7] = float("nan")
    return x


class Masks(nn.Module):
    """Every form export records for &, |, ^, ~ on bool masks (BERT/GPT/DETR-style) and on integers."""

    def forward(self, x, y):
        a, b = x > 0, y < 0.5
        m = a & b
        m2 = (a | b) ^ (x < -1)
        m3 = torch.bitwise_and(a, y > x) | torch.bitwise_or(~a, b) ^ torch.bitwise_xor(a, True)
        m4 = a.clone()
        m4 &= b
        m4 |= x > 1
        m4 ^= y > 1
        i = (x * 4).long()
        j = (y * 4).long()
        bits = (i & j) + (i | 3) + (i ^ j) + torch.bitwise_not(i) + (i & 6) + (i ^ 6) + torch.bitwise_xor(j, 5)
        bits = bits + torch.bitwise_and(i, 3) + torch.bitwise_or(i, 1) + torch.bitwise_xor(i, j)
        k = i.clone()
        k &= 5
        k |= j
        k |= 8
        k ^= 3
        k ^= j
        k.bitwise_and_(j).bitwise_or_(i).bitwise_xor_(2).bitwise_and_(7).bitwise_or_(16).bitwise_xor_(i)
        k.bitwise_not_()
        n = torch.logical_xor(x > 0, y) & ~torch.logical_xor(a, b)
        return m, m2, m3, m4, bits, k, n, a  # ``a`` last: an in-place op on a clone must not change it


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_bitwise_and_logical_ops(io_layout):
    ported = check_converted(Masks().eval(), (_x(2, 3, 4, 5), _x(2, 3, 4, 5)), (_x(1, 3, 7, 2), _x(1, 3, 7, 2)),
                             io_layout=io_layout, rel=0)
    ops = {n["op"] for n in ported.graph["nodes"]}
    forms = [f"aten.{op}.{overload}" for op in ("__and__", "__or__", "__xor__", "__iand__", "__ior__", "__ixor__",
                                               "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_and_",
                                               "bitwise_or_", "bitwise_xor_")
             for overload in ("Tensor", "Scalar")]
    forms += ["aten.bitwise_not.default", "aten.bitwise_not_.default", "aten.logical_xor.default"]
    assert set(forms) - ops == set()


def test_in_place_bitwise_ops_need_no_clone_to_be_right():
    class Chain(nn.Module):
        def forward(self, x):
            m = x > 0
            n = m & (x < 1)  # not in place: m stays as it was
            m |= x < -1
            return m, n

    check_converted(Chain().eval(), _x(2, 9), _x(3, 4), rel=0)


@pytest.mark.parametrize("channels", [1, 4])
@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_prelu(channels, io_layout):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.PReLU(channels), nn.Flatten(1), nn.Linear(4 * 25, 6),
                          nn.PReLU()).eval()
    with torch.no_grad():
        model[1].weight.copy_(torch.linspace(-0.5, 0.7, channels))
        model[4].weight.fill_(-0.3)
    ported = check_converted(model, _x(2, 3, 5, 5, nan=True), _x(3, 3, 5, 5), io_layout=io_layout, rel=1e-6)
    assert {"aten.prelu.default"} <= {n["op"] for n in ported.graph["nodes"]}
    report = porter.validate(model, ported, [(_x(2, 3, 5, 5),)], grads=True, rtol=1e-5)
    assert report.ok, str(report)
    assert {r["name"] for r in report.grads["parameters"]} >= {"1.weight", "4.weight"}


def test_prelu_after_a_channel_shuffle():
    """A channel shuffle (view, transpose, reshape) before a per-channel PReLU leaves the channel dim symbolic in the
    capture (``2*(c//2)``): it converted only where the count was a number (the random-network fuzzer found it).
    The kernel checks the count per call; the port follows torch at a second size."""

    class Shuffled(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = nn.PReLU(6)

        def forward(self, x):
            n, c, h, w = x.shape
            return self.act(x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w))

    model = Shuffled().eval()
    with torch.no_grad():
        model.act.weight.copy_(torch.linspace(-0.5, 0.7, 6))
    check_converted(model, _x(2, 6, 5, 7), _x(3, 6, 4, 9), rel=1e-6)
    from porter.converters.ops.elementwise import k_prelu
    import mlx.core as mx

    with pytest.raises(ValueError, match="prelu: the input has 8 channels"):
        k_prelu(mx.zeros((1, 4, 4, 8)), mx.zeros((6,)), axis=3)


@pytest.mark.parametrize("shape", [(7,), (2, 3), (2, 3, 4, 5, 2)])
def test_prelu_shapes_exact(shape):
    channels = shape[1] if len(shape) > 1 else 1
    model = nn.PReLU(channels).eval()
    with torch.no_grad():
        model.weight.copy_(torch.linspace(-2.0, 0.5, channels))
    check_converted(model, _x(*shape, nan=True), rel=0)


class Sinusoid(nn.Module):
    """``10000 ** (2i/d)`` with a float exponent, an integer exponent (float base) and an int base."""

    def forward(self, x):
        d = x.shape[-1]
        i = torch.arange(d)
        inv = 1.0 / (10000.0 ** (2 * (i // 2) / d))
        return x * inv, 2.0 ** i, 3 ** (i % 5), 10000.0 ** x.clamp(-2, 2)


def test_pow_scalar():
    ported = check_converted(Sinusoid().eval(), _x(2, 3, 8), _x(1, 5, 6), rel=1e-6)
    assert "aten.pow.Scalar" in {n["op"] for n in ported.graph["nodes"]}
    out = ported(porter.converters.runtime.mx.array(np.zeros((1, 1, 4), np.float32)))
    assert [str(o.dtype) for o in out] == ["mlx.core.float32", "mlx.core.float32", "mlx.core.int64",
                                           "mlx.core.float32"]


class AsOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x, y):
        z = self.conv(x)                                         # channels-last inside the port
        flat = z.reshape_as(y)                                   # (N, 4, H*W): torch's element order
        g = z.mean((2, 3), keepdim=True).expand_as(z)            # (N, 4, 1, 1) -> (N, 4, H, W)
        v = y.view_as(y.transpose(1, 2).contiguous().transpose(1, 2))
        b = torch.ones(4, 1, 1).expand_as(z)                    # fewer dims than other
        return flat + y, g * z, v, b


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_reshape_as_and_expand_as_follow_the_other_tensor_at_two_sizes(io_layout):
    ported = check_converted(AsOps().eval(), (_x(2, 3, 4, 5), _x(2, 4, 20)), (_x(3, 3, 6, 3), _x(3, 4, 18)),
                             io_layout=io_layout, rel=1e-6)
    ops = {n["op"] for n in ported.graph["nodes"]}
    assert {"aten.reshape_as.default", "aten.expand_as.default", "aten.view_as.default"} <= ops


class Diffs(nn.Module):
    def forward(self, x):
        return (torch.diff(x), torch.diff(x, n=2, dim=1), torch.diff(x, dim=0, prepend=x[:1] * 2, append=x[-1:]),
                torch.diff(x > 0, dim=-1), torch.diff((x * 3).long(), n=3, dim=2), torch.diff(x, n=0))


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_diff(io_layout):
    ported = check_converted(Diffs().eval(), _x(3, 5, 6, nan=True), _x(2, 4, 9), io_layout=io_layout, rel=0)
    assert "aten.diff.default" in {n["op"] for n in ported.graph["nodes"]}


class MinMaxWhere(nn.Module):
    def forward(self, x, y):
        i = (x * 3).long()
        return (torch.min(x, y), torch.max(x, y), torch.max(x, y[:1]), torch.min(i, (y * 3).long()),
                torch.where(x > 0, x, 0.0), torch.where(x > 0, -1.5, y), torch.where(x > y, 1.0, 0.0),
                torch.where(x > y, 2, -3), torch.where(x > 0, i, 7), torch.where(x > 0, i, 0.5),
                torch.where(x > 0, True, y > 0))


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_min_max_other_and_where_scalars(io_layout):
    ported = check_converted(MinMaxWhere().eval(), (_x(2, 3, 4, 5, nan=True), _x(2, 3, 4, 5)),
                             (_x(1, 3, 3, 6), _x(1, 3, 3, 6, nan=True)), io_layout=io_layout, rel=0)
    ops = {n["op"] for n in ported.graph["nodes"]}
    assert {"aten.min.other", "aten.max.other", "aten.where.ScalarOther", "aten.where.ScalarSelf",
            "aten.where.Scalar"} <= ops


def _weight_normed(kind, module, dim):
    return weight_norm(module, dim=dim) if kind == "hook" else param_weight_norm(module, dim=dim)


@pytest.mark.parametrize("kind", ["hook", "parametrization"])
@pytest.mark.parametrize("dim", [0, 1, None, -2])
def test_weight_norm(kind, dim):
    """``torch.nn.utils.weight_norm`` (weight_g/weight_v) and the parametrization form (original0/1), a grouped
    Conv1d, a ConvTranspose1d and a Linear, for each ``dim`` (None: one norm over the whole weight)."""
    torch.manual_seed(1)
    model = nn.Sequential(_weight_normed(kind, nn.Conv1d(4, 6, 3, padding=1, groups=2), dim), nn.GELU(),
                          _weight_normed(kind, nn.ConvTranspose1d(6, 4, 4, stride=2), dim))
    model = model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("weight_g", "original0")):
                p.mul_(torch.rand_like(p) + 0.5)  # g != ||v||: the norm really matters
    ported = check_converted(model, _x(2, 4, 9), _x(1, 4, 14), rel=1e-5)
    assert "aten._weight_norm.default" in {n["op"] for n in ported.graph["nodes"]}
    assert set(ported.torch_parameters()) == set(model.state_dict())
    report = porter.validate(model, ported, [(_x(2, 4, 9),)], grads=True, rtol=1e-4)
    assert report.ok, str(report)


def test_weight_norm_linear_mlx_layout():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), param_weight_norm(nn.Conv2d(4, 4, 3, groups=4)), nn.Flatten(),
                          weight_norm(nn.Linear(4 * 4 * 4, 5))).eval()
    check_converted(model, _x(2, 3, 8, 8), io_layout="mlx", rel=1e-5)


class Remainders(nn.Module):
    """``%`` follows the divisor's sign (Python's rule), for floats and integers, scalar and tensor divisors."""

    def forward(self, x, y):
        i, j = (x * 5).long(), (y * 3).long()
        j = torch.where(j == 0, 2, j)
        a = x.clone()
        a.remainder_(0.75)
        b = x.clone()
        b.remainder_(y)
        return x % 1.5, x % -1.5, x % y, i % 4, i % -3, i % j, torch.remainder(x, y), a, b


def test_remainder():
    ported = check_converted(Remainders().eval(), (_x(2, 3, 5), _x(2, 3, 5)), (_x(1, 4, 3), _x(1, 4, 3)), rel=1e-6)
    assert {"aten.remainder.Scalar", "aten.remainder.Tensor", "aten.remainder_.Scalar",
            "aten.remainder_.Tensor"} <= {n["op"] for n in ported.graph["nodes"]}


class BuiltMasks(nn.Module):
    """Masks built in the forward (HF causal/padding masks): bool ``ones(...).tril()``, ``full`` of bool and int64,
    ``cumsum``/``sum`` of bools (int64 in torch), SDPA with a bool mask that hides every key of some queries."""

    def forward(self, x):
        t = x.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        keep = (x[..., 0] > 0.5)[:, None, None, :] & causal           # query 0 sees nothing when key 0 is out
        q = x[:, None]
        bool_mask = F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
        additive = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
        float_mask = F.scaled_dot_product_attention(q, q, q, attn_mask=additive)
        flags = torch.full((t,), True) & torch.ones(t, dtype=torch.bool)
        big = torch.full((x.shape[0], t), 2 ** 40, dtype=torch.int64) + torch.full_like(x[..., 0], 3, dtype=torch.int64)
        positions = (x[..., 1] > 0).cumsum(1)
        count = (x > 0).sum(-1) + (x > -1).prod(-1)
        return bool_mask, float_mask, flags, big, positions, count, torch.triu(causal, 1)


def test_masks_built_in_forward_keep_torch_dtypes_and_empty_rows():
    torch.manual_seed(3)
    x = torch.randn(2, 5, 4)
    x[0, 0, 0] = -1.0  # batch 0: the first query has no visible key
    check_converted(BuiltMasks().eval(), x, _x(3, 7, 4), rel=1e-6)
    with torch.no_grad():
        assert (BuiltMasks()(x)[0][0, 0, 0] == 0).all()  # the case above is really there in torch


class Rounding(nn.Module):
    """Exact elementwise ops, on values with halves, NaN and infinities."""

    def forward(self, x):
        y = x * 2.5
        y = torch.where(x > 1.8, float("inf"), torch.where(x < -1.8, float("-inf"), y))
        half = torch.round(x * 4) / 2  # exact halves: round half to even
        return (torch.floor(y), torch.ceil(y), torch.round(half), torch.round(y, decimals=1), torch.trunc(y),
                torch.frac(half + 0.25), torch.isnan(y), torch.isinf(y), torch.isfinite(y), torch.nan_to_num(y),
                torch.nan_to_num(y, nan=1.0, posinf=5.0, neginf=-5.0))


def test_rounding_and_classification_ops_exact():
    ported = check_converted(Rounding().eval(), _x(2, 3, 7, nan=True), _x(3, 4, 5), rel=0)
    assert {f"aten.{op}.default" for op in ("floor", "ceil", "round", "trunc", "frac", "isnan", "isinf", "isfinite",
                                            "nan_to_num")} | {"aten.round.decimals"} <= {
        n["op"] for n in ported.graph["nodes"]}


class Transcendental(nn.Module):
    def forward(self, x, y):
        p = torch.sigmoid(x)
        return (torch.log1p(x.abs()), torch.expm1(x), torch.log2(x.abs() + 0.1), torch.log10(x.abs() + 0.1),
                torch.erfinv(torch.tanh(x) * 0.99), torch.logit(p), torch.logit(p, eps=0.2), torch.atan2(x, y))


def test_transcendental_ops():
    ported = check_converted(Transcendental().eval(), (_x(2, 3, 7), _x(2, 3, 7)), (_x(3, 4, 5), _x(3, 4, 5)),
                             rel=2e-6)
    assert {f"aten.{op}.default" for op in ("log1p", "expm1", "log2", "log10", "erfinv", "logit", "atan2")} <= {
        n["op"] for n in ported.graph["nodes"]}


class MoreOps(nn.Module):
    """clamp with tensor bounds (NaN bound too), global max/min, GLU, repeat_interleave (GQA), outer."""

    def forward(self, x, y):
        low, high = y.mean(-1, keepdim=True) - 0.5, x.amax(-1, keepdim=True) * 0.5
        c = x.clone()
        c.clamp_(min=low)
        k = x.transpose(1, 2)
        return (torch.clamp(x, min=low, max=high), torch.clamp(x, max=y), c, x.max(), y.min(), F.glu(x, dim=1),
                F.glu(k, -1), torch.repeat_interleave(k, 2, dim=1), x.repeat_interleave(3),
                torch.outer(x[0, 0], y[0, :, 0]))


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_more_ops(io_layout):
    ported = check_converted(MoreOps().eval(), (_x(2, 4, 6, nan=True), _x(2, 4, 6)),
                             (_x(3, 6, 4), _x(3, 6, 4, nan=True)), io_layout=io_layout, rel=1e-6)
    assert {"aten.clamp.Tensor", "aten.clamp_.Tensor", "aten.max.default", "aten.min.default", "aten.glu.default",
            "aten.repeat_interleave.self_int", "aten.outer.default"} <= {n["op"] for n in ported.graph["nodes"]}


class Grids(nn.Module):
    """Coordinate grids built in forward (DETR/YOLO/deformable attention): meshgrid in both indexings."""

    def forward(self, x):
        h, w = x.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                indexing="ij")
        u, v = torch.meshgrid(torch.arange(3), torch.arange(w), indexing="xy")
        a, b, c = torch.meshgrid(torch.arange(2), torch.arange(h), torch.arange(w), indexing="ij")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch asks for an explicit indexing
            p, q = torch.meshgrid(torch.arange(h), torch.arange(3))  # aten.meshgrid.default: "ij"
        return x + ys + 2 * xs, u, v, a + b + c, p * q


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_meshgrid(io_layout):
    ported = check_converted(Grids().eval(), _x(2, 3, 4, 5), _x(1, 3, 6, 3), io_layout=io_layout, rel=0)
    assert {"aten.meshgrid.indexing", "aten.meshgrid.default"} <= {n["op"] for n in ported.graph["nodes"]}


def test_bitwise_ops_through_torchscript():
    """TorchScript records ``x & y`` as aten::__and__ too, which is not an in-place op. The oracle is the scripted
    module: TorchScript itself turns ``bitwise_xor(mask, True)`` into ``bitwise_xor(mask, 1)`` (int64)."""
    model = Masks().eval()
    example = (_x(2, 3, 4, 5), _x(2, 3, 4, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(model)  # (torch.jit.trace cannot trace bitwise_xor(bool tensor, True))
    ported = porter.convert(scripted, example, io_layout="torch")
    assert ported.graph["frontend"] == "torchscript"
    for inputs in (example, (_x(1, 3, 6, 2), _x(1, 3, 6, 2))):
        assert_matches(ported, scripted, inputs, rel=0)
