"""torchvision detection and segmentation parts and two more torchvision families at test size, with torchvision's
module structure and ``state_dict`` names (``torchvision.models.detection``, ``torchvision.ops``):

* RetinaNet's network (``retinanet_resnet50_fpn``'s ``backbone`` + ``head``, without the transform and the
  box decoding/NMS, which have data-dependent shapes): ``BackboneWithFPN`` (``IntermediateLayerGetter`` over a
  ResNet, ``FeaturePyramidNetwork`` whose top-down path resizes with ``F.interpolate(size=lateral.shape[-2:],
  mode="nearest")``, ``LastLevelP6P7``), ``RetinaNetHead`` (four shared conv + ReLU per head, per-level ``view`` to
  ``(N, A, K, H, W)``, ``permute``, ``reshape`` to ``(N, HWA, K)``, ``cat`` over levels), returned as a dict;
* LR-ASPP (``lraspp_mobilenet_v3_large``, the zoo tests' twin classes) on a narrow dilated MobileNetV3-Large:
  ``AdaptiveAvgPool2d(1)`` + sigmoid gate, bilinear resize to the low-level map, then to the input size;
* EfficientNetV2 (the zoo tests' twin classes, a shortened ``efficientnet_v2_s`` setting): Fused-MBConv with and
  without expansion, MBConv with squeeze-excitation, stochastic depth (identity in eval), BatchNorm eps 1e-3;
* MaxViT (the zoo tests' twin, small): MBConv, block and grid partition attention with relative position bias.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from porter.examples import BasicBlock, ResNet
from tests.zoo.twins._mobile_ops import Conv2dNormActivation
from tests.zoo.twins.efficientnet import EfficientNet, FusedMBConvConfig, MBConvConfig
from tests.zoo.twins.lraspp import LRASPP
from tests.zoo.twins.maxvit import maxvit_t
from tests.zoo.twins.mobilenetv3 import mobilenet_v3_large
from tests.zoo.twins.segmentation import IntermediateLayerGetter


# ---------------------------------------------------------------------------------------------------- RetinaNet
class FeaturePyramidNetwork(nn.Module):
    def __init__(self, in_channels_list, out_channels, extra_blocks=None):
        super().__init__()
        self.inner_blocks = nn.ModuleList()
        self.layer_blocks = nn.ModuleList()
        for in_channels in in_channels_list:
            self.inner_blocks.append(Conv2dNormActivation(in_channels, out_channels, kernel_size=1, padding=0,
                                                          norm_layer=None, activation_layer=None))
            self.layer_blocks.append(Conv2dNormActivation(out_channels, out_channels, kernel_size=3,
                                                          norm_layer=None, activation_layer=None))
        self.extra_blocks = extra_blocks

    def forward(self, x):
        names, x = list(x.keys()), list(x.values())
        last_inner = self.inner_blocks[-1](x[-1])
        results = [self.layer_blocks[-1](last_inner)]
        for idx in range(len(x) - 2, -1, -1):
            inner_lateral = self.inner_blocks[idx](x[idx])
            inner_top_down = F.interpolate(last_inner, size=inner_lateral.shape[-2:], mode="nearest")
            last_inner = inner_lateral + inner_top_down
            results.insert(0, self.layer_blocks[idx](last_inner))
        if self.extra_blocks is not None:
            results, names = self.extra_blocks(results, x, names)
        return OrderedDict(zip(names, results))


class LastLevelP6P7(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.p6 = nn.Conv2d(in_channels, out_channels, 3, 2, 1)
        self.p7 = nn.Conv2d(out_channels, out_channels, 3, 2, 1)
        self.use_P5 = in_channels == out_channels

    def forward(self, p, c, names):
        x = p[-1] if self.use_P5 else c[-1]
        p6 = self.p6(x)
        p7 = self.p7(F.relu(p6))
        return p + [p6, p7], names + ["p6", "p7"]


class BackboneWithFPN(nn.Module):
    def __init__(self, backbone, return_layers, in_channels_list, out_channels, extra_blocks):
        super().__init__()
        self.body = IntermediateLayerGetter(backbone, return_layers=return_layers)
        self.fpn = FeaturePyramidNetwork(in_channels_list, out_channels, extra_blocks)
        self.out_channels = out_channels

    def forward(self, x):
        return self.fpn(self.body(x))


class RetinaNetClassificationHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes):
        super().__init__()
        self.conv = nn.Sequential(*[Conv2dNormActivation(in_channels, in_channels, norm_layer=None) for _ in range(4)])
        self.cls_logits = nn.Conv2d(in_channels, num_anchors * num_classes, 3, 1, 1)
        self.num_classes = num_classes
        self.num_anchors = num_anchors

    def forward(self, x):
        out = []
        for features in x:
            logits = self.cls_logits(self.conv(features))
            N, _, H, W = logits.shape
            logits = logits.view(N, -1, self.num_classes, H, W).permute(0, 3, 4, 1, 2)
            out.append(logits.reshape(N, -1, self.num_classes))
        return torch.cat(out, dim=1)


class RetinaNetRegressionHead(nn.Module):
    def __init__(self, in_channels, num_anchors):
        super().__init__()
        self.conv = nn.Sequential(*[Conv2dNormActivation(in_channels, in_channels, norm_layer=None) for _ in range(4)])
        self.bbox_reg = nn.Conv2d(in_channels, num_anchors * 4, 3, 1, 1)

    def forward(self, x):
        out = []
        for features in x:
            reg = self.bbox_reg(self.conv(features))
            N, _, H, W = reg.shape
            reg = reg.view(N, -1, 4, H, W).permute(0, 3, 4, 1, 2)
            out.append(reg.reshape(N, -1, 4))
        return torch.cat(out, dim=1)


class RetinaNetHead(nn.Module):
    def __init__(self, in_channels, num_anchors, num_classes):
        super().__init__()
        self.classification_head = RetinaNetClassificationHead(in_channels, num_anchors, num_classes)
        self.regression_head = RetinaNetRegressionHead(in_channels, num_anchors)

    def forward(self, x):
        return {"cls_logits": self.classification_head(x), "bbox_regression": self.regression_head(x)}


class RetinaNetNetwork(nn.Module):
    """RetinaNet's ``backbone`` and ``head`` (torchvision's names) on a batch of images: the head's outputs."""

    def __init__(self, widths=(8, 16, 24, 32), out_channels=16, num_anchors=3, num_classes=5):
        super().__init__()
        resnet = ResNet(BasicBlock, [1, 1, 1, 1], widths=widths)
        self.backbone = BackboneWithFPN(resnet, {"layer2": "0", "layer3": "1", "layer4": "2"}, list(widths[1:]),
                                        out_channels, LastLevelP6P7(widths[-1], out_channels))
        self.head = RetinaNetHead(out_channels, num_anchors, num_classes)

    def forward(self, images):
        features = list(self.backbone(images).values())
        return self.head(features)


