"""Small torch models whose forward branches on ``self.training``, for the training-mode capture's tests
(``converters/capture_train_graph.py``): written here, shaped like torchvision's Inception v3 / GoogLeNet root (an
auxiliary head run and returned in a named tuple only in training)."""

from __future__ import annotations

from collections import namedtuple

import torch
import torch.nn as nn

AuxOutputs = namedtuple("AuxOutputs", ["logits", "aux_logits"])


class AuxNet(nn.Module):
    """An auxiliary classifier (conv, batch norm, pool, linear) on the stem's features, computed and returned with
    the logits in training only; eval returns the logits alone."""

    def __init__(self, classes: int = 5, noise: float = 0.0):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.aux = nn.Sequential(nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(4, classes))
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, stride=2), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                  nn.Flatten())
        self.fc = nn.Linear(8, classes)
        self.noise = Noise(noise)

    def forward(self, x):
        x = self.stem(x)
        aux = self.aux(x) if self.training else None
        x = self.fc(self.noise(self.body(x)))
        return AuxOutputs(x, aux) if self.training else x


class FlatAux(nn.Module):
    """An auxiliary head, in training only, on the stem's map plus a position embedding of a fixed grid, flattened
    into a linear layer: the training graph needs the example's height and width, the eval graph (pooled) takes
    any."""

    def __init__(self, classes: int = 3, height: int = 6, width: int = 5):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.pos = nn.Parameter(torch.zeros(1, 4, height, width))
        self.aux = nn.Linear(4 * height * width, classes)
        self.fc = nn.Linear(4, classes)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        logits = self.fc(x.mean((2, 3)))
        return (logits, self.aux((x + self.pos).flatten(1))) if self.training else logits


class Noise(nn.Module):
    """Gaussian noise added in training (a random difference: the port keeps refusing it)."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x + torch.randn_like(x) * self.scale if self.training and self.scale else x


class Residual(nn.Module):
    """``if self.training: x = x + f(x)`` in a submodule: a deterministic branch below the root."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        return x + torch.tanh(self.proj(x)) if self.training else x


def seeded(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter and batch norm statistic random (none left at torch's 0/1 initial values)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                values = torch.randn(tensor.shape, generator=generator) * 0.3
                tensor.copy_(values.abs() + 0.5 if name.endswith("running_var") else values)
    return model.eval()
