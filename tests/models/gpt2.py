"""Twin of Hugging Face transformers' ``GPT2LMHeadModel`` (eager attention): same module tree and ``state_dict``
names (``transformer.wte``, ``transformer.h.{i}.attn.c_attn`` as a ``Conv1D`` with an ``(in, out)`` weight,
``lm_head.weight`` tied to ``transformer.wte.weight``), small sizes. The causal mask is the non-persistent
``attn.bias`` buffer sliced to the sequence length, as in transformers' eager path. The blocks are
tests/models/text.py's; this file adds the token and position embeddings and the tied head.
"""

from __future__ import annotations

import torch
from torch import nn

from ._common import randomize_
from .text import GPT2Block


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
