"""A twin of transformers' ``DebertaV2Model`` as the current ``modeling_deberta_v2.py`` writes it (module structure
and ``state_dict`` names: ``embeddings.word_embeddings``, ``embeddings.embed_proj``, ``encoder.rel_embeddings``,
``encoder.LayerNorm``, ``encoder.conv.conv``, ``encoder.layer.<i>.attention.self.query_proj`` / ``pos_key_proj`` /
``pos_query_proj``, ``.attention.output.dense``, ``.intermediate.dense``, ``.output.LayerNorm``), small sizes.

Stresses: disentangled attention with relative positions built in the forward (``arange`` differences,
``make_log_bucket_position``: ``sign``, ``abs``, ``torch.where`` with a ``torch.tensor`` made in the function,
``log`` of an int tensor divided by an int, ``ceil``; few buckets so short sequences reach the log branch), the
helpers under ``@torch.jit.script`` as transformers keeps them (``scaled_size_sqrt``, ``build_rpos``,
``make_log_bucket_position``); c2p and p2c scores by ``torch.gather`` with clamped index tensors ``expand``-ed to
``(B * heads, Q, K)``, the p2c one transposed; ``share_att_key`` (positions through the content projections) or
separate ``pos_key_proj``/``pos_query_proj``; the 0/1 mask made ``(B, 1, L, L)`` by an outer product, ``bool()``-ed
and applied with ``masked_fill(~mask, finfo.min)`` (padded query rows are fully masked: uniform), the embeddings
multiplied by the mask; v2's ``ConvLayer`` (conv1d over the sequence, an in-place ``masked_fill_``, tanh/gelu,
LayerNorm) after the first layer, and ``embed_proj`` when the embedding size differs.

Two configs: ``deberta_v3_small`` (DeBERTa-v3's: no absolute positions, no token types, shared keys, layer-normed
relative embeddings) and ``deberta_v2_conv_small`` (v2-xlarge's: the conv layer, absolute positions, token types,
separate position projections, ``embed_proj``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class DebertaV2Config:
    vocab_size: int = 64
    hidden_size: int = 16
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 32
    max_position_embeddings: int = 48
    type_vocab_size: int = 0
    position_biased_input: bool = False
    relative_attention: bool = True
    max_relative_positions: int = -1
    position_buckets: int = 8
    pos_att_type: tuple = ("p2c", "c2p")
    share_att_key: bool = True
    norm_rel_ebd: str = "layer_norm"
    conv_kernel_size: int = 0
    conv_act: str = "tanh"
    embedding_size: int = 16
    pad_token_id: int = 0
    layer_norm_eps: float = 1e-7
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0


_ACT = {"tanh": torch.tanh, "gelu": nn.functional.gelu}


# ---------------------------------------------------------------------------------------------------- positions
@torch.jit.script
def make_log_bucket_position(relative_pos, bucket_size: int, max_position: int):
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid),
                          torch.tensor(mid - 1).type_as(relative_pos), torch.abs(relative_pos))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid))
                         * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)


def build_relative_position(query_layer, key_layer, bucket_size: int = -1, max_position: int = -1):
    """``(1, Q, K)`` long: query position minus key position, log-bucketed past ``bucket_size // 2``."""
    query_size, key_size = query_layer.size(-2), key_layer.size(-2)
    q_ids = torch.arange(query_size, dtype=torch.long, device=query_layer.device)
    k_ids = torch.arange(key_size, dtype=torch.long, device=key_layer.device)
    rel_pos_ids = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel_pos_ids = make_log_bucket_position(rel_pos_ids, bucket_size, max_position)
    rel_pos_ids = rel_pos_ids.to(torch.long)
    return rel_pos_ids[:query_size, :].unsqueeze(0)


@torch.jit.script
def scaled_size_sqrt(query_layer: torch.Tensor, scale_factor: int):
    return torch.sqrt(torch.tensor(query_layer.size(-1), dtype=torch.float) * scale_factor)


@torch.jit.script
def build_rpos(query_layer, key_layer, relative_pos, position_buckets: int, max_relative_positions: int):
    if key_layer.size(-2) != query_layer.size(-2):
        return build_relative_position(key_layer, key_layer, bucket_size=position_buckets,
                                       max_position=max_relative_positions)
    return relative_pos


