"""torch twin of torchvision's ``lraspp_mobilenet_v3_large`` (``torchvision.models.segmentation.lraspp``): the
MobileNetV3-Large twin's ``features`` behind torchvision's ``IntermediateLayerGetter`` names, and the LR-ASPP head."""

from __future__ import annotations

from collections import OrderedDict

from torch import nn
from torch.nn import functional as F

from . import Case
from .mobilenetv3 import mobilenet_v3_large
from .segmentation import IntermediateLayerGetter


class LRASPPHead(nn.Module):
    def __init__(self, low_channels, high_channels, num_classes, inter_channels):
        super().__init__()
        self.cbr = nn.Sequential(nn.Conv2d(high_channels, inter_channels, 1, bias=False),
                                 nn.BatchNorm2d(inter_channels), nn.ReLU(inplace=True))
        self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(high_channels, inter_channels, 1, bias=False),
                                   nn.Sigmoid())
        self.low_classifier = nn.Conv2d(low_channels, num_classes, 1)
        self.high_classifier = nn.Conv2d(inter_channels, num_classes, 1)

    def forward(self, features):
        low, high = features["low"], features["high"]
        x = self.cbr(high) * self.scale(high)
        x = F.interpolate(x, size=low.shape[-2:], mode="bilinear", align_corners=False)
        return self.low_classifier(low) + self.high_classifier(x)


class LRASPP(nn.Module):
    def __init__(self, backbone, low_channels, high_channels, num_classes, inter_channels=128):
        super().__init__()
        self.backbone = backbone
        self.classifier = LRASPPHead(low_channels, high_channels, num_classes, inter_channels)

    def forward(self, x):
        out = self.classifier(self.backbone(x))
        return OrderedDict(out=F.interpolate(out, size=x.shape[-2:], mode="bilinear", align_corners=False))


def lraspp_mobilenet_v3_large(*, weights=None, progress=True, num_classes=None, weights_backbone=None, **kwargs):
    if kwargs.pop("aux_loss", False):
        raise NotImplementedError("This model does not use auxiliary loss")
    num_classes = 21 if num_classes is None else num_classes
    backbone = mobilenet_v3_large(dilated=True).features
    stage_indices = [0] + [i for i, b in enumerate(backbone) if getattr(b, "_is_cn", False)] + [len(backbone) - 1]
    low_pos, high_pos = stage_indices[-4], stage_indices[-1]
    low_channels, high_channels = backbone[low_pos].out_channels, backbone[high_pos].out_channels
    backbone = IntermediateLayerGetter(backbone, return_layers={str(low_pos): "low", str(high_pos): "high"})
    return LRASPP(backbone, low_channels, high_channels, num_classes)


# torchvision's builder has no width arguments: the tests run the real model (3.2M parameters); the sizes give
# non-integer upsampling ratios (45x38 -> C2 6x5, C5 3x3)
CASES = {
    "lraspp_mobilenet_v3_large": Case(lraspp_mobilenet_v3_large, {"num_classes": 5},
                                      inputs=((2, 3, 32, 32), (1, 3, 45, 38)), train=True,
                                      train_input=(4, 3, 64, 64), num_params=3221538),
}
