"""Twins of transformers' ``MixtralModel`` and ``Qwen2MoeModel`` as ``modeling_mixtral.py`` /
``modeling_qwen2_moe.py`` write them in the 4.4x-4.5x releases (module structure and ``state_dict`` names:
``layers.<i>.block_sparse_moe.gate``, ``.block_sparse_moe.experts.<e>.w1`` / ``w2`` / ``w3``; Qwen2-MoE's
``layers.<i>.mlp.gate``, ``.mlp.experts.<e>.gate_proj`` / ``up_proj`` / ``down_proj``, ``.mlp.shared_expert.*``,
``.mlp.shared_expert_gate``), small sizes, no cache. Attention, RoPE, RMSNorm and the causal mask are Mistral's /
Qwen2's (``tests/models/mistral.py``): only the feed-forward differs.

Stresses: the sparse mixture of experts. The router's float32 softmax and ``topk``, the top-k weights renormalised
(Mixtral; Qwen2-MoE only with ``norm_topk_prob``), ``one_hot(selected).permute(2, 1, 0)`` as the expert mask, and
per expert a data-dependent token selection ``torch.where(expert_mask[e])`` whose tokens go through the expert and
are summed back into a zero buffer with ``index_add_``. Mixtral loops over the experts that were hit
(``(expert_mask.sum((-1, -2)) > 0).nonzero()``, 4.5x), Qwen2-MoE over every expert (``range(num_experts)``);
Mixtral multiplies its input by uniform noise in training when ``jitter_noise`` > 0 (0 in the released configs);
Qwen2-MoE adds a shared expert scaled by ``sigmoid(shared_expert_gate(x))``. The block returns
``(hidden, router_logits)`` as transformers' does.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.mistral import MistralAttention, MistralMLP, MistralRMSNorm, MistralRotaryEmbedding, \
    decoder_inputs


def route(block, hidden_states, normalize: bool):
    """The routing both blocks run on ``(tokens, hidden)`` states: ``(router_logits, routing_weights (tokens,
    top_k), a zero output buffer, expert_mask (experts, top_k, tokens))``."""
    router_logits = block.gate(hidden_states)
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    routing_weights, selected_experts = torch.topk(routing_weights, block.top_k, dim=-1)
    if normalize:
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = routing_weights.to(hidden_states.dtype)
    final_hidden_states = torch.zeros(hidden_states.shape, dtype=hidden_states.dtype, device=hidden_states.device)
    expert_mask = F.one_hot(selected_experts, num_classes=block.num_experts).permute(2, 1, 0)
    return router_logits, routing_weights, final_hidden_states, expert_mask


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, intermediate, bias=False)
        self.w2 = nn.Linear(intermediate, hidden, bias=False)
        self.w3 = nn.Linear(hidden, intermediate, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        return self.w2(self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states))


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, hidden: int, intermediate: int, num_experts: int, top_k: int):
        super().__init__()
        self.hidden_dim = hidden
        self.num_experts = num_experts
        self.top_k = top_k
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(MixtralBlockSparseTop2MLP(hidden, intermediate) for _ in range(num_experts))
        self.jitter_noise = 0.0

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        if self.training and self.jitter_noise > 0:
            hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits, routing_weights, final_hidden_states, expert_mask = route(self, hidden_states, True)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class Qwen2MoeSparseMoeBlock(nn.Module):
    def __init__(self, hidden: int, intermediate: int, shared_intermediate: int, num_experts: int, top_k: int,
                 norm_topk_prob: bool):
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.norm_topk_prob = norm_topk_prob
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(MistralMLP(hidden, intermediate) for _ in range(num_experts))
        self.shared_expert = MistralMLP(hidden, shared_intermediate)
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits, routing_weights, final_hidden_states, expert_mask = route(self, hidden_states,
                                                                                 self.norm_topk_prob)
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        shared_expert_output = self.shared_expert(hidden_states)
        shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
        final_hidden_states = final_hidden_states + shared_expert_output
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class MixtralDecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, head_dim, eps, qkv_bias, implementation, moe: nn.Module,
                 moe_name: str):
        super().__init__()
        self.moe_name = moe_name
        self.self_attn = MistralAttention(hidden, heads, kv_heads, head_dim, qkv_bias, implementation)
        setattr(self, moe_name, moe)
        self.input_layernorm = MistralRMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = MistralRMSNorm(hidden, eps=eps)

    def forward(self, hidden_states, attention_mask, position_embeddings):
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states), position_embeddings, attention_mask)
        hidden_states = residual + hidden_states
        moe_out, router_logits = getattr(self, self.moe_name)(self.post_attention_layernorm(hidden_states))
        return hidden_states + moe_out, router_logits


class MixtralModel(nn.Module):
    """``forward(input_ids, attention_mask=None)`` -> ``(last_hidden_state (B, L, hidden), router_logits)``, the
    router logits a tuple of ``(B * L, experts)`` per layer (``output_router_logits=True``)."""

    def __init__(self, moe: str = "mixtral", vocab_size: int = 64, hidden: int = 32, heads: int = 4,
                 kv_heads: int = 2, head_dim: int = 8, intermediate: int = 24, shared_intermediate: int = 40,
                 num_experts: int = 4, top_k: int = 2, norm_topk_prob: bool = False, layers: int = 2,
                 rms_norm_eps: float = 1e-6, sliding_window: Optional[int] = None, qkv_bias: bool = False,
                 attn_implementation: str = "eager"):
        super().__init__()
        self.sliding_window = sliding_window
        self.embed_tokens = nn.Embedding(vocab_size, hidden)

        def block():
            if moe == "mixtral":
                return MixtralSparseMoeBlock(hidden, intermediate, num_experts, top_k), "block_sparse_moe"
            return Qwen2MoeSparseMoeBlock(hidden, intermediate, shared_intermediate, num_experts, top_k,
                                          norm_topk_prob), "mlp"

        self.layers = nn.ModuleList(
            MixtralDecoderLayer(hidden, heads, kv_heads, head_dim, rms_norm_eps, qkv_bias, attn_implementation,
                                *block()) for _ in range(layers))
        self.norm = MistralRMSNorm(hidden, eps=rms_norm_eps)
        self.rotary_emb = MistralRotaryEmbedding(head_dim, 10000.0)

    def forward(self, input_ids, attention_mask=None):
        hidden_states, causal_mask, position_embeddings = decoder_inputs(self, input_ids, attention_mask,
                                                                         self.sliding_window)
        all_router_logits = ()
        for decoder_layer in self.layers:
            hidden_states, router_logits = decoder_layer(hidden_states, causal_mask, position_embeddings)
            all_router_logits += (router_logits,)
        return self.norm(hidden_states), all_router_logits


def mixtral_small() -> MixtralModel:
    """4 experts, top-2, window 4 (Mixtral's config carries Mistral's sliding window)."""
    return MixtralModel(sliding_window=4)


def qwen2_moe_small() -> MixtralModel:
    """Qwen1.5-MoE's layout: biased q/k/v, 6 experts, top-3 weights not renormalised, a shared expert."""
    return MixtralModel(moe="qwen2_moe", num_experts=6, top_k=3, qkv_bias=True)


def qwen2_moe_normalized_small() -> MixtralModel:
    return MixtralModel(moe="qwen2_moe", num_experts=6, top_k=3, qkv_bias=True, norm_topk_prob=True,
                        attn_implementation="sdpa")
