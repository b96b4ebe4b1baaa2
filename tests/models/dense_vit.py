"""Vision transformers for other input sizes and dense prediction, with Hugging Face transformers' module
structure and ``state_dict`` names:

* DINOv2 (``Dinov2Model``): ``embeddings.cls_token/mask_token/position_embeddings``,
  ``embeddings.patch_embeddings.projection``, ``encoder.layer.<i>.norm1/attention.attention.query/...
  layer_scale1.lambda1/mlp.fc1``, ``layernorm``. The position embedding is resized to the input's patch grid with
  bicubic ``interpolate`` (``size`` computed from the input's height and width), so every input size runs its own
  resize; LayerScale multiplies each residual branch.
* SegFormer (``SegformerForSemanticSegmentation``): overlapping patch embeddings (strided conv with padding +
  LayerNorm), efficient self-attention whose keys/values come from a strided spatial-reduction conv + LayerNorm,
  Mix-FFN (Linear, 3x3 depthwise conv on the token grid, GELU, Linear), and the all-MLP decode head (per-stage
  Linear, bilinear resize to the first stage's size, concat in reverse, 1x1 conv + BatchNorm + ReLU, classifier).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn


# ---------------------------------------------------------------------------------------------------- DINOv2
class Dinov2PatchEmbeddings(nn.Module):
    def __init__(self, image_size: int, patch_size: int, num_channels: int, hidden_size: int):
        super().__init__()
        self.num_channels = num_channels
        self.num_patches = (image_size // patch_size) ** 2
        self.projection = nn.Conv2d(num_channels, hidden_size, kernel_size=patch_size, stride=patch_size)

    def forward(self, pixel_values):
        if pixel_values.shape[1] != self.num_channels:
            raise ValueError(f"expected {self.num_channels} channels, got {pixel_values.shape[1]}")
        return self.projection(pixel_values).flatten(2).transpose(1, 2)


class Dinov2Embeddings(nn.Module):
    def __init__(self, image_size: int, patch_size: int, num_channels: int, hidden_size: int):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, hidden_size))
        self.mask_token = nn.Parameter(torch.zeros(1, hidden_size))
        self.patch_embeddings = Dinov2PatchEmbeddings(image_size, patch_size, num_channels, hidden_size)
        self.position_embeddings = nn.Parameter(torch.randn(1, self.patch_embeddings.num_patches + 1, hidden_size))
        self.dropout = nn.Dropout(0.0)
        self.patch_size = patch_size

    def interpolate_pos_encoding(self, embeddings, height: int, width: int):
        num_patches = embeddings.shape[1] - 1
        num_positions = self.position_embeddings.shape[1] - 1
        if num_patches == num_positions and height == width:
            return self.position_embeddings
        class_pos_embed = self.position_embeddings[:, :1]
        patch_pos_embed = self.position_embeddings[:, 1:]
        dim = embeddings.shape[-1]
        new_height, new_width = height // self.patch_size, width // self.patch_size
        sqrt_num_positions = int(num_positions ** 0.5)
        patch_pos_embed = patch_pos_embed.reshape(1, sqrt_num_positions, sqrt_num_positions, dim).permute(0, 3, 1, 2)
        target_dtype = patch_pos_embed.dtype
        patch_pos_embed = nn.functional.interpolate(patch_pos_embed.to(torch.float32), size=(new_height, new_width),
                                                    mode="bicubic", align_corners=False).to(dtype=target_dtype)
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((class_pos_embed, patch_pos_embed), dim=1)

    def forward(self, pixel_values):
        batch_size, _, height, width = pixel_values.shape
        embeddings = self.patch_embeddings(pixel_values.to(dtype=self.patch_embeddings.projection.weight.dtype))
        cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        embeddings = torch.cat((cls_tokens, embeddings), dim=1)
        embeddings = embeddings + self.interpolate_pos_encoding(embeddings, height, width)
        return self.dropout(embeddings)


class Dinov2SelfAttention(nn.Module):
    def __init__(self, hidden_size: int, heads: int):
        super().__init__()
        self.num_attention_heads, self.attention_head_size = heads, hidden_size // heads
        self.scaling = self.attention_head_size ** -0.5
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states):
        new_shape = hidden_states.shape[0], -1, self.num_attention_heads, self.attention_head_size
        key = self.key(hidden_states).view(*new_shape).transpose(1, 2)
        value = self.value(hidden_states).view(*new_shape).transpose(1, 2)
        query = self.query(hidden_states).view(*new_shape).transpose(1, 2)
        weights = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
        weights = nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
        context = torch.matmul(weights, value).transpose(1, 2).contiguous()
        return context.reshape(context.size()[:-2] + (self.num_attention_heads * self.attention_head_size,))


class Dinov2SelfOutput(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states):
        return self.dropout(self.dense(hidden_states))


class Dinov2Attention(nn.Module):
    def __init__(self, hidden_size: int, heads: int):
        super().__init__()
        self.attention = Dinov2SelfAttention(hidden_size, heads)
        self.output = Dinov2SelfOutput(hidden_size)

    def forward(self, hidden_states):
        return self.output(self.attention(hidden_states))


class Dinov2LayerScale(nn.Module):
    def __init__(self, hidden_size: int, layerscale_value: float = 1.0):
        super().__init__()
        self.lambda1 = nn.Parameter(layerscale_value * torch.ones(hidden_size))

    def forward(self, hidden_state):
        return hidden_state * self.lambda1


class Dinov2MLP(nn.Module):
    def __init__(self, hidden_size: int, mlp_ratio: int):
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, hidden_size * mlp_ratio)
        self.activation = nn.GELU()
        self.fc2 = nn.Linear(hidden_size * mlp_ratio, hidden_size)

    def forward(self, hidden_state):
        return self.fc2(self.activation(self.fc1(hidden_state)))


class Dinov2Layer(nn.Module):
    def __init__(self, hidden_size: int, heads: int, mlp_ratio: int, eps: float = 1e-6):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, eps=eps)
        self.attention = Dinov2Attention(hidden_size, heads)
        self.layer_scale1 = Dinov2LayerScale(hidden_size)
        self.drop_path = nn.Identity()
        self.norm2 = nn.LayerNorm(hidden_size, eps=eps)
        self.mlp = Dinov2MLP(hidden_size, mlp_ratio)
        self.layer_scale2 = Dinov2LayerScale(hidden_size)

    def forward(self, hidden_states):
        hidden_states = self.drop_path(self.layer_scale1(self.attention(self.norm1(hidden_states)))) + hidden_states
        layer_output = self.layer_scale2(self.mlp(self.norm2(hidden_states)))
        return self.drop_path(layer_output) + hidden_states


class Dinov2Encoder(nn.Module):
    def __init__(self, hidden_size, heads, mlp_ratio, layers):
        super().__init__()
        self.layer = nn.ModuleList(Dinov2Layer(hidden_size, heads, mlp_ratio) for _ in range(layers))

    def forward(self, hidden_states):
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states)
        return hidden_states


class Dinov2Model(nn.Module):
    """Returns ``(last_hidden_state, pooler_output)``: pooled = the normalised CLS token."""

    def __init__(self, image_size: int = 16, patch_size: int = 4, num_channels: int = 3, hidden_size: int = 16,
                 heads: int = 2, mlp_ratio: int = 2, layers: int = 2):
        super().__init__()
        self.embeddings = Dinov2Embeddings(image_size, patch_size, num_channels, hidden_size)
        self.encoder = Dinov2Encoder(hidden_size, heads, mlp_ratio, layers)
        self.layernorm = nn.LayerNorm(hidden_size, eps=1e-6)

    def forward(self, pixel_values):
        sequence_output = self.layernorm(self.encoder(self.embeddings(pixel_values)))
        return sequence_output, sequence_output[:, 0, :]


def dinov2_small() -> Dinov2Model:
    """Pretrained at 16x16 in 4x4 patches (a 4x4 position grid); hidden 16, two heads, two layers."""
    return Dinov2Model()


# ---------------------------------------------------------------------------------------------------- SegFormer
class SegformerOverlapPatchEmbeddings(nn.Module):
    def __init__(self, patch_size: int, stride: int, num_channels: int, hidden_size: int):
        super().__init__()
        self.proj = nn.Conv2d(num_channels, hidden_size, kernel_size=patch_size, stride=stride,
                              padding=patch_size // 2)
        self.layer_norm = nn.LayerNorm(hidden_size)

    def forward(self, pixel_values):
        embeddings = self.proj(pixel_values)
        _, _, height, width = embeddings.shape
        embeddings = self.layer_norm(embeddings.flatten(2).transpose(1, 2))
        return embeddings, height, width


class SegformerEfficientSelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_attention_heads: int, sequence_reduction_ratio: int):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.all_head_size = hidden_size
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(0.0)
        self.sr_ratio = sequence_reduction_ratio
        if sequence_reduction_ratio > 1:
            self.sr = nn.Conv2d(hidden_size, hidden_size, kernel_size=sequence_reduction_ratio,
                                stride=sequence_reduction_ratio)
            self.layer_norm = nn.LayerNorm(hidden_size)

    def transpose_for_scores(self, hidden_states):
        new_shape = hidden_states.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return hidden_states.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, height: int, width: int):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        if self.sr_ratio > 1:
            batch_size, seq_len, num_channels = hidden_states.shape
            hidden_states = hidden_states.permute(0, 2, 1).reshape(batch_size, num_channels, height, width)
            hidden_states = self.sr(hidden_states)
            hidden_states = hidden_states.reshape(batch_size, num_channels, -1).permute(0, 2, 1)
            hidden_states = self.layer_norm(hidden_states)
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class SegformerSelfOutput(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states):
        return self.dropout(self.dense(hidden_states))


class SegformerAttention(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, sequence_reduction_ratio):
        super().__init__()
        self.self = SegformerEfficientSelfAttention(hidden_size, num_attention_heads, sequence_reduction_ratio)
        self.output = SegformerSelfOutput(hidden_size)

    def forward(self, hidden_states, height, width):
        return self.output(self.self(hidden_states, height, width))


class SegformerDWConv(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 3, 1, 1, bias=True, groups=dim)

    def forward(self, hidden_states, height, width):
        batch_size, seq_len, num_channels = hidden_states.shape
        hidden_states = hidden_states.transpose(1, 2).view(batch_size, num_channels, height, width)
        return self.dwconv(hidden_states).flatten(2).transpose(1, 2)


class SegformerMixFFN(nn.Module):
    def __init__(self, in_features: int, hidden_features: int):
        super().__init__()
        self.dense1 = nn.Linear(in_features, hidden_features)
        self.dwconv = SegformerDWConv(hidden_features)
        self.intermediate_act_fn = nn.GELU()
        self.dense2 = nn.Linear(hidden_features, in_features)
        self.dropout = nn.Dropout(0.0)

    def forward(self, hidden_states, height, width):
        hidden_states = self.intermediate_act_fn(self.dwconv(self.dense1(hidden_states), height, width))
        return self.dropout(self.dense2(self.dropout(hidden_states)))


class SegformerLayer(nn.Module):
    def __init__(self, hidden_size, num_attention_heads, sequence_reduction_ratio, mlp_ratio):
        super().__init__()
        self.layer_norm_1 = nn.LayerNorm(hidden_size)
        self.attention = SegformerAttention(hidden_size, num_attention_heads, sequence_reduction_ratio)
        self.drop_path = nn.Identity()
        self.layer_norm_2 = nn.LayerNorm(hidden_size)
        self.mlp = SegformerMixFFN(hidden_size, int(hidden_size * mlp_ratio))

    def forward(self, hidden_states, height, width):
        hidden_states = self.drop_path(self.attention(self.layer_norm_1(hidden_states), height, width)) + hidden_states
        mlp_output = self.mlp(self.layer_norm_2(hidden_states), height, width)
        return self.drop_path(mlp_output) + hidden_states


class SegformerEncoder(nn.Module):
    def __init__(self, num_channels, hidden_sizes, depths, heads, sr_ratios, patch_sizes, strides, mlp_ratio):
        super().__init__()
        self.patch_embeddings = nn.ModuleList(
            SegformerOverlapPatchEmbeddings(patch_sizes[i], strides[i], num_channels if i == 0 else hidden_sizes[i - 1],
                                            hidden_sizes[i]) for i in range(len(depths)))
        self.block = nn.ModuleList(
            nn.ModuleList(SegformerLayer(hidden_sizes[i], heads[i], sr_ratios[i], mlp_ratio) for _ in range(depths[i]))
            for i in range(len(depths)))
        self.layer_norm = nn.ModuleList(nn.LayerNorm(hidden_sizes[i]) for i in range(len(depths)))

    def forward(self, pixel_values):
        batch_size = pixel_values.shape[0]
        all_hidden_states = ()
        hidden_states = pixel_values
        for embedding_layer, block_layer, norm_layer in zip(self.patch_embeddings, self.block, self.layer_norm):
            hidden_states, height, width = embedding_layer(hidden_states)
            for blk in block_layer:
                hidden_states = blk(hidden_states, height, width)
            hidden_states = norm_layer(hidden_states)
            hidden_states = hidden_states.reshape(batch_size, height, width, -1).permute(0, 3, 1, 2).contiguous()
            all_hidden_states = all_hidden_states + (hidden_states,)
        return all_hidden_states


class SegformerModel(nn.Module):
    def __init__(self, **config):
        super().__init__()
        self.encoder = SegformerEncoder(**config)

    def forward(self, pixel_values):
        return self.encoder(pixel_values)


class SegformerMLP(nn.Module):
    def __init__(self, input_dim: int, decoder_hidden_size: int):
        super().__init__()
        self.proj = nn.Linear(input_dim, decoder_hidden_size)

    def forward(self, hidden_states):
        return self.proj(hidden_states.flatten(2).transpose(1, 2))


class SegformerDecodeHead(nn.Module):
    def __init__(self, hidden_sizes, decoder_hidden_size, num_labels):
        super().__init__()
        self.linear_c = nn.ModuleList(SegformerMLP(h, decoder_hidden_size) for h in hidden_sizes)
        self.linear_fuse = nn.Conv2d(decoder_hidden_size * len(hidden_sizes), decoder_hidden_size, 1, bias=False)
        self.batch_norm = nn.BatchNorm2d(decoder_hidden_size)
        self.activation = nn.ReLU()
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Conv2d(decoder_hidden_size, num_labels, kernel_size=1)

    def forward(self, encoder_hidden_states):
        batch_size = encoder_hidden_states[-1].shape[0]
        all_hidden_states = ()
        for encoder_hidden_state, mlp in zip(encoder_hidden_states, self.linear_c):
            height, width = encoder_hidden_state.shape[2], encoder_hidden_state.shape[3]
            encoder_hidden_state = mlp(encoder_hidden_state).permute(0, 2, 1)
            encoder_hidden_state = encoder_hidden_state.reshape(batch_size, -1, height, width)
            encoder_hidden_state = nn.functional.interpolate(encoder_hidden_state,
                                                             size=encoder_hidden_states[0].size()[2:],
                                                             mode="bilinear", align_corners=False)
            all_hidden_states += (encoder_hidden_state,)
        hidden_states = self.linear_fuse(torch.cat(all_hidden_states[::-1], dim=1))
        hidden_states = self.dropout(self.activation(self.batch_norm(hidden_states)))
        return self.classifier(hidden_states)


class SegformerForSemanticSegmentation(nn.Module):
    def __init__(self, hidden_sizes: Sequence[int] = (8, 16, 24, 32), depths: Sequence[int] = (1, 1, 1, 1),
                 heads: Sequence[int] = (1, 2, 3, 4), sr_ratios: Sequence[int] = (8, 4, 2, 1),
                 patch_sizes: Sequence[int] = (7, 3, 3, 3), strides: Sequence[int] = (4, 2, 2, 2),
                 mlp_ratio: int = 2, decoder_hidden_size: int = 16, num_labels: int = 5):
        super().__init__()
        self.segformer = SegformerModel(num_channels=3, hidden_sizes=hidden_sizes, depths=depths, heads=heads,
                                        sr_ratios=sr_ratios, patch_sizes=patch_sizes, strides=strides,
                                        mlp_ratio=mlp_ratio)
        self.decode_head = SegformerDecodeHead(hidden_sizes, decoder_hidden_size, num_labels)

    def forward(self, pixel_values):
        return self.decode_head(self.segformer(pixel_values))


def segformer_small() -> SegformerForSemanticSegmentation:
    """MiT-b0's four stages (patch 7/3/3/3, strides 4/2/2/2, reduction 8/4/2/1) at widths 8-32, one layer each."""
    return SegformerForSemanticSegmentation()
