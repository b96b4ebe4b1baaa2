"""A twin of transformers' ``PerceiverForSequenceClassification`` as ``modeling_perceiver.py`` writes it (module
structure and ``state_dict`` names: ``perceiver.input_preprocessor.embeddings`` / ``position_embeddings``,
``perceiver.embeddings.latents``, ``perceiver.encoder.cross_attention.attention.self.layernorm1`` / ``layernorm2`` /
``query`` / ``key`` / ``value``, ``.attention.output.dense``, ``.layernorm``, ``.mlp.dense1`` / ``dense2``,
``perceiver.encoder.self_attends.<i>.*``, ``perceiver.decoder.decoder.output_position_encodings.position_embeddings``,
``perceiver.decoder.decoder.decoding_cross_attention.*``, ``perceiver.decoder.decoder.final_layer``), small sizes.

Stresses: a learned latent array expanded to the batch cross-attends to the token embeddings (queries from the
latents, keys and values from the inputs through their own LayerNorm, the input padding mask inverted to
``finfo.min``), ``qk_channels`` apart from ``v_channels`` (per-head widths differ between scores and values), a query
residual; the self-attention stack run ``num_blocks`` times with the same weights; the classification decoder's
single trainable query cross-attending to the latents (one head, ``kv_dim`` the latents' width), its first row
taken as the logits.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn


class PerceiverEmbeddings(nn.Module):
    def __init__(self, num_latents: int, d_latents: int):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(num_latents, d_latents))

    def forward(self, batch_size: int):
        return self.latents.expand(batch_size, -1, -1)


class PerceiverSelfAttention(nn.Module):
    def __init__(self, is_cross_attention, qk_channels, v_channels, num_heads, q_dim, kv_dim):
        super().__init__()
        self.num_heads = num_heads
        if qk_channels is None:
            qk_channels = q_dim
        if v_channels is None:
            v_channels = qk_channels
        self.qk_channels = qk_channels
        self.v_channels = v_channels
        self.qk_channels_per_head = self.qk_channels // num_heads
        self.v_channels_per_head = self.v_channels // num_heads
        self.layernorm1 = nn.LayerNorm(q_dim)
        self.layernorm2 = nn.LayerNorm(kv_dim) if is_cross_attention else nn.Identity()
        self.query = nn.Linear(q_dim, qk_channels)
        self.key = nn.Linear(kv_dim, qk_channels)
        self.value = nn.Linear(kv_dim, v_channels)
        self.dropout = nn.Dropout(0.0)

    def transpose_for_scores(self, x, channels_per_head):
        new_x_shape = x.size()[:-1] + (self.num_heads, channels_per_head)
        return x.view(*new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, inputs=None, inputs_mask=None):
        hidden_states = self.layernorm1(hidden_states)
        inputs = self.layernorm2(inputs)
        is_cross_attention = inputs is not None
        queries = self.query(hidden_states)
        if is_cross_attention:
            keys, values = self.key(inputs), self.value(inputs)
            attention_mask = inputs_mask
        else:
            keys, values = self.key(hidden_states), self.value(hidden_states)
        queries = self.transpose_for_scores(queries, self.qk_channels_per_head)
        keys = self.transpose_for_scores(keys, self.qk_channels_per_head)
        values = self.transpose_for_scores(values, self.v_channels_per_head)
        attention_scores = torch.matmul(queries, keys.transpose(-1, -2))
        batch_size, num_heads, seq_len, q_head_dim = queries.shape
        _, _, _, v_head_dim = values.shape
        hiddens = self.num_heads * v_head_dim
        attention_scores = attention_scores / math.sqrt(q_head_dim)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = self.dropout(nn.Softmax(dim=-1)(attention_scores))
        context_layer = torch.matmul(attention_probs, values).permute(0, 2, 1, 3).contiguous()
        return (context_layer.view(*(context_layer.size()[:-2] + (hiddens,))),)


class PerceiverSelfOutput(nn.Module):
    def __init__(self, input_channels, output_channels):
        super().__init__()
        self.dense = nn.Linear(input_channels, output_channels)

    def forward(self, hidden_states):
        return self.dense(hidden_states)


class PerceiverAttention(nn.Module):
    def __init__(self, is_cross_attention, qk_channels, v_channels, num_heads, q_dim, kv_dim, use_query_residual):
        super().__init__()
        if is_cross_attention and qk_channels is None:
            qk_channels = kv_dim  # cross_attention_shape_for_attention="kv"
        if is_cross_attention and v_channels is None:
            v_channels = qk_channels
        self.self = PerceiverSelfAttention(is_cross_attention, qk_channels, v_channels, num_heads, q_dim, kv_dim)
        self.output = PerceiverSelfOutput(self.self.v_channels, q_dim)
        self.use_query_residual = use_query_residual

    def forward(self, hidden_states, attention_mask=None, inputs=None, inputs_mask=None):
        self_outputs = self.self(hidden_states, attention_mask, inputs, inputs_mask)
        attention_output = self.output(self_outputs[0])
        if self.use_query_residual:
            attention_output = attention_output + hidden_states
        return (attention_output,) + self_outputs[1:]


class PerceiverMLP(nn.Module):
    def __init__(self, input_size, widening_factor):
        super().__init__()
        self.dense1 = nn.Linear(input_size, widening_factor * input_size)
        self.intermediate_act_fn = nn.GELU()
        self.dense2 = nn.Linear(widening_factor * input_size, input_size)

    def forward(self, hidden_states):
        return self.dense2(self.intermediate_act_fn(self.dense1(hidden_states)))


class PerceiverLayer(nn.Module):
    def __init__(self, is_cross_attention=False, qk_channels=None, v_channels=None, num_heads=1, q_dim=None,
                 kv_dim=None, widening_factor=4, use_query_residual=True):
        super().__init__()
        self.attention = PerceiverAttention(is_cross_attention, qk_channels, v_channels, num_heads, q_dim, kv_dim,
                                            use_query_residual)
        self.layernorm = nn.LayerNorm(q_dim)
        self.mlp = PerceiverMLP(q_dim, widening_factor)

    def feed_forward_chunk(self, attention_output):
        return self.mlp(self.layernorm(attention_output))

    def forward(self, hidden_states, attention_mask=None, inputs=None, inputs_mask=None):
        attention_outputs = self.attention(hidden_states, attention_mask, inputs, inputs_mask)
        attention_output = attention_outputs[0]
        layer_output = self.feed_forward_chunk(attention_output) + attention_output
        return (layer_output,) + attention_outputs[1:]


class PerceiverEncoder(nn.Module):
    def __init__(self, config: dict, kv_dim: int):
        super().__init__()
        self.num_blocks = config["num_blocks"]
        self.cross_attention = PerceiverLayer(
            is_cross_attention=True, qk_channels=config["qk_channels"], v_channels=config["v_channels"],
            num_heads=config["num_cross_attention_heads"], q_dim=config["d_latents"], kv_dim=kv_dim,
            widening_factor=config["cross_attention_widening_factor"], use_query_residual=True)
        self.self_attends = nn.ModuleList(
            PerceiverLayer(is_cross_attention=False, qk_channels=config["qk_channels"],
                           v_channels=config["v_channels"], num_heads=config["num_self_attention_heads"],
                           q_dim=config["d_latents"], kv_dim=config["d_latents"],
                           widening_factor=config["self_attention_widening_factor"])
            for _ in range(config["num_self_attends_per_block"]))

    def forward(self, hidden_states, attention_mask=None, inputs=None, inputs_mask=None):
        hidden_states = self.cross_attention(hidden_states, attention_mask=attention_mask, inputs=inputs,
                                             inputs_mask=inputs_mask)[0]
        for _ in range(self.num_blocks):
            for layer_module in self.self_attends:
                hidden_states = layer_module(hidden_states, attention_mask=attention_mask)[0]
        return (hidden_states,)


class PerceiverTextPreprocessor(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, max_position_embeddings: int):
        super().__init__()
        self.d_model = d_model
        self.embeddings = nn.Embedding(vocab_size, d_model)
        self.position_embeddings = nn.Embedding(max_position_embeddings, d_model)

    def num_channels(self) -> int:
        return self.d_model

    def forward(self, inputs):
        embeddings_without_pos = self.embeddings(inputs)
        position_ids = torch.arange(0, inputs.shape[1], device=inputs.device)
        return embeddings_without_pos + self.position_embeddings(position_ids), None, embeddings_without_pos


class PerceiverTrainablePositionEncoding(nn.Module):
    def __init__(self, index_dims: int, num_channels: int):
        super().__init__()
        self.position_embeddings = nn.Parameter(torch.randn(index_dims, num_channels))

    def forward(self, batch_size: Optional[int]):
        position_embeddings = self.position_embeddings
        if batch_size is not None:
            position_embeddings = position_embeddings.expand(batch_size, -1, -1)
        return position_embeddings


class PerceiverBasicDecoder(nn.Module):
    def __init__(self, output_num_channels: int, num_channels: int, d_latents: int, num_heads: int = 1):
        super().__init__()
        self.output_position_encodings = PerceiverTrainablePositionEncoding(1, num_channels)
        self.decoding_cross_attention = PerceiverLayer(is_cross_attention=True, num_heads=num_heads,
                                                       q_dim=num_channels, kv_dim=d_latents, widening_factor=1,
                                                       use_query_residual=True)
        self.final_layer = nn.Linear(num_channels, output_num_channels)

    def decoder_query(self, inputs):
        return self.output_position_encodings(inputs.shape[0])

    def forward(self, query, z):
        output = self.decoding_cross_attention(query, inputs=z, inputs_mask=None)[0]
        return self.final_layer(output)


class PerceiverClassificationDecoder(nn.Module):
    def __init__(self, num_labels: int, num_channels: int, d_latents: int):
        super().__init__()
        self.decoder = PerceiverBasicDecoder(num_labels, num_channels, d_latents)

    def decoder_query(self, inputs):
        return self.decoder.decoder_query(inputs)

    def forward(self, query, z):
        return self.decoder(query, z)[:, 0, :]


class PerceiverModel(nn.Module):
    def __init__(self, config: dict, decoder=None, input_preprocessor=None):
        super().__init__()
        self.input_preprocessor = input_preprocessor
        self.embeddings = PerceiverEmbeddings(config["num_latents"], config["d_latents"])
        self.encoder = PerceiverEncoder(config, kv_dim=input_preprocessor.num_channels())
        self.decoder = decoder

    @staticmethod
    def invert_attention_mask(encoder_attention_mask, dtype):
        extended = encoder_attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended) * torch.finfo(dtype).min

    def forward(self, inputs, attention_mask=None):
        inputs, modality_sizes, inputs_without_pos = self.input_preprocessor(inputs)
        batch_size, seq_length, _ = inputs.size()
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), device=inputs.device)
        extended_attention_mask = self.invert_attention_mask(attention_mask, inputs.dtype)
        embedding_output = self.embeddings(batch_size=batch_size)
        sequence_output = self.encoder(embedding_output, attention_mask=None, inputs=inputs,
                                       inputs_mask=extended_attention_mask)[0]
        logits = self.decoder(self.decoder.decoder_query(inputs), z=sequence_output)
        return logits, sequence_output


class PerceiverForSequenceClassification(nn.Module):
    """``forward(inputs, attention_mask=None)`` -> ``(logits (B, labels), latents (B, num_latents, d_latents))``."""

    def __init__(self, vocab_size: int = 64, d_model: int = 20, d_latents: int = 24, num_latents: int = 6,
                 num_blocks: int = 2, num_self_attends_per_block: int = 2, num_self_attention_heads: int = 4,
                 num_cross_attention_heads: int = 2, qk_channels: Optional[int] = 16,
                 v_channels: Optional[int] = None, max_position_embeddings: int = 32, num_labels: int = 3):
        super().__init__()
        config = dict(d_latents=d_latents, num_latents=num_latents, num_blocks=num_blocks,
                      num_self_attends_per_block=num_self_attends_per_block,
                      num_self_attention_heads=num_self_attention_heads,
                      num_cross_attention_heads=num_cross_attention_heads, qk_channels=qk_channels,
                      v_channels=v_channels, cross_attention_widening_factor=1, self_attention_widening_factor=2)
        self.perceiver = PerceiverModel(
            config, input_preprocessor=PerceiverTextPreprocessor(vocab_size, d_model, max_position_embeddings),
            decoder=PerceiverClassificationDecoder(num_labels, d_latents, d_latents))

    def forward(self, inputs, attention_mask=None):
        return self.perceiver(inputs, attention_mask)


def perceiver_small() -> PerceiverForSequenceClassification:
    """6 latents of 24 over 20-wide token embeddings; scores 16 wide, values 16 (cross) and 24 (self) wide; the two
    self-attention layers run twice."""
    return PerceiverForSequenceClassification()


def perceiver_default_channels_small() -> PerceiverForSequenceClassification:
    """``qk_channels=None``: the cross attention's scores as wide as the inputs (20, ``"kv"``), self attention's as
    the latents (24)."""
    return PerceiverForSequenceClassification(qk_channels=None)
