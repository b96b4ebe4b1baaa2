"""Twin of transformers' ``T5ForConditionalGeneration`` (encoder-decoder, written here from the reference's
structure): shared token embeddings, relative position buckets (bidirectional in the encoder, causal in the
decoder, logarithmic past ``max_exact``) computed by the first block of each stack and handed on, the padding mask
folded into that bias as ``finfo.min``, cross-attention whose bias is zeros plus the encoder mask, ``labels`` shifted
right into ``decoder_input_ids`` and a cross-entropy loss that ignores -100. ``feed_forward_proj`` "relu" is the
original T5 (tied head, output scaled by ``d_model ** -0.5``), "gated-gelu" T5 v1.1 / Flan-T5 (``wi_0``/``wi_1``,
tanh GELU, untied head). Module and ``state_dict`` names are transformers' (``shared``, ``encoder.block.0.layer.0.
SelfAttention.relative_attention_bias``, ``decoder.block.1.layer.1.EncDecAttention.q``, ``lm_head``)."""

from __future__ import annotations

import math

import torch
from torch import nn


class T5Config:
    def __init__(self, vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=3,
                 relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.1,
                 layer_norm_epsilon=1e-6, feed_forward_proj="relu", tie_word_embeddings=True, is_decoder=False,
                 decoder_start_token_id=0, pad_token_id=0):
        self.__dict__.update({k: v for k, v in locals().items() if k != "self"})
        self.is_gated_act = feed_forward_proj.startswith("gated-")
        self.dense_act_fn = feed_forward_proj.split("-")[-1]


