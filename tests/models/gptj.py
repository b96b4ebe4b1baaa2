"""A twin of transformers' ``GPTJForCausalLM`` as ``modeling_gptj.py`` writes it in the 4.3x releases (module
structure and ``state_dict`` names: ``transformer.wte``, ``transformer.h.<i>.ln_1``, ``.attn.q_proj`` / ``k_proj`` /
``v_proj`` / ``out_proj``, ``.mlp.fc_in`` / ``fc_out``, ``transformer.ln_f``, ``lm_head``; the attention's
``bias`` (causal tril), ``masked_bias`` and ``embed_positions`` buffers are not persistent), small sizes, no cache.

Stresses: the interleaved rotary embedding on the first ``rotary_dim`` channels of each head only
(``rotate_every_two``: ``stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)``, sin/cos ``repeat_interleave``-d by
2, gathered from a sinusoid table by ``torch.gather`` of repeated position ids), query and key in ``(B, T, H, D)``
until after the rotation; attention in float32 with the causal buffer sliced ``[key_len - query_len: key_len]`` and
``torch.where`` with a ``finfo.min`` tensor, divided by ``sqrt(head_dim)`` after masking; the parallel block
(attention and MLP both read ``ln_1``'s output, summed with the residual); ``gelu_new``; an untied biased head.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.models.hf_text_more import NewGELUActivation


def create_sinusoidal_positions(num_pos: int, dim: int) -> torch.Tensor:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(num_pos, dtype=torch.int64).float(), inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1 = x[:, :, :, ::2]
    x2 = x[:, :, :, 1::2]
    x = torch.stack((-x2, x1), dim=-1)
    return x.flatten(-2)


def apply_rotary_pos_emb(tensor: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return (tensor * cos) + (rotate_every_two(tensor) * sin)


class GPTJAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, rotary_dim: int, max_positions: int):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
            1, 1, max_positions, max_positions), persistent=False)
        self.register_buffer("masked_bias", torch.tensor(-1e9), persistent=False)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.embed_dim = embed_dim
        self.num_attention_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scale_attn = torch.sqrt(torch.tensor(self.head_dim, dtype=torch.float32)).to(torch.get_default_dtype())
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.rotary_dim = rotary_dim
        pos_embd_dim = self.rotary_dim or self.embed_dim
        self.register_buffer("embed_positions", create_sinusoidal_positions(max_positions, pos_embd_dim),
                             persistent=False)

    def _split_heads(self, tensor, num_attention_heads, attn_head_size, rotary):
        tensor = tensor.view(tensor.size()[:-1] + (num_attention_heads, attn_head_size))
        if rotary:
            return tensor
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_attention_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (num_attention_heads * attn_head_size,))

    def _attn(self, query, key, value, attention_mask=None):
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        query = query.to(torch.float32)
        key = key.to(torch.float32)
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.tensor(mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = attn_weights / self.scale_attn
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights.to(value.dtype))
        return torch.matmul(attn_weights, value)

    def forward(self, hidden_states, attention_mask, position_ids):
        query = self._split_heads(self.q_proj(hidden_states), self.num_attention_heads, self.head_dim, True)
        key = self._split_heads(self.k_proj(hidden_states), self.num_attention_heads, self.head_dim, True)
        value = self._split_heads(self.v_proj(hidden_states), self.num_attention_heads, self.head_dim, False)
        embed_positions = self.embed_positions.repeat(position_ids.shape[0], 1, 1)
        repeated_position_ids = position_ids.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
        sincos = torch.gather(embed_positions, 1, repeated_position_ids)
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        if self.rotary_dim is not None:
            k_rot, k_pass = key[:, :, :, : self.rotary_dim], key[:, :, :, self.rotary_dim:]
            q_rot, q_pass = query[:, :, :, : self.rotary_dim], query[:, :, :, self.rotary_dim:]
            k_rot = apply_rotary_pos_emb(k_rot, sin, cos)
            q_rot = apply_rotary_pos_emb(q_rot, sin, cos)
            key = torch.cat([k_rot, k_pass], dim=-1)
            query = torch.cat([q_rot, q_pass], dim=-1)
        else:
            key = apply_rotary_pos_emb(key, sin, cos)
            query = apply_rotary_pos_emb(query, sin, cos)
        key = key.permute(0, 2, 1, 3)
        query = query.permute(0, 2, 1, 3)
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_attention_heads, self.head_dim)
        return self.resid_dropout(self.out_proj(attn_output))


class GPTJMLP(nn.Module):
    def __init__(self, intermediate_size: int, embed_dim: int):
        super().__init__()
        self.fc_in = nn.Linear(embed_dim, intermediate_size)
        self.fc_out = nn.Linear(intermediate_size, embed_dim)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states):
        return self.dropout(self.fc_out(self.act(self.fc_in(hidden_states))))


class GPTJBlock(nn.Module):
    def __init__(self, embed_dim, num_heads, rotary_dim, max_positions, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embed_dim, eps=eps)
        self.attn = GPTJAttention(embed_dim, num_heads, rotary_dim, max_positions)
        self.mlp = GPTJMLP(4 * embed_dim, embed_dim)

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output = self.attn(hidden_states, attention_mask, position_ids)
        feed_forward_hidden_states = self.mlp(hidden_states)
        return attn_output + feed_forward_hidden_states + residual


class GPTJModel(nn.Module):
    def __init__(self, vocab_size, n_embd, n_layer, n_head, rotary_dim, n_positions, eps):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.drop = nn.Dropout(0.0)
        self.h = nn.ModuleList(GPTJBlock(n_embd, n_head, rotary_dim, n_positions, eps) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=eps)

    def forward(self, input_ids, attention_mask=None):
        input_shape = input_ids.size()
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long, device=input_ids.device).unsqueeze(0)
        if attention_mask is not None:
            attention_mask = attention_mask.view(input_shape[0], -1)[:, None, None, :]
            attention_mask = attention_mask.to(dtype=self.wte.weight.dtype)
            attention_mask = (1.0 - attention_mask) * torch.finfo(self.wte.weight.dtype).min
        hidden_states = self.drop(self.wte(input_ids))
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask, position_ids)
        return self.ln_f(hidden_states)


class GPTJForCausalLM(nn.Module):
    """``forward(input_ids, attention_mask=None)`` -> logits ``(B, L, vocab)``."""

    def __init__(self, vocab_size: int = 64, n_embd: int = 32, n_layer: int = 2, n_head: int = 4,
                 rotary_dim: int = 4, n_positions: int = 32, layer_norm_epsilon: float = 1e-5):
        super().__init__()
        self.transformer = GPTJModel(vocab_size, n_embd, n_layer, n_head, rotary_dim, n_positions,
                                     layer_norm_epsilon)
        self.lm_head = nn.Linear(n_embd, vocab_size)

    def forward(self, input_ids, attention_mask=None):
        return self.lm_head(self.transformer(input_ids, attention_mask)).to(torch.float32)


def gptj_small() -> GPTJForCausalLM:
    """Head dim 8, rotary on its first 4 channels (GPT-J-6B: 64 of 256)."""
    return GPTJForCausalLM()


def gptj_full_rotary_small() -> GPTJForCausalLM:
    """Rotary on every channel of the head (``rotary_dim == head_dim``: ``k_pass`` empty). (transformers'
    ``rotary_dim=None`` builds its table over the whole embedding and fails to broadcast, in torch itself.)"""
    return GPTJForCausalLM(rotary_dim=8)


def real_positions(model: GPTJForCausalLM) -> None:
    """The sinusoid tables back to their real values after a seeded randomisation (a checkpoint does not carry
    these non-persistent buffers; the model builds them)."""
    for block in model.transformer.h:
        table = block.attn.embed_positions
        table.copy_(create_sinusoidal_positions(table.shape[0], table.shape[1]))
