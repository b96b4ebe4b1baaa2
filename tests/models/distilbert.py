"""A twin of transformers' ``DistilBertForSequenceClassification`` as ``modeling_distilbert.py`` writes it in the
4.4x releases (eager attention; module structure and ``state_dict`` names: ``distilbert.embeddings.word_embeddings``
/ ``position_embeddings`` / ``LayerNorm``, ``distilbert.transformer.layer.<i>.attention.q_lin`` / ``k_lin`` /
``v_lin`` / ``out_lin``, ``.sa_layer_norm``, ``.ffn.lin1`` / ``lin2``, ``.output_layer_norm``, ``pre_classifier``,
``classifier``; ``position_ids`` a non-persistent buffer), small sizes.

Stresses: the query scaled before the scores, the padding mask applied by ``masked_fill`` of ``(mask == 0)``
expanded to the scores with a ``torch.tensor(finfo.min)``; post-norm blocks; the first token through a ReLU
classifier head. With ``sinusoidal_pos_embds`` the position table is filled with numpy's sinusoids (sin on even,
cos on odd channels) and frozen (``requires_grad = False``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn


def create_sinusoidal_embeddings(n_pos: int, dim: int, out: torch.Tensor) -> None:
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])
    out.requires_grad = False
    out[:, 0::2] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    out[:, 1::2] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    out.detach_()


class Embeddings(nn.Module):
    def __init__(self, vocab_size, dim, max_position_embeddings, pad_token_id, sinusoidal_pos_embds):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, dim, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, dim)
        self.sinusoidal_pos_embds = sinusoidal_pos_embds
        if sinusoidal_pos_embds:
            with torch.no_grad():
                create_sinusoidal_embeddings(max_position_embeddings, dim, self.position_embeddings.weight)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(0.0)
        self.register_buffer("position_ids", torch.arange(max_position_embeddings).expand((1, -1)), persistent=False)

    def forward(self, input_ids):
        input_embeds = self.word_embeddings(input_ids)
        seq_length = input_embeds.size(1)
        position_ids = self.position_ids[:, :seq_length]
        embeddings = input_embeds + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.dim = dim
        self.dropout = nn.Dropout(0.0)
        self.q_lin = nn.Linear(dim, dim)
        self.k_lin = nn.Linear(dim, dim)
        self.v_lin = nn.Linear(dim, dim)
        self.out_lin = nn.Linear(dim, dim)

    def forward(self, query, key, value, mask):
        bs, q_length, dim = query.size()
        k_length = key.size(1)
        dim_per_head = self.dim // self.n_heads
        mask_reshp = (bs, 1, 1, k_length)

        def shape(x):
            return x.view(bs, -1, self.n_heads, dim_per_head).transpose(1, 2)

        def unshape(x):
            return x.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * dim_per_head)

        q = shape(self.q_lin(query))
        k = shape(self.k_lin(key))
        v = shape(self.v_lin(value))
        q = q / math.sqrt(dim_per_head)
        scores = torch.matmul(q, k.transpose(2, 3))
        mask = (mask == 0).view(mask_reshp).expand_as(scores)
        scores = scores.masked_fill(mask, torch.tensor(torch.finfo(scores.dtype).min))
        weights = self.dropout(nn.functional.softmax(scores, dim=-1))
        context = unshape(torch.matmul(weights, v))
        return (self.out_lin(context),)


class FFN(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.dropout = nn.Dropout(0.0)
        self.lin1 = nn.Linear(dim, hidden_dim)
        self.lin2 = nn.Linear(hidden_dim, dim)
        self.activation = nn.GELU()

    def forward(self, input):
        return self.dropout(self.lin2(self.activation(self.lin1(input))))


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, hidden_dim):
        super().__init__()
        self.attention = MultiHeadSelfAttention(dim, n_heads)
        self.sa_layer_norm = nn.LayerNorm(dim, eps=1e-12)
        self.ffn = FFN(dim, hidden_dim)
        self.output_layer_norm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x, attn_mask):
        sa_output = self.attention(x, x, x, attn_mask)[0]
        sa_output = self.sa_layer_norm(sa_output + x)
        return (self.output_layer_norm(self.ffn(sa_output) + sa_output),)


class Transformer(nn.Module):
    def __init__(self, n_layers, **block):
        super().__init__()
        self.layer = nn.ModuleList(TransformerBlock(**block) for _ in range(n_layers))

    def forward(self, x, attn_mask):
        hidden_state = x
        for layer_module in self.layer:
            hidden_state = layer_module(hidden_state, attn_mask)[-1]
        return (hidden_state,)


class DistilBertModel(nn.Module):
    def __init__(self, vocab_size, dim, n_layers, n_heads, hidden_dim, max_position_embeddings, pad_token_id,
                 sinusoidal_pos_embds):
        super().__init__()
        self.embeddings = Embeddings(vocab_size, dim, max_position_embeddings, pad_token_id, sinusoidal_pos_embds)
        self.transformer = Transformer(n_layers, dim=dim, n_heads=n_heads, hidden_dim=hidden_dim)

    def forward(self, input_ids, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.size(), device=input_ids.device)
        return self.transformer(self.embeddings(input_ids), attention_mask)


class DistilBertForSequenceClassification(nn.Module):
    """``forward(input_ids, attention_mask=None)`` -> logits ``(B, num_labels)``."""

    def __init__(self, vocab_size: int = 64, dim: int = 24, n_layers: int = 2, n_heads: int = 4,
                 hidden_dim: int = 48, max_position_embeddings: int = 32, pad_token_id: int = 0,
                 sinusoidal_pos_embds: bool = False, num_labels: int = 3):
        super().__init__()
        self.distilbert = DistilBertModel(vocab_size, dim, n_layers, n_heads, hidden_dim, max_position_embeddings,
                                          pad_token_id, sinusoidal_pos_embds)
        self.pre_classifier = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, num_labels)
        self.dropout = nn.Dropout(0.0)

    def forward(self, input_ids, attention_mask=None):
        hidden_state = self.distilbert(input_ids, attention_mask)[0]
        pooled_output = nn.ReLU()(self.pre_classifier(hidden_state[:, 0]))
        return self.classifier(self.dropout(pooled_output))


def distilbert_small() -> DistilBertForSequenceClassification:
    return DistilBertForSequenceClassification()


def distilbert_sinusoidal_small() -> DistilBertForSequenceClassification:
    return DistilBertForSequenceClassification(sinusoidal_pos_embds=True)


def real_sinusoids(model: DistilBertForSequenceClassification) -> None:
    """The frozen sinusoid table back after a seeded randomisation (a checkpoint holds these values)."""
    weight = model.distilbert.embeddings.position_embeddings.weight
    create_sinusoidal_embeddings(weight.shape[0], weight.shape[1], weight)
