"""Torch references for the zoo tests: torchvision's architectures with torchvision's module names.

torchvision is not a dependency, so VGG-BN and MobileNetV2 are re-stated here (ResNet comes from
``porter.examples``). Each twin takes the same keyword arguments as the zoo factory of the same name, so a reduced
configuration builds on both sides; ``TWINS`` maps every zoo name to ``(torch factory, reduced kwargs)``.
"""

from __future__ import annotations

import torch
from torch import nn

from porter import examples

VGG_CONFIGS = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
}


class VGG(nn.Module):
    def __init__(self, cfg, num_classes=1000, width_divisor=1, hidden=4096, dropout=0.5):
        super().__init__()
        layers, channels = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                continue
            width = max(1, v // width_divisor)
            layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1), nn.BatchNorm2d(width), nn.ReLU(True)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(channels * 7 * 7, hidden), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, inp, oup, kernel_size=3, stride=1, groups=1):
        super().__init__(nn.Conv2d(inp, oup, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(oup), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [ConvBNReLU6(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
               [6, 320, 1, 1]]

    def __init__(self, num_classes=1000, width_mult=1.0, dropout=0.2):
        super().__init__()
        channels, last = _make_divisible(32 * width_mult), _make_divisible(1280 * max(1.0, width_mult))
        features = [ConvBNReLU6(3, channels, stride=2)]
        for t, c, n, s in self.SETTING:
            out = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(channels, out, s if i == 0 else 1, t))
                channels = out
        features.append(ConvBNReLU6(channels, last, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def vgg11_bn(num_classes=1000, **kwargs):
    return VGG(VGG_CONFIGS["vgg11"], num_classes, **kwargs)


def vgg16_bn(num_classes=1000, **kwargs):
    return VGG(VGG_CONFIGS["vgg16"], num_classes, **kwargs)


def mobilenet_v2(num_classes=1000, **kwargs):
    return MobileNetV2(num_classes, **kwargs)


_SMALL_RESNET = {"num_classes": 7, "widths": (8, 16, 24, 32)}
TWINS = {
    "resnet18": (examples.resnet18, _SMALL_RESNET),
    "resnet34": (examples.resnet34, _SMALL_RESNET),
    "resnet50": (examples.resnet50, {"num_classes": 7, "widths": (4, 8, 12, 16)}),
    "vgg11_bn": (vgg11_bn, {"num_classes": 7, "width_divisor": 8, "hidden": 32}),
    "vgg16_bn": (vgg16_bn, {"num_classes": 7, "width_divisor": 8, "hidden": 32}),
    "mobilenet_v2": (mobilenet_v2, {"num_classes": 7, "width_mult": 0.25}),
}