class NewGELUActivation(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


_ACT = {"relu": nn.ReLU, "gelu": NewGELUActivation}


class T5LayerNorm(nn.Module):
    """RMS norm: no mean subtraction, no bias; the variance in float32."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states


class T5DenseActDense(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wi = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = _ACT[config.dense_act_fn]()

    def forward(self, hidden_states):
        return self.wo(self.dropout(self.act(self.wi(hidden_states))))


class T5DenseGatedActDense(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wi_0 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wi_1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = _ACT[config.dense_act_fn]()

    def forward(self, hidden_states):
        hidden_states = self.act(self.wi_0(hidden_states)) * self.wi_1(hidden_states)
        return self.wo(self.dropout(hidden_states))


class T5LayerFF(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.DenseReluDense = (T5DenseGatedActDense if config.is_gated_act else T5DenseActDense)(config)
        self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states):
        return hidden_states + self.dropout(self.DenseReluDense(self.layer_norm(hidden_states)))


class T5Attention(nn.Module):
    def __init__(self, config, has_relative_attention_bias=False):
        super().__init__()
        self.is_decoder = config.is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = config.relative_attention_num_buckets
        self.relative_attention_max_distance = config.relative_attention_max_distance
        self.n_heads = config.num_heads
        self.key_value_proj_dim = config.d_kv
        self.inner_dim = self.n_heads * self.key_value_proj_dim
        self.dropout = config.dropout_rate
        self.q = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(config.d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, config.d_model, bias=False)
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)).to(torch.long)
        relative_position_if_large = torch.min(relative_position_if_large,
                                               torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, device=None):
        device = device or self.relative_attention_bias.weight.device
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative_position_bucket = self._relative_position_bucket(
            memory_position - context_position, bidirectional=not self.is_decoder,
            num_buckets=self.relative_attention_num_buckets, max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(relative_position_bucket)  # (query, key, heads)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]
        key_length = seq_length if key_value_states is None else key_value_states.shape[1]

        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        def unshape(states):
            return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)

        source = hidden_states if key_value_states is None else key_value_states
        query_states = shape(self.q(hidden_states))
        key_states, value_states = shape(self.k(source)), shape(self.v(source))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))  # no 1/sqrt(d): folded into the init
        if position_bias is None:
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, self.n_heads, seq_length, key_length), device=scores.device,
                                            dtype=scores.dtype)
            else:
                position_bias = self.compute_bias(seq_length, key_length, device=scores.device)
            if mask is not None:
                position_bias = position_bias + mask  # (batch_size, n_heads, seq_length, key_length)
        scores += position_bias
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_weights = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = unshape(torch.matmul(attn_weights, value_states))
        return self.o(attn_output), position_bias


class T5LayerSelfAttention(nn.Module):
    def __init__(self, config, has_relative_attention_bias=False):
        super().__init__()
        self.SelfAttention = T5Attention(config, has_relative_attention_bias=has_relative_attention_bias)
        self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states, attention_mask=None, position_bias=None):
        attention, position_bias = self.SelfAttention(self.layer_norm(hidden_states), mask=attention_mask,
                                                      position_bias=position_bias)
        return hidden_states + self.dropout(attention), position_bias


class T5LayerCrossAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.EncDecAttention = T5Attention(config, has_relative_attention_bias=False)
        self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states, key_value_states, attention_mask=None, position_bias=None):
        attention, position_bias = self.EncDecAttention(self.layer_norm(hidden_states), mask=attention_mask,
                                                        key_value_states=key_value_states,
                                                        position_bias=position_bias)
        return hidden_states + self.dropout(attention), position_bias


def _clamp_half(hidden_states):
    """transformers keeps float16 activations finite: clamp to just under the float16 maximum."""
    if hidden_states.dtype == torch.float16:
        clamp_value = torch.where(torch.isinf(hidden_states).any(), torch.finfo(hidden_states.dtype).max - 1000,
                                  torch.finfo(hidden_states.dtype).max)
        hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
    return hidden_states


class T5Block(nn.Module):
    def __init__(self, config, has_relative_attention_bias=False):
        super().__init__()
        self.is_decoder = config.is_decoder
        self.layer = nn.ModuleList([T5LayerSelfAttention(config, has_relative_attention_bias)])
        if self.is_decoder:
            self.layer.append(T5LayerCrossAttention(config))
        self.layer.append(T5LayerFF(config))

    def forward(self, hidden_states, attention_mask=None, position_bias=None, encoder_hidden_states=None,
                encoder_attention_mask=None, encoder_decoder_position_bias=None):
        hidden_states, position_bias = self.layer[0](hidden_states, attention_mask, position_bias)
        hidden_states = _clamp_half(hidden_states)
        if self.is_decoder and encoder_hidden_states is not None:
            hidden_states, encoder_decoder_position_bias = self.layer[1](
                hidden_states, encoder_hidden_states, encoder_attention_mask, encoder_decoder_position_bias)
            hidden_states = _clamp_half(hidden_states)
        hidden_states = _clamp_half(self.layer[-1](hidden_states))
        return hidden_states, position_bias, encoder_decoder_position_bias


def _inverted(mask, dtype):
    """0/1 mask -> additive: 0 where attended, ``finfo(dtype).min`` where not."""
    return (1.0 - mask.to(dtype)) * torch.finfo(dtype).min


class T5Stack(nn.Module):
    def __init__(self, config, embed_tokens=None):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.is_decoder = config.is_decoder
        layers = config.num_decoder_layers if config.is_decoder else config.num_layers
        self.block = nn.ModuleList([T5Block(config, has_relative_attention_bias=i == 0) for i in range(layers)])
        self.final_layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, input_ids, attention_mask=None, encoder_hidden_states=None, encoder_attention_mask=None):
        inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_length = input_ids.shape
        dtype = inputs_embeds.dtype
        if attention_mask is None:
            attention_mask = torch.ones(batch_size, seq_length, device=inputs_embeds.device)
        if self.is_decoder:  # ModuleUtilsMixin.create_extended_attention_mask_for_decoder
            seq_ids = torch.arange(seq_length, device=inputs_embeds.device)
            causal_mask = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]
            causal_mask = causal_mask.to(attention_mask.dtype)
            extended_attention_mask = _inverted(causal_mask[:, None, :, :] * attention_mask[:, None, None, :], dtype)
        else:
            extended_attention_mask = _inverted(attention_mask[:, None, None, :], dtype)
        encoder_extended_attention_mask = None
        if self.is_decoder and encoder_hidden_states is not None:
            if encoder_attention_mask is None:
                encoder_attention_mask = torch.ones(encoder_hidden_states.shape[:2], device=inputs_embeds.device,
                                                    dtype=torch.long)
            encoder_extended_attention_mask = _inverted(encoder_attention_mask[:, None, None, :], dtype)

        position_bias = encoder_decoder_position_bias = None
        hidden_states = self.dropout(inputs_embeds)
        for layer_module in self.block:
            hidden_states, position_bias, encoder_decoder_position_bias = layer_module(
                hidden_states, extended_attention_mask, position_bias, encoder_hidden_states,
                encoder_extended_attention_mask, encoder_decoder_position_bias)
        return self.dropout(self.final_layer_norm(hidden_states))


class T5ForConditionalGeneration(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.config = config
        self.model_dim = config.d_model
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        config.is_decoder = False
        self.encoder = T5Stack(config, self.shared)
        decoder_config = T5Config(**{k: v for k, v in vars(config).items()
                                     if k not in ("is_gated_act", "dense_act_fn")})
        decoder_config.is_decoder = True
        self.decoder = T5Stack(decoder_config, self.shared)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.shared.weight

    def _shift_right(self, input_ids):
        shifted_input_ids = input_ids.new_zeros(input_ids.shape)
        shifted_input_ids[..., 1:] = input_ids[..., :-1].clone()
        shifted_input_ids[..., 0] = self.config.decoder_start_token_id
        shifted_input_ids.masked_fill_(shifted_input_ids == -100, self.config.pad_token_id)
        return shifted_input_ids

    def forward(self, input_ids, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                labels=None):
        hidden_states = self.encoder(input_ids, attention_mask=attention_mask)
        if labels is not None and decoder_input_ids is None:
            decoder_input_ids = self._shift_right(labels)
        sequence_output = self.decoder(decoder_input_ids, attention_mask=decoder_attention_mask,
                                       encoder_hidden_states=hidden_states, encoder_attention_mask=attention_mask)
        if self.config.tie_word_embeddings:
            sequence_output = sequence_output * (self.model_dim ** -0.5)
        lm_logits = self.lm_head(sequence_output)
        if labels is None:
            return lm_logits, hidden_states
        loss = nn.CrossEntropyLoss(ignore_index=-100)(lm_logits.view(-1, lm_logits.size(-1)), labels.view(-1))
        return loss, lm_logits, hidden_states


def t5_small() -> nn.Module:
    """Original T5: ReLU feed-forward, tied head. d_model 16, 3 heads of 8 (inner 24), 8 buckets up to 16."""
    return T5ForConditionalGeneration(T5Config())


def t5_v1_1_small() -> nn.Module:
    """T5 v1.1 / Flan-T5: gated tanh-GELU feed-forward, untied head, three decoder blocks."""
    return T5ForConditionalGeneration(T5Config(feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                                               num_decoder_layers=3))


def norm_weights_(model: nn.Module) -> None:
    """``T5LayerNorm`` is no ``nn.LayerNorm``: give its weights norm-like values in [0.5, 1.5] (the seeded
    randomisation draws them around 0)."""
    gen = torch.Generator().manual_seed(11)
    for module in model.modules():
        if isinstance(module, T5LayerNorm):
            module.weight.copy_(torch.rand(module.weight.shape, generator=gen) + 0.5)
