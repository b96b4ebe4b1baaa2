"""LR-ASPP on a dilated MobileNetV3-Large (``lraspp_mobilenet_v3_large``) in MLX, channels-last, loading
torchvision-format checkpoints.

Names are torchvision's: ``backbone.<i>`` (MobileNetV3-Large's ``features``, last stage dilated instead of strided),
``classifier.cbr.0/1`` (1x1 conv, BN), ``classifier.scale.1`` (1x1 conv of the global average, sigmoid gate),
``classifier.low_classifier``, ``classifier.high_classifier``. The head fuses the output-stride-8 features (C2) with
the gated output-stride-16 features (bilinearly upsampled); the logits are upsampled to the input size. Example::

    >>> model = zoo.create("lraspp_mobilenet_v3_large", num_classes=21)
    >>> model(mx.zeros((1, 65, 70, 3)))["out"].shape
    (1, 65, 70, 21)
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm2d, Conv2d
from porter.layers import Sigmoid  # native CPU kernels (MLX's own are 15-35x slower)

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from ._mobile_blocks import ReLU, resize_bilinear
from .mobilenetv3 import mobilenet_v3_config, mobilenet_v3_features, stage_indices
from .registry import register_model


class LRASPPHead(nn.Module):
    """``cbr`` (1x1 conv, BN, ReLU) of the high features, gated by ``scale`` (global average, 1x1 conv, sigmoid),
    upsampled to the low features' size and added to per-class 1x1 convs of both.

    Args:
        low_channels (int), high_channels (int): channels of the two feature maps.
        num_classes (int): output channels.
        inter_channels (int): width of ``cbr`` and the gate.
    Shape: low ``(N, H8, W8, low_channels)``, high ``(N, H16, W16, high_channels)`` -> ``(N, H8, W8, num_classes)``.
    """

    def __init__(self, low_channels: int, high_channels: int, num_classes: int, inter_channels: int):
        super().__init__()
        self.cbr = [Conv2d(high_channels, inter_channels, 1, bias=False), BatchNorm2d(inter_channels), ReLU()]
        # index 0 is torchvision's AdaptiveAvgPool2d(1): a mean, applied in __call__
        self.scale = [nn.Identity(), Conv2d(high_channels, inter_channels, 1, bias=False), Sigmoid()]
        self.low_classifier = Conv2d(low_channels, num_classes, 1)
        self.high_classifier = Conv2d(inter_channels, num_classes, 1)

    def __call__(self, low: mx.array, high: mx.array) -> mx.array:
        x = apply_sequence(self.cbr, high)
        x = x * apply_sequence(self.scale, mx.mean(high, axis=(1, 2), keepdims=True))
        x = resize_bilinear(x, low.shape[1:3])
        return self.low_classifier(low) + self.high_classifier(x)


class LRASPP(TorchCheckpointMixin, nn.Module):
    """Lite R-ASPP semantic segmentation on MobileNetV3-Large (dilated last stage).

    Args:
        num_classes (int, optional): output classes (background included). Default: ``21``.
        inter_channels (int, optional): width of the head. Default: ``128``.
    Shape: ``(N, H, W, 3)`` -> ``{"out": (N, H, W, num_classes)}`` (torchvision's dict, channels-last).
    """

    def __init__(self, num_classes: int = 21, inter_channels: int = 128):
        super().__init__()
        config, _ = mobilenet_v3_config("mobilenet_v3_large", dilated=True)
        self.backbone = mobilenet_v3_features(config)
        taps = stage_indices(self.backbone)
        self.low_pos, self.high_pos = taps[-4], taps[-1]  # C2 (output stride 8) and C5 (output stride 16)
        low_channels = self.backbone[self.low_pos].out_channels
        high_channels = 6 * config[-1].out_channels
        self.classifier = LRASPPHead(low_channels, high_channels, num_classes, inter_channels)

    def __call__(self, x: mx.array) -> dict:
        size = x.shape[1:3]
        low = None
        for i, layer in enumerate(self.backbone[:self.high_pos + 1]):
            x = apply_sequence(layer, x) if isinstance(layer, list) else layer(x)
            if i == self.low_pos:
                low = x
        return {"out": resize_bilinear(self.classifier(low, x), size)}


@register_model("lraspp_mobilenet_v3_large", family="lraspp", input_shape=(1, 3, 520, 520),
                summary="LR-ASPP segmentation on a dilated MobileNetV3-Large, 3.2M parameters",
                torch_model="torchvision.models.segmentation:lraspp_mobilenet_v3_large")
def lraspp_mobilenet_v3_large(num_classes: int = 21, aux_loss: bool = False) -> LRASPP:
    """torchvision's ``lraspp_mobilenet_v3_large`` (21 classes by default, as its VOC weights)."""
    if aux_loss:
        raise NotImplementedError("[LRASPP] this model does not use an auxiliary loss ('aux_loss' must be False).")
    return LRASPP(num_classes=num_classes)
