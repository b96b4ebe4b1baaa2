"""Twins of timm's ``GhostNet`` v1 and v2 (``ghostnet_100`` / ``ghostnetv2_100`` structure and ``state_dict``
names: ``conv_stem``, ``bn1``, ``blocks.<i>.<j>.ghost1.primary_conv.<0,1>``/``cheap_operation.<0,1>``,
``ghost1.short_conv.<0..5>`` (v2's DFC attention), ``conv_dw``/``bn_dw``, ``se.conv_reduce``/``se.conv_expand``,
``ghost2.*``, ``shortcut.<0..3>``, the last stage's ``ConvBnAct`` (``conv``, ``bn1`` with its activation inside),
``conv_head``, ``classifier``), few blocks and narrow widths.

Stresses: the ghost module (a primary 1x1 conv, a cheap depthwise conv on its output, ``torch.cat`` of both then the
slice ``[:, :out_chs]``; with an odd ``out_chs`` the slice drops the last cheap channel); SE with a hard-sigmoid
gate; the in-place residual ``x += self.shortcut(shortcut)``; v2's DFC attention: ``F.avg_pool2d`` by 2 (floors an
odd map), a (1, 5) then a (5, 1) depthwise conv, sigmoid, ``F.interpolate(mode="nearest")`` back to the ghost
output's size (on an odd map: 23 -> 11 -> 23) and a product; ``SelectAdaptivePool2d``, ``conv_head`` on the pooled
1x1 map, ``F.dropout`` in the head (p=0 in the twins, so train mode is deterministic).
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


def make_divisible(v, divisor=8, min_value=None, round_limit=.9):
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < round_limit * v:
        new_v += divisor
    return new_v


class SqueezeExcite(nn.Module):
    """timm's _efficientnet_blocks.SqueezeExcite: mean over H, W -> conv_reduce -> act1 -> conv_expand -> gate."""

    def __init__(self, in_chs, rd_ratio=0.25, rd_round_fn=None, act_layer=nn.ReLU, gate_layer=nn.Hardsigmoid):
        super().__init__()
        rd_channels = (rd_round_fn or round)(in_chs * rd_ratio)
        self.conv_reduce = nn.Conv2d(in_chs, rd_channels, 1, bias=True)
        self.act1 = act_layer(inplace=True)
        self.conv_expand = nn.Conv2d(rd_channels, in_chs, 1, bias=True)
        self.gate = gate_layer()

    def forward(self, x):
        x_se = x.mean((2, 3), keepdim=True)
        x_se = self.conv_expand(self.act1(self.conv_reduce(x_se)))
        return x * self.gate(x_se)


_SE_LAYER = partial(SqueezeExcite, rd_round_fn=partial(make_divisible, divisor=4))


class BatchNormAct2d(nn.BatchNorm2d):
    """timm's BatchNormAct2d: the batch norm's own state names, then ``drop`` and ``act``."""

    def __init__(self, num_features, act_layer=nn.ReLU, inplace=True):
        super().__init__(num_features)
        self.drop = nn.Identity()
        self.act = act_layer(inplace=inplace)

    def forward(self, x):
        return self.act(self.drop(super().forward(x)))


class ConvBnAct(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size, stride=1):
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, stride, kernel_size // 2, bias=False)
        self.bn1 = BatchNormAct2d(out_chs)
        self.aa = nn.Identity()
        self.drop_path = nn.Identity()

    def forward(self, x):
        return self.drop_path(self.aa(self.bn1(self.conv(x))))