def retinanet_small() -> nn.Module:
    return RetinaNetNetwork()


# ---------------------------------------------------------------------------------------------------- LR-ASPP
def lraspp_small(num_classes: int = 5) -> nn.Module:
    """torchvision's ``lraspp_mobilenet_v3_large`` builder on a 0.25-width dilated backbone (same names)."""
    backbone = mobilenet_v3_large(dilated=True, width_mult=0.25).features
    stage_indices = [0] + [i for i, b in enumerate(backbone) if getattr(b, "_is_cn", False)] + [len(backbone) - 1]
    low_pos, high_pos = stage_indices[-4], stage_indices[-1]
    low_channels, high_channels = backbone[low_pos].out_channels, backbone[high_pos].out_channels
    backbone = IntermediateLayerGetter(backbone, return_layers={str(low_pos): "low", str(high_pos): "high"})
    return LRASPP(backbone, low_channels, high_channels, num_classes, inter_channels=16)


# ---------------------------------------------------------------------------------------------------- EfficientNetV2
def efficientnet_v2_small(num_classes: int = 7) -> nn.Module:
    """Fused-MBConv (expand 1: one conv; expand 4: conv + project), MBConv with SE, at widths 8-24."""
    setting = [FusedMBConvConfig(1, 3, 1, 8, 8, 1), FusedMBConvConfig(4, 3, 2, 8, 16, 2),
               MBConvConfig(4, 3, 2, 16, 24, 2)]
    return EfficientNet(setting, 0.2, stochastic_depth_prob=0.2, num_classes=num_classes, last_channel=48,
                        norm_layer=partial(nn.BatchNorm2d, eps=1e-3))


# ---------------------------------------------------------------------------------------------------- MaxViT
def maxvit_small(num_classes: int = 7) -> nn.Module:
    """The zoo tests' small MaxViT: 64x64 inputs (block maps 16, 8, 4, 2; partition 2)."""
    return maxvit_t(num_classes=num_classes, input_size=(64, 64), stem_channels=8, block_channels=[8, 16, 16, 24],
                    block_layers=[2, 1, 2, 1], head_dim=4, partition_size=2)
