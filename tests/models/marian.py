"""A twin of transformers' ``MarianMTModel`` as ``modeling_marian.py`` writes it in the 4.4x releases (eager
attention; module structure and ``state_dict`` names: ``model.shared``, ``model.encoder.embed_tokens`` /
``embed_positions``, ``model.encoder.layers.<i>.self_attn.q_proj`` / ``k_proj`` / ``v_proj`` / ``out_proj``,
``.self_attn_layer_norm``, ``.fc1`` / ``fc2``, ``.final_layer_norm``, ``model.decoder.layers.<i>.encoder_attn.*``,
``.encoder_attn_layer_norm``, ``lm_head``, the ``final_logits_bias`` buffer), small sizes, no cache.

Stresses: sinusoidal positions held as a frozen ``nn.Embedding`` (``requires_grad = False``; sin in the first half
of the channels, cos in the second, from numpy) and looked up by an ``arange`` of the length; one embedding shared
by the encoder, the decoder and the head (three names, one tensor), scaled by ``sqrt(d_model)``; BART-style attention
(the query scaled before ``bmm`` over ``(B * heads, L, d)``, the mask added through a ``view``); post-norm layers
with SiLU; the decoder's causal mask (``masked_fill_`` of ``arange < arange + 1``) merged with its padding mask,
cross-attention under the encoder's padding mask; the logits plus ``final_logits_bias``; in float16, the encoder
layers' clamp of inf/NaN states (a data-dependent branch torch takes only in float16).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tests.models.siglip import _prepare_4d_attention_mask


class MarianSinusoidalPositionalEmbedding(nn.Embedding):
    def __init__(self, num_positions: int, embedding_dim: int):
        super().__init__(num_positions, embedding_dim)
        self.weight = self._init_weight(self.weight)

    @staticmethod
    def _init_weight(out: nn.Parameter) -> nn.Parameter:
        n_pos, dim = out.shape
        position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
                                 for pos in range(n_pos)])
        out.requires_grad = False
        sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
        with torch.no_grad():
            out[:, 0:sentinel] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
            out[:, sentinel:] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
        out.detach_()
        return out

    def forward(self, input_ids_shape: torch.Size, past_key_values_length: int = 0):
        bsz, seq_len = input_ids_shape[:2]
        positions = torch.arange(past_key_values_length, past_key_values_length + seq_len, dtype=torch.long,
                                 device=self.weight.device)
        return super().forward(positions)


class MarianAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = 0.0
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states, key_value_states=None, attention_mask=None):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        source = hidden_states if key_value_states is None else key_value_states
        key_states = self._shape(self.k_proj(source), -1, bsz)
        value_states = self._shape(self.v_proj(source), -1, bsz)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)
        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        if attention_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len) + attention_mask
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.bmm(attn_probs, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim).transpose(1, 2)
        return self.out_proj(attn_output.reshape(bsz, tgt_len, self.embed_dim))


class MarianEncoderLayer(nn.Module):
    def __init__(self, d_model, heads, ffn_dim):
        super().__init__()
        self.self_attn = MarianAttention(d_model, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.activation_fn = nn.SiLU()
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, hidden_states, attention_mask):
        residual = hidden_states
        hidden_states = self.self_attn(hidden_states, attention_mask=attention_mask)
        hidden_states = self.self_attn_layer_norm(residual + hidden_states)
        residual = hidden_states
        hidden_states = self.fc2(self.activation_fn(self.fc1(hidden_states)))
        hidden_states = self.final_layer_norm(residual + hidden_states)
        if hidden_states.dtype == torch.float16 and (
                torch.isinf(hidden_states).any() or torch.isnan(hidden_states).any()):
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        return (hidden_states,)


class MarianDecoderLayer(nn.Module):
    def __init__(self, d_model, heads, ffn_dim):
        super().__init__()
        self.self_attn = MarianAttention(d_model, heads)
        self.activation_fn = nn.SiLU()
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.encoder_attn = MarianAttention(d_model, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, hidden_states, attention_mask, encoder_hidden_states, encoder_attention_mask):
        residual = hidden_states
        hidden_states = self.self_attn(hidden_states, attention_mask=attention_mask)
        hidden_states = self.self_attn_layer_norm(residual + hidden_states)
        residual = hidden_states
        hidden_states = self.encoder_attn(hidden_states, key_value_states=encoder_hidden_states,
                                          attention_mask=encoder_attention_mask)
        hidden_states = self.encoder_attn_layer_norm(residual + hidden_states)
        residual = hidden_states
        hidden_states = self.fc2(self.activation_fn(self.fc1(hidden_states)))
        return (self.final_layer_norm(residual + hidden_states),)


def _causal_4d_mask(attention_mask, input_shape, dtype):
    """transformers' ``_prepare_4d_causal_attention_mask`` without a cache: ``finfo.min`` above the diagonal, and
    at padded keys when a mask is given."""
    bsz, tgt_len = input_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    causal_4d_mask = mask.to(dtype)[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len)
    if attention_mask is None:
        return causal_4d_mask
    expanded_attn_mask = _prepare_4d_attention_mask(attention_mask, dtype, tgt_len)
    return causal_4d_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)


class MarianEncoder(nn.Module):
    def __init__(self, embed_tokens, d_model, heads, ffn_dim, layers, max_position_embeddings):
        super().__init__()
        self.embed_scale = d_model ** 0.5
        self.embed_tokens = embed_tokens
        self.embed_positions = MarianSinusoidalPositionalEmbedding(max_position_embeddings, d_model)
        self.layers = nn.ModuleList(MarianEncoderLayer(d_model, heads, ffn_dim) for _ in range(layers))

    def forward(self, input_ids, attention_mask=None):
        input_shape = input_ids.size()
        inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        hidden_states = inputs_embeds + self.embed_positions(input_shape)
        if attention_mask is not None:
            attention_mask = _prepare_4d_attention_mask(attention_mask, inputs_embeds.dtype)
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states, attention_mask)[0]
        return (hidden_states,)


class MarianDecoder(nn.Module):
    def __init__(self, embed_tokens, d_model, heads, ffn_dim, layers, max_position_embeddings):
        super().__init__()
        self.embed_scale = d_model ** 0.5
        self.embed_tokens = embed_tokens
        self.embed_positions = MarianSinusoidalPositionalEmbedding(max_position_embeddings, d_model)
        self.layers = nn.ModuleList(MarianDecoderLayer(d_model, heads, ffn_dim) for _ in range(layers))

    def forward(self, input_ids, attention_mask, encoder_hidden_states, encoder_attention_mask):
        input_shape = input_ids.size()
        inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale
        attention_mask = _causal_4d_mask(attention_mask, input_shape, inputs_embeds.dtype)
        if encoder_attention_mask is not None:
            encoder_attention_mask = _prepare_4d_attention_mask(encoder_attention_mask, inputs_embeds.dtype,
                                                                input_shape[-1])
        hidden_states = inputs_embeds + self.embed_positions(input_shape)
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, attention_mask, encoder_hidden_states,
                                          encoder_attention_mask)[0]
        return (hidden_states,)


class MarianModel(nn.Module):
    def __init__(self, vocab_size, d_model, heads, ffn_dim, layers, max_position_embeddings, pad_token_id):
        super().__init__()
        self.shared = nn.Embedding(vocab_size, d_model, pad_token_id)
        self.encoder = MarianEncoder(self.shared, d_model, heads, ffn_dim, layers, max_position_embeddings)
        self.decoder = MarianDecoder(self.shared, d_model, heads, ffn_dim, layers, max_position_embeddings)

    def forward(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask):
        encoder_hidden_states = self.encoder(input_ids, attention_mask)[0]
        return self.decoder(decoder_input_ids, decoder_attention_mask, encoder_hidden_states, attention_mask)[0]


class MarianMTModel(nn.Module):
    """``forward(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask=None)`` -> logits
    ``(B, L_dec, vocab)``."""

    def __init__(self, vocab_size: int = 64, d_model: int = 24, heads: int = 4, ffn_dim: int = 40, layers: int = 2,
                 max_position_embeddings: int = 32, pad_token_id: int = 0):
        super().__init__()
        self.model = MarianModel(vocab_size, d_model, heads, ffn_dim, layers, max_position_embeddings, pad_token_id)
        self.register_buffer("final_logits_bias", torch.zeros((1, vocab_size)))
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.model.shared.weight

    def forward(self, input_ids, attention_mask, decoder_input_ids, decoder_attention_mask=None):
        hidden = self.model(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask)
        return self.lm_head(hidden) + self.final_logits_bias


def marian_small() -> MarianMTModel:
    return MarianMTModel()


def real_sinusoids(model: MarianMTModel) -> None:
    """The frozen position tables back after a seeded randomisation (a checkpoint holds these values)."""
    for stack in (model.model.encoder, model.model.decoder):
        MarianSinusoidalPositionalEmbedding._init_weight(stack.embed_positions.weight)
