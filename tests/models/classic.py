"""VGG with BatchNorm, AlexNet and SqueezeNet 1.1 at test size, with torchvision's module names.

VGG is the package's own (:class:`porter.examples.VGG`) with a small configuration.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from porter.examples import VGG


def vgg_bn_small(num_classes: int = 10) -> VGG:
    """VGG-11-with-BN shape at 1/8 width: 8-M-16-M-32-32-M."""
    return VGG([8, "M", 16, "M", 32, 32, "M"], num_classes=num_classes, hidden=64)


class AlexNet(nn.Module):
    """AlexNet: 11x11/4 stem, three max pools (3, 2), AdaptiveAvgPool2d((6, 6)), dropout-linear classifier."""

    def __init__(self, widths: Sequence[int] = (64, 192, 384, 256, 256), hidden: int = 4096,
                 num_classes: int = 1000, dropout: float = 0.5):
        super().__init__()
        c1, c2, c3, c4, c5 = widths
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, kernel_size=11, stride=4, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(c1, c2, kernel_size=5, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(c2, c3, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c3, c4, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c4, c5, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(c5 * 6 * 6, hidden), nn.ReLU(inplace=True),
            nn.Dropout(p=dropout), nn.Linear(hidden, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def alexnet_small(num_classes: int = 10) -> AlexNet:
    return AlexNet(widths=(8, 16, 24, 16, 16), hidden=64, num_classes=num_classes)


class Fire(nn.Module):
    """SqueezeNet fire module: 1x1 squeeze, then 1x1 and 3x3 expands concatenated on channels."""

    def __init__(self, inplanes: int, squeeze_planes: int, expand1x1_planes: int, expand3x3_planes: int):
        super().__init__()
        self.inplanes = inplanes
        self.squeeze = nn.Conv2d(inplanes, squeeze_planes, kernel_size=1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze_planes, expand1x1_planes, kernel_size=1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze_planes, expand3x3_planes, kernel_size=3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat(
            [self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], 1
        )


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 layout: 3x3/2 stem, ceil-mode max pools between fire pairs, conv classifier."""

    def __init__(self, fires: Sequence[Sequence[int]], stem: int = 64, num_classes: int = 1000,
                 dropout: float = 0.5):
        super().__init__()
        layers = [nn.Conv2d(3, stem, kernel_size=3, stride=2), nn.ReLU(inplace=True)]
        for i, cfg in enumerate(fires):
            if i % 2 == 0:
                layers.append(nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True))
            layers.append(Fire(*cfg))
        self.features = nn.Sequential(*layers)
        last = fires[-1][2] + fires[-1][3]
        final_conv = nn.Conv2d(last, num_classes, kernel_size=1)
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), final_conv, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


def squeezenet_small(num_classes: int = 10) -> SqueezeNet:
    """SqueezeNet 1.1 at 1/8 width with the first two fire pairs."""
    fires = [(8, 2, 8, 8), (16, 2, 8, 8), (16, 4, 16, 16), (32, 4, 16, 16)]
    return SqueezeNet(fires, stem=8, num_classes=num_classes)
