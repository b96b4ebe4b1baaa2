"""HF transformers' PatchTST (``modeling_patchtst.py``) at test size, with its module structure and ``state_dict``
names: a scaler over the time axis (``std``: masked mean and variance with the observed mask; ``mean``: masked mean
absolute value, the batch's mean where a series has no observation), patches cut by ``Tensor.unfold`` after the
leading samples are dropped, an input embedding per channel (``ModuleList`` + ``stack``) or shared, sin-cos (a
frozen parameter) or random position encodings and an optional class token, encoder layers of attention across time,
optionally across channels (the same attention module), and a feed-forward sublayer, each with batch norm over the
``(batch * channels, d_model, patches)`` view (``PatchTSTBatchNorm``) or layer norm, pre- or post-norm; the
prediction head (shared flatten + Linear, rescaled by the scaler's ``loc``/``scale``) and the
classification head (class token or pooling)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from tests.models._common import calibrate_batch_norms


@dataclass
class PatchTSTConfig:
    num_input_channels: int = 3
    context_length: int = 32
    patch_length: int = 6
    patch_stride: int = 4
    num_hidden_layers: int = 2
    d_model: int = 16
    num_attention_heads: int = 4
    share_embedding: bool = True
    channel_attention: bool = False
    ffn_dim: int = 32
    norm_type: str = "batchnorm"
    norm_eps: float = 1e-5
    pre_norm: bool = True
    positional_encoding_type: str = "sincos"
    use_cls_token: bool = False
    share_projection: bool = True  # HF's per-channel heads are not twinned
    scaling: str = "std"
    pooling_type: Optional[str] = "mean"
    prediction_length: int = 5
    num_targets: int = 4


class PatchTSTAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, hidden_states):
        bsz, tgt_len = hidden_states.shape[:-1]
        shape = (bsz, tgt_len, -1, self.head_dim)
        query = self.q_proj(hidden_states).view(*shape).transpose(1, 2)
        key = self.k_proj(hidden_states).view(*shape).transpose(1, 2)
        value = self.v_proj(hidden_states).view(*shape).transpose(1, 2)
        weights = nn.functional.softmax(torch.matmul(query, key.transpose(2, 3)) * self.scaling, dim=-1)
        out = torch.matmul(weights, value).transpose(1, 2).contiguous()
        return self.out_proj(out.reshape(bsz, tgt_len, -1).contiguous())


class PatchTSTBatchNorm(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.batchnorm = nn.BatchNorm1d(config.d_model, eps=config.norm_eps)

    def forward(self, inputs):
        return self.batchnorm(inputs.transpose(1, 2)).transpose(1, 2)


def _norm(config):
    if config.norm_type == "batchnorm":
        return PatchTSTBatchNorm(config)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps)


class PatchTSTEncoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.channel_attention = config.channel_attention
        self.self_attn = PatchTSTAttention(config.d_model, config.num_attention_heads)
        self.dropout_path1 = nn.Identity()
        self.norm_sublayer1 = _norm(config)
        if self.channel_attention:
            self.dropout_path2 = nn.Identity()
            self.norm_sublayer2 = _norm(config)
        self.ff = nn.Sequential(nn.Linear(config.d_model, config.ffn_dim), nn.GELU(), nn.Identity(),
                                nn.Linear(config.ffn_dim, config.d_model))
        self.dropout_path3 = nn.Identity()
        self.norm_sublayer3 = _norm(config)
        self.pre_norm = config.pre_norm

    def _sublayer(self, hidden, norm, path, fn):
        if self.pre_norm:
            return hidden + path(fn(norm(hidden)))
        return norm(hidden + path(fn(hidden)))

    def forward(self, hidden_state):
        batch_size, channels, length, d_model = hidden_state.shape
        hidden_state = hidden_state.view(batch_size * channels, length, d_model)
        hidden_state = self._sublayer(hidden_state, self.norm_sublayer1, self.dropout_path1, self.self_attn)
        hidden_state = hidden_state.reshape(batch_size, channels, length, d_model)
        if self.channel_attention:
            hidden_state = hidden_state.transpose(2, 1).contiguous().view(batch_size * length, channels, d_model)
            hidden_state = self._sublayer(hidden_state, self.norm_sublayer2, self.dropout_path2, self.self_attn)
            hidden_state = hidden_state.reshape(batch_size, length, channels, d_model).transpose(1, 2).contiguous()
        hidden_state = hidden_state.view(batch_size * channels, length, d_model)
        hidden_state = self._sublayer(hidden_state, self.norm_sublayer3, self.dropout_path3, self.ff)
        return hidden_state.reshape(batch_size, channels, length, d_model)


class PatchTSTEmbedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_input_channels = config.num_input_channels
        self.share_embedding = config.share_embedding
        if self.share_embedding:
            self.input_embedding = nn.Linear(config.patch_length, config.d_model)
        else:
            self.input_embedding = nn.ModuleList(nn.Linear(config.patch_length, config.d_model)
                                                 for _ in range(config.num_input_channels))

    def forward(self, patch_input):
        if self.share_embedding:
            return self.input_embedding(patch_input)
        return torch.stack([self.input_embedding[i](patch_input[:, i, :, :]) for i in range(patch_input.shape[1])],
                           dim=1)


class PatchTSTPositionalEncoding(nn.Module):
    def __init__(self, config, num_patches):
        super().__init__()
        self.use_cls_token = config.use_cls_token
        self.num_input_channels = config.num_input_channels
        if config.use_cls_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, 1, config.d_model))
            num_patches += 1
        self.position_enc = self._init_pe(config, num_patches)
        self.positional_dropout = nn.Identity()

    @staticmethod
    def _init_pe(config, num_patches):
        if config.positional_encoding_type == "random":
            return nn.Parameter(torch.randn(num_patches, config.d_model), requires_grad=True)
        position_enc = torch.zeros(num_patches, config.d_model)
        position = torch.arange(0, num_patches).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, config.d_model, 2) * -(math.log(10000.0) / config.d_model))
        position_enc[:, 0::2] = torch.sin(position * div_term)
        position_enc[:, 1::2] = torch.cos(position * div_term)
        position_enc = position_enc - position_enc.mean()
        position_enc = position_enc / (position_enc.std() * 10)
        return nn.Parameter(position_enc, requires_grad=False)

    def forward(self, patch_input):
        if not self.use_cls_token:
            return self.positional_dropout(patch_input + self.position_enc)
        patch_input = self.positional_dropout(patch_input + self.position_enc[1:, :])
        cls_token = self.cls_token + self.position_enc[:1, :]
        cls_tokens = cls_token.expand(patch_input.shape[0], self.num_input_channels, -1, -1)
        return torch.cat((cls_tokens, patch_input), dim=2)


class PatchTSTEncoder(nn.Module):
    def __init__(self, config, num_patches):
        super().__init__()
        self.embedder = PatchTSTEmbedding(config)
        self.positional_encoder = PatchTSTPositionalEncoding(config, num_patches)
        self.layers = nn.ModuleList(PatchTSTEncoderLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, patch_input):
        hidden_state = self.positional_encoder(self.embedder(patch_input))
        for layer in self.layers:
            hidden_state = layer(hidden_state)
        return hidden_state


class PatchTSTStdScaler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dim, self.keepdim, self.minimum_scale = 1, True, 1e-5

    def forward(self, data, observed_indicator):
        denominator = observed_indicator.sum(self.dim, keepdim=self.keepdim).clamp_min(1.0)
        loc = (data * observed_indicator).sum(self.dim, keepdim=self.keepdim) / denominator
        variance = (((data - loc) * observed_indicator) ** 2).sum(self.dim, keepdim=self.keepdim) / denominator
        scale = torch.sqrt(variance + self.minimum_scale)
        return (data - loc) / scale, loc, scale


class PatchTSTMeanScaler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dim, self.keepdim, self.minimum_scale, self.default_scale = 1, True, 1e-10, None

    def forward(self, data, observed_indicator):
        ts_sum = (data * observed_indicator).abs().sum(self.dim, keepdim=True)
        num_observed = observed_indicator.sum(self.dim, keepdim=True)
        scale = ts_sum / torch.clamp(num_observed, min=1)
        batch_sum = ts_sum.sum(dim=0)
        batch_observations = torch.clamp(num_observed.sum(0), min=1)
        default_scale = torch.squeeze(batch_sum / batch_observations)
        scale = torch.where(num_observed > 0, scale, default_scale)
        scale = torch.clamp(scale, min=self.minimum_scale)
        return data / scale, torch.zeros_like(scale), scale


class PatchTSTScaler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.scaler = PatchTSTMeanScaler(config) if config.scaling == "mean" else PatchTSTStdScaler(config)

    def forward(self, data, observed_indicator):
        return self.scaler(data, observed_indicator)


class PatchTSTPatchify(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.sequence_length = config.context_length
        self.patch_length = config.patch_length
        self.patch_stride = config.patch_stride
        self.num_patches = (max(self.sequence_length, self.patch_length) - self.patch_length) // self.patch_stride + 1
        new_sequence_length = self.patch_length + self.patch_stride * (self.num_patches - 1)
        self.sequence_start = self.sequence_length - new_sequence_length

    def forward(self, past_values):
        if past_values.shape[-2] != self.sequence_length:
            raise ValueError(f"Input sequence length ({past_values.shape[-2]}) doesn't match model configuration "
                             f"({self.sequence_length}).")
        output = past_values[:, self.sequence_start:, :]
        output = output.unfold(dimension=-2, size=self.patch_length, step=self.patch_stride)
        return output.transpose(-2, -3).contiguous()


class PatchTSTModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.scaler = PatchTSTScaler(config)
        self.patchifier = PatchTSTPatchify(config)
        self.masking = nn.Identity()
        self.encoder = PatchTSTEncoder(config, num_patches=self.patchifier.num_patches)

    def forward(self, past_values, past_observed_mask=None):
        if past_observed_mask is None:
            past_observed_mask = torch.ones_like(past_values)
        scaled, loc, scale = self.scaler(past_values, past_observed_mask)
        patched = self.patchifier(scaled)
        return self.encoder(self.masking(patched)), loc, scale


class PatchTSTPredictionHead(nn.Module):
    def __init__(self, config, num_patches):
        super().__init__()
        if not config.share_projection:
            raise ValueError("the twin has HF's shared projection only (its per-channel loop rebinds its input)")
        self.use_cls_token = config.use_cls_token
        self.pooling_type = config.pooling_type
        head_dim = config.d_model if (self.pooling_type or self.use_cls_token) else config.d_model * num_patches
        self.flatten = nn.Flatten(start_dim=2)
        self.projection = nn.Linear(head_dim, config.prediction_length)
        self.dropout = nn.Identity()

    def forward(self, embedding):
        if self.use_cls_token:
            pooled = embedding[:, :, 0, :]
        elif self.pooling_type == "mean":
            pooled = embedding.mean(dim=2)
        elif self.pooling_type == "max":
            pooled = embedding.max(dim=2).values
        else:
            pooled = embedding
        output = self.projection(self.dropout(self.flatten(pooled)))
        return output.transpose(2, 1)


class PatchTSTForPrediction(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = PatchTSTModel(config)
        self.head = PatchTSTPredictionHead(config, self.model.patchifier.num_patches)

    def forward(self, past_values, past_observed_mask=None):
        hidden, loc, scale = self.model(past_values, past_observed_mask)
        y_hat = self.head(hidden)
        return {"prediction_outputs": y_hat * scale + loc, "loc": loc, "scale": scale}


class PatchTSTClassificationHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.use_cls_token = config.use_cls_token
        self.pooling_type = config.pooling_type
        self.flatten = nn.Flatten(start_dim=1)
        self.dropout = nn.Identity()
        self.linear = nn.Linear(config.num_input_channels * config.d_model, config.num_targets)

    def forward(self, embedding):
        if self.use_cls_token:
            pooled = embedding[:, :, 0, :]
        elif self.pooling_type == "mean":
            pooled = embedding.mean(dim=2)
        else:
            pooled = embedding.max(dim=2).values
        return self.linear(self.dropout(self.flatten(pooled)))


class PatchTSTForClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = PatchTSTModel(config)
        self.head = PatchTSTClassificationHead(config)

    def forward(self, past_values, past_observed_mask=None):
        return self.head(self.model(past_values, past_observed_mask)[0])


def patchtst_prediction_small() -> nn.Module:
    """Channel attention, batch norm, pre-norm, sin-cos positions, an embedding per channel, the shared head over
    the flattened patches, the std scaler with a mask of observed values (7 patches of 6, stride 4: the first 2 of 32
    samples dropped)."""
    return PatchTSTForPrediction(PatchTSTConfig(channel_attention=True, share_embedding=False,
                                                pooling_type=None))


def patchtst_classification_small() -> nn.Module:
    """A class token, layer norm, post-norm, random positions, a shared embedding, the mean scaler."""
    return PatchTSTForClassification(PatchTSTConfig(use_cls_token=True, norm_type="layernorm", pre_norm=False,
                                                    positional_encoding_type="random", scaling="mean"))


def calibrate_patchtst(model: nn.Module) -> None:
    """Batch-norm statistics measured on eight seeded series (:func:`calibrate_batch_norms`)."""
    gen = torch.Generator().manual_seed(11)
    calibrate_batch_norms(model, (torch.randn(8, 32, 3, generator=gen) * 2 + 1,
                                  (torch.rand(8, 32, 3, generator=gen) > 0.2).float()))
