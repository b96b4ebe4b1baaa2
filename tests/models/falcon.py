"""Twin of transformers' ``FalconForCausalLM`` (eager attention, written here from the reference's structure):
multi-query attention (one key/value head, ``query_key_value`` split by ``view(..., heads + 2, head_dim)``),
the parallel attention + MLP residual of Falcon-7B, rotary embeddings, or ALiBi (``alibi=True``: per-head slopes
times the cumulative positions of the padding mask, rounded through bfloat16 as the reference does, added before
the ``1/sqrt(head_dim)`` scale), the causal mask combined with the padding mask as ``finfo.min``, GELU MLP,
tied ``lm_head``. Module and ``state_dict`` names are transformers' (``transformer.word_embeddings``,
``transformer.h.0.self_attention.query_key_value``, ``transformer.h.0.mlp.dense_h_to_4h``, ``transformer.ln_f``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class FalconConfig:
    def __init__(self, vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 layer_norm_epsilon=1e-5, multi_query=True, parallel_attn=True, bias=False, alibi=False,
                 rope_theta=10000.0, attention_dropout=0.0, hidden_dropout=0.0):
        self.__dict__.update({k: v for k, v in locals().items() if k != "self"})
        self.head_dim = hidden_size // num_attention_heads
        self.rotary = not alibi


def build_alibi_tensor(attention_mask, num_heads, dtype):
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None].bfloat16() * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class FalconRotaryEmbedding(nn.Module):
    """cos/sin of the positions, computed per call (the reference caches them in non-persistent buffers)."""

    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.dim, self.base = dim, base

    def forward(self, x, position_ids):
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        freqs = position_ids[:, :, None].float() * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class FalconAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.multi_query = config.multi_query
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.rotary_emb = FalconRotaryEmbedding(self.head_dim, config.rope_theta) if config.rotary else None
        qkv_out_dim = self.hidden_size + 2 * self.head_dim if config.multi_query else 3 * self.hidden_size
        self.query_key_value = nn.Linear(self.hidden_size, qkv_out_dim, bias=config.bias)
        self.dense = nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias)
        self.attention_dropout = nn.Dropout(config.attention_dropout)
        self.num_kv_heads = 1 if config.multi_query else self.num_heads

    def _split_heads(self, fused_qkv):
        batch_size, seq_length, _ = fused_qkv.shape
        if not self.multi_query:
            fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads, 3, self.head_dim)
            return fused_qkv[..., 0, :], fused_qkv[..., 1, :], fused_qkv[..., 2, :]
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads + 2, self.head_dim)
        return fused_qkv[..., :-2, :], fused_qkv[..., [-2], :], fused_qkv[..., [-1], :]

    def forward(self, hidden_states, alibi, attention_mask, position_ids):
        query_layer, key_layer, value_layer = self._split_heads(self.query_key_value(hidden_states))
        batch_size, query_length, _, _ = query_layer.shape
        query_layer = query_layer.transpose(1, 2).reshape(batch_size, self.num_heads, query_length, self.head_dim)
        key_layer = key_layer.transpose(1, 2).reshape(batch_size, self.num_kv_heads, query_length, self.head_dim)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size, self.num_kv_heads, query_length,
                                                          self.head_dim)
        if alibi is None:
            cos, sin = self.rotary_emb(value_layer, position_ids)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            query_layer = query_layer * cos + rotate_half(query_layer) * sin
            key_layer = key_layer * cos + rotate_half(key_layer) * sin
            attention_scores = query_layer @ key_layer.transpose(-1, -2)
            attention_scores /= math.sqrt(self.head_dim)
            attention_scores = F.softmax(attention_scores + attention_mask, dim=-1, dtype=hidden_states.dtype)
            attn_output = attention_scores @ value_layer
        else:
            matmul_result = query_layer @ key_layer.transpose(-1, -2)
            attention_scores = matmul_result.view(batch_size, self.num_heads, query_length, query_length)
            input_dtype = attention_scores.dtype
            if input_dtype in (torch.float16, torch.bfloat16):
                attention_scores = attention_scores.to(torch.float32)
            attention_logits = attention_scores + alibi.view(batch_size, self.num_heads, 1, -1)
            attention_logits *= self.inv_norm_factor
            attention_probs = F.softmax(attention_logits + attention_mask, dim=-1, dtype=hidden_states.dtype)
            attention_probs = self.attention_dropout(attention_probs)
            attn_output = attention_probs.view(batch_size, self.num_heads, query_length, query_length) @ value_layer
        attn_output = attn_output.view(batch_size, self.num_heads, query_length, self.head_dim)
        attn_output = attn_output.permute(0, 2, 1, 3).reshape(batch_size, query_length,
                                                              self.num_heads * self.head_dim)
        return self.dense(attn_output)


class FalconMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, 4 * config.hidden_size, bias=config.bias)
        self.act = nn.GELU()
        self.dense_4h_to_h = nn.Linear(4 * config.hidden_size, config.hidden_size, bias=config.bias)

    def forward(self, x):
        return self.dense_4h_to_h(self.act(self.dense_h_to_4h(x)))


def dropout_add(x, residual, prob, training):
    return residual + F.dropout(x, p=prob, training=training)


class FalconDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.self_attention = FalconAttention(config)
        self.mlp = FalconMLP(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        if not config.parallel_attn:
            self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)

    def forward(self, hidden_states, alibi, attention_mask, position_ids):
        residual = hidden_states
        attention_layernorm_out = self.input_layernorm(hidden_states)
        attention_output = self.self_attention(attention_layernorm_out, alibi, attention_mask, position_ids)
        if self.config.parallel_attn:
            mlp_layernorm_out = attention_layernorm_out
        else:
            residual = dropout_add(attention_output, residual, self.config.attention_dropout, self.training)
            mlp_layernorm_out = self.post_attention_layernorm(residual)
        mlp_output = self.mlp(mlp_layernorm_out)
        if self.config.parallel_attn:
            mlp_output += attention_output
        return dropout_add(mlp_output, residual, self.config.hidden_dropout, self.training)


def _causal_4d_mask(attention_mask, dtype):
    """(batch, 1, query, key): 0 where attended, ``finfo(dtype).min`` above the diagonal and at padded keys."""
    batch_size, length = attention_mask.shape
    minimum = torch.finfo(dtype).min
    causal = torch.full((length, length), minimum)
    positions = torch.arange(length)
    causal.masked_fill_(positions < (positions + 1).view(length, 1), 0)
    causal = causal.to(dtype)[None, None, :, :].expand(batch_size, 1, length, length)
    padded = 1.0 - attention_mask[:, None, None, :].expand(batch_size, 1, length, length).to(dtype)
    return causal.masked_fill(padded.bool(), minimum)


class FalconModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.use_alibi = config.alibi
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.h = nn.ModuleList([FalconDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)

    def forward(self, input_ids, attention_mask=None):
        hidden_states = self.word_embeddings(input_ids)
        batch_size, seq_length = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), device=hidden_states.device)
        alibi = None
        if self.use_alibi:
            alibi = build_alibi_tensor(attention_mask, self.num_heads, dtype=hidden_states.dtype)
        position_ids = torch.arange(seq_length, dtype=torch.long, device=hidden_states.device).unsqueeze(0)
        mask = _causal_4d_mask(attention_mask, hidden_states.dtype)
        for block in self.h:
            hidden_states = block(hidden_states, alibi, mask, position_ids)
        return self.ln_f(hidden_states)


class FalconForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transformer = FalconModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.word_embeddings.weight

    def forward(self, input_ids, attention_mask=None):
        return self.lm_head(self.transformer(input_ids, attention_mask))


def falcon_small() -> nn.Module:
    """Falcon-7B's layout: multi-query, parallel attention, rotary, no biases. 4 heads of 8."""
    return FalconForCausalLM(FalconConfig())


def falcon_alibi_small() -> nn.Module:
    """Falcon-RW's layout: ALiBi, full multi-head attention, sequential residuals, biases; 6 heads (not a power
    of two: the extra slopes)."""
    return FalconForCausalLM(FalconConfig(hidden_size=48, num_attention_heads=6, multi_query=False,
                                          parallel_attn=False, bias=True, alibi=True))
