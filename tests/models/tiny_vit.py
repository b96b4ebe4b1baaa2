"""A twin of timm's ``TinyVit`` (the NHWC-block form of timm >= 0.9, ``tiny_vit_5m`` structure and ``state_dict``
names: ``patch_embed.conv1.conv``/``.bn``, ``patch_embed.conv2``, ``stages.0.blocks.<j>.conv1``/``conv2``/``conv3``
(MBConv), ``stages.<i>.downsample.conv1``/``conv2``/``conv3`` (PatchMerging), ``stages.<i>.blocks.<j>.attn.norm``/
``attn.qkv``/``attn.proj``/``attn.attention_biases``, ``local_conv.conv``/``.bn``, ``mlp.norm``/``mlp.fc1``/
``mlp.fc2``, ``head.norm``/``head.fc``), few blocks, narrow widths and small windows.

Stresses: window attention with the map padded up to whole windows (``F.pad`` on an NHWC map, then partition by
``view``/``transpose``/``reshape``, reverse, crop ``[:, :H, :W]``), the ``H == window_size`` branch that skips the
partition, the attention bias gathered from a (heads, offsets) parameter by a non-persistent int64 index buffer
``attention_biases[:, attention_bias_idxs]``, and timm's per-device cache of that gather in eval mode (a dict
filled inside ``forward``), q/k/v split by ``split([key_dim, key_dim, d], dim=3)``; the MBConv stage with the
in-place residual, conv-BN pairs (``ConvNorm``), ``NormMlpClassifierHead`` with ``LayerNorm2d``.
"""

from __future__ import annotations

import itertools
from functools import partial
from typing import Dict

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.focalnet import LayerNorm2d


class ConvNorm(nn.Sequential):
    def __init__(self, in_chs, out_chs, ks=1, stride=1, pad=0, dilation=1, groups=1, bn_weight_init=1):
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, ks, stride, pad, dilation, groups, bias=False)
        self.bn = nn.BatchNorm2d(out_chs)
        nn.init.constant_(self.bn.weight, bn_weight_init)
        nn.init.constant_(self.bn.bias, 0)


