"""VGG with BatchNorm, AlexNet and SqueezeNet 1.1 at test size, with torchvision's module names.

VGG is the package's own (:class:`porter.examples.VGG`) with a small configuration; AlexNet and SqueezeNet's
``Fire`` are the zoo tests' torchvision twins (``tests/zoo/twins``). torchvision's SqueezeNet fixes its widths, so
the small SqueezeNet 1.1 layout (fewer, narrower fires) is built here from the twin's ``Fire``.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from porter.examples import VGG
from tests.zoo.twins.alexnet import AlexNet
from tests.zoo.twins.squeezenet import Fire


def vgg_bn_small(num_classes: int = 10) -> VGG:
    """VGG-11-with-BN shape at 1/8 width: 8-M-16-M-32-32-M."""
    return VGG([8, "M", 16, "M", 32, 32, "M"], num_classes=num_classes, hidden=64)


def alexnet_small(num_classes: int = 10) -> AlexNet:
    return AlexNet(widths=(8, 16, 24, 16, 16), hidden=64, num_classes=num_classes)


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
