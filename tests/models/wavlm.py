"""A twin of transformers' ``WavLMEncoder`` (module structure and ``state_dict`` names: ``pos_conv_embed.conv.
parametrizations.weight.original0``, ``layers.0.attention.rel_attn_embed``, ``.gru_rel_pos_const``,
``.gru_rel_pos_linear``, ``.q_proj``/``k_proj``/``v_proj``/``out_proj``, ``.feed_forward.intermediate_dense``,
``.final_layer_norm``), small sizes; input: the feature projection's output ``(B, T, hidden)`` (the convolutional
feature encoder is wav2vec2's, ``tests/models/speech.py``).

Stresses: relative position buckets (``arange`` differences, ``abs``, ``log`` of ``float / max_exact``, ``.to(long)``
truncation, ``min`` with ``full_like``, ``torch.where``; few buckets so short sequences reach the log branch),
computed in layer 0 only and passed on; the gate (``view(..., 2, 4).sum(-1)``, sigmoid, ``chunk``) scaling the
bias per head and position; ``F.multi_head_attention_forward`` with separate projection weights, concatenated
biases, a float ``attn_mask`` of ``(B * heads, T, T)`` and a ``key_padding_mask``; the padded frames zeroed by
``hidden_states[~attention_mask] = 0.0``; the weight-normed grouped positional conv (``dim=2``) with an even kernel
(one frame dropped).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


class WavLMAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, num_buckets=16, max_distance=20, has_relative_position_bias=True):
        super().__init__()
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, 0.0
        self.head_dim = embed_dim // num_heads
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.gru_rel_pos_const = nn.Parameter(torch.ones(1, self.num_heads, 1, 1))
        self.gru_rel_pos_linear = nn.Linear(self.head_dim, 8)
        if has_relative_position_bias:
            self.rel_attn_embed = nn.Embedding(self.num_buckets, self.num_heads)

    def forward(self, hidden_states, attention_mask=None, position_bias=None):
        bsz, tgt_len, _ = hidden_states.size()
        if position_bias is None:
            position_bias = self.compute_bias(tgt_len, tgt_len)
            position_bias = position_bias.unsqueeze(0).repeat(bsz, 1, 1, 1).view(bsz * self.num_heads, tgt_len,
                                                                                  tgt_len)
        gated_hidden_states = hidden_states.view(hidden_states.shape[:-1] + (self.num_heads, -1))
        gated_hidden_states = gated_hidden_states.permute(0, 2, 1, 3)
        relative_position_proj = self.gru_rel_pos_linear(gated_hidden_states)
        relative_position_proj = relative_position_proj.view(gated_hidden_states.shape[:-1] + (2, 4)).sum(-1)
        gate_a, gate_b = torch.sigmoid(relative_position_proj).chunk(2, dim=-1)
        gate_output = gate_a * (gate_b * self.gru_rel_pos_const - 1.0) + 2.0
        gated_position_bias = gate_output.view(bsz * self.num_heads, -1, 1) * position_bias
        gated_position_bias = gated_position_bias.view((-1, tgt_len, tgt_len))
        attn_output = self.torch_multi_head_self_attention(hidden_states, attention_mask, gated_position_bias)
        return attn_output, position_bias

    def torch_multi_head_self_attention(self, hidden_states, attention_mask, gated_position_bias):
        query = key = value = hidden_states.transpose(0, 1)
        key_padding_mask = attention_mask.ne(1) if attention_mask is not None else None
        attn_output, _ = F.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, torch.empty([0]),
            torch.cat((self.q_proj.bias, self.k_proj.bias, self.v_proj.bias)), None, None, False, self.dropout,
            self.out_proj.weight, self.out_proj.bias, self.training, key_padding_mask, False, gated_position_bias,
            use_separate_proj_weight=True, q_proj_weight=self.q_proj.weight, k_proj_weight=self.k_proj.weight,
            v_proj_weight=self.v_proj.weight)
        return attn_output.transpose(0, 1)

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_positions_bucket(relative_position)
        relative_position_bucket = relative_position_bucket.to(self.rel_attn_embed.weight.device)
        return self.rel_attn_embed(relative_position_bucket).permute([2, 0, 1])

    def _relative_positions_bucket(self, relative_positions):
        num_buckets = self.num_buckets // 2
        relative_buckets = (relative_positions > 0).to(torch.long) * num_buckets
        relative_positions = torch.abs(relative_positions)
        max_exact = num_buckets // 2
        is_small = relative_positions < max_exact
        relative_positions_if_large = torch.log(relative_positions.float() / max_exact)
        relative_positions_if_large = relative_positions_if_large / math.log(self.max_distance / max_exact)
        relative_positions_if_large = relative_positions_if_large * (num_buckets - max_exact)
        relative_position_if_large = (max_exact + relative_positions_if_large).to(torch.long)
        relative_position_if_large = torch.min(relative_position_if_large,
                                               torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_positions, relative_position_if_large)
        return relative_buckets


class WavLMFeedForward(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.intermediate_dropout = nn.Dropout(0.0)
        self.intermediate_dense = nn.Linear(hidden, intermediate)
        self.intermediate_act_fn = nn.GELU()
        self.output_dense = nn.Linear(intermediate, hidden)
        self.output_dropout = nn.Dropout(0.0)

    def forward(self, hidden_states):
        hidden_states = self.intermediate_dropout(self.intermediate_act_fn(self.intermediate_dense(hidden_states)))
        return self.output_dropout(self.output_dense(hidden_states))


class WavLMEncoderLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, has_relative_position_bias):
        super().__init__()
        self.attention = WavLMAttention(hidden, heads, has_relative_position_bias=has_relative_position_bias)
        self.dropout = nn.Dropout(0.0)
        self.layer_norm = nn.LayerNorm(hidden, eps=1e-5)
        self.feed_forward = WavLMFeedForward(hidden, intermediate)
        self.final_layer_norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, hidden_states, attention_mask=None, position_bias=None):
        attn_residual = hidden_states
        hidden_states, position_bias = self.attention(hidden_states, attention_mask, position_bias)
        hidden_states = self.layer_norm(attn_residual + self.dropout(hidden_states))
        hidden_states = hidden_states + self.feed_forward(hidden_states)
        return self.final_layer_norm(hidden_states), position_bias


class WavLMSamePadLayer(nn.Module):
    def __init__(self, num_conv_pos_embeddings):
        super().__init__()
        self.num_pad_remove = 1 if num_conv_pos_embeddings % 2 == 0 else 0

    def forward(self, hidden_states):
        if self.num_pad_remove > 0:
            hidden_states = hidden_states[:, :, : -self.num_pad_remove]
        return hidden_states


class WavLMPositionalConvEmbedding(nn.Module):
    def __init__(self, hidden, kernel, groups):
        super().__init__()
        self.conv = nn.Conv1d(hidden, hidden, kernel_size=kernel, padding=kernel // 2, groups=groups)
        self.conv = weight_norm(self.conv, name="weight", dim=2)
        self.padding = WavLMSamePadLayer(kernel)
        self.activation = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = self.conv(hidden_states.transpose(1, 2))
        return self.activation(self.padding(hidden_states)).transpose(1, 2)


class WavLMEncoder(nn.Module):
    """``forward(hidden_states (B, T, hidden), attention_mask (B, T) of 0/1 or None)`` -> ``(B, T, hidden)``."""

    def __init__(self, hidden=16, heads=2, intermediate=32, layers=2, conv_kernel=8, conv_groups=4):
        super().__init__()
        self.pos_conv_embed = WavLMPositionalConvEmbedding(hidden, conv_kernel, conv_groups)
        self.layer_norm = nn.LayerNorm(hidden, eps=1e-5)
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.ModuleList(WavLMEncoderLayer(hidden, heads, intermediate, i == 0) for i in range(layers))

    def forward(self, hidden_states, attention_mask=None):
        if attention_mask is not None:
            hidden_states[~attention_mask.bool()] = 0.0
        hidden_states = hidden_states + self.pos_conv_embed(hidden_states)
        hidden_states = self.dropout(self.layer_norm(hidden_states))
        position_bias = None
        for layer in self.layers:
            hidden_states, position_bias = layer(hidden_states, attention_mask=attention_mask,
                                                 position_bias=position_bias)
        return hidden_states


def wavlm_encoder_small() -> nn.Module:
    return WavLMEncoder()
