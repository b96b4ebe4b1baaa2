"""Deformable DETR's encoder (``transformers/models/deformable_detr/modeling_deformable_detr.py``: input
projections, sine positions from the pixel mask, level embeddings, ``DeformableDetrEncoder`` with
``DeformableDetrMultiscaleDeformableAttention`` on the pure-PyTorch ``multi_scale_deformable_attention`` path, the
one RT-DETR shares) with HF's module structure and ``state_dict`` names (``input_proj.<l>.0``/``.1``,
``level_embed``, ``encoder.layers.<i>.self_attn.sampling_offsets``, ``.attention_weights``, ``.value_proj``,
``.output_proj``, ``.self_attn_layer_norm``, ``.fc1``, ``.final_layer_norm``), over a two-conv stand-in backbone.

Stresses: multi-scale features flattened and concatenated, spatial shapes as a Python list and as a ``long``
tensor (``torch.as_tensor``), ``level_start_index`` from ``prod``/``cumsum``; reference points from ``linspace`` +
``meshgrid`` per level divided by valid ratios (sums of the mask); sampling offsets from a Linear divided by the
(width, height) normaliser; softmax over levels x points; ``F.grid_sample(bilinear, zeros, align_corners=False)``
per level over values split by level, with sampling points outside the map; the pixel mask resized by nearest
interpolation; a sine position embedding from mask ``cumsum``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def multi_scale_deformable_attention(value, value_spatial_shapes, sampling_locations, attention_weights):
    batch_size, _, num_heads, hidden_dim = value.shape
    _, num_queries, num_heads, num_levels, num_points, _ = sampling_locations.shape
    value_list = value.split([height * width for height, width in value_spatial_shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampling_value_list = []
    for level_id, (height, width) in enumerate(value_spatial_shapes):
        value_l_ = value_list[level_id].flatten(2).transpose(1, 2).reshape(batch_size * num_heads, hidden_dim, height,
                                                                          width)
        sampling_grid_l_ = sampling_grids[:, :, :, level_id].transpose(1, 2).flatten(0, 1)
        sampling_value_l_ = F.grid_sample(value_l_, sampling_grid_l_, mode="bilinear", padding_mode="zeros",
                                          align_corners=False)
        sampling_value_list.append(sampling_value_l_)
    attention_weights = attention_weights.transpose(1, 2).reshape(batch_size * num_heads, 1, num_queries,
                                                                  num_levels * num_points)
    output = (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights).sum(-1).view(
        batch_size, num_heads * hidden_dim, num_queries)
    return output.transpose(1, 2).contiguous()


class DeformableDetrMultiscaleDeformableAttention(nn.Module):
    def __init__(self, d_model: int, n_levels: int, n_heads: int, n_points: int):
        super().__init__()
        self.d_model, self.n_levels, self.n_heads, self.n_points = d_model, n_levels, n_heads, n_points
        self.sampling_offsets = nn.Linear(d_model, n_heads * n_levels * n_points * 2)
        self.attention_weights = nn.Linear(d_model, n_heads * n_levels * n_points)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)

    def forward(self, hidden_states, attention_mask, position_embeddings, reference_points, spatial_shapes,
                spatial_shapes_list):
        hidden_states = hidden_states + position_embeddings
        batch_size, num_queries, _ = hidden_states.shape
        sequence_length = hidden_states.shape[1]
        value = self.value_proj(hidden_states - position_embeddings)
        value = value.masked_fill(~attention_mask[..., None], float(0))
        value = value.view(batch_size, sequence_length, self.n_heads, self.d_model // self.n_heads)
        sampling_offsets = self.sampling_offsets(hidden_states).view(batch_size, num_queries, self.n_heads,
                                                                     self.n_levels, self.n_points, 2)
        attention_weights = self.attention_weights(hidden_states).view(batch_size, num_queries, self.n_heads,
                                                                       self.n_levels * self.n_points)
        attention_weights = F.softmax(attention_weights, -1).view(batch_size, num_queries, self.n_heads,
                                                                  self.n_levels, self.n_points)
        offset_normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
        sampling_locations = (reference_points[:, :, None, :, None, :]
                              + sampling_offsets / offset_normalizer[None, None, None, :, None, :])
        output = multi_scale_deformable_attention(value, spatial_shapes_list, sampling_locations, attention_weights)
        return self.output_proj(output)


class DeformableDetrEncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_levels: int, n_heads: int, n_points: int, ffn_dim: int):
        super().__init__()
        self.self_attn = DeformableDetrMultiscaleDeformableAttention(d_model, n_levels, n_heads, n_points)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.activation_fn = nn.ReLU()
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, hidden_states, attention_mask, position_embeddings, reference_points, spatial_shapes,
                spatial_shapes_list):
        residual = hidden_states
        hidden_states = self.self_attn(hidden_states, attention_mask, position_embeddings, reference_points,
                                       spatial_shapes, spatial_shapes_list)
        hidden_states = self.self_attn_layer_norm(residual + hidden_states)
        residual = hidden_states
        hidden_states = self.fc2(self.activation_fn(self.fc1(hidden_states)))
        return self.final_layer_norm(residual + hidden_states)


class DeformableDetrEncoder(nn.Module):
    def __init__(self, layers: int, **layer):
        super().__init__()
        self.layers = nn.ModuleList(DeformableDetrEncoderLayer(**layer) for _ in range(layers))

    @staticmethod
    def get_reference_points(spatial_shapes, valid_ratios, device):
        reference_points_list = []
        for level, (height, width) in enumerate(spatial_shapes):
            ref_y, ref_x = torch.meshgrid(
                torch.linspace(0.5, height - 0.5, height, dtype=valid_ratios.dtype, device=device),
                torch.linspace(0.5, width - 0.5, width, dtype=valid_ratios.dtype, device=device),
                indexing="ij")
            ref_y = ref_y.reshape(-1)[None] / (valid_ratios[:, None, level, 1] * height)
            ref_x = ref_x.reshape(-1)[None] / (valid_ratios[:, None, level, 0] * width)
            reference_points_list.append(torch.stack((ref_x, ref_y), -1))
        reference_points = torch.cat(reference_points_list, 1)
        return reference_points[:, :, None] * valid_ratios[:, None]

    def forward(self, inputs_embeds, attention_mask, position_embeddings, spatial_shapes, spatial_shapes_list,
                valid_ratios):
        reference_points = self.get_reference_points(spatial_shapes_list, valid_ratios, inputs_embeds.device)
        hidden_states = inputs_embeds
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, position_embeddings, reference_points,
                                  spatial_shapes, spatial_shapes_list)
        return hidden_states


class DeformableDetrSinePositionEmbedding(nn.Module):
    def __init__(self, embedding_dim: int, temperature: int = 10000):
        super().__init__()
        self.embedding_dim, self.temperature, self.scale = embedding_dim, temperature, 2 * math.pi

    def forward(self, pixel_values, pixel_mask):
        y_embed = pixel_mask.cumsum(1, dtype=pixel_values.dtype)
        x_embed = pixel_mask.cumsum(2, dtype=pixel_values.dtype)
        eps = 1e-6
        y_embed = (y_embed - 0.5) / (y_embed[:, -1:, :] + eps) * self.scale
        x_embed = (x_embed - 0.5) / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.embedding_dim, dtype=torch.int64, device=pixel_values.device).float()
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.embedding_dim)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


def get_valid_ratio(mask, dtype=torch.float32):
    _, height, width = mask.shape
    valid_height = torch.sum(mask[:, :, 0], 1)
    valid_width = torch.sum(mask[:, 0, :], 1)
    return torch.stack([valid_width.to(dtype) / width, valid_height.to(dtype) / height], -1)


class DeformableDetrEncoderModel(nn.Module):
    """``forward(pixel_values, pixel_mask)``: images ``(B, 3, H, W)`` and a 0/1 mask ``(B, H, W)`` (1 = real
    pixel) -> encoder states ``(B, sum of h_l * w_l, d_model)`` over two levels (strides 2 and 4)."""

    def __init__(self, d_model: int = 16, n_heads: int = 2, n_points: int = 3, ffn_dim: int = 32, layers: int = 2,
                 channels=(8, 12)):
        super().__init__()
        self.backbone = nn.ModuleList([nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1), nn.ReLU()),
                                       nn.Sequential(nn.Conv2d(channels[0], channels[1], 3, 2, 1), nn.ReLU())])
        self.position_embeddings = DeformableDetrSinePositionEmbedding(d_model // 2)
        self.input_proj = nn.ModuleList(nn.Sequential(nn.Conv2d(c, d_model, kernel_size=1), nn.GroupNorm(4, d_model))
                                        for c in channels)
        self.level_embed = nn.Parameter(torch.empty(len(channels), d_model).normal_())
        self.encoder = DeformableDetrEncoder(layers, d_model=d_model, n_levels=len(channels), n_heads=n_heads,
                                             n_points=n_points, ffn_dim=ffn_dim)

    def forward(self, pixel_values, pixel_mask):
        features, x = [], pixel_values
        for stage in self.backbone:
            x = stage(x)
            mask = F.interpolate(pixel_mask[None].float(), size=x.shape[-2:]).to(torch.bool)[0]
            features.append((x, mask))
        source_flatten, mask_flatten, lvl_pos_embed_flatten, spatial_shapes_list, masks = [], [], [], [], []
        for level, (feature, mask) in enumerate(features):
            source = self.input_proj[level](feature)
            pos_embed = self.position_embeddings(source, mask)
            batch_size, num_channels, height, width = source.shape
            spatial_shapes_list.append((height, width))
            source_flatten.append(source.flatten(2).transpose(1, 2))
            mask_flatten.append(mask.flatten(1))
            lvl_pos_embed_flatten.append(pos_embed.flatten(2).transpose(1, 2) + self.level_embed[level].view(1, 1, -1))
            masks.append(mask)
        source_flatten = torch.cat(source_flatten, 1)
        mask_flatten = torch.cat(mask_flatten, 1)
        lvl_pos_embed_flatten = torch.cat(lvl_pos_embed_flatten, 1)
        spatial_shapes = torch.as_tensor(spatial_shapes_list, dtype=torch.long, device=source_flatten.device)
        valid_ratios = torch.stack([get_valid_ratio(m, dtype=source_flatten.dtype) for m in masks], 1)
        return self.encoder(source_flatten, mask_flatten, lvl_pos_embed_flatten, spatial_shapes,
                            spatial_shapes_list, valid_ratios)


def deformable_detr_encoder_small() -> DeformableDetrEncoderModel:
    return DeformableDetrEncoderModel()
