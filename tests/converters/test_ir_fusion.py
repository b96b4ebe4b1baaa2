"""Graph rewrites before conversion (converters/ir_fusion.py): F.normalize's ops (and x / x.norm(...)) become one
``l2_normalize`` node on any dim, torch is the oracle for values and gradients; chains that are not an L2
normalisation of the same tensor (another norm, a second reader of the norm, a clamp with a max) are left alone and
still match torch; the switch off keeps the four ops."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from tests.converter_check import check_converted

import porter
from porter.converters import ir_fusion


def _kernels(ported) -> list:
    return [node["kernel"] for node in ported.graph["nodes"]]


class Normalize(nn.Module):
    def __init__(self, dim=-1, eps=1e-12):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x):
        return F.normalize(x, dim=self.dim, eps=self.eps) * 2.0


class CosineAttention(nn.Module):
    """Swin V2's cosine attention: q and k normalised over the head dim after a permute."""

    def __init__(self, c=32, heads=4):
        super().__init__()
        self.qkv, self.heads = nn.Linear(c, 3 * c), heads

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        return (attn.softmax(-1) @ v).transpose(1, 2).reshape(b, n, c)


class NormDivide(nn.Module):  # CLIP's normalised embeddings
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True)


class NormReadTwice(nn.Module):
    def forward(self, x):
        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        return x / n.clamp_min(1e-6) + n


class OtherNorms(nn.Module):
    def forward(self, x, y):
        a = x / torch.linalg.vector_norm(x, ord=1, dim=-1, keepdim=True).clamp_min(1e-6)  # an L1 norm
        b = x / torch.linalg.vector_norm(y, dim=-1, keepdim=True).clamp_min(1e-6)  # another tensor's norm
        c = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp(1e-6, 5.0)  # a clamp with a max
        return a + b + c


def _x(*shape, seed=0, zero_row=True):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3
    if zero_row:
        x.view(-1, shape[-1])[0] = 0
    return x


@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_normalize_fused_on_any_dim(dim):
    ported = check_converted(Normalize(dim).eval(), _x(4, 6, 9), _x(2, 6, 9, seed=1))
    kernels = _kernels(ported)
    assert "l2_normalize" in kernels and "vector_norm" not in kernels and "clamp" not in str(kernels)


def test_channels_first_normalize_runs_over_channels_last():
    """dim=1 of a conv's NCHW output is the last axis of Porter's NHWC array: the native row kernel."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3), Normalize(dim=1)).eval()
    ported = check_converted(model, _x(2, 3, 9, 11, zero_row=False), io_layout="mlx")
    node = next(n for n in ported.graph["nodes"] if n["kernel"] == "l2_normalize")
    assert node["attrs"]["axis"] == 3


def test_cosine_attention_matches_torch_with_gradients():
    torch.manual_seed(0)
    model = CosineAttention().eval()
    x = _x(2, 49, 32, zero_row=False)
    ported = check_converted(model, x, _x(3, 49, 32, seed=2, zero_row=False))
    assert _kernels(ported).count("l2_normalize") == 2 and "vector_norm" not in _kernels(ported)
    g = torch.randn(2, 49, 32, generator=torch.Generator().manual_seed(3))
    leaf = x.clone().requires_grad_(True)
    model(leaf).backward(g)
    _, (dx,) = mx.vjp(lambda a: [ported(a)], [mx.array(x.numpy())], [mx.array(g.numpy())])
    np.testing.assert_allclose(np.array(dx), leaf.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_norm_divide_fused():
    ported = check_converted(NormDivide().eval(), _x(5, 17, zero_row=False), _x(3, 17, seed=4, zero_row=False))
    assert "l2_normalize" in _kernels(ported) and "vector_norm" not in _kernels(ported)


def test_norm_with_a_second_reader_left_alone():
    ported = check_converted(NormReadTwice().eval(), _x(5, 17), _x(3, 17, seed=4))
    assert "l2_normalize" not in _kernels(ported) and "vector_norm" in _kernels(ported)


def test_other_norm_patterns_left_alone():
    ported = check_converted(OtherNorms().eval(), (_x(5, 17), _x(5, 17, seed=5)))
    assert "l2_normalize" not in _kernels(ported)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_models_match_torch(dtype):
    model = Normalize(-1).eval().to(dtype)
    ported = porter.convert(model, (_x(4, 40).to(dtype),))
    for x in (_x(4, 40).to(dtype), _x(3, 40, seed=6).to(dtype)):
        got = ported(mx.array(x.float().numpy()).astype(mx.float16 if dtype == torch.float16 else mx.bfloat16))
        want = model(x).double().numpy()
        np.testing.assert_allclose(np.array(got.astype(mx.float32)), want, rtol=1e-2, atol=1e-2, equal_nan=True)


def test_switch_off_keeps_the_ops(monkeypatch):
    monkeypatch.setattr(ir_fusion, "L2_NORMALIZE", False)
    ported = check_converted(Normalize().eval(), _x(4, 9))
    assert "l2_normalize" not in _kernels(ported) and "vector_norm" in _kernels(ported)


def test_saved_port_reloads(tmp_path):
    model = CosineAttention().eval()
    ported = porter.convert(model, (_x(2, 49, 32, zero_row=False),))
    porter.save(ported, tmp_path / "port")
    loaded = porter.load(tmp_path / "port")
    x = _x(2, 49, 32, seed=8, zero_row=False)
    np.testing.assert_allclose(np.array(loaded(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-4,
                               atol=1e-5)
