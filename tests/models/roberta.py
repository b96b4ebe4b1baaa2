"""A twin of transformers' ``RobertaModel`` (module structure and ``state_dict`` names: ``embeddings.word_embeddings``,
``embeddings.position_embeddings``, ``encoder.layer.<i>.attention.self.query``, ``pooler.dense``), small sizes.

Stresses: position ids built from the token ids (``create_position_ids_from_input_ids``: ``ne(padding_idx).int()``,
``cumsum`` over the sequence, ``type_as``, times the mask, plus ``padding_idx``: padded tokens all get position
``padding_idx``), embeddings with a ``padding_idx``, the ``token_type_ids`` buffer sliced and expanded when the
caller gives none, and an optional 0/1 ``attention_mask`` turned into HF's additive mask. The encoder and pooler
are BERT's (``tests/models/text.py``: the same classes and names as transformers' Roberta ones).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.models.text import BertEncoder, BertPooler


def create_position_ids_from_input_ids(input_ids, padding_idx, past_key_values_length=0):
    mask = input_ids.ne(padding_idx).int()
    incremental_indices = (torch.cumsum(mask, dim=1).type_as(mask) + past_key_values_length) * mask
    return incremental_indices.long() + padding_idx


class RobertaEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden: int, max_positions: int, type_vocab: int, pad_token_id: int):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_positions, hidden, padding_idx=pad_token_id)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-5)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(max_positions).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(self.position_ids.size(), dtype=torch.long),
                             persistent=False)
        self.padding_idx = pad_token_id

    def forward(self, input_ids, token_type_ids=None, position_ids=None):
        if position_ids is None:
            position_ids = create_position_ids_from_input_ids(input_ids, self.padding_idx)
        batch, length = input_ids.size()
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :length].expand(batch, length)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class RobertaModel(nn.Module):
    """``forward(input_ids, attention_mask=None, token_type_ids=None)`` -> ``(last_hidden_state, pooler_output)``;
    ids ``(B, L)`` with ``pad_token_id`` 1 at padded places, mask ``(B, L)`` of 0/1."""

    def __init__(self, vocab_size: int = 64, hidden: int = 16, heads: int = 2, intermediate: int = 32,
                 layers: int = 2, max_positions: int = 40, type_vocab: int = 1, pad_token_id: int = 1):
        super().__init__()
        self.embeddings = RobertaEmbeddings(vocab_size, hidden, max_positions, type_vocab, pad_token_id)
        self.encoder = BertEncoder(hidden, heads, intermediate, layers)
        self.pooler = BertPooler(hidden)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        batch, length = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones((batch, length), device=input_ids.device)
        embedding_output = self.embeddings(input_ids, token_type_ids=token_type_ids)
        dtype = embedding_output.dtype
        extended = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        sequence_output = self.encoder(embedding_output, extended)
        return sequence_output, self.pooler(sequence_output)


def roberta_small() -> nn.Module:
    return RobertaModel()
