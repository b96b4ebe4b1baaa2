"""DenseNet's torch twin (torchvision.models.densenet's structure and names) and its zoo cases."""

from collections import OrderedDict
from typing import List, Union

import torch
import torch.nn.functional as F
from torch import nn

from . import Case


class _DenseLayer(nn.Module):
    def __init__(self, num_input_features, growth_rate, bn_size, drop_rate):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)
        self.drop_rate = float(drop_rate)

    def forward(self, inputs: Union[torch.Tensor, List[torch.Tensor]]) -> torch.Tensor:
        # typed (torchvision overloads it) so torch.jit.script compiles it: a tensor or the list of earlier maps
        prev = torch.cat([inputs] if isinstance(inputs, torch.Tensor) else inputs, 1)
        out = self.conv1(self.relu1(self.norm1(prev)))
        out = self.conv2(self.relu2(self.norm2(out)))
        if self.drop_rate > 0:
            out = F.dropout(out, p=self.drop_rate, training=self.training)
        return out


class _DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers, num_input_features, bn_size, growth_rate, drop_rate):
        super().__init__()
        for i in range(num_layers):
            self.add_module(f"denselayer{i + 1}",
                            _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size, drop_rate))

    def forward(self, init_features: torch.Tensor) -> torch.Tensor:
        features = [init_features]
        for _, layer in self.items():
            features.append(layer(features))
        return torch.cat(features, 1)


class _Transition(nn.Sequential):
    def __init__(self, num_input_features, num_output_features):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    def __init__(self, growth_rate=32, block_config=(6, 12, 24, 16), num_init_features=64, bn_size=4, drop_rate=0,
                 num_classes=1000, memory_efficient=False):
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, num_init_features, kernel_size=7, stride=2, padding=3, bias=False)),
            ("norm0", nn.BatchNorm2d(num_init_features)),
            ("relu0", nn.ReLU(inplace=True)),
            ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
        ]))
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            self.features.add_module(f"denseblock{i + 1}",
                                     _DenseBlock(num_layers, num_features, bn_size, growth_rate, drop_rate))
            num_features = num_features + num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add_module(f"transition{i + 1}", _Transition(num_features, num_features // 2))
                num_features = num_features // 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)

    def forward(self, x):
        out = F.relu(self.features(x), inplace=True)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1))


def _builder(growth_rate, block_config, num_init_features):
    def build(**kwargs):
        config = {"growth_rate": growth_rate, "block_config": block_config, "num_init_features": num_init_features}
        return DenseNet(**{**config, **kwargs})
    return build


_SMALL = {"num_classes": 7, "growth_rate": 4, "num_init_features": 8, "bn_size": 2}
CASES = {
    "densenet121": Case(_builder(32, (6, 12, 24, 16), 64), _SMALL, train=True, train_input=(4, 3, 64, 64),
                        num_params=7978856),
    "densenet161": Case(_builder(48, (6, 12, 36, 24), 96), _SMALL, num_params=28681000),
    "densenet169": Case(_builder(32, (6, 12, 32, 32), 64), _SMALL, num_params=14149480),
    "densenet201": Case(_builder(32, (6, 12, 48, 32), 64), _SMALL, num_params=20013928),
}
