"""A twin of transformers' ``BloomModel`` (module structure and ``state_dict`` names: ``word_embeddings``,
``word_embeddings_layernorm``, ``h.<i>.input_layernorm``, ``.self_attention.query_key_value`` / ``.dense``,
``.post_attention_layernorm``, ``.mlp.dense_h_to_4h`` / ``dense_4h_to_h``, ``ln_f``), small sizes, the eager
attention path without a cache.

Stresses: ALiBi slopes built in the forward (``torch.pow`` of a float32 0-d base by int32 ``arange`` powers, the
extra odd-power slopes ``cat``-ed on when the head count is not a power of two: 3 heads here), positions from the
attention mask (``(mask.cumsum(-1) - 1) * mask``: padded places get 0), the ALiBi bias reshaped to
``(B * heads, 1, L)`` and added by ``baddbmm(beta=1, alpha=1/sqrt(d))``; the fused QKV split by
``view(B, L, heads, 3, d)`` and ``[..., i, :]``; the 4-d float causal mask as the current transformers builds it
(``full`` of ``finfo.min``, ``triu``, times ``arange > cache_position``, ``expand``, ``clone``, the padded keys
added, ``== 0``, written back by slice assignment of ``masked_fill``); a float32 softmax cast back to the working
dtype; ``bloom_gelu_forward`` (the tanh form); ``dropout_add``; the residual taken before or after the norm
(``apply_residual_connection_post_layernorm``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def build_alibi_tensor(attention_mask: torch.Tensor, num_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """``(B * heads, 1, L)``: each head's slope times the key's position among the unpadded tokens."""
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), device=attention_mask.device,
                        dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, device=attention_mask.device, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))),
                                  device=attention_mask.device, dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, device=attention_mask.device,
                                    dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


def dropout_add(x, residual, prob: float, training: bool):
    return residual + F.dropout(x, p=prob, training=training)


def bloom_gelu_forward(x):
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


class BloomGelu(nn.Module):
    def forward(self, x):
        return bloom_gelu_forward(x)


class BloomAttention(nn.Module):
    def __init__(self, hidden_size: int, n_head: int, hidden_dropout: float, attention_dropout: float):
        super().__init__()
        self.hidden_size, self.num_heads = hidden_size, n_head
        self.head_dim = hidden_size // n_head
        self.hidden_dropout = hidden_dropout
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.beta = 1.0
        self.query_key_value = nn.Linear(hidden_size, 3 * hidden_size, bias=True)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.attention_dropout = nn.Dropout(attention_dropout)

    def _reshape(self, fused_qkv):
        batch_size, seq_length, _ = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads, 3, self.head_dim)
        return (fused_qkv[..., 0, :].transpose(1, 2), fused_qkv[..., 1, :].transpose(1, 2),
                fused_qkv[..., 2, :].transpose(1, 2))

    def _merge_heads(self, x):
        batch_size_and_num_heads, seq_length, _ = x.shape
        batch_size = batch_size_and_num_heads // self.num_heads
        x = x.view(batch_size, self.num_heads, seq_length, self.head_dim).permute(0, 2, 1, 3)
        return x.reshape(batch_size, seq_length, self.num_heads * self.head_dim)

    def forward(self, hidden_states, residual, alibi, attention_mask):
        batch_size, q_length, _ = hidden_states.shape
        query_layer, key_layer, value_layer = self._reshape(self.query_key_value(hidden_states))
        query_layer = query_layer.reshape(batch_size * self.num_heads, -1, self.head_dim)
        key_layer = key_layer.reshape(batch_size * self.num_heads, -1, self.head_dim).transpose(-1, -2)
        value_layer = value_layer.reshape(batch_size * self.num_heads, -1, self.head_dim)
        attention_scores = alibi.baddbmm(batch1=query_layer, batch2=key_layer, beta=self.beta,
                                         alpha=self.inv_norm_factor)
        attn_weights = attention_scores.view(batch_size, self.num_heads, q_length, -1)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask[:, :, :, :key_layer.shape[-1]]
        attention_probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_layer.dtype)
        attention_probs = self.attention_dropout(attention_probs)
        context_layer = torch.bmm(attention_probs.view(batch_size * self.num_heads, q_length, -1), value_layer)
        output_tensor = self.dense(self._merge_heads(context_layer))
        return dropout_add(output_tensor, residual, self.hidden_dropout, self.training), attention_probs


class BloomMLP(nn.Module):
    def __init__(self, hidden_size: int, hidden_dropout: float):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(hidden_size, 4 * hidden_size)
        self.gelu_impl = BloomGelu()
        self.dense_4h_to_h = nn.Linear(4 * hidden_size, hidden_size)
        self.hidden_dropout = hidden_dropout

    def forward(self, hidden_states, residual):
        hidden_states = self.dense_4h_to_h(self.gelu_impl(self.dense_h_to_4h(hidden_states)))
        return dropout_add(hidden_states, residual, self.hidden_dropout, self.training)


class BloomBlock(nn.Module):
    def __init__(self, hidden_size: int, n_head: int, eps: float, post_ln_residual: bool, dropout: float):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(hidden_size, eps=eps)
        self.num_heads = n_head
        self.self_attention = BloomAttention(hidden_size, n_head, dropout, dropout)
        self.post_attention_layernorm = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = BloomMLP(hidden_size, dropout)
        self.apply_residual_connection_post_layernorm = post_ln_residual

    def forward(self, hidden_states, alibi, attention_mask):
        layernorm_output = self.input_layernorm(hidden_states)
        residual = layernorm_output if self.apply_residual_connection_post_layernorm else hidden_states
        attention_output = self.self_attention(layernorm_output, residual, alibi=alibi,
                                               attention_mask=attention_mask)[0]
        layernorm_output = self.post_attention_layernorm(attention_output)
        residual = layernorm_output if self.apply_residual_connection_post_layernorm else attention_output
        return self.mlp(layernorm_output, residual)


def update_causal_mask(attention_mask, input_tensor, cache_position):
    """transformers' 4-d float mask: ``finfo.min`` above the diagonal and at padded keys, 0 elsewhere,
    ``(B, 1, L, L)``."""
    dtype = input_tensor.dtype
    min_dtype = torch.finfo(dtype).min
    batch_size, sequence_length = input_tensor.shape[:2]
    target_length = attention_mask.shape[-1]
    causal_mask = torch.full((sequence_length, target_length), fill_value=min_dtype, dtype=dtype,
                             device=input_tensor.device)
    if sequence_length != 1:
        causal_mask = torch.triu(causal_mask, diagonal=1)
    causal_mask *= torch.arange(target_length, device=input_tensor.device) > cache_position.reshape(-1, 1)
    causal_mask = causal_mask[None, None, :, :].expand(batch_size, 1, -1, -1)
    causal_mask = causal_mask.clone()
    mask_length = attention_mask.shape[-1]
    padding_mask = causal_mask[:, :, :, :mask_length] + attention_mask[:, None, None, :].to(causal_mask.device)
    padding_mask = padding_mask == 0
    causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)
    return causal_mask


class BloomModel(nn.Module):
    """``forward(input_ids, attention_mask=None)`` -> ``last_hidden_state`` ``(B, L, hidden)``; ids ``(B, L)``,
    mask ``(B, L)`` of 0/1 (left or right padding)."""

    def __init__(self, vocab_size: int = 64, hidden_size: int = 24, n_head: int = 3, n_layer: int = 2,
                 layer_norm_epsilon: float = 1e-5, apply_residual_connection_post_layernorm: bool = False,
                 hidden_dropout: float = 0.0):
        super().__init__()
        self.embed_dim, self.num_heads = hidden_size, n_head
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.word_embeddings_layernorm = nn.LayerNorm(hidden_size, eps=layer_norm_epsilon)
        self.h = nn.ModuleList(BloomBlock(hidden_size, n_head, layer_norm_epsilon,
                                          apply_residual_connection_post_layernorm, hidden_dropout)
                               for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(hidden_size, eps=layer_norm_epsilon)

    def forward(self, input_ids, attention_mask=None):
        batch_size, seq_length = input_ids.shape
        inputs_embeds = self.word_embeddings(input_ids)
        hidden_states = self.word_embeddings_layernorm(inputs_embeds)
        cache_position = torch.arange(0, seq_length, device=inputs_embeds.device)
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), device=hidden_states.device)
        alibi = build_alibi_tensor(attention_mask, self.num_heads, dtype=hidden_states.dtype)
        causal_mask = update_causal_mask(attention_mask, inputs_embeds, cache_position)
        for block in self.h:
            hidden_states = block(hidden_states, alibi=alibi, attention_mask=causal_mask)
        return self.ln_f(hidden_states)


def bloom_small() -> BloomModel:
    return BloomModel()


def bloom_post_ln_small() -> BloomModel:
    """4 heads (slopes a plain power series) and the residual taken after the norms."""
    return BloomModel(hidden_size=16, n_head=4, apply_residual_connection_post_layernorm=True)
