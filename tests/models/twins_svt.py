"""A twin of timm's ``Twins`` (``twins_svt_small`` structure and ``state_dict`` names: ``patch_embeds.<i>.proj``/
``.norm``, ``blocks.<i>.<j>.norm1``/``attn.qkv`` (locally-grouped) or ``attn.q``/``attn.kv``/``attn.sr``/
``attn.norm`` (global sub-sampled)/``attn.proj``/``norm2``/``mlp.fc1``/``mlp.fc2``, ``pos_block.<i>.proj.0``,
``norm``, ``head``), small widths and depths.

Stresses: ``LocallyGroupedAttn`` (tokens -> (B, H, W, C) map, ``F.pad`` on the right and bottom up to the window
with pad sizes computed in Python from H and W, ``reshape``/``transpose`` into windows, SDPA per window, back, then
``x[:, :H, :W, :].contiguous()`` behind an ``if pad_r > 0 or pad_b > 0``); ``GlobalSubSampleAttn`` (the keys and
values from a strided ``sr`` conv over the map, floor on sizes it does not divide, LayerNorm); ``PosConv`` (a
depthwise 3x3 over the token map plus the map, ``x += cnn_feat_token`` in place); alternating window / global
blocks; ``PatchEmbed``'s sizes carried as Python ints between stages.
"""

from __future__ import annotations

from functools import partial
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.cait import Mlp

Size_ = Tuple[int, int]


class LocallyGroupedAttn(nn.Module):
    def __init__(self, dim, num_heads=8, attn_drop=0., proj_drop=0., ws=1):
        assert ws != 1
        super().__init__()
        self.dim, self.num_heads = dim, num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.ws = ws

    def forward(self, x, size: Size_):
        B, N, C = x.shape
        H, W = size
        x = x.view(B, H, W, C)
        pad_l = pad_t = 0
        pad_r = (self.ws - W % self.ws) % self.ws
        pad_b = (self.ws - H % self.ws) % self.ws
        x = F.pad(x, (0, 0, pad_l, pad_r, pad_t, pad_b))
        _, Hp, Wp, _ = x.shape
        _h, _w = Hp // self.ws, Wp // self.ws
        x = x.reshape(B, _h, self.ws, _w, self.ws, C).transpose(2, 3)
        qkv = self.qkv(x).reshape(
            B, _h * _w, self.ws * self.ws, 3, self.num_heads, C // self.num_heads).permute(3, 0, 1, 4, 2, 5)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.)
        x = x.transpose(2, 3).reshape(B, _h, _w, self.ws, self.ws, C)
        x = x.transpose(2, 3).reshape(B, _h * self.ws, _w * self.ws, C)
        if pad_r > 0 or pad_b > 0:
            x = x[:, :H, :W, :].contiguous()
        x = x.reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class GlobalSubSampleAttn(nn.Module):
    def __init__(self, dim, num_heads=8, attn_drop=0., proj_drop=0., sr_ratio=1):
        super().__init__()
        self.dim, self.num_heads = dim, num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.q = nn.Linear(dim, dim, bias=True)
        self.kv = nn.Linear(dim, dim * 2, bias=True)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.sr_ratio = sr_ratio
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
            self.norm = nn.LayerNorm(dim)
        else:
            self.sr = None
            self.norm = None

    def forward(self, x, size: Size_):
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        if self.sr is not None:
            x = x.permute(0, 2, 1).reshape(B, C, *size)
            x = self.sr(x).reshape(B, C, -1).permute(0, 2, 1)
            x = self.norm(x)
        kv = self.kv(x).reshape(B, -1, 2, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., norm_layer=nn.LayerNorm, sr_ratio=1, ws=None):
        super().__init__()
        self.norm1 = norm_layer(dim)
        if ws == 1:
            self.attn = GlobalSubSampleAttn(dim, num_heads, sr_ratio=sr_ratio)
        else:
            self.attn = LocallyGroupedAttn(dim, num_heads, ws=ws)
        self.drop_path1 = nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio))
        self.drop_path2 = nn.Identity()

    def forward(self, x, size: Size_):
        x = x + self.drop_path1(self.attn(self.norm1(x), size))
        return x + self.drop_path2(self.mlp(self.norm2(x)))


class PosConv(nn.Module):
    def __init__(self, in_chans, embed_dim=768, stride=1):
        super().__init__()
        self.proj = nn.Sequential(nn.Conv2d(in_chans, embed_dim, 3, stride, 1, bias=True, groups=embed_dim))
        self.stride = stride

    def forward(self, x, size: Size_):
        B, N, C = x.shape
        cnn_feat_token = x.transpose(1, 2).view(B, C, *size)
        x = self.proj(cnn_feat_token)
        if self.stride == 1:
            x += cnn_feat_token
        return x.flatten(2).transpose(1, 2)


class PatchEmbed(nn.Module):
    def __init__(self, patch_size=4, in_chans=3, embed_dim=768):
        super().__init__()
        self.patch_size = (patch_size, patch_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x) -> Tuple[torch.Tensor, Size_]:
        B, C, H, W = x.shape
        x = self.norm(self.proj(x).flatten(2).transpose(1, 2))
        return x, (H // self.patch_size[0], W // self.patch_size[1])


class Twins(nn.Module):
    def __init__(self, patch_size=4, in_chans=3, num_classes=10, embed_dims=(16, 32, 48, 64), num_heads=(1, 2, 3, 4),
                 mlp_ratios=(4, 4, 4, 4), depths=(2, 2, 2, 1), sr_ratios=(8, 4, 2, 1), wss=(4, 4, 4, 4)):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.global_pool = "avg"
        self.depths = depths
        self.num_features = embed_dims[-1]
        prev_chs = in_chans
        self.patch_embeds = nn.ModuleList()
        self.pos_drops = nn.ModuleList()
        for i in range(len(depths)):
            self.patch_embeds.append(PatchEmbed(patch_size, prev_chs, embed_dims[i]))
            self.pos_drops.append(nn.Dropout(p=0.))
            prev_chs = embed_dims[i]
            patch_size = 2
        self.blocks = nn.ModuleList([
            nn.ModuleList([Block(embed_dims[k], num_heads[k], mlp_ratios[k], norm_layer, sr_ratios[k],
                                 ws=1 if wss is None or i % 2 == 1 else wss[k]) for i in range(depths[k])])
            for k in range(len(depths))])
        self.pos_block = nn.ModuleList([PosConv(embed_dim, embed_dim) for embed_dim in embed_dims])
        self.norm = norm_layer(self.num_features)
        self.head_drop = nn.Dropout(0.)
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x):
        B = x.shape[0]
        for i, (embed, drop, blocks, pos_blk) in enumerate(
                zip(self.patch_embeds, self.pos_drops, self.blocks, self.pos_block)):
            x, size = embed(x)
            x = drop(x)
            for j, blk in enumerate(blocks):
                x = blk(x, size)
                if j == 0:
                    x = pos_blk(x, size)
            if i < len(self.depths) - 1:
                x = x.reshape(B, *size, -1).permute(0, 3, 1, 2).contiguous()
        return self.norm(x)

    def forward(self, x):
        x = self.forward_features(x).mean(dim=1)
        return self.head(self.head_drop(x))


def twins_svt_small():
    return Twins()
