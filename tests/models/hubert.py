"""A twin of transformers' ``HubertModel`` as ``modeling_hubert.py`` writes it in the 4.4x releases (eager
attention, ``do_stable_layer_norm=False``, no SpecAugment; module structure and ``state_dict`` names:
``feature_extractor.conv_layers.<i>.conv`` (layer 0's ``layer_norm`` a per-channel GroupNorm),
``feature_projection.layer_norm`` / ``projection``, ``encoder.pos_conv_embed.conv.parametrizations.weight
.original0`` / ``original1``, ``encoder.layer_norm``, ``encoder.layers.<i>.attention.q_proj`` / ``k_proj`` /
``v_proj`` / ``out_proj``, ``.layer_norm``, ``.feed_forward.intermediate_dense`` / ``output_dense``,
``.final_layer_norm``), small sizes. The convolutional pieces are wav2vec2's (``tests/models/speech.py``), as in
transformers.

Stresses: the padding mask of the raw audio turned into one over the feature frames
(``_get_feature_vector_attention_mask``: each row's length through every conv's ``floor((L - k) / s) + 1``
(``torch.div(..., rounding_mode="floor")``), a 1 written at ``(row, length - 1)`` by index assignment, then
``flip``-``cumsum``-``flip`` and ``bool``); padded frames zeroed by ``hidden_states[~mask] = 0``, the additive
``finfo.min`` mask expanded to ``(B, 1, T, T)``; the weight-normed grouped positional conv with an even kernel;
post-norm encoder layers.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.models.marian import MarianAttention
from tests.models.speech import Wav2Vec2FeatureEncoder, Wav2Vec2PositionalConvEmbedding
from tests.models.wavlm import WavLMFeedForward

_KERNELS, _STRIDES = (10, 3, 2), (5, 2, 2)


class HubertFeatureProjection(nn.Module):
    def __init__(self, conv_dim: int, hidden: int, feat_proj_layer_norm: bool = True):
        super().__init__()
        self.feat_proj_layer_norm = feat_proj_layer_norm
        if self.feat_proj_layer_norm:
            self.layer_norm = nn.LayerNorm(conv_dim, eps=1e-5)
        self.projection = nn.Linear(conv_dim, hidden)
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states):
        if self.feat_proj_layer_norm:
            hidden_states = self.layer_norm(hidden_states)
        return self.dropout(self.projection(hidden_states))


class HubertAttention(MarianAttention):
    """transformers' Hubert attention is BART's, as Marian's: the same projections and arithmetic."""


class HubertFeedForward(WavLMFeedForward):
    """transformers' Hubert feed-forward is wav2vec2's, as WavLM's: the same names and arithmetic."""


class HubertEncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.attention = HubertAttention(hidden, heads)
        self.dropout = nn.Dropout(0.0)
        self.layer_norm = nn.LayerNorm(hidden, eps=1e-5)
        self.feed_forward = HubertFeedForward(hidden, intermediate)
        self.final_layer_norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, hidden_states, attention_mask=None):
        attn_residual = hidden_states
        hidden_states = self.dropout(self.attention(hidden_states, attention_mask=attention_mask))
        hidden_states = self.layer_norm(attn_residual + hidden_states)
        hidden_states = hidden_states + self.feed_forward(hidden_states)
        return (self.final_layer_norm(hidden_states),)


class HubertEncoder(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, layers: int, pos_kernel: int, pos_groups: int):
        super().__init__()
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding(hidden, pos_kernel, pos_groups)
        self.layer_norm = nn.LayerNorm(hidden, eps=1e-5)
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.ModuleList(HubertEncoderLayer(hidden, heads, intermediate) for _ in range(layers))

    def forward(self, hidden_states, attention_mask=None):
        if attention_mask is not None:
            expand_attention_mask = attention_mask.unsqueeze(-1).repeat(1, 1, hidden_states.shape[2])
            hidden_states[~expand_attention_mask] = 0
            attention_mask = 1.0 - attention_mask[:, None, None, :].to(dtype=hidden_states.dtype)
            attention_mask = attention_mask * torch.finfo(hidden_states.dtype).min
            attention_mask = attention_mask.expand(attention_mask.shape[0], 1, attention_mask.shape[-1],
                                                   attention_mask.shape[-1])
        hidden_states = hidden_states + self.pos_conv_embed(hidden_states)
        hidden_states = self.dropout(self.layer_norm(hidden_states))
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=attention_mask)[0]
        return (hidden_states,)


class HubertModel(nn.Module):
    """``forward(input_values (B, samples), attention_mask=None)`` -> ``last_hidden_state (B, frames, hidden)``."""

    def __init__(self, conv_dim: int = 8, hidden: int = 16, heads: int = 4, intermediate: int = 32, layers: int = 2,
                 pos_kernel: int = 4, pos_groups: int = 4):
        super().__init__()
        self.feature_extractor = Wav2Vec2FeatureEncoder((conv_dim,) * 3, _KERNELS, _STRIDES)
        self.feature_projection = HubertFeatureProjection(conv_dim, hidden)
        self.encoder = HubertEncoder(hidden, heads, intermediate, layers, pos_kernel, pos_groups)

    @staticmethod
    def _get_feat_extract_output_lengths(input_lengths):
        for kernel_size, stride in zip(_KERNELS, _STRIDES):
            input_lengths = torch.div(input_lengths - kernel_size, stride, rounding_mode="floor") + 1
        return input_lengths

    def _get_feature_vector_attention_mask(self, feature_vector_length: int, attention_mask):
        output_lengths = self._get_feat_extract_output_lengths(attention_mask.sum(-1)).to(torch.long)
        batch_size = attention_mask.shape[0]
        attention_mask = torch.zeros((batch_size, feature_vector_length), dtype=attention_mask.dtype,
                                     device=attention_mask.device)
        attention_mask[(torch.arange(attention_mask.shape[0], device=attention_mask.device), output_lengths - 1)] = 1
        return attention_mask.flip([-1]).cumsum(-1).flip([-1]).bool()

    def forward(self, input_values, attention_mask=None):
        extract_features = self.feature_extractor(input_values).transpose(1, 2)
        if attention_mask is not None:
            attention_mask = self._get_feature_vector_attention_mask(extract_features.shape[1], attention_mask)
        hidden_states = self.feature_projection(extract_features)
        return self.encoder(hidden_states, attention_mask=attention_mask)[0]


def hubert_small() -> HubertModel:
    return HubertModel()
