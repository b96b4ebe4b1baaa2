"""Twin of Hugging Face transformers' ``GPT2LMHeadModel`` (eager attention): same module tree and ``state_dict``
names (``transformer.wte``, ``transformer.h.{i}.attn.c_attn`` as a ``Conv1D`` with an ``(in, out)`` weight,
``lm_head.weight`` tied to ``transformer.wte.weight``), small sizes. The causal mask is the non-persistent
``attn.bias`` buffer sliced to the sequence length, as in transformers' eager path.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._common import randomize_


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer whose weight is stored transposed, ``(nx, nf)``."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, embed: int, heads: int, positions: int):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((positions, positions), dtype=torch.bool)).view(
            1, 1, positions, positions), persistent=False)
        self.num_heads, self.head_dim, self.split_size = heads, embed // heads, embed
        self.c_attn = Conv1D(3 * embed, embed)
        self.c_proj = Conv1D(embed, embed)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _split_heads(self, tensor):
        return tensor.view(tensor.size()[:-1] + (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        attn_weights = torch.matmul(query, key.transpose(-1, -2)) / (value.size(-1) ** 0.5)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.full([], torch.finfo(attn_weights.dtype).min, dtype=attn_weights.dtype)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = self.attn_dropout(nn.functional.softmax(attn_weights, dim=-1))
        out = torch.matmul(attn_weights, value).permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.num_heads * self.head_dim,))
        return self.resid_dropout(self.c_proj(out))


class GPT2MLP(nn.Module):
    def __init__(self, inner: int, embed: int):
        super().__init__()
        self.c_fc = Conv1D(inner, embed)
        self.c_proj = Conv1D(embed, inner)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, embed: int, heads: int, positions: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embed, eps=1e-5)
        self.attn = GPT2Attention(embed, heads, positions)
        self.ln_2 = nn.LayerNorm(embed, eps=1e-5)
        self.mlp = GPT2MLP(4 * embed, embed)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, vocab: int, embed: int, layers: int, heads: int, positions: int):
        super().__init__()
        self.wte = nn.Embedding(vocab, embed)
        self.wpe = nn.Embedding(positions, embed)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(embed, heads, positions) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(embed, eps=1e-5)

    def forward(self, input_ids):
        position_ids = torch.arange(0, input_ids.size(-1), dtype=torch.long, device=input_ids.device).unsqueeze(0)
        hidden = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        for block in self.h:
            hidden = block(hidden)
        return self.ln_f(hidden)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, vocab: int = 97, embed: int = 32, layers: int = 2, heads: int = 4, positions: int = 64):
        super().__init__()
        self.transformer = GPT2Model(vocab, embed, layers, heads, positions)
        self.lm_head = nn.Linear(embed, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tie_weights()

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))


def gpt2_small(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    return randomize_(GPT2LMHeadModel(), seed)
