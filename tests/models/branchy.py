"""DenseNet (concatenating dense blocks) and GoogLeNet (Inception branches) at test size, torchvision's names.

DenseNet, and GoogLeNet's ``BasicConv2d`` and ``Inception``, are the zoo tests' torchvision twins
(``tests/zoo/twins``). The GoogLeNet here is a shortened one (inception 3a, 3b, 4a, 5a of torchvision's nine, no
auxiliary heads, ``transform_input`` on) that keeps torchvision's names for the stages it has.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from tests.zoo.twins.densenet import DenseNet
from tests.zoo.twins.googlenet import BasicConv2d, Inception


# ---------------------------------------------------------------------------------------------------- DenseNet
def densenet_small(num_classes: int = 10) -> DenseNet:
    return DenseNet(growth_rate=4, block_config=(2, 2), num_init_features=8, bn_size=2, num_classes=num_classes)


# ---------------------------------------------------------------------------------------------------- GoogLeNet
class GoogLeNet(nn.Module):
    """GoogLeNet with ``transform_input`` (per-channel affine on ``x[:, c]``, re-concatenated), inception stages
    3a/3b, 4a and 5a (torchvision has 3a-3b, 4a-4e, 5a-5b; the names kept here are the same), eval mode only
    (no auxiliary heads)."""

    def __init__(self, widths: Sequence[int] = (8, 8, 16), num_classes: int = 1000, transform_input: bool = True,
                 dropout: float = 0.2):
        super().__init__()
        c1, c2, c3 = widths
        self.transform_input = transform_input
        self.conv1 = BasicConv2d(3, c1, kernel_size=7, stride=2, padding=3)
        self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = BasicConv2d(c1, c2, kernel_size=1)
        self.conv3 = BasicConv2d(c2, c3, kernel_size=3, padding=1)
        self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception3a = Inception(c3, 4, 4, 8, 2, 4, 4)     # -> 20
        self.inception3b = Inception(20, 8, 8, 8, 2, 4, 4)     # -> 24
        self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception4a = Inception(24, 8, 4, 12, 2, 6, 6)    # -> 32
        self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)
        self.inception5a = Inception(32, 8, 8, 12, 4, 6, 6)    # -> 32
        self.aux1 = None
        self.aux2 = None
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(32, num_classes)

    def _transform_input(self, x: torch.Tensor) -> torch.Tensor:
        # Re-normalise ImageNet-standardised input to the [-1, 1] convention the original weights expect.
        if not self.transform_input:
            return x
        x_ch0 = torch.unsqueeze(x[:, 0], 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5
        x_ch1 = torch.unsqueeze(x[:, 1], 1) * (0.224 / 0.5) + (0.456 - 0.5) / 0.5
        x_ch2 = torch.unsqueeze(x[:, 2], 1) * (0.225 / 0.5) + (0.406 - 0.5) / 0.5
        return torch.cat((x_ch0, x_ch1, x_ch2), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._transform_input(x)
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.maxpool4(self.inception4a(x))
        x = self.inception5a(x)
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(self.dropout(x))


def googlenet_small(num_classes: int = 10) -> GoogLeNet:
    return GoogLeNet(num_classes=num_classes)
