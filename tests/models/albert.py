"""A twin of transformers' ``AlbertModel`` as ``modeling_albert.py`` writes it in the 4.4x releases (eager
attention; module structure and ``state_dict`` names: ``embeddings.word_embeddings`` / ``position_embeddings`` /
``token_type_embeddings`` / ``LayerNorm``, ``encoder.embedding_hidden_mapping_in``,
``encoder.albert_layer_groups.<g>.albert_layers.<j>.attention.query`` / ``key`` / ``value`` / ``dense`` /
``LayerNorm``, ``.ffn``, ``.ffn_output``, ``.full_layer_layer_norm``, ``pooler``; ``position_ids`` and
``token_type_ids`` non-persistent buffers), small sizes.

Stresses: one layer group's weights run by every layer (``num_hidden_layers`` applications of
``albert_layer_groups[int(i / (layers / groups))]``), so the port must keep one copy and sum its gradients over the
applications; factorized embeddings (``embedding_size`` < ``hidden_size``, projected by
``embedding_hidden_mapping_in``); the extended mask ``(1 - mask) * finfo.min``; ``gelu_new`` (tanh GELU written
out: ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``); post-norm residuals; the tanh pooler on the
first token; token types from the default buffer when none are given.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tests.models.hf_text_more import NewGELUActivation


class AlbertEmbeddings(nn.Module):
    def __init__(self, vocab_size, embedding_size, max_position_embeddings, type_vocab_size, eps):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_position_embeddings, embedding_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, embedding_size)
        self.LayerNorm = nn.LayerNorm(embedding_size, eps=eps)
        self.dropout = nn.Dropout(0.0)
        self.register_buffer("position_ids", torch.arange(max_position_embeddings).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long),
                             persistent=False)

    def forward(self, input_ids, token_type_ids=None):
        seq_length = input_ids.size()[1]
        position_ids = self.position_ids[:, :seq_length]
        if token_type_ids is None:
            buffered_token_type_ids = self.token_type_ids[:, :seq_length]
            token_type_ids = buffered_token_type_ids.expand(input_ids.shape[0], seq_length)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class AlbertAttention(nn.Module):
    def __init__(self, hidden_size, heads, eps):
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden_size // heads
        self.all_head_size = heads * self.attention_head_size
        self.query = nn.Linear(hidden_size, self.all_head_size)
        self.key = nn.Linear(hidden_size, self.all_head_size)
        self.value = nn.Linear(hidden_size, self.all_head_size)
        self.attention_dropout = nn.Dropout(0.0)
        self.output_dropout = nn.Dropout(0.0)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = self.attention_dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).transpose(2, 1).flatten(2)
        projected_context_layer = self.output_dropout(self.dense(context_layer))
        return (self.LayerNorm(hidden_states + projected_context_layer),)


class AlbertLayer(nn.Module):
    def __init__(self, hidden_size, heads, intermediate_size, eps):
        super().__init__()
        self.full_layer_layer_norm = nn.LayerNorm(hidden_size, eps=eps)
        self.attention = AlbertAttention(hidden_size, heads, eps)
        self.ffn = nn.Linear(hidden_size, intermediate_size)
        self.ffn_output = nn.Linear(intermediate_size, hidden_size)
        self.activation = NewGELUActivation()
        self.dropout = nn.Dropout(0.0)

    def ff_chunk(self, attention_output):
        return self.ffn_output(self.activation(self.ffn(attention_output)))

    def forward(self, hidden_states, attention_mask=None):
        attention_output = self.attention(hidden_states, attention_mask)
        ffn_output = self.ff_chunk(attention_output[0])
        return (self.full_layer_layer_norm(ffn_output + attention_output[0]),) + attention_output[1:]


class AlbertLayerGroup(nn.Module):
    def __init__(self, inner_group_num, **layer):
        super().__init__()
        self.albert_layers = nn.ModuleList(AlbertLayer(**layer) for _ in range(inner_group_num))

    def forward(self, hidden_states, attention_mask=None):
        for albert_layer in self.albert_layers:
            hidden_states = albert_layer(hidden_states, attention_mask)[0]
        return (hidden_states,)


class AlbertTransformer(nn.Module):
    def __init__(self, embedding_size, hidden_size, num_hidden_layers, num_hidden_groups, inner_group_num, **layer):
        super().__init__()
        self.num_hidden_layers = num_hidden_layers
        self.num_hidden_groups = num_hidden_groups
        self.embedding_hidden_mapping_in = nn.Linear(embedding_size, hidden_size)
        self.albert_layer_groups = nn.ModuleList(
            AlbertLayerGroup(inner_group_num, hidden_size=hidden_size, **layer) for _ in range(num_hidden_groups))

    def forward(self, hidden_states, attention_mask=None):
        hidden_states = self.embedding_hidden_mapping_in(hidden_states)
        for i in range(self.num_hidden_layers):
            group_idx = int(i / (self.num_hidden_layers / self.num_hidden_groups))
            hidden_states = self.albert_layer_groups[group_idx](hidden_states, attention_mask)[0]
        return hidden_states


class AlbertModel(nn.Module):
    """``forward(input_ids, attention_mask=None, token_type_ids=None)`` -> ``(last_hidden_state (B, L, hidden),
    pooler_output (B, hidden))``."""

    def __init__(self, vocab_size: int = 64, embedding_size: int = 8, hidden_size: int = 24, heads: int = 4,
                 intermediate_size: int = 40, num_hidden_layers: int = 4, num_hidden_groups: int = 1,
                 inner_group_num: int = 1, max_position_embeddings: int = 32, type_vocab_size: int = 2,
                 layer_norm_eps: float = 1e-12):
        super().__init__()
        self.embeddings = AlbertEmbeddings(vocab_size, embedding_size, max_position_embeddings, type_vocab_size,
                                           layer_norm_eps)
        self.encoder = AlbertTransformer(embedding_size, hidden_size, num_hidden_layers, num_hidden_groups,
                                         inner_group_num, heads=heads, intermediate_size=intermediate_size,
                                         eps=layer_norm_eps)
        self.pooler = nn.Linear(hidden_size, hidden_size)
        self.pooler_activation = nn.Tanh()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape, device=input_ids.device)
        embedding_output = self.embeddings(input_ids, token_type_ids=token_type_ids)
        extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2).to(dtype=embedding_output.dtype)
        extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(embedding_output.dtype).min
        sequence_output = self.encoder(embedding_output, extended_attention_mask)
        pooled_output = self.pooler_activation(self.pooler(sequence_output[:, 0]))
        return sequence_output, pooled_output


def albert_small() -> AlbertModel:
    """ALBERT-base's sharing: one group of one layer run 4 times; embeddings of 8 projected to 24."""
    return AlbertModel()


def albert_two_groups_small() -> AlbertModel:
    """Two groups of two layers each, 6 layers: groups 0, 0, 0, 1, 1, 1 (``int(i / 3)``)."""
    return AlbertModel(num_hidden_layers=6, num_hidden_groups=2, inner_group_num=2)
