"""Decoder-only LLM variants beside LLaMA (:mod:`tests.models.text`), each with its reference implementation's
module structure and ``state_dict`` names so a checkpoint's keys match at full size:

- HF Gemma (``transformers/models/gemma/modeling_gemma.py``): ``GemmaRMSNorm`` scales by ``1 + weight`` in float32
  (weights start at 0), the MLP gates with tanh-approximate GELU (``gelu_pytorch_tanh``), the token embedding is
  multiplied by ``sqrt(hidden_size)`` built as a tensor in the embedding's dtype, ``head_dim`` independent of
  ``hidden_size / heads``; ``model.embed_tokens``, ``model.layers.<i>.self_attn.q_proj``, ``.mlp.gate_proj``,
  ``lm_head`` (tied to the embedding).
- HF Mistral (``modeling_mistral.py``, the 4.3x ``_prepare_4d_causal_attention_mask`` path): a sliding-window causal
  mask built in the forward (``masked_fill_`` of a ``finfo.min`` tensor, then ``tril(diagonal=-window-1)``), merged
  with the padding ``attention_mask`` input; eager attention adds it to the logits, softmax in float32.
- HF Qwen2 (``modeling_qwen2.py``): q/k/v projections with bias, o_proj without.
- Meta's reference LLaMA (``llama/model.py``): rotary embedding as complex numbers (``torch.polar`` for the table,
  ``view_as_complex`` / ``view_as_real`` in ``apply_rotary_emb``), ``freqs_cis`` and the KV cache (``cache_k``,
  ``cache_v``) kept as plain tensor attributes (not buffers), the cache written by slice assignment and read back in
  the same call, ``torch.hstack`` of the mask, ``@torch.inference_mode()`` on the forward; ``tok_embeddings``,
  ``layers.<i>.attention.wq``, ``.feed_forward.w1``, ``attention_norm``, ``ffn_norm``, ``norm``, ``output``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .text import LlamaRMSNorm, LlamaRotaryEmbedding, repeat_kv, rotate_half


# ---------------------------------------------------------------------------------------------------- HF family
class GemmaRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class PytorchGELUTanh(nn.Module):
    def forward(self, input):
        return F.gelu(input, approximate="tanh")


class DecoderMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, act: nn.Module):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = act

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class DecoderAttention(nn.Module):
    """HF's eager attention (``eager_attention_forward``): an additive mask, softmax in float32."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, qkv_bias: bool = False):
        super().__init__()
        self.head_dim = head_dim
        self.num_key_value_groups = heads // kv_heads
        self.scaling = head_dim ** -0.5
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        input_shape = hidden_states.shape[:-1]
        shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        k, v = repeat_kv(k, self.num_key_value_groups), repeat_kv(v, self.num_key_value_groups)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        attn_weights = attn_weights + attention_mask[:, :, :, : k.shape[-2]]
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(attn_weights, v).transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(*input_shape, -1).contiguous())


class DecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, intermediate, norm, act, qkv_bias):
        super().__init__()
        self.self_attn = DecoderAttention(hidden, heads, kv_heads, head_dim, qkv_bias)
        self.mlp = DecoderMLP(hidden, intermediate, act)
        self.input_layernorm = norm(hidden)
        self.post_attention_layernorm = norm(hidden)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        residual = hidden_states
        hidden_states = residual + self.self_attn(self.input_layernorm(hidden_states), position_embeddings,
                                                  attention_mask)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


def make_causal_mask(bsz: int, tgt_len: int, dtype, sliding_window: Optional[int] = None):
    """``AttentionMaskConverter._make_causal_mask`` (transformers 4.3x), no past."""
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if sliding_window is not None:
        diagonal = -sliding_window - 1
        context_mask = torch.tril(torch.ones_like(mask, dtype=torch.bool), diagonal=diagonal)
        mask.masked_fill_(context_mask, torch.finfo(dtype).min)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len)


def expand_padding_mask(mask, dtype, tgt_len: int):
    """``AttentionMaskConverter._expand_mask``: ``(B, S)`` of 1/0 -> additive ``(B, 1, T, S)``."""
    bsz, src_len = mask.size()
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class DecoderModel(nn.Module):
    """``model.*`` of a ``*ForCausalLM``: ``embed_tokens``, ``layers``, ``norm``, ``rotary_emb``."""

    def __init__(self, vocab, hidden, heads, kv_heads, head_dim, intermediate, layers, norm, act, qkv_bias,
                 scale_embeddings: bool, sliding_window: Optional[int]):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, kv_heads, head_dim, intermediate, norm, act,
                                                 qkv_bias) for _ in range(layers))
        self.norm = norm(hidden)
        self.rotary_emb = LlamaRotaryEmbedding(head_dim)
        self.hidden_size, self.scale_embeddings, self.sliding_window = hidden, scale_embeddings, sliding_window

    def forward(self, input_ids, attention_mask=None):
        inputs_embeds = self.embed_tokens(input_ids)
        bsz, seq_len = input_ids.shape
        mask = make_causal_mask(bsz, seq_len, inputs_embeds.dtype, self.sliding_window)
        if attention_mask is not None:
            padding = expand_padding_mask(attention_mask, inputs_embeds.dtype, seq_len)
            mask = mask.masked_fill(padding.bool(), torch.finfo(inputs_embeds.dtype).min)
        position_ids = torch.arange(seq_len).unsqueeze(0)
        hidden_states = inputs_embeds
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        if self.scale_embeddings:  # Gemma
            normalizer = torch.tensor(self.hidden_size ** 0.5, dtype=hidden_states.dtype)
            hidden_states = hidden_states * normalizer
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_embeddings, mask)
        return self.norm(hidden_states)


