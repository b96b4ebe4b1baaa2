"""Full-size torch twins of torchvision architectures for the model benchmark (torchvision is not a dependency).

The classes are the tests' torchvision twins (``tests/zoo/twins``: torchvision's module structure and ``state_dict``
names; ``tests/models`` builds the same classes small) and ``porter.examples``; here they are built at torchvision's
published sizes. Each builder takes no
argument and returns the model in eval mode with its default (random) initialisation; ``benchmarks/models.py``
registers them with their standard input shape. Add a model: a builder here (or anywhere importable) and one
``register(...)`` line in ``benchmarks/models.py``.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.zoo.twins.convnext import CNBlockConfig, ConvNeXt  # noqa: E402
from tests.zoo.twins.efficientnet import EfficientNet, MBConvConfig  # noqa: E402
from tests.zoo.twins.regnet import RegNet  # noqa: E402
from tests.zoo.twins.video_resnet import BasicBlock, BasicStem, Conv3DSimple, VideoResNet  # noqa: E402
from tests.zoo.twins.vit import VisionTransformer  # noqa: E402


def efficientnet_b0():
    settings = [MBConvConfig(1, 3, 1, 32, 16, 1), MBConvConfig(6, 3, 2, 16, 24, 2), MBConvConfig(6, 5, 2, 24, 40, 2),
                MBConvConfig(6, 3, 2, 40, 80, 3), MBConvConfig(6, 5, 1, 80, 112, 3),
                MBConvConfig(6, 5, 2, 112, 192, 4), MBConvConfig(6, 3, 1, 192, 320, 1)]
    return EfficientNet(settings, dropout=0.2).eval()


def regnet_y_400mf():
    # torchvision: stem 32, depths 1/3/6/6, widths 48/104/208/440, group width 8, SE 0.25
    stages = [(48, 2, 1, 8, 1.0), (104, 2, 3, 8, 1.0), (208, 2, 6, 8, 1.0), (440, 2, 6, 8, 1.0)]
    return RegNet((stages, 0.25), stem_width=32).eval()


def convnext_tiny():
    setting = [CNBlockConfig(96, 192, 3), CNBlockConfig(192, 384, 3), CNBlockConfig(384, 768, 9),
               CNBlockConfig(768, None, 3)]
    return ConvNeXt(setting, stochastic_depth_prob=0.1).eval()


def vit_b_16():
    return VisionTransformer(image_size=224, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768,
                             mlp_dim=3072).eval()


def swin_t():
    from tests.zoo.twins.swin import swin_t as build

    return build().eval()


def r3d_18():
    return VideoResNet(BasicBlock, [Conv3DSimple] * 4, [2, 2, 2, 2], BasicStem).eval()
