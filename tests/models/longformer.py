"""A twin of transformers' ``LongformerModel`` (module structure and ``state_dict`` names: ``embeddings.*``,
``encoder.layer.<i>.attention.self.{query,key,value,query_global,key_global,value_global}``,
``encoder.layer.<i>.attention.output.dense``, ``...intermediate.dense``, ``...output.LayerNorm``, ``pooler.dense``),
small sizes (hidden 16, 2 heads, attention window 4 per layer, so one-sided window w = 2 and chunks of 2w = 4).

Stresses: the sliding-window attention by overlapping chunks (``_chunk``: a fresh reshape viewed as chunks of 2w rows,
then ``as_strided`` with the chunk stride halved; the value side pads by w on both ends and ``as_strided`` into chunks
of 3w), ``_pad_and_transpose_last_two_dims`` and ``_pad_and_diagonalize`` (pad, flatten, cut, re-view: diagonals
into columns), the band assembled by slice assignments into ``new_empty``, ``_mask_invalid_locations`` (in-place
``masked_fill_`` of the first and last w rows through views), padding of the ids and mask to a multiple of the window
(``_pad_to_window_size``) and the unpadding at the end, the -inf of the mask (``finfo.min``) on the band,
``masked_fill`` of fully masked query rows, positions from the ids' ``cumsum`` (RoBERTa's).

The encoder decides ``is_global_attn`` with ``.any().item()`` and the global path gathers by ``nonzero``: both
data-dependent, as in transformers. ``local_only=True`` (the default for the twins) replaces only that ``.item()``
by the constant False (what it is for any call without a ``global_attention_mask``), so torch.export can capture
the local path; ``local_only=False`` keeps transformers' line.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def create_position_ids_from_input_ids(input_ids, padding_idx):
    mask = input_ids.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class LongformerEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden, max_positions, type_vocab, pad_token_id):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=pad_token_id)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-5)
        self.dropout = nn.Dropout(0.0)
        self.padding_idx = pad_token_id
        self.position_embeddings = nn.Embedding(max_positions, hidden, padding_idx=pad_token_id)

    def forward(self, input_ids, token_type_ids):
        position_ids = create_position_ids_from_input_ids(input_ids, self.padding_idx)
        embeddings = (self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
                      + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(embeddings))


class LongformerSelfAttention(nn.Module):
    def __init__(self, hidden, heads, attention_window):
        super().__init__()
        self.num_heads, self.head_dim, self.embed_dim = heads, hidden // heads, hidden
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.query_global, self.key_global, self.value_global = (nn.Linear(hidden, hidden) for _ in range(3))
        self.dropout = 0.0
        self.one_sided_attn_window_size = attention_window // 2

    # -------------------------------------------------------------------------------------------- band helpers
    @staticmethod
    def _pad_and_transpose_last_two_dims(x, padding):
        x = nn.functional.pad(x, padding)
        return x.view(*x.size()[:-2], x.size(-1), x.size(-2))

    @staticmethod
    def _pad_and_diagonalize(chunked):
        heads, chunks, w, dim = chunked.size()
        chunked = nn.functional.pad(chunked, (0, w + 1)).view(heads, chunks, -1)[:, :, :-w]
        return chunked.view(heads, chunks, w, w + dim)[:, :, :, :-1]

    @staticmethod
    def _chunk(x, w):
        x = x.view(x.size(0), x.size(1) // (w * 2), w * 2, x.size(2))
        size, stride = list(x.size()), list(x.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
        return x.as_strided(size=size, stride=stride)

    @staticmethod
    def _mask_invalid_locations(scores, w):
        begin = scores.new_ones(w, w + 1).tril().flip(dims=[0])[None, :, None, :]
        end = begin.flip(dims=(1, 3))
        first = scores[:, :w, :, : w + 1]
        first.masked_fill_(begin.expand(first.size()) == 1, -float("inf"))
        last = scores[:, -w:, :, -(w + 1):]
        last.masked_fill_(end.expand(last.size()) == 1, -float("inf"))

    def _sliding_chunks_query_key_matmul(self, query, key, w):
        batch, length, heads, dim = query.size()
        chunks = length // w - 1
        query = self._chunk(query.transpose(1, 2).reshape(batch * heads, length, dim), w)
        key = self._chunk(key.transpose(1, 2).reshape(batch * heads, length, dim), w)
        band = self._pad_and_transpose_last_two_dims(torch.einsum("bcxd,bcyd->bcxy", (query, key)), (0, 0, 0, 1))
        out = band.new_empty((batch * heads, chunks + 1, w, w * 2 + 1))
        out[:, :-1, :, w:] = band[:, :, :w, : w + 1]
        out[:, -1, :, w:] = band[:, -1, w:, : w + 1]
        out[:, 1:, :, :w] = band[:, :, -(w + 1):-1, w + 1:]
        out[:, 0, 1:w, 1:w] = band[:, 0, : w - 1, 1 - w:]
        out = out.view(batch, heads, length, 2 * w + 1).transpose(2, 1)
        self._mask_invalid_locations(out, w)
        return out

    def _sliding_chunks_matmul_attn_probs_value(self, probs, value, w):
        batch, length, heads, dim = value.size()
        chunks = length // w - 1
        probs = probs.transpose(1, 2).reshape(batch * heads, length // w, w, 2 * w + 1)
        value = value.transpose(1, 2).reshape(batch * heads, length, dim)
        padded = nn.functional.pad(value, (0, 0, w, w), value=-1)
        stride = padded.stride()
        chunked = padded.as_strided(size=(batch * heads, chunks + 1, 3 * w, dim),
                                    stride=(stride[0], w * stride[1], stride[1], stride[2]))
        context = torch.einsum("bcwd,bcdh->bcwh", (self._pad_and_diagonalize(probs), chunked))
        return context.view(batch, heads, length, dim).transpose(1, 2)

    # -------------------------------------------------------------------------------------------- global tokens
    @staticmethod
    def _get_global_attn_indices(is_index_global_attn):
        counts = is_index_global_attn.long().sum(dim=1)
        most = counts.max()
        nonzero = is_index_global_attn.nonzero(as_tuple=True)
        local = torch.arange(most, device=is_index_global_attn.device) < counts.unsqueeze(dim=-1)
        return most, nonzero, local.nonzero(as_tuple=True), (local == 0).nonzero(as_tuple=True)

    def _global_path(self, hidden_states, query, key, value, scores, masked, global_attn):
        """The global tokens (transformers' ``_concat_with_global_key_attn_probs``,
        ``_compute_attn_output_with_global_indices`` and ``_compute_global_attn_output_from_hidden`` in one place):
        only reached with ``local_only=False`` and a global mask (nonzero gathers: refused by a port)."""
        most, nonzero, local_nz, local_zero = self._get_global_attn_indices(global_attn)
        batch = key.shape[0]
        key_global = key.new_zeros(batch, most, self.num_heads, self.head_dim)
        key_global[local_nz] = key[nonzero]
        from_global = torch.einsum("blhd,bshd->blhs", (query, key_global))
        from_global[local_zero[0], :, :, local_zero[1]] = torch.finfo(from_global.dtype).min
        scores = torch.cat((from_global, scores), dim=-1)
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
        probs = torch.masked_fill(probs, masked[:, :, None, None], 0.0).type_as(scores)
        value_global = value.new_zeros(batch, most, self.num_heads, self.head_dim)
        value_global[local_nz] = value[nonzero]
        out = torch.matmul(probs.narrow(-1, 0, most).transpose(1, 2).clone(),
                           value_global.transpose(1, 2).clone()).transpose(1, 2)
        out = out + self._sliding_chunks_matmul_attn_probs_value(
            probs.narrow(-1, most, probs.size(-1) - most).contiguous(), value, self.one_sided_attn_window_size)
        length = hidden_states.shape[0]
        out = out.transpose(0, 1).reshape(length, batch, self.embed_dim).contiguous()
        states = hidden_states.new_zeros(most, batch, self.embed_dim)
        states[local_nz[::-1]] = hidden_states[nonzero[::-1]]
        q = self.query_global(states) / math.sqrt(self.head_dim)
        q = q.contiguous().view(most, batch * self.num_heads, self.head_dim).transpose(0, 1)
        k = self.key_global(hidden_states).contiguous().view(-1, batch * self.num_heads, self.head_dim).transpose(0, 1)
        v = self.value_global(hidden_states).contiguous().view(-1, batch * self.num_heads, self.head_dim).transpose(0, 1)
        g = torch.bmm(q, k.transpose(1, 2)).view(batch, self.num_heads, most, length)
        g[local_zero[0], :, local_zero[1], :] = torch.finfo(g.dtype).min
        g = g.masked_fill(masked[:, None, None, :], torch.finfo(g.dtype).min)
        g = nn.functional.softmax(g.view(batch * self.num_heads, most, length), dim=-1, dtype=torch.float32)
        g = torch.bmm(g.type_as(q), v).view(batch, self.num_heads, most, self.head_dim)
        out[nonzero[::-1]] = g[local_nz[0], :, local_nz[1]].view(len(local_nz[0]), -1)
        return out

    def forward(self, hidden_states, attention_mask, is_index_masked, is_index_global_attn, is_global_attn):
        hidden_states = hidden_states.transpose(0, 1)
        query, key, value = self.query(hidden_states), self.key(hidden_states), self.value(hidden_states)
        length, batch, _ = hidden_states.size()
        query /= math.sqrt(self.head_dim)
        query = query.view(length, batch, self.num_heads, self.head_dim).transpose(0, 1)
        key = key.view(length, batch, self.num_heads, self.head_dim).transpose(0, 1)
        w = self.one_sided_attn_window_size
        scores = self._sliding_chunks_query_key_matmul(query, key, w)
        remove = (attention_mask != 0)[:, :, None, None]
        float_mask = remove.type_as(query).masked_fill(remove, torch.finfo(query.dtype).min)
        scores += self._sliding_chunks_query_key_matmul(float_mask.new_ones(size=float_mask.size()), float_mask, w)
        value = value.view(length, batch, self.num_heads, self.head_dim).transpose(0, 1)
        if is_global_attn:
            return self._global_path(hidden_states, query, key, value, scores, is_index_masked,
                                     is_index_global_attn).transpose(0, 1)
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32)
        probs = torch.masked_fill(probs, is_index_masked[:, :, None, None], 0.0).type_as(scores)
        probs = nn.functional.dropout(probs, p=self.dropout, training=self.training)
        out = self._sliding_chunks_matmul_attn_probs_value(probs, value, w)
        return out.transpose(0, 1).reshape(length, batch, self.embed_dim).contiguous().transpose(0, 1)


class LongformerSelfOutput(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-5)
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class LongformerAttention(nn.Module):
    def __init__(self, hidden, heads, attention_window):
        super().__init__()
        self.self = LongformerSelfAttention(hidden, heads, attention_window)
        self.output = LongformerSelfOutput(hidden)

    def forward(self, hidden_states, *masks):
        return self.output(self.self(hidden_states, *masks), hidden_states)


class LongformerIntermediate(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class LongformerOutput(LongformerSelfOutput):
    def __init__(self, hidden, intermediate):
        nn.Module.__init__(self)
        self.dense = nn.Linear(intermediate, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-5)
        self.dropout = nn.Dropout(0.0)


class LongformerLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, attention_window):
        super().__init__()
        self.attention = LongformerAttention(hidden, heads, attention_window)
        self.intermediate = LongformerIntermediate(hidden, intermediate)
        self.output = LongformerOutput(hidden, intermediate)

    def forward(self, hidden_states, *masks):
        attn = self.attention(hidden_states, *masks)
        return self.output(self.intermediate(attn), attn)


class LongformerEncoder(nn.Module):
    def __init__(self, hidden, heads, intermediate, windows, local_only):
        super().__init__()
        self.layer = nn.ModuleList(LongformerLayer(hidden, heads, intermediate, w) for w in windows)
        self.local_only = local_only

    def forward(self, hidden_states, attention_mask, padding_len=0):
        is_index_masked = attention_mask < 0
        is_index_global_attn = attention_mask > 0
        is_global_attn = False if self.local_only else is_index_global_attn.flatten().any().item()
        for layer in self.layer:
            hidden_states = layer(hidden_states, attention_mask, is_index_masked, is_index_global_attn,
                                  is_global_attn)
        if padding_len > 0:
            hidden_states = hidden_states[:, :-padding_len]
        return hidden_states


class LongformerPooler(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class LongformerModel(nn.Module):
    """``forward(input_ids, attention_mask=None, global_attention_mask=None)`` -> ``(last_hidden_state,
    pooler_output)``; ids ``(B, L)`` (any L: padded to a multiple of the largest window with ``pad_token_id`` 1),
    masks ``(B, L)`` of 0/1."""

    def __init__(self, vocab_size=64, hidden=16, heads=2, intermediate=32, attention_window=(4, 4),
                 max_positions=64, type_vocab=1, pad_token_id=1, local_only=True):
        super().__init__()
        self.attention_window, self.pad_token_id = list(attention_window), pad_token_id
        self.embeddings = LongformerEmbeddings(vocab_size, hidden, max_positions, type_vocab, pad_token_id)
        self.encoder = LongformerEncoder(hidden, heads, intermediate, self.attention_window, local_only)
        self.pooler = LongformerPooler(hidden)

    def _pad_to_window_size(self, input_ids, attention_mask, token_type_ids):
        window = max(self.attention_window)
        padding_len = (window - input_ids.shape[1] % window) % window
        if padding_len > 0:
            input_ids = nn.functional.pad(input_ids, (0, padding_len), value=self.pad_token_id)
            attention_mask = nn.functional.pad(attention_mask, (0, padding_len), value=False)
            token_type_ids = nn.functional.pad(token_type_ids, (0, padding_len), value=0)
        return padding_len, input_ids, attention_mask, token_type_ids

    def forward(self, input_ids, attention_mask=None, global_attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.size(), device=input_ids.device)
        token_type_ids = torch.zeros(input_ids.size(), dtype=torch.long, device=input_ids.device)
        if global_attention_mask is not None:
            attention_mask = attention_mask * (global_attention_mask + 1)
        padding_len, input_ids, attention_mask, token_type_ids = self._pad_to_window_size(
            input_ids, attention_mask, token_type_ids)
        # get_extended_attention_mask(...)[:, 0, 0, :]: 0 where attended, finfo.min where masked
        extended = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
        hidden_states = self.embeddings(input_ids, token_type_ids)
        sequence = self.encoder(hidden_states, extended[:, 0, 0, :], padding_len)
        return sequence, self.pooler(sequence)


def longformer_small(**kwargs):
    return LongformerModel(**kwargs)
