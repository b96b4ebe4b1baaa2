"""Complex tensors as rotary position embeddings use them (Meta's LLaMA reference ``apply_rotary_emb``:
``polar``, ``view_as_complex``, complex products, ``view_as_real``), against torch at two sequence lengths, with the
complex table as a plain attribute (a constant of the capture) and as a buffer (saved and loaded), and gradients."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from porter.compare import assert_close
from tests.converter_check import check_converted, run_ported

torch.manual_seed(0)


def precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    freqs = torch.outer(torch.arange(end), freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * freqs_cis).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * freqs_cis).flatten(3).type_as(xk))


class RotaryAttention(nn.Module):
    def __init__(self, dim=32, heads=4, max_len=16, as_buffer=False):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        table = precompute_freqs_cis(self.head_dim, max_len * 2)
        if as_buffer:
            self.register_buffer("freqs_cis", table)
        else:
            self.freqs_cis = table

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, self.heads, self.head_dim) for w in (self.wq, self.wk, self.wv))
        q, k = apply_rotary_emb(q, k, self.freqs_cis[:t])
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, -1))


@pytest.mark.parametrize("as_buffer", [False, True])
def test_rotary_attention_matches_torch_at_two_lengths(as_buffer, tmp_path):
    model = RotaryAttention(as_buffer=as_buffer).eval()
    ported = check_converted(model, torch.randn(2, 7, 32), torch.randn(1, 11, 32))
    porter.save(ported, tmp_path / "rope")
    loaded = porter.load(tmp_path / "rope")
    x = torch.randn(3, 9, 32)
    with torch.no_grad():
        want = model(x).numpy()
    (got,) = run_ported(loaded, (x,))
    assert_close(got, want, what="loaded")


def test_rotary_attention_gradients():
    from tests.converters.test_ops_math import _assert_input_grads

    model = RotaryAttention().eval()
    x = torch.randn(2, 6, 32)
    ported = porter.convert(model, x, io_layout="torch")
    _assert_input_grads(ported, model, (x,))


class ComplexOps(nn.Module):
    def forward(self, a, b):
        z = torch.complex(a, b)
        w = torch.polar(a.abs(), b)
        # angle away from the branch cut's signed zeros (a sum's -0.0 vs +0.0 flips it by 2 pi)
        return (torch.view_as_real(z * w + z), (z * w).real, (z - w).imag, z.angle(), a.angle(), z.conj().imag + 0,
                torch.view_as_real(z.conj_physical()))


def test_complex_construction_and_parts_match_torch():
    check_converted(ComplexOps().eval(), (torch.randn(2, 3), torch.randn(2, 3)), (torch.randn(4, 5), torch.randn(4, 5)))


def test_view_as_complex_needs_a_last_dim_of_two():
    from porter.converters.ops.complex import k_complex

    with pytest.raises(ValueError, match="last dim must have size 2"):
        k_complex(mx.zeros((2, 3)), fn="from_pair")
