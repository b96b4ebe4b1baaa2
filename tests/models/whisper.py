"""A twin of transformers' ``WhisperModel``: the encoder of ``tests/models/sequence.py`` and a ``WhisperDecoder``
(module structure and ``state_dict`` names: ``decoder.embed_tokens``, ``decoder.embed_positions.weight``,
``decoder.layers.<i>.self_attn.k_proj`` (no bias) / ``q_proj`` / ``v_proj`` / ``out_proj``,
``.self_attn_layer_norm``, ``.encoder_attn.*``, ``.encoder_attn_layer_norm``, ``.fc1``, ``.fc2``,
``.final_layer_norm``, ``decoder.layer_norm``), small sizes, eager attention, no cache.

Stresses: learned decoder positions as an ``nn.Embedding`` subclass indexed by ``position_ids`` (``cache_position``
``unsqueeze(0).repeat(B, 1)``, ``weight[position_ids]``), the 4-d float causal mask (with an optional decoder
padding mask) added to the self-attention scores, cross-attention whose keys and values are projected from the
encoder's states (another length than the queries: ``(B, heads, Ld, Le)`` scores), q scaled before the product.
"""

from __future__ import annotations

import torch
from torch import nn

from .mistral import prepare_4d_causal_mask
from .sequence import WhisperEncoder


class WhisperPositionalEmbedding(nn.Embedding):
    def forward(self, input_ids, past_key_values_length: int = 0, position_ids=None):
        if position_ids is None:
            return self.weight[past_key_values_length: past_key_values_length + input_ids.shape[1]]
        return self.weight[position_ids]


class WhisperAttention(nn.Module):
    """Self-attention, or cross-attention when ``key_value_states`` is given; ``attention_mask`` additive
    ``(B, 1, Lq, Lk)``."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden_states, key_value_states=None, attention_mask=None):
        bsz, tgt_len = hidden_states.shape[:-1]
        q_input_shape = (bsz, tgt_len, -1, self.head_dim)
        query_states = (self.q_proj(hidden_states) * self.scaling).view(*q_input_shape).transpose(1, 2)
        current_states = key_value_states if key_value_states is not None else hidden_states
        key_states = self.k_proj(current_states).view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(current_states).view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        return self.out_proj(attn_output.reshape(bsz, tgt_len, -1))


class WhisperDecoderLayer(nn.Module):
    def __init__(self, embed_dim: int, heads: int, ffn_dim: int):
        super().__init__()
        self.self_attn = WhisperAttention(embed_dim, heads)
        self.activation_fn = nn.functional.gelu
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.encoder_attn = WhisperAttention(embed_dim, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, hidden_states, attention_mask, encoder_hidden_states):
        residual = hidden_states
        hidden_states = self.self_attn(self.self_attn_layer_norm(hidden_states), attention_mask=attention_mask)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.encoder_attn(self.encoder_attn_layer_norm(hidden_states),
                                          key_value_states=encoder_hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.fc2(self.activation_fn(self.fc1(self.final_layer_norm(hidden_states))))
        return residual + hidden_states


class WhisperDecoder(nn.Module):
    def __init__(self, vocab_size: int = 64, d_model: int = 16, heads: int = 2, ffn_dim: int = 32, layers: int = 2,
                 max_target_positions: int = 24, pad_token_id: int = 0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model, pad_token_id)
        self.embed_positions = WhisperPositionalEmbedding(max_target_positions, d_model)
        self.layers = nn.ModuleList(WhisperDecoderLayer(d_model, heads, ffn_dim) for _ in range(layers))
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, input_ids, encoder_hidden_states, attention_mask=None):
        batch, length = input_ids.shape
        inputs_embeds = self.embed_tokens(input_ids)
        cache_position = torch.arange(0, length, device=inputs_embeds.device)
        position_ids = cache_position.unsqueeze(0).repeat(batch, 1)
        positions = self.embed_positions(input_ids, past_key_values_length=0, position_ids=position_ids)
        hidden_states = inputs_embeds + positions.to(inputs_embeds.device)
        causal_mask = prepare_4d_causal_mask(attention_mask, length, length, inputs_embeds.dtype, cache_position,
                                             batch, None)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, causal_mask, encoder_hidden_states)
        return self.layer_norm(hidden_states)


class WhisperModel(nn.Module):
    """``forward(input_features, decoder_input_ids, decoder_attention_mask=None)`` -> the decoder's
    ``last_hidden_state`` ``(B, Ld, d_model)``; features ``(B, num_mel_bins, T)``, ids ``(B, Ld)``."""

    def __init__(self):
        super().__init__()
        self.encoder = WhisperEncoder()
        self.decoder = WhisperDecoder()

    def forward(self, input_features, decoder_input_ids, decoder_attention_mask=None):
        encoder_outputs = self.encoder(input_features)
        return self.decoder(decoder_input_ids, encoder_outputs, attention_mask=decoder_attention_mask)


def whisper_small() -> WhisperModel:
    """The encoder's 8 mel bins / 32 source positions, a 24-position decoder."""
    return WhisperModel()
