"""Twin of torchvision's ``SwinTransformer3d`` (``swin3d_t`` structure and ``state_dict`` names: ``patch_embed.proj``/
``norm``, ``features.<2i>.<j>.norm1``/``attn.qkv``/``attn.proj``/``attn.relative_position_bias_table``/
``attn.relative_position_index``/``norm2``/``mlp.<0,3>``, ``features.<2i+1>.reduction``/``norm``, ``norm``,
``head``), two narrow stages of two blocks and 4x4x4 windows.

Stresses: the 3-d patch embedding padded to patch multiples (``F.pad`` of T, H and W, a strided ``Conv3d``, NTHWC from
there on); 3-d shifted windows: the input padded to window multiples, ``torch.roll`` over three dims, the
window partition by an 8-d ``view``/``permute``, the attention mask built in the forward by slice assignments over
(T, H, W) and ``masked_fill``; the 3-d relative position bias gathered from its table by the index buffer (sliced to
the window volume); windows that shrink to the input where it is smaller (and then no shift) - Python branches on
sizes; 2-d patch merging over H and W of each frame (odd sizes padded); the mean over (T, H, W) by
``AdaptiveAvgPool3d``.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from tests.zoo.twins.swin import (PatchMerging, SwinTransformerBlock, attend_and_project, masked_windows,
                                  region_mask)


def _get_window_and_shift_size(shift_size, size_dhw, window_size):
    for i in range(3):
        if size_dhw[i] <= window_size[i]:
            window_size[i] = size_dhw[i]
            shift_size[i] = 0
    return window_size, shift_size


def _get_relative_position_bias(relative_position_bias_table, relative_position_index, window_size):
    window_vol = window_size[0] * window_size[1] * window_size[2]
    bias = relative_position_bias_table[relative_position_index[:window_vol, :window_vol].flatten()]
    bias = bias.view(window_vol, window_vol, -1)
    return bias.permute(2, 0, 1).contiguous().unsqueeze(0)


def _compute_pad_size_3d(size_dhw, patch_size):
    return [(patch_size[i] - size_dhw[i] % patch_size[i]) % patch_size[i] for i in range(3)]


def _compute_attention_mask_3d(x, size_dhw, window_size, shift_size):
    attn_mask = x.new_zeros(*size_dhw)
    num_windows = (size_dhw[0] // window_size[0]) * (size_dhw[1] // window_size[1]) * (size_dhw[2] // window_size[2])
    slices = [((0, -window_size[i]), (-window_size[i], -shift_size[i]), (-shift_size[i], None)) for i in range(3)]
    count = 0
    for d in slices[0]:
        for h in slices[1]:
            for w in slices[2]:
                attn_mask[d[0]:d[1], h[0]:h[1], w[0]:w[1]] = count
                count += 1
    attn_mask = attn_mask.view(size_dhw[0] // window_size[0], window_size[0], size_dhw[1] // window_size[1],
                               window_size[1], size_dhw[2] // window_size[2], window_size[2])
    return region_mask(attn_mask.permute(0, 2, 4, 1, 3, 5).reshape(num_windows,
                                                                   window_size[0] * window_size[1] * window_size[2]))


def shifted_window_attention_3d(input, qkv_weight, proj_weight, relative_position_bias, window_size, num_heads,
                                shift_size, attention_dropout=0.0, dropout=0.0, qkv_bias=None, proj_bias=None,
                                training=True):
    b, t, h, w, c = input.shape
    pad_size = _compute_pad_size_3d((t, h, w), window_size)
    x = F.pad(input, (0, 0, 0, pad_size[2], 0, pad_size[1], 0, pad_size[0]))
    _, tp, hp, wp, _ = x.shape
    padded_size = (tp, hp, wp)
    if sum(shift_size) > 0:
        x = torch.roll(x, shifts=(-shift_size[0], -shift_size[1], -shift_size[2]), dims=(1, 2, 3))
    num_windows = ((padded_size[0] // window_size[0]) * (padded_size[1] // window_size[1])
                   * (padded_size[2] // window_size[2]))
    x = x.view(b, padded_size[0] // window_size[0], window_size[0], padded_size[1] // window_size[1], window_size[1],
               padded_size[2] // window_size[2], window_size[2], c)
    x = x.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(b * num_windows,
                                                  window_size[0] * window_size[1] * window_size[2], c)
    qkv = F.linear(x, qkv_weight, qkv_bias)
    qkv = qkv.reshape(x.size(0), x.size(1), 3, num_heads, c // num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    q = q * (c // num_heads) ** -0.5
    attn = q.matmul(k.transpose(-2, -1))
    attn = attn + relative_position_bias
    if sum(shift_size) > 0:
        attn_mask = _compute_attention_mask_3d(x, padded_size, window_size, shift_size)
        attn = masked_windows(attn, attn_mask, num_windows, num_heads)
    x = attend_and_project(attn, v, c, proj_weight, proj_bias, attention_dropout, dropout, training)
    x = x.view(b, padded_size[0] // window_size[0], padded_size[1] // window_size[1], padded_size[2] // window_size[2],
               window_size[0], window_size[1], window_size[2], c)
    x = x.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, tp, hp, wp, c)
    if sum(shift_size) > 0:
        x = torch.roll(x, shifts=(shift_size[0], shift_size[1], shift_size[2]), dims=(1, 2, 3))
    return x[:, :t, :h, :w, :].contiguous()


class ShiftedWindowAttention3d(nn.Module):
    def __init__(self, dim, window_size, shift_size, num_heads, qkv_bias=True, proj_bias=True,
                 attention_dropout=0.0, dropout=0.0):
        super().__init__()
        self.window_size, self.shift_size, self.num_heads = window_size, shift_size, num_heads
        self.attention_dropout, self.dropout = attention_dropout, dropout
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        ws = window_size
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * ws[0] - 1) * (2 * ws[1] - 1) * (2 * ws[2] - 1), num_heads))
        coords = torch.stack(torch.meshgrid(*[torch.arange(w) for w in ws], indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        relative_coords = (coords_flatten[:, :, None] - coords_flatten[:, None, :]).permute(1, 2, 0).contiguous()
        for i in range(3):
            relative_coords[:, :, i] += ws[i] - 1
        relative_coords[:, :, 0] *= (2 * ws[1] - 1) * (2 * ws[2] - 1)
        relative_coords[:, :, 1] *= 2 * ws[2] - 1
        self.register_buffer("relative_position_index", relative_coords.sum(-1))

    def forward(self, x):
        _, t, h, w, _ = x.shape
        window_size, shift_size = _get_window_and_shift_size(self.shift_size.copy(), [t, h, w],
                                                             self.window_size.copy())
        bias = _get_relative_position_bias(self.relative_position_bias_table, self.relative_position_index,
                                           window_size)
        return shifted_window_attention_3d(x, self.qkv.weight, self.proj.weight, bias, window_size, self.num_heads,
                                           shift_size=shift_size, attention_dropout=self.attention_dropout,
                                           dropout=self.dropout, qkv_bias=self.qkv.bias, proj_bias=self.proj.bias,
                                           training=self.training)


class PatchEmbed3d(nn.Module):
    def __init__(self, patch_size, in_channels=3, embed_dim=96, norm_layer=None):
        super().__init__()
        self.tuple_patch_size = tuple(patch_size)
        self.proj = nn.Conv3d(in_channels, embed_dim, kernel_size=self.tuple_patch_size, stride=self.tuple_patch_size)
        self.norm = norm_layer(embed_dim) if norm_layer is not None else nn.Identity()

    def forward(self, x):
        _, _, t, h, w = x.size()
        pad_size = _compute_pad_size_3d((t, h, w), self.tuple_patch_size)
        x = F.pad(x, (0, pad_size[2], 0, pad_size[1], 0, pad_size[0]))
        x = self.proj(x).permute(0, 2, 3, 4, 1)  # B T H W C
        return self.norm(x)


class SwinTransformer3d(nn.Module):
    def __init__(self, patch_size, embed_dim, depths, num_heads, window_size, mlp_ratio=4.0, dropout=0.0,
                 attention_dropout=0.0, stochastic_depth_prob=0.0, num_classes=10):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-5)
        self.patch_embed = PatchEmbed3d(patch_size=patch_size, embed_dim=embed_dim, norm_layer=norm_layer)
        self.pos_drop = nn.Dropout(p=dropout)
        layers, total, block_id = [], sum(depths), 0
        for i_stage, depth in enumerate(depths):
            dim = embed_dim * 2 ** i_stage
            stage = []
            for i_layer in range(depth):
                sd_prob = stochastic_depth_prob * float(block_id) / (total - 1)
                stage.append(SwinTransformerBlock(
                    dim, num_heads[i_stage], window_size=window_size,
                    shift_size=[0 if i_layer % 2 == 0 else w // 2 for w in window_size], mlp_ratio=mlp_ratio,
                    dropout=dropout, attention_dropout=attention_dropout, stochastic_depth_prob=sd_prob,
                    norm_layer=norm_layer, attn_layer=ShiftedWindowAttention3d))
                block_id += 1
            layers.append(nn.Sequential(*stage))
            if i_stage < len(depths) - 1:
                layers.append(PatchMerging(dim, norm_layer))
        self.features = nn.Sequential(*layers)
        self.num_features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = norm_layer(self.num_features)
        self.avgpool = nn.AdaptiveAvgPool3d(1)
        self.head = nn.Linear(self.num_features, num_classes)

    def forward(self, x):
        x = self.pos_drop(self.patch_embed(x))
        x = self.norm(self.features(x))
        x = self.avgpool(x.permute(0, 4, 1, 2, 3))
        return self.head(torch.flatten(x, 1))


def swin3d_small() -> nn.Module:
    """``swin3d_t``'s form (patch 2x4x4, shifted blocks in pairs), width 16, depths (2, 2), windows 4x4x4."""
    return SwinTransformer3d(patch_size=[2, 4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                             window_size=[4, 4, 4])
