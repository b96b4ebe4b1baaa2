"""Torch references of the zoo's VGG-BN and MobileNetV2 (imports torch; never used by a zoo model at runtime).

torchvision is not a dependency, so these re-state torchvision's ``vgg11_bn``, ``vgg16_bn`` and ``mobilenet_v2``
with its module names: their ``state_dict`` has exactly torchvision's keys, and ``porter convert --arch vgg11_bn``
builds them (``model_info(name)["torch_model"]``). The ResNets' references are in :mod:`porter.examples`. Each
factory takes the same keyword arguments as the zoo factory of the same name (torchvision's, plus
``width_divisor``/``hidden`` for VGG to build reduced models with the same names). Weights are random.
"""

from __future__ import annotations

import torch
from torch import nn

VGG_CONFIGS = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
}


class VGG(nn.Module):
    """torchvision's VGG with BatchNorm: ``features`` (flat numbering), ``avgpool`` (7x7), ``classifier.0/3/6``."""

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
    """torchvision's MobileNetV2: ``features.0`` stem, ``features.1-17`` inverted residuals, ``features.18`` head."""

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


def vgg11_bn(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-11 with BatchNorm (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg11"], num_classes, **kwargs)


def vgg16_bn(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-16 with BatchNorm (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg16"], num_classes, **kwargs)


def mobilenet_v2(num_classes: int = 1000, **kwargs) -> MobileNetV2:
    """MobileNetV2 (random weights); ``kwargs``: ``width_mult``, ``dropout``."""
    return MobileNetV2(num_classes, **kwargs)

