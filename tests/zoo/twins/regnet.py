"""torch twin of torchvision's RegNet X/Y (``torchvision.models.regnet``): same modules, names and builders. The
RegNet parameters (``depth``, ``w_0``, ``w_a``, ``w_m``, ``group_width``; Porter's, also taken by the zoo factories)
may be overridden to build reduced models with the same names."""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn

from . import Case
from ._mobile_ops import Conv2dNormActivation, SqueezeExcitation, make_divisible


class BottleneckTransform(nn.Sequential):
    def __init__(self, width_in, width_out, stride, norm_layer, activation_layer, group_width, bottleneck_multiplier,
                 se_ratio):
        layers = OrderedDict()
        w_b = int(round(width_out * bottleneck_multiplier))
        g = w_b // group_width
        layers["a"] = Conv2dNormActivation(width_in, w_b, kernel_size=1, stride=1, norm_layer=norm_layer,
                                           activation_layer=activation_layer)
        layers["b"] = Conv2dNormActivation(w_b, w_b, kernel_size=3, stride=stride, groups=g, norm_layer=norm_layer,
                                           activation_layer=activation_layer)
        if se_ratio:
            layers["se"] = SqueezeExcitation(w_b, int(round(se_ratio * width_in)), activation=activation_layer)
        layers["c"] = Conv2dNormActivation(w_b, width_out, kernel_size=1, stride=1, norm_layer=norm_layer,
                                           activation_layer=None)
        super().__init__(layers)


class ResBottleneckBlock(nn.Module):
    def __init__(self, width_in, width_out, stride, norm_layer, activation_layer, group_width=1,
                 bottleneck_multiplier=1.0, se_ratio=None):
        super().__init__()
        self.proj = None
        if width_in != width_out or stride != 1:
            self.proj = Conv2dNormActivation(width_in, width_out, kernel_size=1, stride=stride, norm_layer=norm_layer,
                                             activation_layer=None)
        self.f = BottleneckTransform(width_in, width_out, stride, norm_layer, activation_layer, group_width,
                                     bottleneck_multiplier, se_ratio)
        self.activation = activation_layer(inplace=True)

    def forward(self, x):
        x = self.proj(x) + self.f(x) if self.proj is not None else x + self.f(x)
        return self.activation(x)


class AnyStage(nn.Sequential):
    def __init__(self, width_in, width_out, stride, depth, norm_layer, activation_layer, group_width,
                 bottleneck_multiplier, se_ratio=None, stage_index=0):
        super().__init__()
        for i in range(depth):
            self.add_module(f"block{stage_index}-{i}", ResBottleneckBlock(
                width_in if i == 0 else width_out, width_out, stride if i == 0 else 1, norm_layer, activation_layer,
                group_width, bottleneck_multiplier, se_ratio))


def block_params(depth, w_0, w_a, w_m, group_width, bottleneck_multiplier=1.0, se_ratio=None):
    with torch.device("cpu"):  # the tests build default models on the meta device; these are plain numbers
        return _block_params(depth, w_0, w_a, w_m, group_width, bottleneck_multiplier, se_ratio)


def _block_params(depth, w_0, w_a, w_m, group_width, bottleneck_multiplier, se_ratio):
    widths_cont = torch.arange(depth) * w_a + w_0
    block_capacity = torch.round(torch.log(widths_cont / w_0) / math.log(w_m))
    block_widths = (torch.round(torch.divide(w_0 * torch.pow(w_m, block_capacity), 8)) * 8).int().tolist()
    num_stages = len(set(block_widths))
    split_helper = zip(block_widths + [0], [0] + block_widths, block_widths + [0], [0] + block_widths)
    splits = [w != wp or r != rp for w, wp, r, rp in split_helper]
    stage_widths = [w for w, t in zip(block_widths, splits[:-1]) if t]
    stage_depths = torch.diff(torch.tensor([d for d, t in enumerate(splits) if t])).int().tolist()
    multipliers = [bottleneck_multiplier] * num_stages
    widths = [int(w * b) for w, b in zip(stage_widths, multipliers)]
    group_widths = [min(group_width, w_bot) for w_bot in widths]
    ws_bot = [make_divisible(w_bot, g) for w_bot, g in zip(widths, group_widths)]
    stage_widths = [int(w_bot / b) for w_bot, b in zip(ws_bot, multipliers)]
    return list(zip(stage_widths, [2] * num_stages, stage_depths, group_widths, multipliers)), se_ratio


