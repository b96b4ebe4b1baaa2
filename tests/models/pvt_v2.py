"""A twin of timm's ``PyramidVisionTransformerV2`` (``pvt_v2_b0`` structure and ``state_dict`` names:
``patch_embed.proj``, ``stages.<i>.downsample.proj``/``.norm``, ``stages.<i>.blocks.<j>.attn.q``/``kv``/``sr``/
``norm``/``proj``, ``.mlp.fc1``/``dwconv``/``fc2``, ``stages.<i>.norm``, ``head``), small sizes; ``linear=True``
(``pvt_v2_b2_li``) too.

Stresses: overlapping patch embeds (7x7 stride 4, then 3x3 stride 2, padding k // 2) followed by a channels-last
LayerNorm (``permute(0, 2, 3, 1)``); spatial-reduction attention: tokens -> map (``permute`` + ``reshape`` with the
map size carried as a Python list), a strided ``sr`` conv (kernel = stride = ratio, floor on sizes it does not
divide), LayerNorm on the reduced keys/values, ``kv`` reshaped to ``(2, B, heads, N', d)`` and ``unbind``;
the linear variant's ``AdaptiveAvgPool2d(7)`` + 1x1 conv + GELU on the keys; ``MlpWithDepthwiseConv`` (tokens ->
map -> depthwise 3x3 -> tokens); ``scaled_dot_product_attention``; global mean over the last map.
"""

from __future__ import annotations

from typing import List, Sequence

import torch.nn.functional as F
from torch import nn


def _norm(dim):
    return nn.LayerNorm(dim, eps=1e-6)


class MlpWithDepthwiseConv(nn.Module):
    def __init__(self, in_features, hidden_features, extra_relu=False):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.relu = nn.ReLU() if extra_relu else nn.Identity()
        self.dwconv = nn.Conv2d(hidden_features, hidden_features, 3, 1, 1, bias=True, groups=hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop = nn.Dropout(0.0)

    def forward(self, x, feat_size: List[int]):
        x = self.fc1(x)
        B, N, C = x.shape
        x = x.transpose(1, 2).view(B, C, feat_size[0], feat_size[1])
        x = self.dwconv(self.relu(x))
        x = x.flatten(2).transpose(1, 2)
        x = self.drop(self.act(x))
        return self.drop(self.fc2(x))


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, sr_ratio=1, linear_attn=False, qkv_bias=True):
        super().__init__()
        self.dim, self.num_heads = dim, num_heads
        self.head_dim = dim // num_heads
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)
        if not linear_attn:
            self.pool = None
            if sr_ratio > 1:
                self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
                self.norm = _norm(dim)
            else:
                self.sr, self.norm = None, None
            self.act = None
        else:
            self.pool = nn.AdaptiveAvgPool2d(7)
            self.sr = nn.Conv2d(dim, dim, kernel_size=1, stride=1)
            self.norm = _norm(dim)
            self.act = nn.GELU()

    def forward(self, x, feat_size: List[int]):
        B, N, C = x.shape
        H, W = feat_size
        q = self.q(x).reshape(B, N, self.num_heads, -1).permute(0, 2, 1, 3)
        if self.pool is not None:
            x = x.permute(0, 2, 1).reshape(B, C, H, W)
            x = self.sr(self.pool(x)).reshape(B, C, -1).permute(0, 2, 1)
            x = self.act(self.norm(x))
            kv = self.kv(x).reshape(B, -1, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        elif self.sr is not None:
            x = x.permute(0, 2, 1).reshape(B, C, H, W)
            x = self.sr(x).reshape(B, C, -1).permute(0, 2, 1)
            x = self.norm(x)
            kv = self.kv(x).reshape(B, -1, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        else:
            kv = self.kv(x).reshape(B, -1, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio, sr_ratio, linear_attn, qkv_bias=True):
        super().__init__()
        self.norm1 = _norm(dim)
        self.attn = Attention(dim, num_heads, sr_ratio, linear_attn, qkv_bias)
        self.drop_path1 = nn.Identity()
        self.norm2 = _norm(dim)
        self.mlp = MlpWithDepthwiseConv(dim, int(dim * mlp_ratio), extra_relu=linear_attn)
        self.drop_path2 = nn.Identity()

    def forward(self, x, feat_size: List[int]):
        x = x + self.drop_path1(self.attn(self.norm1(x), feat_size))
        return x + self.drop_path2(self.mlp(self.norm2(x), feat_size))


class OverlapPatchEmbed(nn.Module):
    def __init__(self, patch_size=7, stride=4, in_chans=3, embed_dim=768):
        super().__init__()
        self.patch_size = (patch_size, patch_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, patch_size, stride=stride, padding=(patch_size // 2, patch_size // 2))
        self.norm = _norm(embed_dim)

    def forward(self, x):
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


class PyramidVisionTransformerStage(nn.Module):
    def __init__(self, dim, dim_out, depth, downsample, num_heads, sr_ratio, linear_attn, mlp_ratio):
        super().__init__()
        self.grad_checkpointing = False
        self.downsample = OverlapPatchEmbed(3, 2, dim, dim_out) if downsample else None
        self.blocks = nn.ModuleList(Block(dim_out, num_heads, mlp_ratio, sr_ratio, linear_attn) for _ in range(depth))
        self.norm = _norm(dim_out)

    def forward(self, x):
        if self.downsample is not None:  # B, C, H, W in; the first stage gets B, H, W, C from the patch embed
            x = self.downsample(x)
        B, H, W, C = x.shape
        feat_size = (H, W)
        x = x.reshape(B, -1, C)
        for blk in self.blocks:
            x = blk(x, feat_size)
        x = self.norm(x)
        return x.reshape(B, feat_size[0], feat_size[1], -1).permute(0, 3, 1, 2).contiguous()


class PyramidVisionTransformerV2(nn.Module):
    def __init__(self, in_chans=3, num_classes=10, depths: Sequence[int] = (1, 1, 1, 1),
                 embed_dims: Sequence[int] = (8, 16, 24, 32), num_heads: Sequence[int] = (1, 2, 3, 4),
                 sr_ratios: Sequence[int] = (8, 4, 2, 1), mlp_ratios: Sequence[float] = (2.0, 2.0, 2.0, 2.0),
                 linear: bool = False):
        super().__init__()
        self.global_pool = "avg"
        self.patch_embed = OverlapPatchEmbed(7, 4, in_chans, embed_dims[0])
        stages, prev_dim = [], embed_dims[0]
        for i in range(len(depths)):
            stages.append(PyramidVisionTransformerStage(prev_dim, embed_dims[i], depths[i], i > 0, num_heads[i],
                                                        sr_ratios[i], linear, mlp_ratios[i]))
            prev_dim = embed_dims[i]
        self.stages = nn.Sequential(*stages)
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(embed_dims[-1], num_classes)

    def forward(self, x):
        x = self.stages(self.patch_embed(x))
        x = x.mean(dim=(-1, -2))
        return self.head(self.head_drop(x))


def pvt_v2_small() -> nn.Module:
    return PyramidVisionTransformerV2()


def pvt_v2_linear_small() -> nn.Module:
    return PyramidVisionTransformerV2(linear=True)
