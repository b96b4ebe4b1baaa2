"""Small twins of popular text transformers (Hugging Face module structure and ``state_dict`` names), each taking
float token embeddings (``inputs_embeds``) so the coverage test's normal inputs drive them:

* ``BertModel``: attention mask ``(mask > -1) & ~(mask > 1.5)``, HF's extended additive mask, GELU, pooler;
  ``BertTokenModel``: the same with transformers' forward signature (``input_ids``, ``attention_mask``,
  ``token_type_ids``, ``position_ids``, ``inputs_embeds``, all but the ids optional) for the keyword-input tests;
* ``GPT2Model``-style causal attention: bool ``tril`` buffer, ``masked_fill``, softmax, HF ``Conv1D`` (addmm),
  tanh GELU;
* ``T5Stack``: relative position buckets (log, abs, min, where, integer ops; bidirectional encoder and causal
  decoder buckets), RMS ``T5LayerNorm``, ReLU feed-forward;
* ``LlamaModel``: rotary embedding under ``@torch.no_grad()`` with ``torch.autocast(enabled=False)``, ``inv_freq``
  recomputed in forward (``base ** t``, dynamic-rope style), grouped-query attention (``repeat_kv``), causal SDPA,
  RMSNorm, SiLU-gated MLP.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tests.models import t5


# ---------------------------------------------------------------------------------------------------- BERT
class BertEmbeddings(nn.Module):
    def __init__(self, hidden: int, max_positions: int = 64, type_vocab: int = 2):
        super().__init__()
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(max_positions).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros((1, max_positions), dtype=torch.long), persistent=False)

    def forward(self, inputs_embeds):
        batch, length = inputs_embeds.shape[:2]
        token_type_ids = self.token_type_ids[:, :length].expand(batch, length)
        position_ids = self.position_ids[:, :length]
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def _heads(self, x):
        return x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        q, k, v = self._heads(self.query(hidden_states)), self._heads(self.key(hidden_states)), \
            self._heads(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size) + attention_mask
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (q.shape[1] * self.attention_head_size,))


class BertSelfOutput(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)
        self.output = BertSelfOutput(hidden)

    def forward(self, hidden_states, attention_mask):
        return self.output(self.self(hidden_states, attention_mask), hidden_states)


class BertIntermediate(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(BertSelfOutput):
    def __init__(self, intermediate: int, hidden: int):
        super().__init__(hidden)
        self.dense = nn.Linear(intermediate, hidden)


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.attention = BertAttention(hidden, heads)
        self.intermediate = BertIntermediate(hidden, intermediate)
        self.output = BertOutput(intermediate, hidden)

    def forward(self, hidden_states, attention_mask):
        attention_output = self.attention(hidden_states, attention_mask)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int, layers: int):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(hidden, heads, intermediate) for _ in range(layers)])

    def forward(self, hidden_states, attention_mask):
        for layer in self.layer:
            hidden_states = layer(hidden_states, attention_mask)
        return hidden_states


class BertPooler(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class BertModel(nn.Module):
    """Input ``(N, L, hidden)`` embeddings and a ``(N, L)`` float mask score (kept where in (-1, 1.5])."""

    def __init__(self, hidden: int = 16, heads: int = 2, intermediate: int = 32, layers: int = 2):
        super().__init__()
        self.embeddings = BertEmbeddings(hidden)
        self.encoder = BertEncoder(hidden, heads, intermediate, layers)
        self.pooler = BertPooler(hidden)

    def forward(self, inputs_embeds, mask_scores):
        keep = (mask_scores > -1.0) & ~(mask_scores > 1.5)
        dtype = inputs_embeds.dtype
        extended = (1.0 - keep[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        sequence_output = self.encoder(self.embeddings(inputs_embeds), extended)
        return sequence_output, self.pooler(sequence_output)


def bert_small() -> nn.Module:
    return BertModel()


class BertTokenEmbeddings(BertEmbeddings):
    """transformers' ``BertEmbeddings``: word, token type and position embeddings (``token_type_ids`` ``None``:
    the zeros buffer, as transformers)."""

    def __init__(self, vocab: int, hidden: int, max_positions: int = 64, type_vocab: int = 2):
        super().__init__(hidden, max_positions, type_vocab)
        self.word_embeddings = nn.Embedding(vocab, hidden, padding_idx=0)

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        batch, length = inputs_embeds.shape[:2]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :length].expand(batch, length)
        if position_ids is None:
            position_ids = self.position_ids[:, :length]
        embeddings = inputs_embeds + self.token_type_embeddings(token_type_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertTokenModel(BertModel):
    """``BertModel`` with transformers' forward signature: ``input_ids`` ``(N, L)`` int64, ``attention_mask``
    ``(N, L)`` 1 = keep, 0 = masked (``None``: all kept), ``token_type_ids`` ``(N, L)`` in ``{0, 1}`` (``None``:
    zeros), ``position_ids``, ``inputs_embeds`` instead of ``input_ids``; returns ``(sequence_output,
    pooled_output)``. For the keyword-input tests (``tests/converters/test_keyword_inputs.py``)."""

    def __init__(self, vocab: int = 30, hidden: int = 16, heads: int = 2, intermediate: int = 32, layers: int = 2):
        super().__init__(hidden, heads, intermediate, layers)
        self.embeddings = BertTokenEmbeddings(vocab, hidden)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None):
        shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:2]
        hidden = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        if attention_mask is None:
            attention_mask = torch.ones(shape, device=hidden.device)
        dtype = hidden.dtype
        extended = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        sequence_output = self.encoder(hidden, extended)
        return sequence_output, self.pooler(sequence_output)


def bert_tokens_small() -> nn.Module:
    torch.manual_seed(0)
    return BertTokenModel().eval()


# ---------------------------------------------------------------------------------------------------- GPT-2
class Conv1D(nn.Module):
    """HF's transposed linear: ``weight`` is ``(nx, nf)``, applied with ``addmm``."""

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
    """``mask="where"`` masks as transformers' eager path does (``torch.where`` against the dtype's minimum);
    ``mask="fill"`` uses ``masked_fill(-inf)`` instead, so both ops stay covered."""

    def __init__(self, hidden: int, heads: int, max_positions: int, mask: str = "where"):
        super().__init__()
        if mask not in ("where", "fill"):
            raise ValueError(f"mask must be 'where' or 'fill', got {mask!r}")
        self.mask = mask
        self.register_buffer("bias", torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool))
                             .view(1, 1, max_positions, max_positions), persistent=False)
        self.num_heads = heads
        self.head_dim = hidden // heads
        self.c_attn = Conv1D(3 * hidden, hidden)
        self.c_proj = Conv1D(hidden, hidden)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _split(self, x):
        return x.view(x.size()[:-1] + (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.num_heads * self.head_dim, dim=2)
        query, key, value = self._split(query), self._split(key), self._split(value)
        weights = torch.matmul(query, key.transpose(-1, -2)) / (value.size(-1) ** 0.5)
        q_len, k_len = query.size(-2), key.size(-2)
        causal = self.bias[:, :, k_len - q_len:k_len, :k_len]
        if self.mask == "fill":
            weights = weights.masked_fill(~causal, float("-inf"))
        else:
            weights = torch.where(causal, weights, torch.full([], torch.finfo(weights.dtype).min, dtype=weights.dtype))
        weights = self.attn_dropout(nn.functional.softmax(weights, dim=-1))
        out = torch.matmul(weights, value).permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.num_heads * self.head_dim,))
        return self.resid_dropout(self.c_proj(out))


