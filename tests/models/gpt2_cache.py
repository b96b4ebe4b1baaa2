"""GPT-2 with transformers' legacy KV cache (``past_key_values`` as a tuple of ``(key, value)`` per layer, each
``(N, heads, past, head_dim)``; ``use_cache=True`` returns the new cache beside the logits): the decoding loop Hugging
Face runs without a ``Cache`` object. Same module tree and ``state_dict`` names as :mod:`tests.models.gpt2`
(``transformer.h.<i>.attn.c_attn``, ``lm_head`` tied to ``wte``); attention as transformers' eager
``GPT2Attention``: the layer's past keys and values concatenated before the new ones (``torch.cat(..., dim=-2)``),
the causal mask sliced from the non-persistent ``attn.bias`` buffer at ``[k_len - q_len : k_len, :k_len]``,
positions from ``past_length``.

A decoder port is two ports, as optimum's ``decoder_model`` / ``decoder_with_past_model``: the prefill (no past)
and the decode step (a past of any length, one or more new tokens).
"""

from __future__ import annotations

import torch
from torch import nn

from ._common import randomize_
from .text import GPT2MLP, Conv1D


class CachedGPT2Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, max_positions: int):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool))
                             .view(1, 1, max_positions, max_positions), persistent=False)
        self.num_heads, self.head_dim = heads, hidden // heads
        self.c_attn = Conv1D(3 * hidden, hidden)
        self.c_proj = Conv1D(hidden, hidden)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _split(self, x):
        return x.view(x.size()[:-1] + (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, layer_past=None, use_cache=False):
        query, key, value = self.c_attn(hidden_states).split(self.num_heads * self.head_dim, dim=2)
        query, key, value = self._split(query), self._split(key), self._split(value)
        if layer_past is not None:
            past_key, past_value = layer_past
            key, value = torch.cat((past_key, key), dim=-2), torch.cat((past_value, value), dim=-2)
        present = (key, value) if use_cache else None
        weights = torch.matmul(query, key.transpose(-1, -2)) / (value.size(-1) ** 0.5)
        q_len, k_len = query.size(-2), key.size(-2)
        causal = self.bias[:, :, k_len - q_len:k_len, :k_len]
        weights = torch.where(causal, weights, torch.full([], torch.finfo(weights.dtype).min, dtype=weights.dtype))
        weights = self.attn_dropout(nn.functional.softmax(weights, dim=-1))
        out = torch.matmul(weights, value).permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.num_heads * self.head_dim,))
        return self.resid_dropout(self.c_proj(out)), present


class CachedGPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int, max_positions: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = CachedGPT2Attention(hidden, heads, max_positions)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = GPT2MLP(4 * hidden, hidden)

    def forward(self, x, layer_past=None, use_cache=False):
        attended, present = self.attn(self.ln_1(x), layer_past, use_cache)
        x = x + attended
        return x + self.mlp(self.ln_2(x)), present


class CachedGPT2Model(nn.Module):
    def __init__(self, vocab: int, embed: int, layers: int, heads: int, positions: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, embed)
        self.wpe = nn.Embedding(positions, embed)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([CachedGPT2Block(embed, heads, positions) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embed, eps=1e-5)

    def forward(self, input_ids, past_key_values=None, use_cache=True):
        if past_key_values is None:
            past_length, past_key_values = 0, (None,) * len(self.h)
        else:
            past_length = past_key_values[0][0].size(-2)
        position_ids = torch.arange(past_length, input_ids.size(-1) + past_length, dtype=torch.long,
                                    device=input_ids.device).unsqueeze(0)
        hidden = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        presents = ()
        for block, layer_past in zip(self.h, past_key_values):
            hidden, present = block(hidden, layer_past, use_cache)
            presents = presents + (present,)
        return self.ln_f(hidden), (presents if use_cache else None)


class CachedGPT2LMHeadModel(nn.Module):
    """``forward(input_ids, past_key_values=None, use_cache=True)`` -> ``(logits, presents)``: logits
    ``(N, T, vocab)``, presents a tuple of ``(key, value)`` per layer, ``(N, heads, past + T, head_dim)``."""

    def __init__(self, vocab: int = 97, embed: int = 32, layers: int = 2, heads: int = 4, positions: int = 64):
        super().__init__()
        self.transformer = CachedGPT2Model(vocab, embed, layers, heads, positions)
        self.lm_head = nn.Linear(embed, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tie_weights()

    def forward(self, input_ids, past_key_values=None, use_cache=True):
        hidden, presents = self.transformer(input_ids, past_key_values, use_cache)
        return self.lm_head(hidden), presents


def gpt2_cached_small(seed: int = 0) -> CachedGPT2LMHeadModel:
    torch.manual_seed(seed)
    return randomize_(CachedGPT2LMHeadModel(), seed)
