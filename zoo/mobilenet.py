"""MobileNetV2 in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``features.0.0`` (stem conv), ``features.<i>.conv.<j>`` (inverted residuals),
``features.18.0`` (head conv), ``classifier.1`` (the linear layer). Example::

    >>> model = zoo.create("mobilenet_v2", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm2d, Conv2d

from ._common import apply_sequence, make_divisible
from ._loading import TorchCheckpointMixin
from .registry import register_model

# (expansion t, output channels c, repeats n, first stride s), torchvision's table.
_SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
            [6, 320, 1, 1]]


def _conv_bn_relu6(inp: int, oup: int, kernel_size: int = 3, stride: int = 1, groups: int = 1) -> list:
    """torchvision's ``Conv2dNormActivation``: children ``0`` (conv, no bias), ``1`` (BN), ``2`` (ReLU6)."""
    conv = Conv2d(inp, oup, kernel_size, stride=stride, padding=(kernel_size - 1) // 2, groups=groups, bias=False)
    return [conv, BatchNorm2d(oup), nn.ReLU6()]


class InvertedResidual(nn.Module):
    """1x1 expand (ReLU6), 3x3 depthwise (ReLU6), linear 1x1 projection; residual when the shape is kept.

    Args:
        inp (int): input channels.
        oup (int): output channels.
        stride (int): stride of the depthwise conv, 1 or 2.
        expand_ratio (int): hidden width is ``round(inp * expand_ratio)``.
    Shape: ``(N, H, W, inp)`` -> ``(N, ceil(H / stride), ceil(W / stride), oup)``.
    """

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"[InvertedResidual] 'stride' must be 1 or 2 but got {stride}.")
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        self.conv = [_conv_bn_relu6(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        self.conv += [_conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
                      Conv2d(hidden, oup, 1, bias=False), BatchNorm2d(oup)]

    def __call__(self, x: mx.array) -> mx.array:
        out = apply_sequence(self.conv, x)
        return x + out if self.use_res_connect else out


class MobileNetV2(TorchCheckpointMixin, nn.Module):
    """MobileNetV2: stem, 17 inverted residuals, 1x1 head conv, global average, ``classifier``.

    Args:
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        width_mult (float, optional): width multiplier (channels rounded to multiples of 8). Default: ``1.0``.
        dropout (float, optional): dropout before the classifier (inactive in eval). Default: ``0.2``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 1``.
    """

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2):
        super().__init__()
        if not width_mult > 0:
            raise ValueError(f"[MobileNetV2] 'width_mult' must be positive but got {width_mult!r}.")
        channels = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        self.features = [_conv_bn_relu6(3, channels, stride=2)]
        for t, c, n, s in _SETTING:
            out = make_divisible(c * width_mult)
            for i in range(n):
                self.features.append(InvertedResidual(channels, out, s if i == 0 else 1, expand_ratio=t))
                channels = out
        self.features.append(_conv_bn_relu6(channels, last, kernel_size=1))
        self.classifier = [nn.Dropout(dropout), nn.Linear(last, num_classes)]

    def __call__(self, x: mx.array) -> mx.array:
        x = apply_sequence(self.features, x)
        return apply_sequence(self.classifier, mx.mean(x, axis=(1, 2)))


@register_model("mobilenet_v2", family="mobilenet", summary="MobileNetV2 (width 1.0), 3.5M parameters",
                torch_model="porter.examples:mobilenet_v2")
def mobilenet_v2(num_classes: int = 1000, **kwargs) -> MobileNetV2:
    """MobileNetV2 as torchvision's ``mobilenet_v2``. ``kwargs``: ``width_mult``, ``dropout``."""
    return MobileNetV2(num_classes=num_classes, **kwargs)