# ---------------------------------------------------------------------------------------------------- attention
class DisentangledSelfAttention(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query_proj = nn.Linear(config.hidden_size, self.all_head_size, bias=True)
        self.key_proj = nn.Linear(config.hidden_size, self.all_head_size, bias=True)
        self.value_proj = nn.Linear(config.hidden_size, self.all_head_size, bias=True)
        self.share_att_key = config.share_att_key
        self.pos_att_type = list(config.pos_att_type)
        self.relative_attention = config.relative_attention
        if self.relative_attention:
            self.position_buckets = config.position_buckets
            self.max_relative_positions = config.max_relative_positions
            if self.max_relative_positions < 1:
                self.max_relative_positions = config.max_position_embeddings
            self.pos_ebd_size = self.max_relative_positions
            if self.position_buckets > 0:
                self.pos_ebd_size = self.position_buckets
            self.pos_dropout = nn.Dropout(config.hidden_dropout_prob)
            if not self.share_att_key:
                if "c2p" in self.pos_att_type:
                    self.pos_key_proj = nn.Linear(config.hidden_size, self.all_head_size, bias=True)
                if "p2c" in self.pos_att_type:
                    self.pos_query_proj = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x, attention_heads) -> torch.Tensor:
        x = x.view(x.size()[:-1] + (attention_heads, -1))
        return x.permute(0, 2, 1, 3).contiguous().view(-1, x.size(1), x.size(-1))

    def forward(self, hidden_states, attention_mask, query_states=None, relative_pos=None, rel_embeddings=None):
        if query_states is None:
            query_states = hidden_states
        query_layer = self.transpose_for_scores(self.query_proj(query_states), self.num_attention_heads)
        key_layer = self.transpose_for_scores(self.key_proj(hidden_states), self.num_attention_heads)
        value_layer = self.transpose_for_scores(self.value_proj(hidden_states), self.num_attention_heads)

        scale_factor = 1 + ("c2p" in self.pos_att_type) + ("p2c" in self.pos_att_type)
        scale = scaled_size_sqrt(query_layer, scale_factor)
        attention_scores = torch.bmm(query_layer, key_layer.transpose(-1, -2) / scale.to(dtype=query_layer.dtype))
        if self.relative_attention:
            rel_embeddings = self.pos_dropout(rel_embeddings)
            attention_scores = attention_scores + self.disentangled_attention_bias(
                query_layer, key_layer, relative_pos, rel_embeddings, scale_factor)
        attention_scores = attention_scores.view(-1, self.num_attention_heads, attention_scores.size(-2),
                                                 attention_scores.size(-1))
        attention_mask = attention_mask.bool()
        attention_scores = attention_scores.masked_fill(~attention_mask, torch.finfo(query_layer.dtype).min)
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.bmm(attention_probs.view(-1, attention_probs.size(-2), attention_probs.size(-1)),
                                  value_layer)
        context_layer = (context_layer.view(-1, self.num_attention_heads, context_layer.size(-2),
                                            context_layer.size(-1)).permute(0, 2, 1, 3).contiguous())
        return context_layer.view(context_layer.size()[:-2] + (-1,))

    def disentangled_attention_bias(self, query_layer, key_layer, relative_pos, rel_embeddings, scale_factor):
        if relative_pos is None:
            relative_pos = build_relative_position(query_layer, key_layer, bucket_size=self.position_buckets,
                                                   max_position=self.max_relative_positions)
        if relative_pos.dim() == 2:
            relative_pos = relative_pos.unsqueeze(0).unsqueeze(0)
        elif relative_pos.dim() == 3:
            relative_pos = relative_pos.unsqueeze(1)
        elif relative_pos.dim() != 4:
            raise ValueError(f"Relative position ids must be of dim 2 or 3 or 4. {relative_pos.dim()}")
        att_span = self.pos_ebd_size
        relative_pos = relative_pos.to(device=query_layer.device, dtype=torch.long)
        rel_embeddings = rel_embeddings[0:att_span * 2, :].unsqueeze(0)
        repeats = query_layer.size(0) // self.num_attention_heads
        if self.share_att_key:
            pos_query_layer = self.transpose_for_scores(self.query_proj(rel_embeddings),
                                                        self.num_attention_heads).repeat(repeats, 1, 1)
            pos_key_layer = self.transpose_for_scores(self.key_proj(rel_embeddings),
                                                      self.num_attention_heads).repeat(repeats, 1, 1)
        else:
            if "c2p" in self.pos_att_type:
                pos_key_layer = self.transpose_for_scores(self.pos_key_proj(rel_embeddings),
                                                          self.num_attention_heads).repeat(repeats, 1, 1)
            if "p2c" in self.pos_att_type:
                pos_query_layer = self.transpose_for_scores(self.pos_query_proj(rel_embeddings),
                                                            self.num_attention_heads).repeat(repeats, 1, 1)
        score = 0
        if "c2p" in self.pos_att_type:  # content -> position
            scale = scaled_size_sqrt(pos_key_layer, scale_factor)
            c2p_att = torch.bmm(query_layer, pos_key_layer.transpose(-1, -2))
            c2p_pos = torch.clamp(relative_pos + att_span, 0, att_span * 2 - 1)
            c2p_att = torch.gather(c2p_att, dim=-1, index=c2p_pos.squeeze(0).expand(
                [query_layer.size(0), query_layer.size(1), relative_pos.size(-1)]))
            score += c2p_att / scale.to(dtype=c2p_att.dtype)
        if "p2c" in self.pos_att_type:  # position -> content
            scale = scaled_size_sqrt(pos_query_layer, scale_factor)
            # transformers passes the last two arguments in this order (swapped; only used for cross lengths)
            r_pos = build_rpos(query_layer, key_layer, relative_pos, self.max_relative_positions,
                               self.position_buckets)
            p2c_pos = torch.clamp(-r_pos + att_span, 0, att_span * 2 - 1)
            p2c_att = torch.bmm(key_layer, pos_query_layer.transpose(-1, -2))
            p2c_att = torch.gather(p2c_att, dim=-1, index=p2c_pos.squeeze(0).expand(
                [query_layer.size(0), key_layer.size(-2), key_layer.size(-2)])).transpose(-1, -2)
            score += p2c_att / scale.to(dtype=p2c_att.dtype)
        return score