class GhostModule(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size=1, ratio=2, dw_size=3, stride=1, use_act=True,
                 act_layer=nn.ReLU):
        super().__init__()
        self.out_chs = out_chs
        init_chs = math.ceil(out_chs / ratio)
        new_chs = init_chs * (ratio - 1)
        self.primary_conv = nn.Sequential(
            nn.Conv2d(in_chs, init_chs, kernel_size, stride, kernel_size // 2, bias=False),
            nn.BatchNorm2d(init_chs),
            act_layer(inplace=True) if use_act else nn.Identity())
        self.cheap_operation = nn.Sequential(
            nn.Conv2d(init_chs, new_chs, dw_size, 1, dw_size // 2, groups=init_chs, bias=False),
            nn.BatchNorm2d(new_chs),
            act_layer(inplace=True) if use_act else nn.Identity())

    def forward(self, x):
        x1 = self.primary_conv(x)
        x2 = self.cheap_operation(x1)
        out = torch.cat([x1, x2], dim=1)
        return out[:, :self.out_chs, :, :]


class GhostModuleV2(GhostModule):
    """The ghost module gated by DFC attention: a map at half the size, decoupled (1, 5) and (5, 1) depthwise
    convs, sigmoid, nearest-upsampled back to the ghost output's size."""

    def __init__(self, in_chs, out_chs, kernel_size=1, ratio=2, dw_size=3, stride=1, use_act=True,
                 act_layer=nn.ReLU):
        super().__init__(in_chs, out_chs, kernel_size, ratio, dw_size, stride, use_act, act_layer)
        self.gate_fn = nn.Sigmoid()
        self.short_conv = nn.Sequential(
            nn.Conv2d(in_chs, out_chs, kernel_size, stride, kernel_size // 2, bias=False),
            nn.BatchNorm2d(out_chs),
            nn.Conv2d(out_chs, out_chs, kernel_size=(1, 5), stride=1, padding=(0, 2), groups=out_chs, bias=False),
            nn.BatchNorm2d(out_chs),
            nn.Conv2d(out_chs, out_chs, kernel_size=(5, 1), stride=1, padding=(2, 0), groups=out_chs, bias=False),
            nn.BatchNorm2d(out_chs))

    def forward(self, x):
        res = self.short_conv(F.avg_pool2d(x, kernel_size=2, stride=2))
        x1 = self.primary_conv(x)
        x2 = self.cheap_operation(x1)
        out = torch.cat([x1, x2], dim=1)
        gate = F.interpolate(self.gate_fn(res), size=(out.shape[-2], out.shape[-1]), mode="nearest")
        return out[:, :self.out_chs, :, :] * gate


class GhostBottleneck(nn.Module):
    def __init__(self, in_chs, mid_chs, out_chs, dw_kernel_size=3, stride=1, act_layer=nn.ReLU, se_ratio=0.,
                 mode="original"):
        super().__init__()
        self.stride = stride
        ghost = GhostModuleV2 if mode == "attn" else GhostModule
        self.ghost1 = ghost(in_chs, mid_chs, use_act=True, act_layer=act_layer)
        if stride > 1:
            self.conv_dw = nn.Conv2d(mid_chs, mid_chs, dw_kernel_size, stride=stride,
                                     padding=(dw_kernel_size - 1) // 2, groups=mid_chs, bias=False)
            self.bn_dw = nn.BatchNorm2d(mid_chs)
        else:
            self.conv_dw = None
            self.bn_dw = None
        self.se = _SE_LAYER(mid_chs, rd_ratio=se_ratio) if se_ratio else None
        self.ghost2 = GhostModule(mid_chs, out_chs, use_act=False)
        if in_chs == out_chs and stride == 1:
            self.shortcut = nn.Sequential()
        else:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_chs, in_chs, dw_kernel_size, stride=stride, padding=(dw_kernel_size - 1) // 2,
                          groups=in_chs, bias=False),
                nn.BatchNorm2d(in_chs),
                nn.Conv2d(in_chs, out_chs, 1, stride=1, padding=0, bias=False),
                nn.BatchNorm2d(out_chs))

    def forward(self, x):
        shortcut = x
        x = self.ghost1(x)
        if self.conv_dw is not None:
            x = self.bn_dw(self.conv_dw(x))
        if self.se is not None:
            x = self.se(x)
        x = self.ghost2(x)
        x += self.shortcut(shortcut)
        return x


class SelectAdaptivePool2d(nn.Module):
    def __init__(self, pool_type="avg"):
        super().__init__()
        self.pool_type = pool_type
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Identity()

    def forward(self, x):
        return self.flatten(self.pool(x))


# k, expansion, out channels, SE ratio, stride; narrow (widths of ghostnet_100 / 4, odd out_chs in places)
SMALL_CFGS = [
    [[3, 16, 8, 0, 1]],
    [[3, 24, 12, 0, 2]],
    [[5, 36, 20, 0.25, 2]],
    [[3, 40, 20, 0, 1], [3, 48, 28, 0.25, 1]],
    [[5, 64, 40, 0.25, 2]],
]


class GhostNet(nn.Module):
    def __init__(self, cfgs=SMALL_CFGS, num_classes=10, width=1.0, in_chans=3, global_pool="avg", drop_rate=0.,
                 version="v1"):
        super().__init__()
        self.drop_rate = drop_rate
        stem_chs = make_divisible(8 * width, 4)
        self.conv_stem = nn.Conv2d(in_chans, stem_chs, 3, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem_chs)
        self.act1 = nn.ReLU(inplace=True)
        prev_chs = stem_chs
        stages = []
        layer_idx = 0
        for cfg in cfgs:
            layers = []
            for k, exp_size, c, se_ratio, s in cfg:
                out_chs = make_divisible(c * width, 4)
                mid_chs = make_divisible(exp_size * width, 4)
                mode = "attn" if version == "v2" and layer_idx > 1 else "original"
                layers.append(GhostBottleneck(prev_chs, mid_chs, out_chs, k, s, se_ratio=se_ratio, mode=mode))
                prev_chs = out_chs
                layer_idx += 1
            stages.append(nn.Sequential(*layers))
        out_chs = make_divisible(exp_size * width, 4)
        stages.append(nn.Sequential(ConvBnAct(prev_chs, out_chs, 1)))
        self.pool_dim = prev_chs = out_chs
        self.blocks = nn.Sequential(*stages)
        self.num_features = out_chs = 96
        self.global_pool = SelectAdaptivePool2d(pool_type=global_pool)
        self.conv_head = nn.Conv2d(prev_chs, out_chs, 1, 1, 0, bias=True)
        self.act2 = nn.ReLU(inplace=True)
        self.flatten = nn.Flatten(1)
        self.classifier = nn.Linear(out_chs, num_classes)

    def forward_features(self, x):
        return self.blocks(self.act1(self.bn1(self.conv_stem(x))))

    def forward_head(self, x):
        x = self.flatten(self.act2(self.conv_head(self.global_pool(x))))
        if self.drop_rate > 0.:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return self.classifier(x)

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


def ghostnet_small():
    return GhostNet(version="v1")


def ghostnetv2_small():
    """v2: the ghost1 of every block after the second is DFC-gated."""
    return GhostNet(version="v2")