class RegNet(nn.Module):
    def __init__(self, params, num_classes=1000, stem_width=32):
        super().__init__()
        stages, se_ratio = params
        norm_layer, activation = nn.BatchNorm2d, nn.ReLU
        self.stem = Conv2dNormActivation(3, stem_width, kernel_size=3, stride=2, norm_layer=norm_layer,
                                         activation_layer=activation)
        current = stem_width
        blocks = []
        for i, (width_out, stride, depth, group_width, bottleneck) in enumerate(stages):
            blocks.append((f"block{i + 1}", AnyStage(current, width_out, stride, depth, norm_layer, activation,
                                                     group_width, bottleneck, se_ratio, stage_index=i + 1)))
            current = width_out
        self.trunk_output = nn.Sequential(OrderedDict(blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(current, num_classes)

    def forward(self, x):
        return self.fc(self.avgpool(self.trunk_output(self.stem(x))).flatten(start_dim=1))


_SIZES = {
    "regnet_y_400mf": dict(depth=16, w_0=48, w_a=27.89, w_m=2.09, group_width=8, se_ratio=0.25),
    "regnet_y_800mf": dict(depth=14, w_0=56, w_a=38.84, w_m=2.4, group_width=16, se_ratio=0.25),
    "regnet_y_1_6gf": dict(depth=27, w_0=48, w_a=20.71, w_m=2.65, group_width=24, se_ratio=0.25),
    "regnet_y_3_2gf": dict(depth=21, w_0=80, w_a=42.63, w_m=2.66, group_width=24, se_ratio=0.25),
    "regnet_y_8gf": dict(depth=17, w_0=192, w_a=76.82, w_m=2.19, group_width=56, se_ratio=0.25),
    "regnet_y_16gf": dict(depth=18, w_0=200, w_a=106.23, w_m=2.48, group_width=112, se_ratio=0.25),
    "regnet_y_32gf": dict(depth=20, w_0=232, w_a=115.89, w_m=2.53, group_width=232, se_ratio=0.25),
    "regnet_y_128gf": dict(depth=27, w_0=456, w_a=160.83, w_m=2.52, group_width=264, se_ratio=0.25),
    "regnet_x_400mf": dict(depth=22, w_0=24, w_a=24.48, w_m=2.54, group_width=16),
    "regnet_x_800mf": dict(depth=16, w_0=56, w_a=35.73, w_m=2.28, group_width=16),
    "regnet_x_1_6gf": dict(depth=18, w_0=80, w_a=34.01, w_m=2.25, group_width=24),
    "regnet_x_3_2gf": dict(depth=25, w_0=88, w_a=26.31, w_m=2.25, group_width=48),
    "regnet_x_8gf": dict(depth=23, w_0=80, w_a=49.56, w_m=2.88, group_width=120),
    "regnet_x_16gf": dict(depth=22, w_0=216, w_a=55.59, w_m=2.1, group_width=128),
    "regnet_x_32gf": dict(depth=23, w_0=320, w_a=69.86, w_m=2.0, group_width=168),
}
_PARAM_NAMES = ("depth", "w_0", "w_a", "w_m", "group_width", "bottleneck_multiplier", "se_ratio")


def _builder(name):
    def builder(*, weights=None, progress=True, **kwargs):
        settings = dict(_SIZES[name], **{k: kwargs.pop(k) for k in _PARAM_NAMES if k in kwargs})
        return RegNet(block_params(**settings), **kwargs)

    builder.__name__ = name
    return builder


# one reduced shape for every size (4 stages of depths 1-1-3-1 from w_0=8, w_a=8, w_m=2); the default
# configurations are checked separately (keys, shapes, torchvision's parameter counts)
_SMALL = {"num_classes": 7, "stem_width": 8, "depth": 6, "w_0": 8, "w_a": 8.0, "w_m": 2.0, "group_width": 8}
_COUNTS = {"regnet_y_400mf": 4344144, "regnet_y_800mf": 6432512, "regnet_y_1_6gf": 11202430,
           "regnet_y_3_2gf": 19436338, "regnet_y_8gf": 39381472, "regnet_y_16gf": 83590140,
           "regnet_y_32gf": 145046770, "regnet_y_128gf": 644812894, "regnet_x_400mf": 5495976,
           "regnet_x_800mf": 7259656, "regnet_x_1_6gf": 9190136, "regnet_x_3_2gf": 15296552,
           "regnet_x_8gf": 39572648, "regnet_x_16gf": 54278536, "regnet_x_32gf": 107811560}
CASES = {name: Case(_builder(name), _SMALL, inputs=((2, 3, 32, 32), (1, 3, 37, 30)), num_params=_COUNTS[name],
                    train=name == "regnet_y_400mf", train_input=(4, 3, 64, 64))
         for name in _SIZES}
