"""A twin of timm's ``EdgeNeXt`` (``edgenext_xx_small`` structure and ``state_dict`` names: ``stem.0``/``stem.1``,
``stages.<i>.downsample.0`` (LayerNorm2d)/``.1``, ``stages.<i>.blocks.<j>.conv_dw``/``norm``/``mlp.fc1``/``mlp.fc2``/
``gamma`` (ConvBlock), ``.convs.<k>``/``pos_embd.token_projection``/``norm_xca``/``gamma_xca``/``xca.temperature``/
``xca.qkv``/``xca.proj`` (SplitTransposeBlock), ``head.norm``/``head.fc``), few blocks and narrow widths.

Stresses: the split depthwise convs (``x.chunk(scales, dim=1)`` with a channel count the scales do not divide:
44 -> 15, 15, 14, each chunk after the first added to the previous conv's output before its own conv, the last
passed through, ``torch.cat``); XCA, transposed attention (L2-normalised q and k over the tokens, a C x C map per
head scaled by a learned ``temperature``); the Fourier position encoding built from the grid at run time
(``torch.zeros((B, H, W))`` inverted to a bool mask, ``cumsum`` with a float dtype, normalised by the last row and
column, ``arange`` frequencies with ``torch.div(..., rounding_mode="floor")``, interleaved sin/cos by ``stack`` and
``flatten``, a 1x1 conv); depthwise 3/5/7/9 kernels, layer scale, the channels-first ``LayerNorm2d``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.focalnet import LayerNorm2d
from tests.models.ghostnet import SelectAdaptivePool2d
from tests.models.volo import Mlp


class PositionalEncodingFourier(nn.Module):
    def __init__(self, hidden_dim=32, dim=768, temperature=10000):
        super().__init__()
        self.token_projection = nn.Conv2d(hidden_dim * 2, dim, kernel_size=1)
        self.scale = 2 * math.pi
        self.temperature = temperature
        self.hidden_dim = hidden_dim
        self.dim = dim

    def forward(self, shape):
        device = self.token_projection.weight.device
        dtype = self.token_projection.weight.dtype
        inv_mask = ~torch.zeros(shape).to(device=device, dtype=torch.bool)
        y_embed = inv_mask.cumsum(1, dtype=dtype)
        x_embed = inv_mask.cumsum(2, dtype=dtype)
        eps = 1e-6
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.hidden_dim, dtype=dtype, device=device)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.hidden_dim)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return self.token_projection(pos)


def _dw_conv(dim, dim_out, kernel_size, stride=1, bias=True):
    """timm's ``create_conv2d(..., depthwise=True)`` with a static symmetric padding."""
    return nn.Conv2d(dim, dim_out, kernel_size, stride=stride, padding=((stride - 1) + (kernel_size - 1)) // 2,
                     groups=dim, bias=bias)


class ConvBlock(nn.Module):
    def __init__(self, dim, dim_out=None, kernel_size=7, stride=1, conv_bias=True, expand_ratio=4,
                 ls_init_value=1e-6, norm_layer=partial(nn.LayerNorm, eps=1e-6), act_layer=nn.GELU):
        super().__init__()
        dim_out = dim_out or dim
        self.shortcut_after_dw = stride > 1 or dim != dim_out
        self.conv_dw = _dw_conv(dim, dim_out, kernel_size, stride, conv_bias)
        self.norm = norm_layer(dim_out)
        self.mlp = Mlp(dim_out, int(expand_ratio * dim_out), act_layer=act_layer)
        self.gamma = nn.Parameter(ls_init_value * torch.ones(dim_out)) if ls_init_value > 0 else None
        self.drop_path = nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.conv_dw(x)
        if self.shortcut_after_dw:
            shortcut = x
        x = self.mlp(self.norm(x.permute(0, 2, 3, 1)))
        if self.gamma is not None:
            x = self.gamma * x
        return shortcut + self.drop_path(x.permute(0, 3, 1, 2))


class CrossCovarianceAttn(nn.Module):
    """(B, N, C) -> same: attention between channels (a head_dim x head_dim map per head), not tokens."""

    def __init__(self, dim, num_heads=8, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.ones(num_heads, 1, 1))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)
        attn = (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)) * self.temperature
        x = self.attn_drop(attn.softmax(dim=-1)) @ v
        return self.proj_drop(self.proj(x.permute(0, 3, 1, 2).reshape(B, N, C)))


