"""Twin of timm's ``ResNeSt`` (``resnest14d`` / ``resnest50d_4s2x40d`` structure and ``state_dict`` names: the deep
stem ``conv1.<0..6>``, ``bn1``, ``layer<i>.<j>.conv1``/``bn1``, the split-attention conv ``conv2.conv``/``bn0``/
``fc1``/``bn1``/``fc2``, ``conv3``/``bn3``, the average-pool shortcut ``downsample.<1,2>``, ``fc``), narrow widths.

Stresses: split attention (a conv with ``groups * radix`` groups, the radix splits summed, a global mean, two 1x1
convs, the radix softmax: ``view(B, groups, radix, -1).transpose(1, 2)``, softmax over the radix axis, the
weighted sum of the splits); the 3x3 average pool that takes the stride after (``avd_last``) or before
(``avd_first``) the split attention; the shortcut's ``AvgPool2d(2, ceil_mode=True, count_include_pad=False)`` on odd
maps; the in-place residual ``out += shortcut``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from tests.models.ghostnet import SelectAdaptivePool2d, make_divisible


class RadixSoftmax(nn.Module):
    def __init__(self, radix, cardinality):
        super().__init__()
        self.radix = radix
        self.cardinality = cardinality

    def forward(self, x):
        batch = x.size(0)
        if self.radix > 1:
            x = x.view(batch, self.cardinality, self.radix, -1).transpose(1, 2)
            x = F.softmax(x, dim=1)
            return x.reshape(batch, -1)
        return x.sigmoid()


class SplitAttn(nn.Module):
    """timm.layers.SplitAttn: the radix branches of one grouped conv, weighted by an attention over the radix."""

    def __init__(self, in_channels, out_channels, stride=1, groups=1, radix=2, rd_ratio=0.25, rd_divisor=8):
        super().__init__()
        self.radix = radix
        mid_chs = out_channels * radix
        attn_chs = make_divisible(in_channels * radix * rd_ratio, min_value=32, divisor=rd_divisor)
        self.conv = nn.Conv2d(in_channels, mid_chs, 3, stride, 1, groups=groups * radix, bias=False)
        self.bn0 = nn.BatchNorm2d(mid_chs)
        self.drop = nn.Identity()
        self.act0 = nn.ReLU(inplace=True)
        self.fc1 = nn.Conv2d(out_channels, attn_chs, 1, groups=groups)
        self.bn1 = nn.BatchNorm2d(attn_chs)
        self.act1 = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(attn_chs, mid_chs, 1, groups=groups)
        self.rsoftmax = RadixSoftmax(radix, groups)

    def forward(self, x):
        x = self.act0(self.drop(self.bn0(self.conv(x))))
        B, RC, H, W = x.shape
        if self.radix > 1:
            x = x.reshape((B, self.radix, RC // self.radix, H, W))
            x_gap = x.sum(dim=1)
        else:
            x_gap = x
        x_gap = x_gap.mean((2, 3), keepdim=True)
        x_gap = self.act1(self.bn1(self.fc1(x_gap)))
        x_attn = self.rsoftmax(self.fc2(x_gap)).view(B, -1, 1, 1)
        if self.radix > 1:
            out = (x * x_attn.reshape((B, self.radix, RC // self.radix, 1, 1))).sum(dim=1)
        else:
            out = x * x_attn
        return out.contiguous()


class ResNestBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, radix=2, cardinality=1, base_width=64,
                 avd=True, avd_first=False):
        super().__init__()
        group_width = int(planes * (base_width / 64.)) * cardinality
        avd_stride = stride if avd and stride > 1 else 0
        if avd_stride:
            stride = 1
        self.radix = radix
        self.conv1 = nn.Conv2d(inplanes, group_width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(group_width)
        self.act1 = nn.ReLU(inplace=True)
        self.avd_first = nn.AvgPool2d(3, avd_stride, padding=1) if avd_stride and avd_first else None
        self.conv2 = SplitAttn(group_width, group_width, stride=stride, groups=cardinality, radix=radix)
        self.bn2 = nn.Identity()
        self.drop_block = nn.Identity()
        self.act2 = nn.Identity()
        self.avd_last = nn.AvgPool2d(3, avd_stride, padding=1) if avd_stride and not avd_first else None
        self.conv3 = nn.Conv2d(group_width, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.act3 = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.drop_path = None

    def forward(self, x):
        shortcut = x
        out = self.act1(self.bn1(self.conv1(x)))
        if self.avd_first is not None:
            out = self.avd_first(out)
        out = self.act2(self.drop_block(self.bn2(self.conv2(out))))
        if self.avd_last is not None:
            out = self.avd_last(out)
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            shortcut = self.downsample(x)
        out += shortcut
        return self.act3(out)


def downsample_avg(in_channels, out_channels, stride):
    """timm's ``downsample_avg``: a 2x2 average pool that rounds up and ignores padding, then a 1x1 conv and BN."""
    pool = nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False) if stride > 1 else nn.Identity()
    return nn.Sequential(pool, nn.Conv2d(in_channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels))


class ResNet(nn.Module):
    """timm's ResNet as ``resnest*`` builds it: deep stem (``stem_type="deep"``), ``avg_down`` shortcuts."""

    def __init__(self, layers, channels, stem_width, num_classes=10, in_chans=3, drop_rate=0., **block_args):
        super().__init__()
        self.drop_rate = drop_rate
        inplanes = stem_width * 2
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_chans, stem_width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(stem_width),
            nn.ReLU(inplace=True), nn.Conv2d(stem_width, stem_width, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(stem_width), nn.ReLU(inplace=True),
            nn.Conv2d(stem_width, inplanes, 3, stride=1, padding=1, bias=False))
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.act1 = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        for i, (blocks, planes) in enumerate(zip(layers, channels)):
            stride = 1 if i == 0 else 2
            stage = []
            for j in range(blocks):
                downsample = None
                if j == 0 and (stride != 1 or inplanes != planes * 4):
                    downsample = downsample_avg(inplanes, planes * 4, stride)
                stage.append(ResNestBottleneck(inplanes, planes, stride if j == 0 else 1, downsample, **block_args))
                inplanes = planes * 4
            self.add_module(f"layer{i + 1}", nn.Sequential(*stage))
        self.num_features = inplanes
        self.global_pool = SelectAdaptivePool2d()
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = self.maxpool(self.act1(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.global_pool(x).flatten(1)
        if self.drop_rate:
            x = F.dropout(x, p=float(self.drop_rate), training=self.training)
        return self.fc(x)


def resnest_small() -> nn.Module:
    """``resnest14d``'s form (radix 2, one group, the pool after the split attention), widths / 8."""
    return ResNet([1, 1, 1, 1], (8, 16, 32, 64), stem_width=8, radix=2, cardinality=1, base_width=64, avd=True,
                  avd_first=False)


def resnest_4s2x_small() -> nn.Module:
    """``resnest50d_4s2x40d``'s form (radix 4, two groups, the pool before the split attention); base width 32 so
    that the narrow group widths divide into the conv's ``groups * radix`` = 8 groups."""
    return ResNet([2, 1, 1, 1], (16, 32, 32, 64), stem_width=8, radix=4, cardinality=2, base_width=32, avd=True,
                  avd_first=True)
