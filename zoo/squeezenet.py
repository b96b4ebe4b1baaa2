"""SqueezeNet 1.0 and 1.1 in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``features.<i>`` (convs, pools and ``Fire`` modules with ``squeeze``, ``expand1x1``,
``expand3x3``), ``classifier.1`` (the final 1x1 conv). Example::

    >>> model = zoo.create("squeezenet1_1", num_classes=10)
    >>> model(mx.zeros((1, 224, 224, 3))).shape
    (1, 10)
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from porter.layers import Conv2d, MaxPool2d

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from .registry import register_model


class Fire(nn.Module):
    """1x1 ``squeeze`` conv, then ``expand1x1`` and ``expand3x3`` convs concatenated (each with ReLU).

    Args:
        inplanes (int): input channels.
        squeeze_planes (int): channels after the squeeze.
        expand1x1_planes, expand3x3_planes (int): channels of the two expand branches.
    Shape: ``(N, H, W, inplanes)`` -> ``(N, H, W, expand1x1_planes + expand3x3_planes)``.
    """

    def __init__(self, inplanes: int, squeeze_planes: int, expand1x1_planes: int, expand3x3_planes: int):
        super().__init__()
        self.squeeze = Conv2d(inplanes, squeeze_planes, 1)
        self.expand1x1 = Conv2d(squeeze_planes, expand1x1_planes, 1)
        self.expand3x3 = Conv2d(squeeze_planes, expand3x3_planes, 3, padding=1)

    def __call__(self, x: mx.array) -> mx.array:
        x = nn.relu(self.squeeze(x))
        return mx.concatenate([nn.relu(self.expand1x1(x)), nn.relu(self.expand3x3(x))], axis=-1)


def _pool() -> MaxPool2d:
    return MaxPool2d(3, stride=2, ceil_mode=True)


class SqueezeNet(TorchCheckpointMixin, nn.Module):
    """torchvision's SqueezeNet: ``features`` (stem conv, ceil-mode max pools, Fire modules) and ``classifier``
    (dropout, 1x1 conv to the classes, ReLU, global average).

    Args:
        version (str, optional): ``"1_0"`` or ``"1_1"``. Default: ``"1_0"``.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        dropout (float, optional): dropout before the final conv (inactive in eval). Default: ``0.5``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; ``H, W >= 17`` (1.0) or ``>= 15`` (1.1).
    """

    def __init__(self, version: str = "1_0", num_classes: int = 1000, dropout: float = 0.5):
        super().__init__()
        if version == "1_0":
            self.features = [Conv2d(3, 96, 7, stride=2), nn.ReLU(), _pool(),
                             Fire(96, 16, 64, 64), Fire(128, 16, 64, 64), Fire(128, 32, 128, 128), _pool(),
                             Fire(256, 32, 128, 128), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
                             Fire(384, 64, 256, 256), _pool(), Fire(512, 64, 256, 256)]
        elif version == "1_1":
            self.features = [Conv2d(3, 64, 3, stride=2), nn.ReLU(), _pool(),
                             Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), _pool(),
                             Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), _pool(),
                             Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256),
                             Fire(512, 64, 256, 256)]
        else:
            raise ValueError(f"[SqueezeNet] Unsupported SqueezeNet version {version}: 1_0 or 1_1 expected.")
        self.classifier = [nn.Dropout(dropout), Conv2d(512, num_classes, 1), nn.ReLU()]

    def __call__(self, x: mx.array) -> mx.array:
        x = apply_sequence(self.classifier, apply_sequence(self.features, x))
        return mx.mean(x, axis=(1, 2))


@register_model("squeezenet1_0", family="squeezenet", summary="SqueezeNet 1.0, 1.2M parameters",
                torch_model="torchvision.models:squeezenet1_0")
def squeezenet1_0(num_classes: int = 1000, **kwargs) -> SqueezeNet:
    """SqueezeNet 1.0 as torchvision's ``squeezenet1_0``. ``kwargs``: ``dropout``."""
    return SqueezeNet("1_0", num_classes=num_classes, **kwargs)


@register_model("squeezenet1_1", family="squeezenet", summary="SqueezeNet 1.1 (2.4x less computation), 1.2M parameters",
                torch_model="torchvision.models:squeezenet1_1")
def squeezenet1_1(num_classes: int = 1000, **kwargs) -> SqueezeNet:
    """SqueezeNet 1.1 as torchvision's ``squeezenet1_1``. ``kwargs``: ``dropout``."""
    return SqueezeNet("1_1", num_classes=num_classes, **kwargs)