class PatchEmbed(nn.Module):
    def __init__(self, in_chans, embed_dim, activation):
        super().__init__()
        self.stride = 4
        self.conv1 = ConvNorm(in_chans, embed_dim // 2, 3, 2, 1)
        self.act = activation()
        self.conv2 = ConvNorm(embed_dim // 2, embed_dim, 3, 2, 1)

    def forward(self, x):
        return self.conv2(self.act(self.conv1(x)))


class MBConv(nn.Module):
    def __init__(self, in_chans, out_chans, expand_ratio, activation):
        super().__init__()
        hidden = int(in_chans * expand_ratio)
        self.conv1 = ConvNorm(in_chans, hidden, ks=1)
        self.act1 = activation()
        self.conv2 = ConvNorm(hidden, hidden, ks=3, stride=1, pad=1, groups=hidden)
        self.act2 = activation()
        self.conv3 = ConvNorm(hidden, out_chans, ks=1, bn_weight_init=0.0)
        self.act3 = activation()
        self.drop_path = nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.conv3(self.act2(self.conv2(self.act1(self.conv1(x)))))
        x = self.drop_path(x)
        x += shortcut
        return self.act3(x)


class PatchMerging(nn.Module):
    def __init__(self, dim, out_dim, activation):
        super().__init__()
        self.act = activation()
        self.conv1 = ConvNorm(dim, out_dim, 1, 1, 0)
        self.conv2 = ConvNorm(out_dim, out_dim, 3, 2, 1, groups=out_dim)
        self.conv3 = ConvNorm(out_dim, out_dim, 1, 1, 0)

    def forward(self, x):
        return self.conv3(self.act(self.conv2(self.act(self.conv1(x)))))


class ConvLayer(nn.Module):
    def __init__(self, dim, depth, activation, conv_expand_ratio=4.):
        super().__init__()
        self.blocks = nn.Sequential(*[MBConv(dim, dim, conv_expand_ratio, activation) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(x)


class NormMlp(nn.Module):
    """TinyViT's own Mlp: LayerNorm first."""

    def __init__(self, in_features, hidden_features, act_layer=nn.GELU):
        super().__init__()
        self.norm = nn.LayerNorm(in_features)
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.act = act_layer()
        self.drop = nn.Dropout(0.)

    def forward(self, x):
        x = self.drop(self.act(self.fc1(self.norm(x))))
        return self.drop(self.fc2(x))


class Attention(nn.Module):
    """(B*windows, N, C) -> same; a learned bias per head and per |dy|, |dx| offset between window positions."""
    attention_bias_cache: Dict[str, torch.Tensor]

    def __init__(self, dim, key_dim, num_heads=8, attn_ratio=4, resolution=(14, 14)):
        super().__init__()
        self.num_heads = num_heads
        self.scale = key_dim ** -0.5
        self.key_dim = key_dim
        self.val_dim = int(attn_ratio * key_dim)
        self.out_dim = self.val_dim * num_heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, num_heads * (self.val_dim + 2 * key_dim))
        self.proj = nn.Linear(self.out_dim, dim)
        points = list(itertools.product(range(resolution[0]), range(resolution[1])))
        offsets, idxs = {}, []
        for p1 in points:
            for p2 in points:
                offset = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
                idxs.append(offsets.setdefault(offset, len(offsets)))
        self.attention_biases = nn.Parameter(torch.zeros(num_heads, len(offsets)))
        self.register_buffer("attention_bias_idxs", torch.LongTensor(idxs).view(len(points), len(points)),
                             persistent=False)
        self.attention_bias_cache = {}

    @torch.no_grad()
    def train(self, mode=True):
        super().train(mode)
        if mode and self.attention_bias_cache:
            self.attention_bias_cache = {}

    def get_attention_biases(self, device: torch.device) -> torch.Tensor:
        if torch.jit.is_tracing() or self.training:
            return self.attention_biases[:, self.attention_bias_idxs]
        device_key = str(device)
        if device_key not in self.attention_bias_cache:
            self.attention_bias_cache[device_key] = self.attention_biases[:, self.attention_bias_idxs]
        return self.attention_bias_cache[device_key]

    def forward(self, x):
        attn_bias = self.get_attention_biases(x.device)
        B, N, _ = x.shape
        qkv = self.qkv(self.norm(x))
        q, k, v = qkv.view(B, N, self.num_heads, -1).split([self.key_dim, self.key_dim, self.val_dim], dim=3)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
        attn = (q * self.scale) @ k.transpose(-2, -1) + attn_bias
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, N, self.out_dim)
        return self.proj(x)


class TinyVitBlock(nn.Module):
    """(B, H, W, C) -> same: padded window attention, a depthwise conv-BN, the MLP."""

    def __init__(self, dim, num_heads, window_size=7, mlp_ratio=4., local_conv_size=3, activation=nn.GELU):
        super().__init__()
        self.window_size = window_size
        self.attn = Attention(dim, dim // num_heads, num_heads, attn_ratio=1, resolution=(window_size, window_size))
        self.drop_path1 = nn.Identity()
        self.mlp = NormMlp(dim, int(dim * mlp_ratio), act_layer=activation)
        self.drop_path2 = nn.Identity()
        self.local_conv = ConvNorm(dim, dim, ks=local_conv_size, stride=1, pad=local_conv_size // 2, groups=dim)

    def forward(self, x):
        B, H, W, C = x.shape
        L = H * W
        ws = self.window_size
        shortcut = x
        if H == ws and W == ws:
            x = self.attn(x.reshape(B, L, C)).view(B, H, W, C)
        else:
            pad_b = (ws - H % ws) % ws
            pad_r = (ws - W % ws) % ws
            padding = pad_b > 0 or pad_r > 0
            if padding:
                x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
            pH, pW = H + pad_b, W + pad_r
            nH, nW = pH // ws, pW // ws
            x = x.view(B, nH, ws, nW, ws, C).transpose(2, 3).reshape(B * nH * nW, ws * ws, C)
            x = self.attn(x)
            x = x.view(B, nH, nW, ws, ws, C).transpose(2, 3).reshape(B, pH, pW, C)
            if padding:
                x = x[:, :H, :W].contiguous()
        x = shortcut + self.drop_path1(x)
        x = self.local_conv(x.permute(0, 3, 1, 2))
        x = x.reshape(B, C, L).transpose(1, 2)
        x = x + self.drop_path2(self.mlp(x))
        return x.view(B, H, W, C)


class TinyVitStage(nn.Module):
    def __init__(self, dim, out_dim, depth, num_heads, window_size, mlp_ratio=4., local_conv_size=3,
                 activation=nn.GELU):
        super().__init__()
        self.downsample = PatchMerging(dim, out_dim, activation)
        self.blocks = nn.Sequential(*[
            TinyVitBlock(out_dim, num_heads, window_size, mlp_ratio, local_conv_size, activation)
            for _ in range(depth)])

    def forward(self, x):
        x = self.downsample(x).permute(0, 2, 3, 1)
        return self.blocks(x).permute(0, 3, 1, 2)


class NormMlpClassifierHead(nn.Module):
    """timm's NormMlpClassifierHead without a hidden layer: pool, LayerNorm2d, flatten, fc."""

    def __init__(self, in_features, num_classes, norm_layer=LayerNorm2d):
        super().__init__()
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.norm = norm_layer(in_features)
        self.flatten = nn.Flatten(1)
        self.pre_logits = nn.Identity()
        self.drop = nn.Dropout(0.)
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        x = self.flatten(self.norm(self.global_pool(x)))
        return self.fc(self.drop(self.pre_logits(x)))


class TinyVit(nn.Module):
    def __init__(self, in_chans=3, num_classes=10, embed_dims=(16, 32, 48, 64), depths=(1, 1, 2, 1),
                 num_heads=(1, 2, 3, 4), window_sizes=(3, 3, 4, 3), mlp_ratio=2., mbconv_expand_ratio=2.0,
                 local_conv_size=3):
        super().__init__()
        activation = nn.GELU
        self.patch_embed = PatchEmbed(in_chans, embed_dims[0], activation)
        stages = [ConvLayer(embed_dims[0], depths[0], activation, mbconv_expand_ratio)]
        for i in range(1, len(depths)):
            stages.append(TinyVitStage(embed_dims[i - 1], embed_dims[i], depths[i], num_heads[i], window_sizes[i],
                                       mlp_ratio, local_conv_size, activation))
        self.stages = nn.Sequential(*stages)
        self.num_features = embed_dims[-1]
        self.head = NormMlpClassifierHead(self.num_features, num_classes, norm_layer=partial(LayerNorm2d, eps=1e-5))

    def forward_features(self, x):
        return self.stages(self.patch_embed(x))

    def forward(self, x):
        return self.head(self.forward_features(x))


def tiny_vit_small():
    """64x64 -> stage grids 16, 8, 4, 2: windows of 3 pad 8 -> 9 and 4 -> 6; the 4x4 stage with window 4 takes the
    no-partition branch; 72x56 (18x14 ... 3x2) pads every stage."""
    return TinyVit()
