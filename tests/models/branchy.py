"""DenseNet (concatenating dense blocks) and GoogLeNet (Inception branches) at test size, torchvision's names."""

from __future__ import annotations

from collections import OrderedDict
from typing import List, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------------------------------------------- DenseNet
class _DenseLayer(nn.Module):
    """BN-ReLU-1x1 bottleneck, BN-ReLU-3x3 to ``growth_rate`` channels, applied to the concat of all inputs."""

    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int, drop_rate: float = 0.0):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)
        self.drop_rate = float(drop_rate)

    def forward(self, features: Union[torch.Tensor, List[torch.Tensor]]) -> torch.Tensor:
        prev = [features] if isinstance(features, torch.Tensor) else features
        bottleneck = self.conv1(self.relu1(self.norm1(torch.cat(prev, 1))))
        new = self.conv2(self.relu2(self.norm2(bottleneck)))
        if self.drop_rate > 0:
            new = F.dropout(new, p=self.drop_rate, training=self.training)
        return new


class _DenseBlock(nn.ModuleDict):
    """Layers ``denselayer1..n``; each sees the concatenation of the block input and all earlier outputs."""

    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int,
                 drop_rate: float = 0.0):
        super().__init__()
        for i in range(num_layers):
            layer = _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size, drop_rate)
            self.add_module(f"denselayer{i + 1}", layer)

    def forward(self, init_features: torch.Tensor) -> torch.Tensor:
        features = [init_features]
        for _, layer in self.items():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, num_input_features: int, num_output_features: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    """DenseNet-BC: stem (conv0, norm0, relu0, pool0), dense blocks with halving transitions, norm5, classifier."""

    def __init__(self, growth_rate: int = 32, block_config: Sequence[int] = (6, 12, 24, 16),
                 num_init_features: int = 64, bn_size: int = 4, drop_rate: float = 0.0, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, num_init_features, kernel_size=7, stride=2, padding=3, bias=False)),
            ("norm0", nn.BatchNorm2d(num_init_features)),
            ("relu0", nn.ReLU(inplace=True)),
            ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
        ]))
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = _DenseBlock(num_layers, num_features, bn_size, growth_rate, drop_rate)
            self.features.add_module(f"denseblock{i + 1}", block)
            num_features += num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add_module(f"transition{i + 1}", _Transition(num_features, num_features // 2))
                num_features //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.features(x), inplace=True)
        out = torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1)
        return self.classifier(out)


def densenet_small(num_classes: int = 10) -> DenseNet:
    return DenseNet(growth_rate=4, block_config=(2, 2), num_init_features=8, bn_size=2, num_classes=num_classes)


# ---------------------------------------------------------------------------------------------------- GoogLeNet
class BasicConv2d(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, **kwargs):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    """Four parallel branches (1x1; 1x1-3x3; 1x1-3x3; 3x3 max pool-1x1) concatenated on channels.

    As in torchvision, the third branch uses a 3x3 conv where the paper has 5x5; the pool branch uses
    ceil_mode with stride 1 (same size).
    """

    def __init__(self, in_channels: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int, ch5x5: int,
                 pool_proj: int):
        super().__init__()
        self.branch1 = BasicConv2d(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(BasicConv2d(in_channels, ch3x3red, kernel_size=1),
                                     BasicConv2d(ch3x3red, ch3x3, kernel_size=3, padding=1))
        self.branch3 = nn.Sequential(BasicConv2d(in_channels, ch5x5red, kernel_size=1),
                                     BasicConv2d(ch5x5red, ch5x5, kernel_size=3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
                                     BasicConv2d(in_channels, pool_proj, kernel_size=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


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
