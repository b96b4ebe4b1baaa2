"""Small twins of Hugging Face text towers (``transformers`` module structure and ``state_dict`` names):

* CLIP's text tower with projection (``modeling_clip.py``: ``CLIPTextModelWithProjection``): token and position
  embeddings (``position_ids`` buffer sliced to the length), pre-norm layers with quick-GELU, a causal mask plus
  an expanded padding mask (``masked_fill`` with the dtype's minimum), EOS pooling by ``input_ids.argmax(-1)``
  (a data-dependent gather: the legacy ``eos_token_id == 2`` path), ``text_projection``;
* FNet (``modeling_fnet.py``): token-type / position buffers, an embedding ``projection``, ``torch.fft.fftn`` over
  (sequence, hidden) keeping the real part in place of attention, post-norm residuals, a tanh pooler.

Both take integer ``input_ids`` ``(B, L)``; CLIP also a 0/1 ``attention_mask``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


# ---------------------------------------------------------------------------------------------------- CLIP text
class CLIPTextEmbeddings(nn.Module):
    def __init__(self, vocab: int, dim: int, max_positions: int):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, dim)
        self.position_embedding = nn.Embedding(max_positions, dim)
        self.register_buffer("position_ids", torch.arange(max_positions).expand((1, -1)), persistent=False)

    def forward(self, input_ids):
        position_ids = self.position_ids[:, :input_ids.shape[-1]]
        return self.token_embedding(input_ids) + self.position_embedding(position_ids)


class CLIPAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.embed_dim, self.num_heads, self.head_dim = dim, heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.q_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, hidden_states, attention_mask):
        b, n, _ = hidden_states.shape
        shape = (b, n, self.num_heads, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        weights = torch.matmul(q, k.transpose(2, 3)) * self.scale + attention_mask
        weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, n, self.embed_dim).contiguous()
        return self.out_proj(out)


class QuickGELUActivation(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class CLIPMLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.activation_fn = QuickGELUActivation()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.activation_fn(self.fc1(x)))


class CLIPEncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.self_attn = CLIPAttention(dim, heads)
        self.layer_norm1 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = CLIPMLP(dim, hidden)
        self.layer_norm2 = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, hidden_states, attention_mask):
        hidden_states = hidden_states + self.self_attn(self.layer_norm1(hidden_states), attention_mask)
        return hidden_states + self.mlp(self.layer_norm2(hidden_states))


class CLIPEncoder(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList([CLIPEncoderLayer(dim, heads, hidden) for _ in range(layers)])

    def forward(self, hidden_states, attention_mask):
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask)
        return hidden_states


def _causal_mask(b, n, dtype):
    mask = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype).triu(1)
    return mask[None, None].expand(b, 1, n, n)


def _expand_mask(mask, dtype):
    b, n = mask.shape
    inverted = 1.0 - mask[:, None, None, :].expand(b, 1, n, n).to(dtype)
    return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)


class CLIPTextTransformer(nn.Module):
    def __init__(self, vocab=64, dim=16, heads=2, hidden=32, layers=2, max_positions=24):
        super().__init__()
        self.embeddings = CLIPTextEmbeddings(vocab, dim, max_positions)
        self.encoder = CLIPEncoder(dim, heads, hidden, layers)
        self.final_layer_norm = nn.LayerNorm(dim, eps=1e-5)
        self.eos_token_id = 2

    def forward(self, input_ids, attention_mask):
        hidden_states = self.embeddings(input_ids)
        b, n = input_ids.shape
        mask = _causal_mask(b, n, hidden_states.dtype) + _expand_mask(attention_mask, hidden_states.dtype)
        last = self.final_layer_norm(self.encoder(hidden_states, mask))
        pooled = last[torch.arange(last.shape[0], device=last.device),
                      input_ids.to(dtype=torch.int, device=last.device).argmax(dim=-1)]
        return last, pooled


class CLIPTextModelWithProjection(nn.Module):
    def __init__(self, dim=16, projection_dim=12):
        super().__init__()
        self.text_model = CLIPTextTransformer(dim=dim)
        self.text_projection = nn.Linear(dim, projection_dim, bias=False)

    def forward(self, input_ids, attention_mask):
        last, pooled = self.text_model(input_ids, attention_mask)
        return self.text_projection(pooled), last


def clip_text_small() -> nn.Module:
    return CLIPTextModelWithProjection()


# ---------------------------------------------------------------------------------------------------- FNet
class NewGELUActivation(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class FNetEmbeddings(nn.Module):
    def __init__(self, vocab: int, dim: int, max_positions: int, type_vocab: int = 4, pad_token_id: int = 3):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_positions, dim)
        self.token_type_embeddings = nn.Embedding(type_vocab, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.projection = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(0.0)
        self.register_buffer("position_ids", torch.arange(max_positions).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros((1, max_positions), dtype=torch.long), persistent=False)

    def forward(self, input_ids):
        b, n = input_ids.shape
        position_ids = self.position_ids[:, :n]
        token_type_ids = self.token_type_ids[:, :n].expand(b, n)
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = self.LayerNorm(embeddings + self.position_embeddings(position_ids))
        return self.dropout(self.projection(embeddings))


class FNetBasicFourierTransform(nn.Module):
    def forward(self, hidden_states):
        return (torch.fft.fftn(hidden_states, dim=(1, 2)).real,)


class FNetBasicOutput(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(input_tensor + hidden_states)


class FNetFourierTransform(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.self = FNetBasicFourierTransform()
        self.output = FNetBasicOutput(dim)

    def forward(self, hidden_states):
        return (self.output(self.self(hidden_states)[0], hidden_states),)


class FNetIntermediate(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.dense = nn.Linear(dim, hidden)
        self.intermediate_act_fn = NewGELUActivation()

    def forward(self, x):
        return self.intermediate_act_fn(self.dense(x))


class FNetOutput(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class FNetLayer(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fourier = FNetFourierTransform(dim)
        self.intermediate = FNetIntermediate(dim, hidden)
        self.output = FNetOutput(dim, hidden)

    def forward(self, hidden_states):
        fourier_output = self.fourier(hidden_states)[0]
        return (self.output(self.intermediate(fourier_output), fourier_output),)


class FNetEncoder(nn.Module):
    def __init__(self, dim: int, hidden: int, layers: int):
        super().__init__()
        self.layer = nn.ModuleList([FNetLayer(dim, hidden) for _ in range(layers)])

    def forward(self, hidden_states):
        for layer in self.layer:
            hidden_states = layer(hidden_states)[0]
        return hidden_states


class FNetPooler(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class FNetModel(nn.Module):
    def __init__(self, vocab=64, dim=16, hidden=32, layers=2, max_positions=24):
        super().__init__()
        self.embeddings = FNetEmbeddings(vocab, dim, max_positions)
        self.encoder = FNetEncoder(dim, hidden, layers)
        self.pooler = FNetPooler(dim)

    def forward(self, input_ids):
        sequence_output = self.encoder(self.embeddings(input_ids))
        return sequence_output, self.pooler(sequence_output)


def fnet_small() -> nn.Module:
    return FNetModel()
