"""HF transformers' MobileViTV2 image classifier (``modeling_mobilevitv2.py``) at test size, with its module
structure and ``state_dict`` names: MobileNetV2 inverted residuals, then MobileViTV2 layers whose maps are cut into
2x2 patches by ``F.unfold`` and put back by ``F.fold`` (a map of odd size loses its last row or column to the
unfold and gets zeros there from the fold, as in HF), linear self-attention (a 1x1 conv to one query channel plus
keys and values, ``torch.split``, softmax over the patches, a context vector summed over them, ``relu(values)``
times it), ``GroupNorm(1)`` as the layer norm, SiLU."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class MobileViTV2Config:
    num_channels: int = 3
    patch_size: int = 2
    expand_ratio: float = 2.0
    conv_kernel_size: int = 3
    layer_norm_eps: float = 1e-5
    n_attn_blocks: list = field(default_factory=lambda: [1, 1, 1])
    base_attn_unit_dims: list = field(default_factory=lambda: [128, 192, 256])
    width_multiplier: float = 0.25
    ffn_multiplier: int = 2
    num_labels: int = 5


def make_divisible(value, divisor=8, min_value=None):
    min_value = min_value or divisor
    new_value = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if new_value < 0.9 * value:
        new_value += divisor
    return int(new_value)


def clip(value, min_val=float("-inf"), max_val=float("inf")):
    return max(min_val, min(max_val, value))


class MobileViTV2ConvLayer(nn.Module):
    def __init__(self, config, in_channels, out_channels, kernel_size, stride=1, groups=1, bias=False, dilation=1,
                 use_normalization=True, use_activation=True):
        super().__init__()
        padding = int((kernel_size - 1) / 2) * dilation
        self.convolution = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                     dilation=dilation, groups=groups, bias=bias)
        self.normalization = nn.BatchNorm2d(out_channels, eps=1e-5, momentum=0.1) if use_normalization else None
        self.activation = nn.SiLU() if use_activation else None

    def forward(self, features):
        features = self.convolution(features)
        if self.normalization is not None:
            features = self.normalization(features)
        if self.activation is not None:
            features = self.activation(features)
        return features


class MobileViTV2InvertedResidual(nn.Module):
    def __init__(self, config, in_channels, out_channels, stride, dilation=1):
        super().__init__()
        expanded = make_divisible(int(round(in_channels * config.expand_ratio)), 8)
        self.use_residual = stride == 1 and in_channels == out_channels
        self.expand_1x1 = MobileViTV2ConvLayer(config, in_channels, expanded, kernel_size=1)
        self.conv_3x3 = MobileViTV2ConvLayer(config, expanded, expanded, kernel_size=3, stride=stride,
                                             groups=expanded, dilation=dilation)
        self.reduce_1x1 = MobileViTV2ConvLayer(config, expanded, out_channels, kernel_size=1, use_activation=False)

    def forward(self, features):
        out = self.reduce_1x1(self.conv_3x3(self.expand_1x1(features)))
        return features + out if self.use_residual else out


class MobileViTV2MobileNetLayer(nn.Module):
    def __init__(self, config, in_channels, out_channels, stride=1, num_stages=1):
        super().__init__()
        self.layer = nn.ModuleList()
        for i in range(num_stages):
            self.layer.append(MobileViTV2InvertedResidual(config, in_channels, out_channels,
                                                          stride=stride if i == 0 else 1))
            in_channels = out_channels

    def forward(self, features):
        for layer in self.layer:
            features = layer(features)
        return features


class MobileViTV2LinearSelfAttention(nn.Module):
    def __init__(self, config, embed_dim):
        super().__init__()
        self.qkv_proj = MobileViTV2ConvLayer(config, embed_dim, 1 + 2 * embed_dim, kernel_size=1, bias=True,
                                             use_normalization=False, use_activation=False)
        self.attn_dropout = nn.Dropout(p=0.0)
        self.out_proj = MobileViTV2ConvLayer(config, embed_dim, embed_dim, kernel_size=1, bias=True,
                                             use_normalization=False, use_activation=False)
        self.embed_dim = embed_dim

    def forward(self, hidden_states):
        qkv = self.qkv_proj(hidden_states)
        query, key, value = torch.split(qkv, split_size_or_sections=[1, self.embed_dim, self.embed_dim], dim=1)
        context_scores = self.attn_dropout(torch.nn.functional.softmax(query, dim=-1))
        context_vector = torch.sum(key * context_scores, dim=-1, keepdim=True)
        return self.out_proj(torch.nn.functional.relu(value) * context_vector.expand_as(value))


class MobileViTV2FFN(nn.Module):
    def __init__(self, config, embed_dim, ffn_latent_dim):
        super().__init__()
        self.conv1 = MobileViTV2ConvLayer(config, embed_dim, ffn_latent_dim, kernel_size=1, bias=True,
                                          use_normalization=False, use_activation=True)
        self.dropout1 = nn.Dropout(0.0)
        self.conv2 = MobileViTV2ConvLayer(config, ffn_latent_dim, embed_dim, kernel_size=1, bias=True,
                                          use_normalization=False, use_activation=False)
        self.dropout2 = nn.Dropout(0.0)

    def forward(self, hidden_states):
        return self.dropout2(self.conv2(self.dropout1(self.conv1(hidden_states))))


class MobileViTV2TransformerLayer(nn.Module):
    def __init__(self, config, embed_dim, ffn_latent_dim):
        super().__init__()
        self.layernorm_before = nn.GroupNorm(num_groups=1, num_channels=embed_dim, eps=config.layer_norm_eps)
        self.attention = MobileViTV2LinearSelfAttention(config, embed_dim)
        self.dropout1 = nn.Dropout(p=0.0)
        self.layernorm_after = nn.GroupNorm(num_groups=1, num_channels=embed_dim, eps=config.layer_norm_eps)
        self.ffn = MobileViTV2FFN(config, embed_dim, ffn_latent_dim)

    def forward(self, hidden_states):
        hidden_states = self.attention(self.layernorm_before(hidden_states)) + hidden_states
        return self.ffn(self.layernorm_after(hidden_states)) + hidden_states


class MobileViTV2Transformer(nn.Module):
    def __init__(self, config, n_layers, d_model):
        super().__init__()
        ffn_dim = int((config.ffn_multiplier * d_model // 16) * 16)
        self.layer = nn.ModuleList(MobileViTV2TransformerLayer(config, d_model, ffn_dim) for _ in range(n_layers))

    def forward(self, hidden_states):
        for layer in self.layer:
            hidden_states = layer(hidden_states)
        return hidden_states


class MobileViTV2Layer(nn.Module):
    def __init__(self, config, in_channels, out_channels, attn_unit_dim, n_attn_blocks=2, dilation=1, stride=2):
        super().__init__()
        self.patch_width = self.patch_height = config.patch_size
        if stride == 2:
            self.downsampling_layer = MobileViTV2InvertedResidual(config, in_channels, out_channels, stride=stride)
            in_channels = out_channels
        else:
            self.downsampling_layer = None
        self.conv_kxk = MobileViTV2ConvLayer(config, in_channels, in_channels, kernel_size=config.conv_kernel_size,
                                             groups=in_channels)
        self.conv_1x1 = MobileViTV2ConvLayer(config, in_channels, attn_unit_dim, kernel_size=1,
                                             use_normalization=False, use_activation=False)
        self.transformer = MobileViTV2Transformer(config, d_model=attn_unit_dim, n_layers=n_attn_blocks)
        self.layernorm = nn.GroupNorm(num_groups=1, num_channels=attn_unit_dim, eps=config.layer_norm_eps)
        self.conv_projection = MobileViTV2ConvLayer(config, attn_unit_dim, in_channels, kernel_size=1,
                                                    use_normalization=True, use_activation=False)

    def unfolding(self, feature_map):
        batch_size, in_channels, height, width = feature_map.shape
        kernel = (self.patch_height, self.patch_width)
        patches = nn.functional.unfold(feature_map, kernel_size=kernel, stride=kernel)
        return patches.reshape(batch_size, in_channels, self.patch_height * self.patch_width, -1), (height, width)

    def folding(self, patches, output_size):
        batch_size, in_dim, patch_size, n_patches = patches.shape
        patches = patches.reshape(batch_size, in_dim * patch_size, n_patches)
        kernel = (self.patch_height, self.patch_width)
        return nn.functional.fold(patches, output_size=output_size, kernel_size=kernel, stride=kernel)

    def forward(self, features):
        if self.downsampling_layer:
            features = self.downsampling_layer(features)
        features = self.conv_1x1(self.conv_kxk(features))
        patches, output_size = self.unfolding(features)
        patches = self.layernorm(self.transformer(patches))
        return self.conv_projection(self.folding(patches, output_size))


class MobileViTV2Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        w = config.width_multiplier
        dims = [make_divisible(clip(32 * w, 16, 64), divisor=8, min_value=16), make_divisible(64 * w, divisor=16)]
        dims += [make_divisible(c * w, divisor=8) for c in (128, 256, 384, 512)]
        self.layer = nn.ModuleList([
            MobileViTV2MobileNetLayer(config, dims[0], dims[1], stride=1, num_stages=1),
            MobileViTV2MobileNetLayer(config, dims[1], dims[2], stride=2, num_stages=2),
        ])
        for i in range(3):
            self.layer.append(MobileViTV2Layer(
                config, dims[2 + i], dims[3 + i],
                attn_unit_dim=make_divisible(config.base_attn_unit_dims[i] * w, divisor=8),
                n_attn_blocks=config.n_attn_blocks[i]))

    def forward(self, hidden_states):
        for layer in self.layer:
            hidden_states = layer(hidden_states)
        return hidden_states


class MobileViTV2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        stem = make_divisible(clip(32 * config.width_multiplier, 16, 64), divisor=8, min_value=16)
        self.conv_stem = MobileViTV2ConvLayer(config, config.num_channels, stem, kernel_size=3, stride=2)
        self.encoder = MobileViTV2Encoder(config)

    def forward(self, pixel_values):
        return torch.mean(self.encoder(self.conv_stem(pixel_values)), dim=[-2, -1], keepdim=False)


class MobileViTV2ForImageClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.mobilevitv2 = MobileViTV2Model(config)
        self.classifier = nn.Linear(make_divisible(512 * config.width_multiplier, divisor=8), config.num_labels)

    def forward(self, pixel_values):
        return self.classifier(self.mobilevitv2(pixel_values))


def mobilevitv2_small() -> nn.Module:
    """Width 0.25 (channels 16, 16, 32, 64, 96, 128; attention units 32, 48, 64), one attention block per layer."""
    return MobileViTV2ForImageClassification(MobileViTV2Config())
