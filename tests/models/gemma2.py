"""A twin of transformers' ``Gemma2ForCausalLM`` as ``modeling_gemma2.py`` writes it in the 4.44-4.47 releases
(module structure and ``state_dict`` names: ``model.embed_tokens``, ``model.layers.<i>.self_attn.q_proj`` /
``k_proj`` / ``v_proj`` / ``o_proj``, ``.mlp.gate_proj`` / ``up_proj`` / ``down_proj``, ``.input_layernorm``,
``.post_attention_layernorm``, ``.pre_feedforward_layernorm``, ``.post_feedforward_layernorm``, ``model.norm``,
``lm_head`` tied to the embedding; ``rotary_emb.inv_freq`` not persistent), small sizes, no cache.

Stresses: attention logit soft-capping (``tanh(logits / cap) * cap`` before the mask) with the scale from
``query_pre_attn_scalar`` rather than ``head_dim``; final logit soft-capping; even layers sliding-window, odd ones
global: the decoder layer turns the global causal mask into the window's (``tril(ones_like(mask, bool),
diagonal=-window)`` then ``torch.where`` with ``finfo.min``); pre and post norms around both the attention and the MLP
(Gemma's ``1 + weight`` RMSNorm in float32); the embedding scaled by ``sqrt(hidden)`` built in the working dtype;
grouped-query attention; tanh-GELU gate; eager attention (the only one Gemma2 supports with soft-capping).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.llm_variants import GemmaRMSNorm, PytorchGELUTanh
from tests.models.mistral import MistralAttention, MistralRotaryEmbedding, decoder_inputs, repeat_kv


class Gemma2MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = PytorchGELUTanh()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def eager_attention_forward(module, query, key, value, attention_mask, softcap: Optional[float] = None):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * module.scaling
    if softcap is not None:
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=module.attention_dropout, training=module.training)
    return torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()


class Gemma2Attention(MistralAttention):
    def __init__(self, layer_idx: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                 query_pre_attn_scalar: float, attn_logit_softcapping: Optional[float], sliding_window: int):
        super().__init__(hidden, heads, kv_heads, head_dim, qkv_bias=False, implementation="eager")
        self.scaling = query_pre_attn_scalar ** -0.5
        self.attn_logit_softcapping = attn_logit_softcapping
        self.sliding_window = sliding_window if not bool(layer_idx % 2) else None

    def attend(self, query, key, value, attention_mask):
        return eager_attention_forward(self, query, key, value, attention_mask, softcap=self.attn_logit_softcapping)


class Gemma2DecoderLayer(nn.Module):
    def __init__(self, layer_idx: int, hidden: int, intermediate: int, eps: float, sliding_window: int, **attn):
        super().__init__()
        self.is_sliding = not bool(layer_idx % 2)
        self.sliding_window = sliding_window
        self.self_attn = Gemma2Attention(layer_idx, hidden, sliding_window=sliding_window, **attn)
        self.mlp = Gemma2MLP(hidden, intermediate)
        self.input_layernorm = GemmaRMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = GemmaRMSNorm(hidden, eps=eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(hidden, eps=eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(hidden, eps=eps)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        if self.is_sliding and attention_mask is not None:
            min_dtype = torch.finfo(hidden_states.dtype).min
            sliding_window_mask = torch.tril(torch.ones_like(attention_mask, dtype=torch.bool),
                                             diagonal=-self.sliding_window)
            attention_mask = torch.where(sliding_window_mask, min_dtype, attention_mask)
            if attention_mask.shape[-1] <= 1:  # decoding
                attention_mask = attention_mask[:, :, :, -self.sliding_window:]
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states, position_embeddings, attention_mask)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.pre_feedforward_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.post_feedforward_layernorm(hidden_states)
        return residual + hidden_states


class Gemma2Model(nn.Module):
    def __init__(self, vocab_size, hidden, intermediate, layers, eps, sliding_window, head_dim, **attn):
        super().__init__()
        self.hidden_size = hidden
        self.embed_tokens = nn.Embedding(vocab_size, hidden)
        self.layers = nn.ModuleList(
            Gemma2DecoderLayer(i, hidden, intermediate, eps, sliding_window, head_dim=head_dim, **attn)
            for i in range(layers))
        self.norm = GemmaRMSNorm(hidden, eps=eps)
        self.rotary_emb = MistralRotaryEmbedding(head_dim, 10000.0)

    def forward(self, input_ids, attention_mask=None):
        hidden_states, causal_mask, position_embeddings = decoder_inputs(self, input_ids, attention_mask, None)
        normalizer = torch.tensor(self.hidden_size ** 0.5, dtype=hidden_states.dtype)
        hidden_states = hidden_states * normalizer
        for decoder_layer in self.layers:
            hidden_states = decoder_layer(hidden_states, position_embeddings, causal_mask)
        return self.norm(hidden_states)


class Gemma2ForCausalLM(nn.Module):
    """``forward(input_ids, attention_mask=None)`` -> soft-capped logits ``(B, L, vocab)``."""

    def __init__(self, vocab_size: int = 64, hidden: int = 32, intermediate: int = 48, layers: int = 3,
                 heads: int = 4, kv_heads: int = 2, head_dim: int = 12, query_pre_attn_scalar: float = 16.0,
                 attn_logit_softcapping: Optional[float] = 2.0, final_logit_softcapping: Optional[float] = 3.0,
                 sliding_window: int = 4, rms_norm_eps: float = 1e-6):
        super().__init__()
        self.final_logit_softcapping = final_logit_softcapping
        self.model = Gemma2Model(vocab_size, hidden, intermediate, layers, rms_norm_eps, sliding_window, head_dim,
                                 heads=heads, kv_heads=kv_heads, query_pre_attn_scalar=query_pre_attn_scalar,
                                 attn_logit_softcapping=attn_logit_softcapping)
        self.lm_head = nn.Linear(hidden, vocab_size, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids, attention_mask=None):
        logits = self.lm_head(self.model(input_ids, attention_mask))
        if self.final_logit_softcapping is not None:
            logits = logits / self.final_logit_softcapping
            logits = torch.tanh(logits)
            logits = logits * self.final_logit_softcapping
        return logits


def gemma2_small() -> Gemma2ForCausalLM:
    """3 layers (sliding, global, sliding), window 4 (test lengths 7 and 13), caps 2 and 3 that the random logits
    reach (the tanh is not near-linear), ``query_pre_attn_scalar`` 16 where ``head_dim`` is 12."""
    return Gemma2ForCausalLM()


def gemma2_uncapped_small() -> Gemma2ForCausalLM:
    """Soft-capping off (``None``), as Gemma2 configs loaded for SDPA/flash attention have it."""
    return Gemma2ForCausalLM(attn_logit_softcapping=None, final_logit_softcapping=None)
