"""AlexNet's torch twin (torchvision.models.alexnet's structure and names) and its zoo case."""

import torch
from torch import nn

from . import Case


class AlexNet(nn.Module):
    """torchvision's AlexNet; ``width_divisor`` or explicit ``widths`` (the five convs' channels) and ``hidden``
    shrink it for the tests (same names)."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5, width_divisor: int = 1, hidden: int = 4096,
                 widths=None):
        super().__init__()
        if widths is not None and len(widths) != 5:
            raise ValueError(f"AlexNet: 'widths' takes the five convs' channels, got {widths!r}")
        c1, c2, c3, c4, c5 = widths or (max(1, c // width_divisor) for c in (64, 192, 384, 256, 256))
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
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def alexnet(**kwargs) -> AlexNet:
    return AlexNet(**kwargs)


# 63 pixels is AlexNet's minimum; 127x99 reaches a 3x2 map before the 6x6 adaptive pool (uneven windows)
CASES = {
    "alexnet": Case(alexnet, {"num_classes": 7, "width_divisor": 8, "hidden": 32},
                    inputs=((2, 3, 64, 64), (1, 3, 127, 99)), train=True, train_input=(4, 3, 127, 127),
                    train_kwargs={"dropout": 0.0}, num_params=61100840),
}
