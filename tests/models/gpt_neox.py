"""A twin of transformers' ``GPTNeoXModel`` (module structure and ``state_dict`` names: ``embed_in``,
``layers.<i>.input_layernorm``, ``layers.<i>.post_attention_layernorm``, ``layers.<i>.attention.query_key_value``,
``layers.<i>.attention.dense``, ``layers.<i>.mlp.dense_h_to_4h`` / ``dense_4h_to_h``, ``final_layer_norm``; the
causal ``bias`` and rotary ``inv_freq`` buffers non-persistent, as in current transformers), small sizes.

Stresses: the fused QKV projection split by ``view(B, L, heads, 3 * head_size)`` and slicing the last dim (not
``chunk`` over the hidden dim), partial rotary embeddings (``rotary_pct``: only the first ``rotary_ndims`` of each head
rotate, the rest pass through and are ``cat``-ed back), cos/sin built from ``arange(seq_len)`` and gathered by
position ids, the causal mask sliced from a ``tril`` buffer and applied with ``torch.where`` against ``finfo.min``,
an additive padding mask, softmax in float32, and the parallel residual (``x + attn(ln1(x)) + mlp(ln2(x))``) or the
sequential one (``use_parallel_residual=False``).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
    cos, sin = cos[position_ids].unsqueeze(1), sin[position_ids].unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class GPTNeoXRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, seq_len):
        t = torch.arange(seq_len, device=x.device, dtype=torch.int64).type_as(self.inv_freq)
        emb = torch.cat((torch.outer(t, self.inv_freq),) * 2, dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class GPTNeoXAttention(nn.Module):
    def __init__(self, hidden, heads, rotary_pct, max_positions):
        super().__init__()
        self.num_attention_heads, self.hidden_size = heads, hidden
        self.head_size = hidden // heads
        self.rotary_ndims = int(self.head_size * rotary_pct)
        causal = torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, max_positions, max_positions), persistent=False)
        self.rotary_emb = GPTNeoXRotaryEmbedding(self.rotary_ndims)
        self.norm_factor = math.sqrt(self.head_size)
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.attention_dropout = nn.Dropout(0.0)

    def forward(self, hidden_states, attention_mask, position_ids):
        qkv = self.query_key_value(hidden_states)
        qkv = qkv.view(*qkv.size()[:-1], self.num_attention_heads, 3 * self.head_size)
        hs = self.head_size
        query = qkv[..., :hs].permute(0, 2, 1, 3)
        key = qkv[..., hs: 2 * hs].permute(0, 2, 1, 3)
        value = qkv[..., 2 * hs:].permute(0, 2, 1, 3)
        q_rot, q_pass = query[..., : self.rotary_ndims], query[..., self.rotary_ndims:]
        k_rot, k_pass = key[..., : self.rotary_ndims], key[..., self.rotary_ndims:]
        cos, sin = self.rotary_emb(value, seq_len=key.shape[-2])
        query, key = apply_rotary_pos_emb(q_rot, k_rot, cos, sin, position_ids)
        query, key = torch.cat((query, q_pass), dim=-1), torch.cat((key, k_pass), dim=-1)
        output = self._attn(query, key, value, attention_mask)
        output = output.permute(0, 2, 1, 3).contiguous()
        return self.dense(output.view(output.size(0), output.size(1), self.hidden_size))

    def _attn(self, query, key, value, attention_mask):
        batch, heads, q_len, dim = query.size()
        k_len = key.size(-2)
        causal = self.bias[:, :, k_len - q_len: k_len, :k_len]
        query = query.reshape(batch * heads, q_len, dim)
        key = key.reshape(batch * heads, k_len, dim)
        scores = torch.zeros(batch * heads, q_len, k_len, dtype=query.dtype, device=key.device)
        scores = torch.baddbmm(scores, query, key.transpose(1, 2), beta=1.0, alpha=1.0 / self.norm_factor)
        scores = scores.view(batch, heads, q_len, k_len)
        mask_value = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype).to(scores.device)
        scores = torch.where(causal, scores, mask_value)
        if attention_mask is not None:
            scores = scores + attention_mask
        weights = nn.functional.softmax(scores, dim=-1).to(value.dtype)
        return torch.matmul(self.attention_dropout(weights), value)


class GPTNeoXMLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(hidden, intermediate)
        self.dense_4h_to_h = nn.Linear(intermediate, hidden)
        self.act = nn.GELU()

    def forward(self, hidden_states):
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(hidden_states)))


class GPTNeoXLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, rotary_pct, max_positions, use_parallel_residual):
        super().__init__()
        self.use_parallel_residual = use_parallel_residual
        self.input_layernorm = nn.LayerNorm(hidden, eps=1e-5)
        self.post_attention_layernorm = nn.LayerNorm(hidden, eps=1e-5)
        self.post_attention_dropout, self.post_mlp_dropout = nn.Dropout(0.0), nn.Dropout(0.0)
        self.attention = GPTNeoXAttention(hidden, heads, rotary_pct, max_positions)
        self.mlp = GPTNeoXMLP(hidden, intermediate)

    def forward(self, hidden_states, attention_mask, position_ids):
        attn_output = self.post_attention_dropout(
            self.attention(self.input_layernorm(hidden_states), attention_mask, position_ids))
        if self.use_parallel_residual:
            mlp_output = self.post_mlp_dropout(self.mlp(self.post_attention_layernorm(hidden_states)))
            return mlp_output + attn_output + hidden_states
        attn_output = attn_output + hidden_states
        return self.post_mlp_dropout(self.mlp(self.post_attention_layernorm(attn_output))) + attn_output


class GPTNeoXModel(nn.Module):
    """``forward(input_ids, attention_mask=None)`` -> ``last_hidden_state`` (B, L, hidden); mask (B, L) of 0/1."""

    def __init__(self, vocab_size=64, hidden=32, heads=2, intermediate=48, layers=2, rotary_pct=0.25,
                 max_positions=32, use_parallel_residual=True):
        super().__init__()
        self.embed_in = nn.Embedding(vocab_size, hidden)
        self.emb_dropout = nn.Dropout(0.0)
        self.layers = nn.ModuleList(
            GPTNeoXLayer(hidden, heads, intermediate, rotary_pct, max_positions, use_parallel_residual)
            for _ in range(layers))
        self.final_layer_norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, input_ids, attention_mask=None):
        batch, length = input_ids.shape
        position_ids = torch.arange(0, length, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        hidden_states = self.emb_dropout(self.embed_in(input_ids))
        if attention_mask is not None:
            attention_mask = attention_mask.view(batch, -1)[:, None, None, :].to(hidden_states.dtype)
            attention_mask = (1.0 - attention_mask) * torch.finfo(hidden_states.dtype).min
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, position_ids)
        return self.final_layer_norm(hidden_states)


def gpt_neox_small():
    return GPTNeoXModel()


def gpt_neox_sequential_small():
    """Pythia-style configs use the parallel residual; this is the other form, with full rotary (rotary_pct 1)."""
    return GPTNeoXModel(rotary_pct=1.0, use_parallel_residual=False)
