"""A twin of timm's ``VOLO`` (``volo_d1`` structure and ``state_dict`` names: ``patch_embed.conv.<0..8>``,
``patch_embed.proj``, ``pos_embed`` (1, H/16, W/16, C), ``network.<i>.<j>.norm1``/``attn.v``/``attn.attn``/
``attn.proj``/``norm2``/``mlp.fc1``/``mlp.fc2`` (Outlookers), ``network.1.proj`` (the downsample),
``network.<i>.<j>.attn.qkv`` (Transformers), ``post_network.<i>.attn.kv``/``attn.q``, ``cls_token``, ``aux_head``,
``norm``, ``head``), few blocks and small sizes. Tokens are channels-last (B, H, W, C) between the stages.

Stresses: outlook attention (``nn.Unfold`` of the value map into 3x3 patches at stride 2, attention weights from
a ``ceil_mode=True`` average pool of the tokens through a Linear to k^4 per head, softmax, ``F.fold`` back onto the
grid, overlapping windows summed); on an odd grid (9x9 from 72x72) the pool's last window is partial and ``ceil``
sizes it; the learned ``pos_embed`` added after the downsample (a fixed grid: other sizes must give the same
pooled grid); class attention (a query from the class token only, the class token replaced by ``torch.cat``);
the head's ``out + 0.5 * aux_head(x[:, 1:]).max(1)[0]`` (a max over the tokens).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Mlp(nn.Module):
    """timm.layers.Mlp: fc1 -> act -> drop1 -> norm (Identity) -> fc2 -> drop2."""

    def __init__(self, in_features, hidden_features, act_layer=nn.GELU, drop=0.):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.drop1(self.act(self.fc1(x)))
        return self.drop2(self.fc2(self.norm(x)))


class OutlookAttention(nn.Module):
    """(B, H, W, C) -> (B, H, W, C): each pooled position predicts a k^2 x k^2 mixing of the k x k value patch
    around it, and the mixed patches are folded back (summed where they overlap)."""

    def __init__(self, dim, num_heads, kernel_size=3, padding=1, stride=1, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.kernel_size = kernel_size
        self.padding = padding
        self.stride = stride
        self.scale = (dim // num_heads) ** -0.5
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.attn = nn.Linear(dim, kernel_size ** 4 * num_heads)
        self.attn_drop = nn.Dropout(0.)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.)
        self.unfold = nn.Unfold(kernel_size=kernel_size, padding=padding, stride=stride)
        self.pool = nn.AvgPool2d(kernel_size=stride, stride=stride, ceil_mode=True)

    def forward(self, x):
        B, H, W, C = x.shape
        k2 = self.kernel_size * self.kernel_size
        heads = self.num_heads
        v = self.v(x).permute(0, 3, 1, 2)
        h, w = math.ceil(H / self.stride), math.ceil(W / self.stride)
        v = self.unfold(v).reshape(B, heads, C // heads, k2, h * w).permute(0, 1, 4, 3, 2)
        attn = self.pool(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        attn = self.attn(attn).reshape(B, h * w, heads, k2, k2).permute(0, 2, 1, 3, 4)
        attn = self.attn_drop((attn * self.scale).softmax(dim=-1))
        x = (attn @ v).permute(0, 1, 4, 3, 2).reshape(B, C * k2, h * w)
        x = F.fold(x, output_size=(H, W), kernel_size=self.kernel_size, padding=self.padding, stride=self.stride)
        return self.proj_drop(self.proj(x.permute(0, 2, 3, 1)))


class Outlooker(nn.Module):
    def __init__(self, dim, kernel_size, padding, stride=1, num_heads=1, mlp_ratio=3., qkv_bias=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = OutlookAttention(dim, num_heads, kernel_size, padding, stride, qkv_bias)
        self.drop_path = nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class Attention(nn.Module):
    """Plain multi-head self-attention over the (B, H, W, C) grid's H*W tokens."""

    def __init__(self, dim, num_heads=8, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.)

    def forward(self, x):
        B, H, W, C = x.shape
        qkv = self.qkv(x).reshape(B, H * W, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = self.attn_drop(((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1))
        x = (attn @ v).transpose(1, 2).reshape(B, H, W, C)
        return self.proj_drop(self.proj(x))


class Transformer(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads, qkv_bias)
        self.drop_path = nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ClassAttention(nn.Module):
    """(B, N, C) -> (B, 1, C): the class token (token 0) attends to every token."""

    def __init__(self, dim, num_heads=8, head_dim=None, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim if head_dim is not None else dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.kv = nn.Linear(dim, self.head_dim * num_heads * 2, bias=qkv_bias)
        self.q = nn.Linear(dim, self.head_dim * num_heads, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.)
        self.proj = nn.Linear(self.head_dim * num_heads, dim)
        self.proj_drop = nn.Dropout(0.)

    def forward(self, x):
        B, N, C = x.shape
        kv = self.kv(x).reshape(B, N, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)
        q = self.q(x[:, :1, :]).reshape(B, self.num_heads, 1, self.head_dim)
        attn = self.attn_drop(((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1))
        cls_embed = (attn @ v).transpose(1, 2).reshape(B, 1, self.head_dim * self.num_heads)
        return self.proj_drop(self.proj(cls_embed))


class ClassBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = ClassAttention(dim, num_heads, qkv_bias=qkv_bias)
        self.drop_path = nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        cls_embed = x[:, :1]
        cls_embed = cls_embed + self.drop_path(self.attn(self.norm1(x)))
        cls_embed = cls_embed + self.drop_path(self.mlp(self.norm2(cls_embed)))
        return torch.cat([cls_embed, x[:, 1:]], dim=1)


class PatchEmbed(nn.Module):
    """The stem: three conv-BN-ReLU (the first at stride 2), then a patch projection; NCHW out."""

    def __init__(self, stem_stride=2, patch_size=8, in_chans=3, hidden_dim=16, embed_dim=32):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_chans, hidden_dim, kernel_size=7, stride=stem_stride, padding=3, bias=False),
            nn.BatchNorm2d(hidden_dim), nn.ReLU(inplace=True),
            nn.Conv2d(hidden_dim, hidden_dim, kernel_size=3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(hidden_dim), nn.ReLU(inplace=True),
            nn.Conv2d(hidden_dim, hidden_dim, kernel_size=3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(hidden_dim), nn.ReLU(inplace=True))
        self.proj = nn.Conv2d(hidden_dim, embed_dim, kernel_size=patch_size // stem_stride,
                              stride=patch_size // stem_stride)

    def forward(self, x):
        return self.proj(self.conv(x))


class Downsample(nn.Module):
    def __init__(self, in_embed_dim, out_embed_dim, patch_size=2):
        super().__init__()
        self.proj = nn.Conv2d(in_embed_dim, out_embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


class VOLO(nn.Module):
    def __init__(self, layers=(1, 1, 1, 1), img_size=72, in_chans=3, num_classes=10, global_pool="token",
                 patch_size=8, stem_hidden_dim=16, embed_dims=(16, 32, 32, 32), num_heads=(2, 4, 4, 4),
                 downsamples=(True, False, False, False), outlook_attention=(True, False, False, False),
                 mlp_ratio=3.0, qkv_bias=False, post_layers=("ca", "ca"), use_aux_head=True, pooling_scale=2):
        super().__init__()
        self.global_pool = global_pool
        self.num_features = embed_dims[-1]
        self.patch_embed = PatchEmbed(2, patch_size, in_chans, stem_hidden_dim, embed_dims[0])
        grid = (img_size // patch_size // pooling_scale, img_size // patch_size // pooling_scale)
        self.pos_embed = nn.Parameter(torch.zeros(1, grid[0], grid[1], embed_dims[-1]))
        self.pos_drop = nn.Dropout(0.)
        network = []
        for i, depth in enumerate(layers):
            if outlook_attention[i]:
                blocks = [Outlooker(embed_dims[i], kernel_size=3, padding=1, stride=2, num_heads=num_heads[i],
                                    mlp_ratio=mlp_ratio, qkv_bias=qkv_bias) for _ in range(depth)]
            else:
                blocks = [Transformer(embed_dims[i], num_heads[i], mlp_ratio=mlp_ratio, qkv_bias=qkv_bias)
                          for _ in range(depth)]
            network.append(nn.Sequential(*blocks))
            if downsamples[i]:
                network.append(Downsample(embed_dims[i], embed_dims[i + 1], 2))
        self.network = nn.ModuleList(network)
        self.post_network = nn.ModuleList([
            ClassBlock(embed_dims[-1], num_heads[-1], mlp_ratio=mlp_ratio, qkv_bias=qkv_bias)
            for _ in post_layers])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims[-1]))
        self.aux_head = nn.Linear(self.num_features, num_classes) if use_aux_head else None
        self.norm = nn.LayerNorm(self.num_features)
        self.head_drop = nn.Dropout(0.)
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_tokens(self, x):
        for idx, block in enumerate(self.network):
            if idx == 2:  # the position embedding joins after the outlooker stage and its downsample
                x = self.pos_drop(x + self.pos_embed)
            x = block(x)
        B, H, W, C = x.shape
        return x.reshape(B, -1, C)

    def forward_cls(self, x):
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        for block in self.post_network:
            x = block(x)
        return x

    def forward_features(self, x):
        x = self.patch_embed(x).permute(0, 2, 3, 1)
        x = self.forward_cls(self.forward_tokens(x))
        return self.norm(x)

    def forward_head(self, x):
        out = x.mean(dim=1) if self.global_pool == "avg" else x[:, 0]
        x = self.head_drop(x)
        out = self.head(out)
        if self.aux_head is not None:
            out = out + 0.5 * self.aux_head(x[:, 1:]).max(1)[0]
        return out

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


def volo_small():
    """72x72 -> a 9x9 outlook grid (odd: the ceil-mode pool's last row and column are partial), pos grid 4x4."""
    return VOLO()