class GPT2MLP(nn.Module):
    def __init__(self, intermediate: int, hidden: int):
        super().__init__()
        self.c_fc = Conv1D(intermediate, hidden)
        self.c_proj = Conv1D(hidden, intermediate)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int, max_positions: int, mask: str = "where"):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = GPT2Attention(hidden, heads, max_positions, mask)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = GPT2MLP(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    """Input ``(N, T, hidden)`` embeddings; ``wpe`` position embeddings read through ``arange``."""

    def __init__(self, hidden: int = 16, heads: int = 2, layers: int = 2, max_positions: int = 32):
        super().__init__()
        self.wpe = nn.Embedding(max_positions, hidden)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(hidden, heads, max_positions, mask="fill") for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, inputs_embeds):
        position_ids = torch.arange(0, inputs_embeds.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.drop(inputs_embeds + self.wpe(position_ids))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


def gpt2_small() -> nn.Module:
    return GPT2Model()


# ---------------------------------------------------------------------------------------------------- T5
class T5LayerNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


class T5Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, has_relative_attention_bias: bool, is_decoder: bool,
                 num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.is_decoder = is_decoder
        self.n_heads = heads
        self.key_value_proj_dim = hidden // heads
        self.relative_attention_num_buckets = num_buckets
        self.relative_attention_max_distance = max_distance
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, hidden, bias=False)
        self.v = nn.Linear(hidden, hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(num_buckets, heads)

    _relative_position_bucket = staticmethod(t5.T5Attention._relative_position_bucket)

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        buckets = self._relative_position_bucket(relative_position, bidirectional=not self.is_decoder,
                                                 num_buckets=self.relative_attention_num_buckets,
                                                 max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(buckets)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, position_bias=None):
        batch, length = hidden_states.shape[:2]

        def heads(x):
            return x.view(batch, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        q, k, v = heads(self.q(hidden_states)), heads(self.k(hidden_states)), heads(self.v(hidden_states))
        scores = torch.matmul(q, k.transpose(3, 2))
        if position_bias is None:
            position_bias = self.compute_bias(length, length)
        scores += position_bias
        weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        out = torch.matmul(weights, v).transpose(1, 2).contiguous().view(batch, -1, self.n_heads *
                                                                         self.key_value_proj_dim)
        return self.o(out), position_bias


class T5LayerSelfAttention(nn.Module):
    def __init__(self, hidden, heads, has_relative_attention_bias, is_decoder):
        super().__init__()
        self.SelfAttention = T5Attention(hidden, heads, has_relative_attention_bias, is_decoder)
        self.layer_norm = T5LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, position_bias=None):
        attention, position_bias = self.SelfAttention(self.layer_norm(hidden_states), position_bias)
        return hidden_states + self.dropout(attention), position_bias


class T5DenseActDense(nn.Module):
    def __init__(self, hidden: int, ff: int):
        super().__init__()
        self.wi = nn.Linear(hidden, ff, bias=False)
        self.wo = nn.Linear(ff, hidden, bias=False)
        self.dropout = nn.Dropout(0.1)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.wo(self.dropout(self.act(self.wi(x))))


class T5LayerFF(nn.Module):
    def __init__(self, hidden: int, ff: int):
        super().__init__()
        self.DenseReluDense = T5DenseActDense(hidden, ff)
        self.layer_norm = T5LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.dropout(self.DenseReluDense(self.layer_norm(x)))


class T5Block(nn.Module):
    def __init__(self, hidden, heads, ff, has_relative_attention_bias, is_decoder):
        super().__init__()
        self.layer = nn.ModuleList([T5LayerSelfAttention(hidden, heads, has_relative_attention_bias, is_decoder),
                                    T5LayerFF(hidden, ff)])

    def forward(self, hidden_states, position_bias=None):
        hidden_states, position_bias = self.layer[0](hidden_states, position_bias)
        return self.layer[1](hidden_states), position_bias


class T5Stack(nn.Module):
    def __init__(self, hidden, heads, ff, layers, is_decoder):
        super().__init__()
        self.block = nn.ModuleList([T5Block(hidden, heads, ff, i == 0, is_decoder) for i in range(layers)])
        self.final_layer_norm = T5LayerNorm(hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, inputs_embeds):
        hidden_states, position_bias = self.dropout(inputs_embeds), None
        for block in self.block:
            hidden_states, position_bias = block(hidden_states, position_bias)
        return self.dropout(self.final_layer_norm(hidden_states))


class T5Model(nn.Module):
    """``encoder`` (bidirectional buckets) and ``decoder`` stacks over the same embeddings (no cross-attention:
    the decoder stack exercises the unidirectional buckets, ``-min(rel, 0)``)."""

    def __init__(self, hidden: int = 16, heads: int = 2, ff: int = 32, layers: int = 2):
        super().__init__()
        self.encoder = T5Stack(hidden, heads, ff, layers, is_decoder=False)
        self.decoder = T5Stack(hidden, heads, ff, 1, is_decoder=True)

    def forward(self, inputs_embeds):
        return self.encoder(inputs_embeds), self.decoder(inputs_embeds)


def t5_small() -> nn.Module:
    return T5Model()


# ---------------------------------------------------------------------------------------------------- Llama
class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim: int, base: float = 10000.0):
        super().__init__()
        self.dim = dim
        self.base = base
        self.attention_scaling = 1.0

    @torch.no_grad()
    def forward(self, x, position_ids):
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        with torch.autocast(device_type="cpu", enabled=False):  # force float32
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(hidden_states, n_rep: int):
    batch, kv_heads, length, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, kv_heads, n_rep, length, head_dim)
    return hidden_states.reshape(batch, kv_heads * n_rep, length, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int):
        super().__init__()
        self.head_dim = hidden // heads
        self.num_key_value_groups = heads // kv_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, hidden_states, position_embeddings):
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = position_embeddings
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, self.num_key_value_groups), repeat_kv(v, self.num_key_value_groups)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling)
        return self.o_proj(out.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1).contiguous())


class LlamaMLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate):
        super().__init__()
        self.self_attn = LlamaAttention(hidden, heads, kv_heads)
        self.mlp = LlamaMLP(hidden, intermediate)
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.post_attention_layernorm = LlamaRMSNorm(hidden)

    def forward(self, hidden_states, position_embeddings):
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states), position_embeddings)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class LlamaModel(nn.Module):
    """Input ``(N, T, hidden)`` embeddings; positions ``arange(T)`` per sample."""

    def __init__(self, hidden: int = 16, heads: int = 4, kv_heads: int = 2, intermediate: int = 32, layers: int = 2):
        super().__init__()
        self.layers = nn.ModuleList([LlamaDecoderLayer(hidden, heads, kv_heads, intermediate)
                                     for _ in range(layers)])
        self.norm = LlamaRMSNorm(hidden)
        self.rotary_emb = LlamaRotaryEmbedding(hidden // heads)

    def forward(self, inputs_embeds):
        position_ids = torch.arange(inputs_embeds.shape[1]).unsqueeze(0).expand(inputs_embeds.shape[0], -1)
        position_embeddings = self.rotary_emb(inputs_embeds, position_ids)
        hidden_states = inputs_embeds
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_embeddings)
        return self.norm(hidden_states)


def llama_small() -> nn.Module:
    return LlamaModel()
