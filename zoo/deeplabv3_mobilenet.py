"""DeepLabV3 on a dilated MobileNetV3-Large (``deeplabv3_mobilenet_v3_large``) in MLX, channels-last, loading
torchvision-format checkpoints.

Names are torchvision's: ``backbone.<i>`` (MobileNetV3-Large's ``features`` up to the head conv, last stage dilated
instead of strided: output stride 16), ``classifier.*`` (:func:`~porter.zoo.segmentation.deeplab_head` on the head
conv's 960 channels), ``aux_classifier.*`` (with ``aux_loss``: an FCN head on the output-stride-8 block, 40
channels). The model returns ``{"out": (N, H, W, num_classes), "aux": ...}`` like torchvision's OrderedDict, logits
upsampled bilinearly to the input size. Example::

    >>> model = zoo.create("deeplabv3_mobilenet_v3_large", num_classes=21)
    >>> model(mx.zeros((1, 65, 70, 3)))["out"].shape
    (1, 65, 70, 21)
"""

from __future__ import annotations

from typing import Optional, Sequence

import mlx.core as mx

from ._common import apply_sequence
from .mobilenetv3 import mobilenet_v3_config, mobilenet_v3_features, stage_indices
from .registry import register_model
from .segmentation import SegmentationModel, deeplab_head, fcn_head, interpolate_bilinear


class MobileNetV3SegmentationModel(SegmentationModel):
    """torchvision's ``DeepLabV3`` on MobileNetV3 ``features``: ``classifier`` on the map at ``out_pos``,
    ``aux_classifier`` (optional) on the one at ``aux_pos``, both upsampled bilinearly to the input size.

    Args:
        backbone (list): MobileNetV3 ``features`` (:func:`~porter.zoo.mobilenetv3.mobilenet_v3_features`).
        out_pos (int), aux_pos (int): indices in ``backbone`` of the two tapped maps (``aux_pos < out_pos``).
        classifier (list): the main head.
        aux_classifier (list, optional): the auxiliary head. Default: ``None``.
    Shape: ``(N, H, W, 3)`` -> ``{"out": (N, H, W, classes)}`` plus ``"aux"`` with an auxiliary head.
    """

    def __init__(self, backbone: list, out_pos: int, aux_pos: int, classifier: list,
                 aux_classifier: Optional[list] = None):
        if not 0 <= aux_pos < out_pos < len(backbone):
            raise ValueError(f"[MobileNetV3SegmentationModel] need 0 <= 'aux_pos' < 'out_pos' < {len(backbone)} but "
                             f"got aux_pos={aux_pos}, out_pos={out_pos}.")
        super().__init__(backbone[:out_pos + 1], classifier, aux_classifier)
        self.out_pos, self.aux_pos = out_pos, aux_pos

    def __call__(self, x: mx.array) -> dict:
        size = x.shape[1:3]
        aux = None
        for i, layer in enumerate(self.backbone):
            x = apply_sequence(layer, x) if isinstance(layer, list) else layer(x)
            if i == self.aux_pos:
                aux = x
        result = {"out": interpolate_bilinear(apply_sequence(self.classifier, x), size)}
        if "aux_classifier" in self:
            result["aux"] = interpolate_bilinear(apply_sequence(self.aux_classifier, aux), size)
        return result


@register_model("deeplabv3_mobilenet_v3_large", family="deeplabv3", input_shape=(1, 3, 520, 520),
                summary="DeepLabV3 (ASPP) on a dilated MobileNetV3-Large, 11.0M parameters with aux",
                torch_model="torchvision.models.segmentation:deeplabv3_mobilenet_v3_large")
def deeplabv3_mobilenet_v3_large(num_classes: Optional[int] = None, aux_loss: Optional[bool] = None,
                                 width_mult: float = 1.0, reduced_tail: bool = False,
                                 head_dropout: Optional[float] = None, atrous_rates: Sequence[int] = (12, 24, 36)
                                 ) -> MobileNetV3SegmentationModel:
    """torchvision's ``deeplabv3_mobilenet_v3_large``: ``num_classes`` (default 21), ``aux_loss`` (an FCN head on the
    output-stride-8 block; torchvision's weights have it). Not in torchvision's builder (defaults are its model):
    ``width_mult``/``reduced_tail`` shrink the backbone (same names), ``head_dropout`` replaces the heads' fixed
    dropout (ASPP 0.5, FCN 0.1), ``atrous_rates`` the ASPP dilations. Input ``(N, H, W, 3)``."""
    num_classes = 21 if num_classes is None else num_classes
    config, _ = mobilenet_v3_config("mobilenet_v3_large", width_mult, reduced_tail, dilated=True)
    features = mobilenet_v3_features(config)
    taps = stage_indices(features)
    out_pos, aux_pos = taps[-1], taps[-4]
    out_channels, aux_channels = 6 * config[-1].out_channels, features[aux_pos].out_channels
    classifier = deeplab_head(out_channels, num_classes, atrous_rates,
                              dropout=0.5 if head_dropout is None else head_dropout)
    aux = fcn_head(aux_channels, num_classes, dropout=0.1 if head_dropout is None else head_dropout) if aux_loss \
        else None
    return MobileNetV3SegmentationModel(features, out_pos, aux_pos, classifier, aux)
