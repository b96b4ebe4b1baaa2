"""AlexNet in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``features.0/3/6/8/10`` (convs), ``classifier.1/4/6`` (linear layers). Example::

    >>> model = zoo.create("alexnet", num_classes=10)
    >>> model(mx.zeros((1, 224, 224, 3))).shape
    (1, 10)
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from porter.layers import AdaptiveAvgPool2d, Conv2d, MaxPool2d

from ._common import apply_sequence
from ._loading import FlattenLinear, TorchCheckpointMixin
from .registry import register_model


class AlexNet(TorchCheckpointMixin, nn.Module):
    """torchvision's AlexNet: five convs with ReLU and three 3x3/2 max pools, a 6x6 adaptive average pool and a
    three-layer ``classifier`` with dropout.

    Args:
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        dropout (float, optional): dropout probability in the classifier (inactive in eval). Default: ``0.5``.
        width_divisor (int, optional): divide every conv width by this (a reduced model with the same names).
            Default: ``1``.
        hidden (int, optional): width of the two hidden classifier layers. Default: ``4096``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; ``H, W >= 63`` (three unpadded 3x3/2 pools).
    """

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5, width_divisor: int = 1, hidden: int = 4096):
        super().__init__()
        if isinstance(width_divisor, bool) or not isinstance(width_divisor, int) or width_divisor <= 0:
            raise ValueError(f"[AlexNet] 'width_divisor' must be a positive int but got {width_divisor!r}.")
        c1, c2, c3, c4, c5 = (max(1, c // width_divisor) for c in (64, 192, 384, 256, 256))
        self.features = [
            Conv2d(3, c1, 11, stride=4, padding=2), nn.ReLU(), MaxPool2d(3, stride=2),
            Conv2d(c1, c2, 5, padding=2), nn.ReLU(), MaxPool2d(3, stride=2),
            Conv2d(c2, c3, 3, padding=1), nn.ReLU(),
            Conv2d(c3, c4, 3, padding=1), nn.ReLU(),
            Conv2d(c4, c5, 3, padding=1), nn.ReLU(), MaxPool2d(3, stride=2),
        ]
        self.avgpool = AdaptiveAvgPool2d((6, 6))
        self.classifier = [
            nn.Dropout(dropout), FlattenLinear((c5, 6, 6), hidden), nn.ReLU(),
            nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, num_classes),
        ]

    def __call__(self, x: mx.array) -> mx.array:
        return apply_sequence(self.classifier, self.avgpool(apply_sequence(self.features, x)))


@register_model("alexnet", family="alexnet", summary="AlexNet, 61.1M parameters",
                torch_model="torchvision.models:alexnet")
def alexnet(num_classes: int = 1000, **kwargs) -> AlexNet:
    """AlexNet as torchvision's ``alexnet``. ``kwargs``: ``dropout`` (and ``width_divisor``, ``hidden``)."""
    return AlexNet(num_classes=num_classes, **kwargs)
