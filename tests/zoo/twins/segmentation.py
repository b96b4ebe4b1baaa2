"""torchvision.models.segmentation's FCN and DeepLabV3 on ResNet-50/101 as torch twins (structure and names), and
their zoo cases. ``head_dropout`` (not in torchvision) replaces the heads' fixed dropout so training can be compared
without random masks; ``widths`` shrinks the backbone."""

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from porter.examples import Bottleneck, ResNet

from . import Case


class IntermediateLayerGetter(nn.ModuleDict):
    """torchvision's: the backbone's children up to the last returned layer; returns the named maps."""

    def __init__(self, model, return_layers):
        layers, remaining = OrderedDict(), dict(return_layers)
        for name, module in model.named_children():
            layers[name] = module
            remaining.pop(name, None)
            if not remaining:
                break
        super().__init__(layers)
        self.return_layers = dict(return_layers)

    def forward(self, x):
        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out


class FCNHead(nn.Sequential):
    def __init__(self, in_channels, channels, dropout=0.1):
        inter = in_channels // 4
        super().__init__(nn.Conv2d(in_channels, inter, 3, padding=1, bias=False), nn.BatchNorm2d(inter), nn.ReLU(),
                         nn.Dropout(dropout), nn.Conv2d(inter, channels, 1))


class ASPPConv(nn.Sequential):
    def __init__(self, in_channels, out_channels, dilation):
        super().__init__(nn.Conv2d(in_channels, out_channels, 3, padding=dilation, dilation=dilation, bias=False),
                         nn.BatchNorm2d(out_channels), nn.ReLU())


class ASPPPooling(nn.Sequential):
    def __init__(self, in_channels, out_channels):
        super().__init__(nn.AdaptiveAvgPool2d(1), nn.Conv2d(in_channels, out_channels, 1, bias=False),
                         nn.BatchNorm2d(out_channels), nn.ReLU())

    def forward(self, x):
        size = x.shape[-2:]
        for mod in self:
            x = mod(x)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class ASPP(nn.Module):
    def __init__(self, in_channels, atrous_rates, out_channels=256, dropout=0.5):
        super().__init__()
        modules = [nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, bias=False), nn.BatchNorm2d(out_channels),
                                 nn.ReLU())]
        modules += [ASPPConv(in_channels, out_channels, rate) for rate in atrous_rates]
        modules.append(ASPPPooling(in_channels, out_channels))
        self.convs = nn.ModuleList(modules)
        self.project = nn.Sequential(nn.Conv2d(len(self.convs) * out_channels, out_channels, 1, bias=False),
                                     nn.BatchNorm2d(out_channels), nn.ReLU(), nn.Dropout(dropout))

    def forward(self, x):
        return self.project(torch.cat([conv(x) for conv in self.convs], dim=1))


class DeepLabHead(nn.Sequential):
    """torchvision's; ``channels`` (Porter's: torchvision fixes 256) narrows ASPP and the head for the tests."""

    def __init__(self, in_channels, num_classes, atrous_rates=(12, 24, 36), dropout=0.5, channels=256):
        super().__init__(ASPP(in_channels, atrous_rates, channels, dropout=dropout),
                         nn.Conv2d(channels, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
                         nn.Conv2d(channels, num_classes, 1))


class SimpleSegmentationModel(nn.Module):
    def __init__(self, backbone, classifier, aux_classifier=None):
        super().__init__()
        self.backbone = backbone
        self.classifier = classifier
        self.aux_classifier = aux_classifier

    def forward(self, x):
        input_shape = x.shape[-2:]
        features = self.backbone(x)
        result = OrderedDict()
        result["out"] = F.interpolate(self.classifier(features["out"]), size=input_shape, mode="bilinear",
                                      align_corners=False)
        if self.aux_classifier is not None:
            result["aux"] = F.interpolate(self.aux_classifier(features["aux"]), size=input_shape, mode="bilinear",
                                          align_corners=False)
        return result


class DeepLabV3(SimpleSegmentationModel):
    """torchvision's DeepLabV3: a SimpleSegmentationModel (``backbone``, ``classifier``, ``aux_classifier``)."""


def _builder(head, layers):
    def build(num_classes=None, aux_loss=None, widths=(64, 128, 256, 512), head_dropout=None, **head_kwargs):
        num_classes = 21 if num_classes is None else num_classes
        resnet = ResNet(Bottleneck, layers, replace_stride_with_dilation=[False, True, True], widths=widths)
        return_layers = {"layer4": "out", "layer3": "aux"} if aux_loss else {"layer4": "out"}
        backbone = IntermediateLayerGetter(resnet, return_layers)
        fcn_dropout = 0.1 if head_dropout is None else head_dropout
        if head == "fcn":
            classifier = FCNHead(widths[3] * 4, num_classes, fcn_dropout, **head_kwargs)
        else:
            classifier = DeepLabHead(widths[3] * 4, num_classes, dropout=0.5 if head_dropout is None else head_dropout,
                                     **head_kwargs)
        aux = FCNHead(widths[2] * 4, num_classes, fcn_dropout) if aux_loss else None
        return (SimpleSegmentationModel if head == "fcn" else DeepLabV3)(backbone, classifier, aux)
    return build


# Documented counts include the aux head (torchvision's weights have it); the default build has none, so they are
# checked in test_zooa_families.py. Output stride 8: 45x38 gives 6x5 logits upsampled by a non-integer factor.
_SMALL = {"num_classes": 5, "widths": (4, 8, 8, 8)}
# On the tests' 4x4 to 6x5 maps, torchvision's rates 12/24/36 would leave every off-centre tap in the padding:
# small rates keep those weights (and the dilated gradient) tested
_SMALL_DEEPLAB = {**_SMALL, "atrous_rates": (1, 2, 3)}
_INPUTS = ((2, 3, 32, 32), (1, 3, 45, 38))
CASES = {
    "fcn_resnet50": Case(_builder("fcn", [3, 4, 6, 3]), _SMALL, inputs=_INPUTS, train=True,
                         train_input=(2, 3, 48, 40), train_kwargs={"head_dropout": 0.0}),
    "fcn_resnet101": Case(_builder("fcn", [3, 4, 23, 3]), {**_SMALL, "aux_loss": True}, inputs=_INPUTS),
    # ASPP's pooling branch normalizes one value per image: a batch of 8 keeps its batch statistics sane
    "deeplabv3_resnet50": Case(_builder("deeplabv3", [3, 4, 6, 3]), _SMALL_DEEPLAB, inputs=_INPUTS, train=True,
                               train_input=(8, 3, 32, 32), train_kwargs={"head_dropout": 0.0}),
    "deeplabv3_resnet101": Case(_builder("deeplabv3", [3, 4, 23, 3]), {**_SMALL_DEEPLAB, "aux_loss": True},
                                inputs=_INPUTS),
}
