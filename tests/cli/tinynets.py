"""Small torch models the CLI tests save as real checkpoints (importable as ``tinynets`` via --model)."""

import torch
from torch import nn


class TinyNet(nn.Module):
    """conv-bn-relu-maxpool-conv-avgpool-linear on (N, C, H, W); any H, W >= 4."""

    def __init__(self, in_channels: int = 3, num_classes: int = 5, width: int = 8):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        x = self.relu(self.conv2(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def tiny_net(**kwargs) -> TinyNet:
    """A factory function, as `--model tests.cli.tinynets:tiny_net` names it."""
    return TinyNet(**kwargs)


def seeded(seed: int = 0, **kwargs) -> TinyNet:
    """TinyNet with seeded random weights and non-trivial BatchNorm statistics, in eval mode."""
    torch.manual_seed(seed)
    model = TinyNet(**kwargs)
    with torch.no_grad():
        model.bn1.running_mean.uniform_(-0.5, 0.5)
        model.bn1.running_var.uniform_(0.5, 2.0)
        model.bn1.weight.uniform_(0.5, 1.5)
    return model.eval()


class NeedsUnsupported(nn.Module):
    """Uses ops no converter is expected to support, to exercise the unsupported-ops error."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return torch.lgamma(y.abs() + 1) + torch.special.erfcx(y)


class TwoInputs(nn.Module):
    """Two image inputs of different channel counts, summed after a conv each."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x, y):
        return torch.relu(self.a(x) + self.b(y))
