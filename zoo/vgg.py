"""VGG-11/13/16/19, with and without BatchNorm, in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``features.<i>`` numbered over every conv, BN (``_bn`` models), ReLU and pool;
``classifier.0/3/6``.
Example::

    >>> model = zoo.create("vgg11_bn", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from typing import Sequence, Union

import mlx.core as mx
import mlx.nn as nn

from porter.layers import AdaptiveAvgPool2d, BatchNorm2d, Conv2d, MaxPool2d

from ._common import apply_sequence
from ._loading import FlattenLinear, TorchCheckpointMixin
from .registry import register_model

_CONFIGS = {  # torchvision's configurations "A", "B", "D", "E"
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(TorchCheckpointMixin, nn.Module):
    """VGG: ``features`` (3x3 conv, BN if ``batch_norm``, ReLU; 2x2 max pools), a 7x7 adaptive average pool and a
    three-layer ``classifier``.

    Args:
        cfg (sequence): channels per conv, ``"M"`` for a max pool.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        width_divisor (int, optional): divide every conv width by this (a reduced model with the same names).
            Default: ``1``.
        hidden (int, optional): width of the two hidden classifier layers. Default: ``4096``.
        dropout (float, optional): dropout probability in the classifier (inactive in eval). Default: ``0.5``.
        batch_norm (bool, optional): a BatchNorm after every conv. Default: ``True``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 32`` (five 2x2 pools).
    """

    def __init__(self, cfg: Sequence[Union[int, str]], num_classes: int = 1000, width_divisor: int = 1,
                 hidden: int = 4096, dropout: float = 0.5, batch_norm: bool = True):
        super().__init__()
        if isinstance(width_divisor, bool) or not isinstance(width_divisor, int) or width_divisor <= 0:
            raise ValueError(f"[VGG] 'width_divisor' must be a positive int but got {width_divisor!r}.")
        self.features, channels = [], 3
        for v in cfg:
            if v == "M":
                self.features.append(MaxPool2d(kernel_size=2, stride=2))
                continue
            width = max(1, v // width_divisor)
            self.features.append(Conv2d(channels, width, kernel_size=3, padding=1))
            self.features += [BatchNorm2d(width), nn.ReLU()] if batch_norm else [nn.ReLU()]
            channels = width
        self.avgpool = AdaptiveAvgPool2d((7, 7))
        self.classifier = [
            FlattenLinear((channels, 7, 7), hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        ]

    def __call__(self, x: mx.array) -> mx.array:
        return apply_sequence(self.classifier, self.avgpool(apply_sequence(self.features, x)))


_TORCH = "porter.examples:{}"


_PARAMS = {"vgg11": "132.9M", "vgg11_bn": "132.9M", "vgg13": "133.0M", "vgg13_bn": "133.1M", "vgg16": "138.4M",
           "vgg16_bn": "138.4M", "vgg19": "143.7M", "vgg19_bn": "143.7M"}


def _register(depth: int, batch_norm: bool):
    name = f"vgg{depth}{'_bn' if batch_norm else ''}"
    summary = f"VGG-{depth}{' with BatchNorm' if batch_norm else ''}, {_PARAMS[name]} parameters"

    @register_model(name, family="vgg", summary=summary, torch_model=_TORCH.format(name))
    def factory(num_classes: int = 1000, **kwargs) -> VGG:
        return VGG(_CONFIGS[f"vgg{depth}"], num_classes=num_classes, batch_norm=batch_norm, **kwargs)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"{summary} (torchvision's ``{name}``). ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."
    return factory


vgg11, vgg11_bn = _register(11, False), _register(11, True)
vgg13, vgg13_bn = _register(13, False), _register(13, True)
vgg16, vgg16_bn = _register(16, False), _register(16, True)
vgg19, vgg19_bn = _register(19, False), _register(19, True)
