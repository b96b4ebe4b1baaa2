"""ShuffleNetV2, ConvNeXt and RegNet at test size, with torchvision's module structure and names.

The classes are the zoo tests' torchvision twins (``tests/zoo/twins``), built here from small explicit settings.
"""

from __future__ import annotations

from tests.zoo.twins.convnext import CNBlockConfig, ConvNeXt
from tests.zoo.twins.regnet import RegNet
from tests.zoo.twins.shufflenetv2 import ShuffleNetV2


def shufflenet_v2_small(num_classes: int = 10) -> ShuffleNetV2:
    return ShuffleNetV2([2, 2, 1], [8, 16, 32, 48, 64], num_classes=num_classes)


def convnext_small(num_classes: int = 10) -> ConvNeXt:
    """Three stages (in, out or None, blocks) of one block each; stochastic depth 0.1, layer scale 1e-6."""
    setting = [CNBlockConfig(8, 16, 1), CNBlockConfig(16, 24, 1), CNBlockConfig(24, None, 1)]
    return ConvNeXt(setting, stochastic_depth_prob=0.1, layer_scale=1e-6, num_classes=num_classes)


def regnet_small(num_classes: int = 10) -> RegNet:
    """RegNetY-like (SE 0.25) with group width 8: group convs with 2 and 4 groups.

    Stages: (width, stride, depth, group_width, bottleneck_multiplier), as ``regnet.block_params`` returns them.
    """
    stages = [(16, 2, 1, 8, 1.0), (32, 2, 2, 8, 1.0)]
    return RegNet((stages, 0.25), stem_width=8, num_classes=num_classes)
