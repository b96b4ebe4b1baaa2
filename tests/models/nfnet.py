"""A twin of timm's ``NormFreeNet`` (``dm_nfnet_f0`` structure and ``state_dict`` names: ``stem.conv1``..``conv4``,
``stages.<i>.<j>.downsample.conv``, ``.conv1``/``conv2``/``conv2b``/``conv3`` (each with a ``gain``),
``.attn_last.fc1``/``fc2``, ``.skipinit_gain``, ``final_conv``, ``head.fc``), small sizes; ``same_padding=False``
with the gamma folded into the conv's scale (timm's ``nfnet_f0``) too.

Stresses: ``ScaledStdConv2d`` standardises its weight in every forward with ``F.batch_norm(weight.reshape(1, O,
-1), None, None, weight=gain * scale, training=True, momentum=0.)`` (a batch norm in training form with no running
statistics, on a parameter: its gradient reaches ``weight`` and ``gain``); ``ScaledStdConv2dSame``'s TF "same"
padding computed from the input size in the forward (``math.ceil(ih / stride)``, an asymmetric ``F.pad``);
``GammaAct`` (``F.gelu(x).mul_(gamma)``); ``NormFreeBlock``'s ``act1(x) * beta`` pre-activation, skipinit
(``out.mul_(self.skipinit_gain)``, a 0-d parameter), ``attn_gain * se(out)``, ``out * alpha + shortcut``;
``DownsampleAvg`` (``AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)`` + 1x1 conv) on odd maps.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

_GELU_GAMMA = 1.7015043497085571  # timm's _nonlin_gamma['gelu']


def get_padding(kernel_size, stride=1, dilation=1):
    return ((stride - 1) + dilation * (kernel_size - 1)) // 2


def get_same_padding(x: int, kernel_size: int, stride: int, dilation: int):
    return max((math.ceil(x / stride) - 1) * stride + (kernel_size - 1) * dilation + 1 - x, 0)


def pad_same(x, kernel_size, stride, dilation=(1, 1), value=0):
    ih, iw = x.size()[-2:]
    pad_h = get_same_padding(ih, kernel_size[0], stride[0], dilation[0])
    pad_w = get_same_padding(iw, kernel_size[1], stride[1], dilation[1])
    return F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2), value=value)


class ScaledStdConv2d(nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=None, dilation=1, groups=1,
                 bias=True, gamma=1.0, eps=1e-6, gain_init=1.0):
        if padding is None:
            padding = get_padding(kernel_size, stride, dilation)
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
        self.gain = nn.Parameter(torch.full((self.out_channels, 1, 1, 1), gain_init))
        self.scale = gamma * self.weight[0].numel() ** -0.5
        self.eps = eps

    def forward(self, x):
        weight = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None,
                              weight=(self.gain * self.scale).view(-1), training=True, momentum=0.,
                              eps=self.eps).reshape_as(self.weight)
        return F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ScaledStdConv2dSame(nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding="SAME", dilation=1, groups=1,
                 bias=True, gamma=1.0, eps=1e-6, gain_init=1.0):
        is_dynamic = not (stride == 1 and (dilation * (kernel_size - 1)) % 2 == 0)
        padding = 0 if is_dynamic else get_padding(kernel_size, stride, dilation)
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                         dilation=dilation, groups=groups, bias=bias)
        self.gain = nn.Parameter(torch.full((self.out_channels, 1, 1, 1), gain_init))
        self.scale = gamma * self.weight[0].numel() ** -0.5
        self.same_pad = is_dynamic
        self.eps = eps

    def forward(self, x):
        if self.same_pad:
            x = pad_same(x, self.kernel_size, self.stride, self.dilation)
        weight = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None,
                              weight=(self.gain * self.scale).view(-1), training=True, momentum=0.,
                              eps=self.eps).reshape_as(self.weight)
        return F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


def _gelu(x, inplace: bool = False):
    return F.gelu(x)


class GammaAct(nn.Module):
    def __init__(self, act_type="gelu", gamma: float = 1.0, inplace=False):
        super().__init__()
        self.act_fn = _gelu
        self.gamma = gamma
        self.inplace = inplace

    def forward(self, x):
        return self.act_fn(x, inplace=self.inplace).mul_(self.gamma)


class SEModule(nn.Module):
    def __init__(self, channels, rd_ratio=0.5):
        super().__init__()
        rd_channels = int(channels * rd_ratio)
        self.fc1 = nn.Conv2d(channels, rd_channels, kernel_size=1, bias=True)
        self.bn = nn.Identity()
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(rd_channels, channels, kernel_size=1, bias=True)
        self.gate = nn.Sigmoid()

    def forward(self, x):
        x_se = x.mean((2, 3), keepdim=True)
        x_se = self.fc1(x_se)
        x_se = self.act(self.bn(x_se))
        x_se = self.fc2(x_se)
        return x * self.gate(x_se)


class DownsampleAvg(nn.Module):
    def __init__(self, in_chs, out_chs, stride=1, conv_layer=ScaledStdConv2d):
        super().__init__()
        if stride > 1:
            self.pool = nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False)
        else:
            self.pool = nn.Identity()
        self.conv = conv_layer(in_chs, out_chs, 1, stride=1)

    def forward(self, x):
        return self.conv(self.pool(x))


class NormFreeBlock(nn.Module):
    def __init__(self, in_chs, out_chs, stride=1, alpha=1.0, beta=1.0, bottle_ratio=0.5, group_size=None,
                 extra_conv=True, skipinit=True, attn_layer=None, attn_gain=2.0, act_layer=None, conv_layer=None):
        super().__init__()
        mid_chs = int(out_chs * bottle_ratio)
        groups = 1 if not group_size else mid_chs // group_size
        if group_size:
            mid_chs = group_size * groups
        self.alpha, self.beta, self.attn_gain = alpha, beta, attn_gain
        if in_chs != out_chs or stride != 1:
            self.downsample = DownsampleAvg(in_chs, out_chs, stride=stride, conv_layer=conv_layer)
        else:
            self.downsample = None
        self.act1 = act_layer()
        self.conv1 = conv_layer(in_chs, mid_chs, 1)
        self.act2 = act_layer(inplace=True)
        self.conv2 = conv_layer(mid_chs, mid_chs, 3, stride=stride, groups=groups)
        if extra_conv:
            self.act2b = act_layer(inplace=True)
            self.conv2b = conv_layer(mid_chs, mid_chs, 3, stride=1, groups=groups)
        else:
            self.act2b = self.conv2b = None
        self.attn = None
        self.act3 = act_layer()
        self.conv3 = conv_layer(mid_chs, out_chs, 1, gain_init=1. if skipinit else 0.)
        self.attn_last = attn_layer(out_chs) if attn_layer is not None else None
        self.drop_path = nn.Identity()
        self.skipinit_gain = nn.Parameter(torch.tensor(0.)) if skipinit else None

    def forward(self, x):
        out = self.act1(x) * self.beta
        shortcut = x
        if self.downsample is not None:
            shortcut = self.downsample(out)
        out = self.conv1(out)
        out = self.conv2(self.act2(out))
        if self.conv2b is not None:
            out = self.conv2b(self.act2b(out))
        if self.attn is not None:
            out = self.attn_gain * self.attn(out)
        out = self.conv3(self.act3(out))
        if self.attn_last is not None:
            out = self.attn_gain * self.attn_last(out)
        out = self.drop_path(out)
        if self.skipinit_gain is not None:
            out.mul_(self.skipinit_gain)
        return out * self.alpha + shortcut


class ClassifierHead(nn.Module):
    def __init__(self, in_features, num_classes):
        super().__init__()
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return self.fc(self.drop(self.flatten(self.global_pool(x))))


class NormFreeNet(nn.Module):
    """``dm_nfnet``'s layout (deep_quad stem, reg=False blocks with SE after conv3, final conv + act, head)."""

    def __init__(self, depths=(1, 2, 1, 1), channels=(32, 48, 64, 64), stem_chs=16, group_size=8,
                 num_features=64, num_classes=10, same_padding=True, gamma_in_act=True, alpha=0.2):
        super().__init__()
        conv_layer = ScaledStdConv2dSame if same_padding else ScaledStdConv2d
        if gamma_in_act:
            act_layer = partial(GammaAct, "gelu", gamma=_GELU_GAMMA)
            conv_layer = partial(conv_layer, eps=1e-5)
        else:
            act_layer = partial(nn.GELU)
            act_layer = _InplaceArg(act_layer)
            conv_layer = partial(conv_layer, gamma=_GELU_GAMMA, eps=1e-5)
        attn_layer = partial(SEModule, rd_ratio=0.5)

        stem_widths = (stem_chs // 8, stem_chs // 4, stem_chs // 2, stem_chs)
        stem, in_chs = OrderedDict(), 3
        for i, (c, s) in enumerate(zip(stem_widths, (2, 1, 1, 2))):
            stem[f"conv{i + 1}"] = conv_layer(in_chs, c, kernel_size=3, stride=s)
            if i != 3:
                stem[f"act{i + 2}"] = act_layer(inplace=True)
            in_chs = c
        self.stem = nn.Sequential(stem)

        prev_chs, expected_var, stages = stem_chs, 1.0, []
        for stage_idx, depth in enumerate(depths):
            stride = 1 if stage_idx == 0 else 2
            blocks = []
            for block_idx in range(depth):
                blocks.append(NormFreeBlock(
                    prev_chs, channels[stage_idx], stride=stride if block_idx == 0 else 1, alpha=alpha,
                    beta=1. / expected_var ** 0.5, group_size=group_size, attn_layer=attn_layer,
                    act_layer=act_layer, conv_layer=conv_layer))
                if block_idx == 0:
                    expected_var = 1.
                expected_var += alpha ** 2
                prev_chs = channels[stage_idx]
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.final_conv = conv_layer(prev_chs, num_features, 1)
        self.final_act = act_layer(inplace=True)
        self.head = ClassifierHead(num_features, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.stages(x)
        x = self.final_act(self.final_conv(x))
        return self.head(x)


class _InplaceArg:
    """timm's ``get_act_layer('gelu')`` class takes ``inplace=``; ``nn.GELU`` does not: drop it."""

    def __init__(self, cls):
        self.cls = cls

    def __call__(self, inplace=False):
        return self.cls()


def dm_nfnet_small():
    return NormFreeNet()


def nfnet_small():
    """timm's ``nfnet_f0`` flavour: symmetric static padding, gamma in the conv's scale, plain GELU."""
    return NormFreeNet(same_padding=False, gamma_in_act=False)
