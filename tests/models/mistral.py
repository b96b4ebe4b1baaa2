"""A twin of transformers' ``MistralModel`` / ``Qwen2Model`` as the current ``modeling_mistral.py`` writes them
(module structure and ``state_dict`` names: ``embed_tokens``, ``layers.<i>.self_attn.q_proj`` / ``k_proj`` /
``v_proj`` / ``o_proj``, ``.mlp.gate_proj`` / ``up_proj`` / ``down_proj``, ``.input_layernorm``,
``.post_attention_layernorm``, ``norm``; the ``rotary_emb.inv_freq`` buffer is not persistent), small sizes, no
cache. (``tests/models/llm_variants.py`` holds the older 4.3x Mistral with ``_prepare_4d_causal_attention_mask``.)

Stresses: RoPE from a module shared by the layers (``inv_freq[None, :, None].expand(B, -1, 1) @ positions``,
under ``torch.autocast(enabled=False)`` and ``no_grad``, ``cat``, cos/sin cast to the working dtype), ``head_dim``
apart from ``hidden // heads``, grouped-query attention (``repeat_kv``: ``expand`` then ``reshape``), the
sliding-window causal mask of ``_prepare_4d_causal_attention_mask_with_cache_position`` (``arange > cache_position``
``bitwise_or_`` ``arange <= cache_position - window``, ``causal_mask *= bool``, padded keys written back by slice
assignment of ``masked_fill``), the eager path (float32 softmax cast back) or SDPA with the float mask and an explicit
``scale``, RMSNorm in float32, the SiLU-gated MLP. Qwen2's variant: biased q/k/v, no window.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


class MistralRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class MistralRotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, base: float):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        position_ids_expanded = position_ids[:, None, :].float()
        with torch.autocast(device_type=x.device.type, enabled=False):
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim: int = 1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention_forward(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    return torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()


def sdpa_attention_forward(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0):
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    causal_mask = attention_mask[:, :, :, : key.shape[-2]] if attention_mask is not None else None
    is_causal = causal_mask is None and query.shape[2] > 1
    out = F.scaled_dot_product_attention(query.contiguous(), key.contiguous(), value.contiguous(),
                                         attn_mask=causal_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal)
    return out.transpose(1, 2).contiguous()


_ATTENTION = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}


class MistralAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool, implementation: str):
        super().__init__()
        self.head_dim = head_dim
        self.num_key_value_groups = heads // kv_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = 0.0
        self.implementation = implementation
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        cos, sin = position_embeddings
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
        attn_output = self.attend(query_states, key_states, value_states, attention_mask)
        return self.o_proj(attn_output.reshape(*input_shape, -1).contiguous())

    def attend(self, query, key, value, attention_mask):
        """``(B, L, heads, head_dim)`` attention output (the twins of later models override it)."""
        return _ATTENTION[self.implementation](self, query, key, value, attention_mask,
                                               dropout=0.0 if not self.training else self.attention_dropout,
                                               scaling=self.scaling)


class MistralMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class MistralDecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, intermediate, eps, qkv_bias, implementation):
        super().__init__()
        self.self_attn = MistralAttention(hidden, heads, kv_heads, head_dim, qkv_bias, implementation)
        self.mlp = MistralMLP(hidden, intermediate)
        self.input_layernorm = MistralRMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = MistralRMSNorm(hidden, eps=eps)

    def forward(self, hidden_states, attention_mask, position_embeddings):
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states), position_embeddings, attention_mask)
        hidden_states = residual + hidden_states
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


def prepare_4d_causal_mask(attention_mask, sequence_length: int, target_length: int, dtype, cache_position,
                           batch_size: int, sliding_window: Optional[int]):
    """``(B, 1, L, L)`` float: ``finfo.min`` at future keys, keys ``window`` or more behind, padded keys."""
    min_dtype = torch.finfo(dtype).min
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype,
                             device=cache_position.device)
    diagonal_attend_mask = torch.arange(target_length, device=cache_position.device) > cache_position.reshape(-1, 1)
    if sliding_window is not None:
        sliding_attend_mask = (torch.arange(target_length, device=cache_position.device)
                               <= (cache_position.reshape(-1, 1) - sliding_window))
        diagonal_attend_mask.bitwise_or_(sliding_attend_mask)
    causal_mask *= diagonal_attend_mask
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
    if attention_mask is not None:
        causal_mask = causal_mask.clone()
        if attention_mask.shape[-1] > target_length:
            attention_mask = attention_mask[:, :target_length]
        mask_length = attention_mask.shape[-1]
        padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :].to(causal_mask.device)
        padding_mask = padding_mask == 0
        causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
    return causal_mask


def decoder_inputs(model, input_ids, attention_mask, sliding_window: Optional[int]):
    """What transformers' model forward gives its decoder layers, no cache: the token embeddings (``model
    .embed_tokens``), the 4-d causal mask, RoPE's ``(cos, sin)`` (``model.rotary_emb``) at positions ``0..L-1``."""
    inputs_embeds = model.embed_tokens(input_ids)
    cache_position = torch.arange(0, inputs_embeds.shape[1], device=inputs_embeds.device)
    causal_mask = prepare_4d_causal_mask(attention_mask, inputs_embeds.shape[1], inputs_embeds.shape[1],
                                         inputs_embeds.dtype, cache_position, inputs_embeds.shape[0], sliding_window)
    return inputs_embeds, causal_mask, model.rotary_emb(inputs_embeds, cache_position.unsqueeze(0))


class MistralModel(nn.Module):
    """``forward(input_ids, attention_mask=None)`` -> ``last_hidden_state`` ``(B, L, hidden)``; ids ``(B, L)``,
    mask ``(B, L)`` of 0/1."""

    def __init__(self, vocab_size: int = 64, hidden: int = 32, heads: int = 4, kv_heads: int = 2,
                 head_dim: int = 12, intermediate: int = 48, layers: int = 2, rms_norm_eps: float = 1e-6,
                 rope_theta: float = 10000.0, sliding_window: Optional[int] = 4, qkv_bias: bool = False,
                 attn_implementation: str = "eager", pad_token_id: Optional[int] = None):
        super().__init__()
        self.sliding_window = sliding_window
        self.embed_tokens = nn.Embedding(vocab_size, hidden, pad_token_id)
        self.layers = nn.ModuleList(
            MistralDecoderLayer(hidden, heads, kv_heads, head_dim, intermediate, rms_norm_eps, qkv_bias,
                                attn_implementation) for _ in range(layers))
        self.norm = MistralRMSNorm(hidden, eps=rms_norm_eps)
        self.rotary_emb = MistralRotaryEmbedding(head_dim, rope_theta)

    def forward(self, input_ids, attention_mask=None):
        hidden_states, causal_mask, position_embeddings = decoder_inputs(self, input_ids, attention_mask,
                                                                         self.sliding_window)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, causal_mask, position_embeddings)
        return self.norm(hidden_states)


def mistral_small() -> MistralModel:
    """Window 4 (the test lengths are 7 and 13), 4 query heads over 2 key/value heads, head_dim 12 of hidden 32."""
    return MistralModel()


def mistral_sdpa_small() -> MistralModel:
    return MistralModel(attn_implementation="sdpa")


def qwen2_small() -> MistralModel:
    """Qwen2's layout: biased q/k/v, no sliding window, 6 query heads over 2 key/value heads."""
    return MistralModel(heads=6, kv_heads=2, head_dim=8, hidden=24, sliding_window=None, qkv_bias=True,
                        attn_implementation="sdpa")
