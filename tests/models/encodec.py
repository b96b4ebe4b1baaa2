"""A twin of transformers' EnCodec autoencoder (``EncodecEncoder`` / ``EncodecDecoder``: module structure and
``state_dict`` names, ``encoder.layers.0.conv.parametrizations.weight.original0``, ``encoder.layers.1.block.1.conv``,
``encoder.layers.<i>.lstm.weight_ih_l0``, ``decoder.layers.<i>.conv`` transposed), small sizes; the residual
vector quantizer between them is left out (encoder -> decoder directly).

Stresses: weight norm as ``torch.nn.utils.parametrizations.weight_norm``; the causal padding arithmetic done on
0-d tensor buffers (``stride``, ``kernel_size``, ``padding_total``) and the input's length:
``_get_extra_padding_for_conv1d`` divides, ``torch.ceil``s and casts to int64, and the tensors are handed to
``F.pad`` (``mode="reflect"``, with ``max`` of two tensors and the short-input extra pad); transposed convs
trimmed by ``math.ceil(padding_total * trim_right_ratio)``; a two-layer LSTM over ``(T, B, C)`` with a residual;
ELU; the decoded audio cropped to the input's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


@dataclass
class EncodecConfig:
    audio_channels: int = 1
    num_filters: int = 4
    upsampling_ratios: Sequence[int] = (4, 2)
    num_residual_layers: int = 1
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    compress: int = 2
    kernel_size: int = 7
    last_kernel_size: int = 7
    hidden_size: int = 8
    num_lstm_layers: int = 2
    use_causal_conv: bool = True
    pad_mode: str = "reflect"
    norm_type: str = "weight_norm"
    trim_right_ratio: float = 1.0
    use_conv_shortcut: bool = True


class EncodecConv1d(nn.Module):
    def __init__(self, config, in_channels, out_channels, kernel_size, stride=1, dilation=1):
        super().__init__()
        self.causal, self.pad_mode, self.norm_type = config.use_causal_conv, config.pad_mode, config.norm_type
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride, dilation=dilation)
        if self.norm_type == "weight_norm":
            self.conv = weight_norm(self.conv)
        elif self.norm_type == "time_group_norm":
            self.norm = nn.GroupNorm(1, out_channels)
        kernel_size = self.conv.kernel_size[0]
        stride = torch.tensor(self.conv.stride[0], dtype=torch.int64)
        dilation = self.conv.dilation[0]
        kernel_size = torch.tensor((kernel_size - 1) * dilation + 1, dtype=torch.int64)
        self.register_buffer("stride", stride, persistent=False)
        self.register_buffer("kernel_size", kernel_size, persistent=False)
        self.register_buffer("padding_total", kernel_size - stride, persistent=False)

    def _get_extra_padding_for_conv1d(self, hidden_states):
        length = hidden_states.shape[-1]
        n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
        n_frames = torch.ceil(n_frames).to(torch.int64) - 1
        ideal_length = n_frames * self.stride + self.kernel_size - self.padding_total
        return ideal_length - length

    @staticmethod
    def _pad1d(hidden_states, paddings, mode="zero", value=0.0):
        length = hidden_states.shape[-1]
        padding_left, padding_right = paddings
        if not mode == "reflect":
            return nn.functional.pad(hidden_states, paddings, mode, value)
        max_pad = max(padding_left, padding_right)
        extra_pad = 0
        if length <= max_pad:
            extra_pad = max_pad - length + 1
            hidden_states = nn.functional.pad(hidden_states, (0, extra_pad))
        padded = nn.functional.pad(hidden_states, paddings, mode, value)
        end = padded.shape[-1] - extra_pad
        return padded[..., :end]

    def forward(self, hidden_states):
        extra_padding = self._get_extra_padding_for_conv1d(hidden_states)
        if self.causal:
            hidden_states = self._pad1d(hidden_states, (self.padding_total, extra_padding), mode=self.pad_mode)
        else:
            padding_right = self.padding_total // 2
            padding_left = self.padding_total - padding_right
            hidden_states = self._pad1d(hidden_states, (padding_left, padding_right + extra_padding),
                                        mode=self.pad_mode)
        hidden_states = self.conv(hidden_states)
        if self.norm_type == "time_group_norm":
            hidden_states = self.norm(hidden_states)
        return hidden_states


class EncodecConvTranspose1d(nn.Module):
    def __init__(self, config, in_channels, out_channels, kernel_size, stride=1):
        super().__init__()
        self.causal, self.trim_right_ratio = config.use_causal_conv, config.trim_right_ratio
        self.norm_type = config.norm_type
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride)
        if config.norm_type == "weight_norm":
            self.conv = weight_norm(self.conv)
        elif config.norm_type == "time_group_norm":
            self.norm = nn.GroupNorm(1, out_channels)

    def forward(self, hidden_states):
        kernel_size, stride = self.conv.kernel_size[0], self.conv.stride[0]
        padding_total = kernel_size - stride
        hidden_states = self.conv(hidden_states)
        if self.norm_type == "time_group_norm":
            hidden_states = self.norm(hidden_states)
        if self.causal:
            padding_right = math.ceil(padding_total * self.trim_right_ratio)
        else:
            padding_right = padding_total // 2
        padding_left = padding_total - padding_right
        end = hidden_states.shape[-1] - padding_right
        return hidden_states[..., padding_left:end]


class EncodecLSTM(nn.Module):
    def __init__(self, config, dimension):
        super().__init__()
        self.lstm = nn.LSTM(dimension, dimension, config.num_lstm_layers)

    def forward(self, hidden_states):
        hidden_states = hidden_states.permute(2, 0, 1)
        hidden_states = self.lstm(hidden_states)[0] + hidden_states
        return hidden_states.permute(1, 2, 0)


class EncodecResnetBlock(nn.Module):
    def __init__(self, config, dim, dilations):
        super().__init__()
        kernel_sizes = (config.residual_kernel_size, 1)
        hidden = dim // config.compress
        block = []
        for i, (kernel_size, dilation) in enumerate(zip(kernel_sizes, dilations)):
            in_chs = dim if i == 0 else hidden
            out_chs = dim if i == len(kernel_sizes) - 1 else hidden
            block += [nn.ELU(), EncodecConv1d(config, in_chs, out_chs, kernel_size, dilation=dilation)]
        self.block = nn.ModuleList(block)
        self.shortcut = EncodecConv1d(config, dim, dim, kernel_size=1) if config.use_conv_shortcut else nn.Identity()

    def forward(self, hidden_states):
        residual = hidden_states
        for layer in self.block:
            hidden_states = layer(hidden_states)
        return self.shortcut(residual) + hidden_states


class EncodecEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        model = [EncodecConv1d(config, config.audio_channels, config.num_filters, config.kernel_size)]
        scaling = 1
        for ratio in reversed(config.upsampling_ratios):
            current_scale = scaling * config.num_filters
            for j in range(config.num_residual_layers):
                model += [EncodecResnetBlock(config, current_scale, [config.dilation_growth_rate ** j, 1])]
            model += [nn.ELU(), EncodecConv1d(config, current_scale, current_scale * 2, kernel_size=ratio * 2,
                                              stride=ratio)]
            scaling *= 2
        model += [EncodecLSTM(config, scaling * config.num_filters), nn.ELU(),
                  EncodecConv1d(config, scaling * config.num_filters, config.hidden_size, config.last_kernel_size)]
        self.layers = nn.ModuleList(model)

    def forward(self, hidden_states):
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states


class EncodecDecoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        scaling = int(2 ** len(config.upsampling_ratios))
        model = [EncodecConv1d(config, config.hidden_size, scaling * config.num_filters, config.kernel_size),
                 EncodecLSTM(config, scaling * config.num_filters)]
        for ratio in config.upsampling_ratios:
            current_scale = scaling * config.num_filters
            model += [nn.ELU(), EncodecConvTranspose1d(config, current_scale, current_scale // 2,
                                                       kernel_size=ratio * 2, stride=ratio)]
            for j in range(config.num_residual_layers):
                model += [EncodecResnetBlock(config, current_scale // 2, (config.dilation_growth_rate ** j, 1))]
            scaling //= 2
        model += [nn.ELU(), EncodecConv1d(config, config.num_filters, config.audio_channels, config.last_kernel_size)]
        self.layers = nn.ModuleList(model)

    def forward(self, hidden_states):
        for layer in self.layers:
            hidden_states = layer(hidden_states)
        return hidden_states


class EncodecAutoencoder(nn.Module):
    """``forward(input_values (B, C, T))`` -> ``(audio_values (B, C, T), embeddings (B, hidden, frames))``: the
    decoder's output cropped to the input's length, as ``EncodecModel.decode`` crops to the padding mask."""

    def __init__(self, config: EncodecConfig = EncodecConfig()):
        super().__init__()
        self.encoder = EncodecEncoder(config)
        self.decoder = EncodecDecoder(config)

    def forward(self, input_values):
        embeddings = self.encoder(input_values)
        audio_values = self.decoder(embeddings)
        return audio_values[..., : input_values.shape[-1]], embeddings


def encodec_small() -> nn.Module:
    return EncodecAutoencoder()


def encodec_non_causal_small() -> nn.Module:
    """The 48 kHz model's convs: centred padding (``padding_total // 2`` on tensors), time group norm."""
    return EncodecAutoencoder(EncodecConfig(use_causal_conv=False, norm_type="time_group_norm"))
