"""MobileNetV2, MobileNetV3 and EfficientNet at test size, with torchvision's module structure and names.

MobileNetV2 is the package's own (:class:`porter.examples.MobileNetV2`); MobileNetV3 and EfficientNet are the zoo
tests' torchvision twins (``tests/zoo/twins``), built here from small explicit settings.
"""

from __future__ import annotations

from functools import partial

from porter.examples import MobileNetV2
from tests.zoo.twins.efficientnet import EfficientNet, MBConvConfig
from tests.zoo.twins.mobilenetv3 import InvertedResidualConfig, MobileNetV3


# ---------------------------------------------------------------------------------------------------- V2
def mobilenet_v2_small(num_classes: int = 10) -> MobileNetV2:
    # round_nearest=4 keeps the 12-channel stage (multiples of 8 would round it to 16).
    setting = [[1, 8, 1, 1], [4, 12, 2, 2], [4, 16, 2, 2]]
    return MobileNetV2(num_classes, inverted_residual_setting=setting, round_nearest=4, input_channel=8,
                       last_channel=32)


# ---------------------------------------------------------------------------------------------------- V3
def mobilenet_v3_small(num_classes: int = 10) -> MobileNetV3:
    """Five blocks (in, kernel, expanded, out, use_se, "RE"|"HS", stride): SE, both activations, two residuals."""
    # Channel counts are multiples of 8, which torchvision's config would round them to anyway.
    c = partial(InvertedResidualConfig, dilation=1, width_mult=1.0)
    settings = [
        c(8, 3, 8, 8, True, "RE", 2),
        c(8, 3, 24, 16, False, "RE", 2),
        c(16, 3, 32, 16, False, "RE", 1),
        c(16, 5, 48, 24, True, "HS", 2),
        c(24, 5, 48, 24, True, "HS", 1),
    ]
    return MobileNetV3(settings, last_channel=64, num_classes=num_classes)


# ---------------------------------------------------------------------------------------------------- EfficientNet
def efficientnet_small(num_classes: int = 10) -> EfficientNet:
    """Three stages (expand_ratio, kernel, stride, in, out, num_layers); dropout 0.2, stochastic depth 0.2."""
    settings = [MBConvConfig(1, 3, 1, 8, 8, 1), MBConvConfig(6, 3, 2, 8, 16, 2), MBConvConfig(6, 5, 2, 16, 24, 2)]
    return EfficientNet(settings, dropout=0.2, stochastic_depth_prob=0.2, num_classes=num_classes)