class ForCausalLM(nn.Module):
    """``forward(input_ids[, attention_mask])`` -> logits ``(B, T, vocab)``."""

    def __init__(self, tie: bool, **config):
        super().__init__()
        self.model = DecoderModel(**config)
        self.lm_head = nn.Linear(config["hidden"], config["vocab"], bias=False)
        if tie:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, attention_mask=None):
        return self.lm_head(self.model(input_ids, attention_mask))


_SMALL = dict(vocab=64, hidden=16, heads=4, kv_heads=2, intermediate=32, layers=2)


def gemma_small() -> ForCausalLM:
    """Gemma's head_dim (8) differs from hidden / heads (4), as in Gemma-7B (3072 / 16 != 256)."""
    return ForCausalLM(True, **_SMALL, head_dim=8, norm=GemmaRMSNorm, act=PytorchGELUTanh(), qkv_bias=False,
                       scale_embeddings=True, sliding_window=None)


def mistral_small() -> ForCausalLM:
    return ForCausalLM(False, **_SMALL, head_dim=4, norm=LlamaRMSNorm, act=nn.SiLU(), qkv_bias=False,
                       scale_embeddings=False, sliding_window=3)


def qwen2_small() -> ForCausalLM:
    return ForCausalLM(True, **_SMALL, head_dim=4, norm=LlamaRMSNorm, act=nn.SiLU(), qkv_bias=True,
                       scale_embeddings=False, sliding_window=None)


# ---------------------------------------------------------------------------------------------------- Meta LLaMA
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis, x):
    ndim = x.ndim
    assert 0 <= 1 < ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def meta_repeat_kv(x, n_rep: int):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep,
                                                                                       head_dim)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, max_batch_size, max_seq_len):
        super().__init__()
        self.n_local_heads, self.n_local_kv_heads = n_heads, n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        self.cache_k = torch.zeros((max_batch_size, max_seq_len, n_kv_heads, self.head_dim))
        self.cache_v = torch.zeros((max_batch_size, max_seq_len, n_kv_heads, self.head_dim))

    def forward(self, x, start_pos: int, freqs_cis, mask):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        self.cache_k = self.cache_k.to(xq)
        self.cache_v = self.cache_v.to(xq)
        self.cache_k[:bsz, start_pos: start_pos + seqlen] = xk
        self.cache_v[:bsz, start_pos: start_pos + seqlen] = xv
        keys = self.cache_k[:bsz, : start_pos + seqlen]
        values = self.cache_v[:bsz, : start_pos + seqlen]
        keys = meta_repeat_kv(keys, self.n_rep)
        values = meta_repeat_kv(values, self.n_rep)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id, dim, n_heads, n_kv_heads, hidden_dim, max_batch_size, max_seq_len):
        super().__init__()
        self.layer_id = layer_id
        self.attention = Attention(dim, n_heads, n_kv_heads, max_batch_size, max_seq_len)
        self.feed_forward = FeedForward(dim, hidden_dim)
        self.attention_norm = RMSNorm(dim)
        self.ffn_norm = RMSNorm(dim)

    def forward(self, x, start_pos, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """``forward(tokens, start_pos)``: token ids ``(B, T)`` -> float32 logits ``(B, T, vocab)``."""

    def __init__(self, vocab_size=64, dim=16, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=32,
                 max_batch_size=4, max_seq_len=16):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(TransformerBlock(i, dim, n_heads, n_kv_heads, hidden_dim, max_batch_size,
                                                     max_seq_len) for i in range(n_layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        self.freqs_cis = precompute_freqs_cis(dim // n_heads, max_seq_len * 2)

    @torch.inference_mode()
    def forward(self, tokens, start_pos: int = 0):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        self.freqs_cis = self.freqs_cis.to(h.device)
        freqs_cis = self.freqs_cis[start_pos: start_pos + seqlen]
        mask = None
        if seqlen > 1:
            mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=1)
            mask = torch.hstack([torch.zeros((seqlen, start_pos), device=tokens.device), mask]).type_as(h)
        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        h = self.norm(h)
        return self.output(h).float()


def meta_llama_small() -> Transformer:
    return Transformer()


class PrefillAttention(Attention):
    """Meta's ``Attention`` at ``start_pos=0`` with the cache's round trip taken out: at the first call the rows it
    reads back (``[:bsz, :seqlen]``) are exactly the keys and values just written, so the keys and values are used
    directly. Same parameters and names; the port of the unmodified model is refused (its forward writes the
    cache, state for the next call)."""

    def forward(self, x, start_pos: int, freqs_cis, mask):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_local_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_local_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        keys, values = meta_repeat_kv(xk, self.n_rep), meta_repeat_kv(xv, self.n_rep)
        xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values).transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(output)


def meta_llama_prefill_small() -> Transformer:
    model = Transformer()
    for layer in model.layers:
        layer.attention.__class__ = PrefillAttention
    return model