class SplitTransposeBlock(nn.Module):
    def __init__(self, dim, num_scales=1, num_heads=8, expand_ratio=4, use_pos_emb=True, conv_bias=True,
                 qkv_bias=True, ls_init_value=1e-6, norm_layer=partial(nn.LayerNorm, eps=1e-6), act_layer=nn.GELU):
        super().__init__()
        width = max(int(math.ceil(dim / num_scales)), int(math.floor(dim // num_scales)))
        self.width = width
        self.num_scales = max(1, num_scales - 1)
        self.convs = nn.ModuleList([_dw_conv(width, width, 3, bias=conv_bias) for _ in range(self.num_scales)])
        self.pos_embd = PositionalEncodingFourier(dim=dim) if use_pos_emb else None
        self.norm_xca = norm_layer(dim)
        self.gamma_xca = nn.Parameter(ls_init_value * torch.ones(dim)) if ls_init_value > 0 else None
        self.xca = CrossCovarianceAttn(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.norm = norm_layer(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(expand_ratio * dim), act_layer=act_layer)
        self.gamma = nn.Parameter(ls_init_value * torch.ones(dim)) if ls_init_value > 0 else None
        self.drop_path = nn.Identity()

    def forward(self, x):
        shortcut = x
        spx = x.chunk(len(self.convs) + 1, dim=1)
        spo = []
        sp = spx[0]
        for i, conv in enumerate(self.convs):
            if i > 0:
                sp = sp + spx[i]
            sp = conv(sp)
            spo.append(sp)
        spo.append(spx[-1])
        x = torch.cat(spo, 1)
        B, C, H, W = x.shape
        x = x.reshape(B, C, H * W).permute(0, 2, 1)
        if self.pos_embd is not None:
            x = x + self.pos_embd((B, H, W)).reshape(B, -1, x.shape[1]).permute(0, 2, 1)
        x = x + self.drop_path(self.gamma_xca * self.xca(self.norm_xca(x)))
        x = self.mlp(self.norm(x.reshape(B, H, W, C)))
        if self.gamma is not None:
            x = self.gamma * x
        return shortcut + self.drop_path(x.permute(0, 3, 1, 2))


class EdgeNeXtStage(nn.Module):
    def __init__(self, in_chs, out_chs, stride=2, depth=2, num_global_blocks=1, num_heads=4, scales=2,
                 kernel_size=7, expand_ratio=4, use_pos_emb=False, conv_bias=True, ls_init_value=1.0,
                 norm_layer=LayerNorm2d, norm_layer_cl=partial(nn.LayerNorm, eps=1e-6), act_layer=nn.GELU):
        super().__init__()
        if stride == 1:
            self.downsample = nn.Identity()
        else:
            self.downsample = nn.Sequential(norm_layer(in_chs),
                                            nn.Conv2d(in_chs, out_chs, kernel_size=2, stride=2, bias=conv_bias))
            in_chs = out_chs
        blocks = []
        for i in range(depth):
            if i < depth - num_global_blocks:
                blocks.append(ConvBlock(in_chs, out_chs, kernel_size=kernel_size, conv_bias=conv_bias,
                                        expand_ratio=expand_ratio, ls_init_value=ls_init_value,
                                        norm_layer=norm_layer_cl, act_layer=act_layer))
            else:
                blocks.append(SplitTransposeBlock(in_chs, num_scales=scales, num_heads=num_heads,
                                                  expand_ratio=expand_ratio, use_pos_emb=use_pos_emb,
                                                  conv_bias=conv_bias, ls_init_value=ls_init_value,
                                                  norm_layer=norm_layer_cl, act_layer=act_layer))
            in_chs = out_chs
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x):
        return self.blocks(self.downsample(x))


class EdgeNeXt(nn.Module):
    def __init__(self, in_chans=3, num_classes=10, dims=(16, 32, 44, 64), depths=(2, 2, 2, 2),
                 global_block_counts=(0, 1, 1, 1), kernel_sizes=(3, 5, 7, 9), heads=(4, 4, 4, 4),
                 d2_scales=(2, 2, 3, 4), use_pos_emb=(False, True, False, False), ls_init_value=1e-6,
                 expand_ratio=2, conv_bias=True):
        super().__init__()
        norm_layer = partial(LayerNorm2d, eps=1e-6)
        norm_layer_cl = partial(nn.LayerNorm, eps=1e-6)
        self.stem = nn.Sequential(nn.Conv2d(in_chans, dims[0], kernel_size=4, stride=4, bias=conv_bias),
                                  norm_layer(dims[0]))
        stages, in_chs = [], dims[0]
        for i in range(4):
            stages.append(EdgeNeXtStage(
                in_chs, dims[i], stride=2 if i > 0 else 1, depth=depths[i], num_global_blocks=global_block_counts[i],
                num_heads=heads[i], scales=d2_scales[i], kernel_size=kernel_sizes[i], expand_ratio=expand_ratio,
                use_pos_emb=use_pos_emb[i], conv_bias=conv_bias, ls_init_value=ls_init_value,
                norm_layer=norm_layer, norm_layer_cl=norm_layer_cl))
            in_chs = dims[i]
        self.stages = nn.Sequential(*stages)
        self.num_features = dims[-1]
        self.norm_pre = nn.Identity()
        self.head = nn.Sequential(OrderedDict([
            ("global_pool", SelectAdaptivePool2d(pool_type="avg")),
            ("norm", norm_layer(self.num_features)),
            ("flatten", nn.Flatten(1)),
            ("drop", nn.Dropout(0.)),
            ("fc", nn.Linear(self.num_features, num_classes))]))

    def forward(self, x):
        x = self.norm_pre(self.stages(self.stem(x)))
        x = self.head.flatten(self.head.norm(self.head.global_pool(x)))
        return self.head.fc(self.head.drop(x))


def edgenext_small():
    return EdgeNeXt()
