"""torch twin of torchvision's ``deeplabv3_mobilenet_v3_large`` (``torchvision.models.segmentation.deeplabv3``):
the MobileNetV3-Large twin's dilated ``features`` behind ``IntermediateLayerGetter``, the DeepLabV3 twin's head.
``width_mult``/``reduced_tail``/``head_dropout``/``atrous_rates`` are not torchvision's builder arguments: their
defaults are its model; the tests shrink it with them."""

from __future__ import annotations

from . import Case
from .mobilenetv3 import mobilenet_v3_large
from .segmentation import DeepLabHead, FCNHead, IntermediateLayerGetter, SimpleSegmentationModel


def deeplabv3_mobilenet_v3_large(*, weights=None, progress=True, num_classes=None, aux_loss=None,
                                 weights_backbone=None, width_mult=1.0, reduced_tail=False, head_dropout=None,
                                 atrous_rates=(12, 24, 36)):
    num_classes = 21 if num_classes is None else num_classes
    backbone = mobilenet_v3_large(dilated=True, width_mult=width_mult, reduced_tail=reduced_tail).features
    stage_indices = [0] + [i for i, b in enumerate(backbone) if getattr(b, "_is_cn", False)] + [len(backbone) - 1]
    out_pos, aux_pos = stage_indices[-1], stage_indices[-4]
    out_inplanes, aux_inplanes = backbone[out_pos].out_channels, backbone[aux_pos].out_channels
    return_layers = {str(out_pos): "out"}
    if aux_loss:
        return_layers[str(aux_pos)] = "aux"
    backbone = IntermediateLayerGetter(backbone, return_layers)
    aux = FCNHead(aux_inplanes, num_classes, 0.1 if head_dropout is None else head_dropout) if aux_loss else None
    classifier = DeepLabHead(out_inplanes, num_classes, atrous_rates,
                             dropout=0.5 if head_dropout is None else head_dropout)
    return SimpleSegmentationModel(backbone, classifier, aux)


# Output stride 16: 45x38 gives 3x3 logits upsampled by a non-integer factor, the aux head's 6x5 likewise. The ASPP
# rates of 12/24/36 would leave every off-centre tap of 2x2 to 3x3 maps in the padding: small rates keep them tested.
# The documented count (11,029,328, with aux) is checked in test_zooa_families.py.
CASES = {
    "deeplabv3_mobilenet_v3_large": Case(
        deeplabv3_mobilenet_v3_large,
        {"num_classes": 5, "aux_loss": True, "width_mult": 0.5, "reduced_tail": True, "atrous_rates": (1, 2, 3)},
        inputs=((2, 3, 32, 32), (1, 3, 45, 38))),
}