class DebertaV2SelfOutput(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class DebertaV2Attention(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.self = DisentangledSelfAttention(config)
        self.output = DebertaV2SelfOutput(config)

    def forward(self, hidden_states, attention_mask, query_states=None, relative_pos=None, rel_embeddings=None):
        self_output = self.self(hidden_states, attention_mask, query_states=query_states,
                                relative_pos=relative_pos, rel_embeddings=rel_embeddings)
        return self.output(self_output, hidden_states if query_states is None else query_states)


class DebertaV2Intermediate(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, hidden_states):
        return nn.functional.gelu(self.dense(hidden_states))


class DebertaV2Output(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class DebertaV2Layer(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.attention = DebertaV2Attention(config)
        self.intermediate = DebertaV2Intermediate(config)
        self.output = DebertaV2Output(config)

    def forward(self, hidden_states, attention_mask, query_states=None, relative_pos=None, rel_embeddings=None):
        attention_output = self.attention(hidden_states, attention_mask, query_states=query_states,
                                          relative_pos=relative_pos, rel_embeddings=rel_embeddings)
        return self.output(self.intermediate(attention_output), attention_output)


class ConvLayer(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        kernel_size = config.conv_kernel_size
        self.conv_act = config.conv_act
        self.conv = nn.Conv1d(config.hidden_size, config.hidden_size, kernel_size,
                              padding=(kernel_size - 1) // 2, groups=1)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, residual_states, input_mask):
        out = self.conv(hidden_states.permute(0, 2, 1).contiguous()).permute(0, 2, 1).contiguous()
        rmask = (1 - input_mask).bool()
        out.masked_fill_(rmask.unsqueeze(-1).expand(out.size()), 0)
        out = _ACT[self.conv_act](self.dropout(out))
        layer_norm_input = residual_states + out
        output = self.LayerNorm(layer_norm_input).to(layer_norm_input)
        if input_mask.dim() != layer_norm_input.dim():
            if input_mask.dim() == 4:
                input_mask = input_mask.squeeze(1).squeeze(1)
            input_mask = input_mask.unsqueeze(2)
        return output * input_mask.to(output.dtype)


class DebertaV2Encoder(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.layer = nn.ModuleList([DebertaV2Layer(config) for _ in range(config.num_hidden_layers)])
        self.relative_attention = config.relative_attention
        if self.relative_attention:
            self.max_relative_positions = config.max_relative_positions
            if self.max_relative_positions < 1:
                self.max_relative_positions = config.max_position_embeddings
            self.position_buckets = config.position_buckets
            pos_ebd_size = self.max_relative_positions * 2
            if self.position_buckets > 0:
                pos_ebd_size = self.position_buckets * 2
            self.rel_embeddings = nn.Embedding(pos_ebd_size, config.hidden_size)
        self.norm_rel_ebd = [x.strip() for x in config.norm_rel_ebd.lower().split("|")]
        if "layer_norm" in self.norm_rel_ebd:
            self.LayerNorm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps, elementwise_affine=True)
        self.conv = ConvLayer(config) if config.conv_kernel_size > 0 else None

    def get_rel_embedding(self):
        rel_embeddings = self.rel_embeddings.weight if self.relative_attention else None
        if rel_embeddings is not None and "layer_norm" in self.norm_rel_ebd:
            rel_embeddings = self.LayerNorm(rel_embeddings)
        return rel_embeddings

    def get_attention_mask(self, attention_mask):
        if attention_mask.dim() <= 2:
            extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2)
            attention_mask = extended_attention_mask * extended_attention_mask.squeeze(-2).unsqueeze(-1)
        elif attention_mask.dim() == 3:
            attention_mask = attention_mask.unsqueeze(1)
        return attention_mask

    def get_rel_pos(self, hidden_states, query_states=None, relative_pos=None):
        if self.relative_attention and relative_pos is None:
            relative_pos = build_relative_position(query_states if query_states is not None else hidden_states,
                                                   hidden_states, bucket_size=self.position_buckets,
                                                   max_position=self.max_relative_positions)
        return relative_pos

    def forward(self, hidden_states, attention_mask, query_states=None, relative_pos=None):
        input_mask = attention_mask if attention_mask.dim() <= 2 else (attention_mask.sum(-2) > 0)
        attention_mask = self.get_attention_mask(attention_mask)
        relative_pos = self.get_rel_pos(hidden_states, query_states, relative_pos)
        next_kv = hidden_states
        rel_embeddings = self.get_rel_embedding()
        output_states = next_kv
        for i, layer_module in enumerate(self.layer):
            output_states = layer_module(next_kv, attention_mask, query_states=query_states,
                                         relative_pos=relative_pos, rel_embeddings=rel_embeddings)
            if i == 0 and self.conv is not None:
                output_states = self.conv(hidden_states, output_states, input_mask)
            if query_states is not None:
                query_states = output_states
            else:
                next_kv = output_states
        return output_states


class DebertaV2Embeddings(nn.Module):
    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.config = config
        self.embedding_size = config.embedding_size
        self.word_embeddings = nn.Embedding(config.vocab_size, self.embedding_size, padding_idx=config.pad_token_id)
        self.position_biased_input = config.position_biased_input
        self.position_embeddings = (nn.Embedding(config.max_position_embeddings, self.embedding_size)
                                    if self.position_biased_input else None)
        self.token_type_embeddings = (nn.Embedding(config.type_vocab_size, self.embedding_size)
                                      if config.type_vocab_size > 0 else None)
        if self.embedding_size != config.hidden_size:
            self.embed_proj = nn.Linear(self.embedding_size, config.hidden_size, bias=False)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)),
                             persistent=False)

    def forward(self, input_ids, token_type_ids=None, position_ids=None, mask=None):
        input_shape = input_ids.size()
        if position_ids is None:
            position_ids = self.position_ids[:, :input_shape[1]]
        if token_type_ids is None:
            token_type_ids = torch.zeros(input_shape, dtype=torch.long, device=self.position_ids.device)
        inputs_embeds = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            position_embeddings = self.position_embeddings(position_ids.long())
        else:
            position_embeddings = torch.zeros_like(inputs_embeds)
        embeddings = inputs_embeds
        if self.position_biased_input:
            embeddings = embeddings + position_embeddings
        if self.token_type_embeddings is not None:
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        if self.embedding_size != self.config.hidden_size:
            embeddings = self.embed_proj(embeddings)
        embeddings = self.LayerNorm(embeddings)
        if mask is not None:
            if mask.dim() != embeddings.dim():
                if mask.dim() == 4:
                    mask = mask.squeeze(1).squeeze(1)
                mask = mask.unsqueeze(2)
            embeddings = embeddings * mask.to(embeddings.dtype)
        return self.dropout(embeddings)


class DebertaV2Model(nn.Module):
    """``forward(input_ids, attention_mask=None, token_type_ids=None)`` -> ``last_hidden_state`` ``(B, L, hidden)``;
    ids ``(B, L)``, mask ``(B, L)`` of 0/1."""

    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.config = config
        self.embeddings = DebertaV2Embeddings(config)
        self.encoder = DebertaV2Encoder(config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        input_shape = input_ids.size()
        if attention_mask is None:
            attention_mask = torch.ones(input_shape, device=input_ids.device)
        if token_type_ids is None:
            token_type_ids = torch.zeros(input_shape, dtype=torch.long, device=input_ids.device)
        embedding_output = self.embeddings(input_ids, token_type_ids=token_type_ids, mask=attention_mask)
        return self.encoder(embedding_output, attention_mask)


def deberta_v3_small() -> DebertaV2Model:
    """DeBERTa-v3's layout: 8 position buckets (log buckets from distance 4 on), max relative position 16."""
    return DebertaV2Model(DebertaV2Config(max_relative_positions=16))


def deberta_v2_conv_small() -> DebertaV2Model:
    """DeBERTa-v2-xlarge's layout: conv layer (kernel 3, gelu), absolute positions, 2 token types, separate
    position projections, a 12-wide embedding projected to 16."""
    return DebertaV2Model(DebertaV2Config(type_vocab_size=2, position_biased_input=True, share_att_key=False,
                                          conv_kernel_size=3, conv_act="gelu", embedding_size=12,
                                          max_relative_positions=16))
