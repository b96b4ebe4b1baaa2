"""torchvision.models.segmentation in MLX: FCN and DeepLabV3 on ResNet-50/101, channels-last.

Names are torchvision's: ``backbone.*`` (the ResNet up to ``layer4``, dilated: output stride 8),
``classifier.*`` (:func:`fcn_head` or :func:`deeplab_head`), ``aux_classifier.*`` (an FCN head on ``layer3``, with
``aux_loss``). The model returns ``{"out": (N, H, W, num_classes), "aux": ...}`` like torchvision's OrderedDict,
logits upsampled bilinearly to the input size.

Pieces other families reuse (import them from here): :class:`ASPP`, :func:`deeplab_head`, :func:`fcn_head`,
:func:`interpolate_bilinear` (torch's ``F.interpolate(mode="bilinear", align_corners=False)`` to a size) and
:class:`SegmentationModel`. Example::

    >>> model = zoo.create("deeplabv3_resnet50", num_classes=21)
    >>> model(mx.zeros((1, 97, 120, 3)))["out"].shape
    (1, 97, 120, 21)
"""

from __future__ import annotations

from typing import Optional, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from porter.layers import AdaptiveAvgPool2d, BatchNorm2d, Conv2d

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from .registry import register_model
from .resnet import Bottleneck, ResNet

__all__ = ["ASPP", "SegmentationModel", "deeplab_head", "fcn_head", "interpolate_bilinear"]


def _source_indices(in_size: int, out_size: int) -> tuple:
    """torch's bilinear source indices and weights along one axis (align_corners=False, float32 arithmetic)."""
    if in_size == out_size:
        idx = np.arange(out_size, dtype=np.int32)
        return idx, idx, np.zeros(out_size, np.float32)
    scale = np.float32(in_size) / np.float32(out_size)
    src = np.maximum((np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5),
                     np.float32(0))
    i0 = np.minimum(src.astype(np.int32), in_size - 1)
    i1 = np.where(i0 < in_size - 1, i0 + 1, i0)
    lam = np.clip(src - i0.astype(np.float32), 0, 1).astype(np.float32)
    return i0, i1, lam


def interpolate_bilinear(x: mx.array, size: Sequence[int]) -> mx.array:
    """``F.interpolate(x, size, mode="bilinear", align_corners=False)`` channels-last.

    Args:
        x (mx.array): ``(N, H, W, C)``.
        size (2 ints): output ``(H_out, W_out)``.
    Returns:
        ``(N, H_out, W_out, C)``, each output a blend of the 2x2 input pixels around its source position
        ``(i + 0.5) * H / H_out - 0.5`` (clamped at 0), as torch computes it.
    """
    if len(size) != 2 or any(int(s) < 1 for s in size):
        raise ValueError(f"[interpolate_bilinear] 'size' must be two positive ints but got {size!r}.")
    for axis, out_size in ((1, int(size[0])), (2, int(size[1]))):
        i0, i1, lam = _source_indices(x.shape[axis], out_size)
        if x.shape[axis] == out_size:
            continue
        shape = [1, 1, 1, 1]
        shape[axis] = out_size
        w1 = mx.array(lam.reshape(shape)).astype(x.dtype)
        x = mx.take(x, mx.array(i0), axis=axis) * (1 - w1) + mx.take(x, mx.array(i1), axis=axis) * w1
    return x


def _conv_bn_relu(in_channels: int, out_channels: int, kernel_size: int = 1, dilation: int = 1) -> list:
    padding = dilation if kernel_size == 3 else 0
    return [Conv2d(in_channels, out_channels, kernel_size, padding=padding, dilation=dilation, bias=False),
            BatchNorm2d(out_channels), nn.ReLU()]


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: a 1x1 branch, one 3x3 branch per rate (dilation = rate), an image-pooling
    branch (global average, 1x1 conv, broadcast back), concatenated and projected (``project.0``) with dropout.

    Args:
        in_channels (int): input channels.
        atrous_rates (sequence of ints): dilations of the 3x3 branches (torchvision: ``[12, 24, 36]``).
        out_channels (int, optional): channels of every branch and of the output. Default: ``256``.
        dropout (float, optional): dropout after the projection (training only). Default: ``0.5``.
    Shape: ``(N, H, W, in_channels)`` -> ``(N, H, W, out_channels)``. Names: ``convs.0.0`` (1x1), ``convs.<i>.0``
    (3x3 per rate), ``convs.<last>.1`` (pooling conv), ``project.0``.
    """

    def __init__(self, in_channels: int, atrous_rates: Sequence[int], out_channels: int = 256,
                 dropout: float = 0.5):
        super().__init__()
        self.convs = [_conv_bn_relu(in_channels, out_channels)]
        self.convs += [_conv_bn_relu(in_channels, out_channels, 3, dilation=int(r)) for r in atrous_rates]
        self.convs.append([AdaptiveAvgPool2d(1)] + _conv_bn_relu(in_channels, out_channels))
        self.project = _conv_bn_relu(len(self.convs) * out_channels, out_channels) + [nn.Dropout(dropout)]

    def __call__(self, x: mx.array) -> mx.array:
        branches = [apply_sequence(conv, x) for conv in self.convs[:-1]]
        pooled = apply_sequence(self.convs[-1], x)  # (N, 1, 1, C): bilinear upsampling of one pixel is a copy
        branches.append(mx.broadcast_to(pooled, x.shape[:-1] + pooled.shape[-1:]))
        return apply_sequence(self.project, mx.concatenate(branches, axis=-1))


def deeplab_head(in_channels: int, num_classes: int, atrous_rates: Sequence[int] = (12, 24, 36),
                 dropout: float = 0.5) -> list:
    """torchvision's ``DeepLabHead`` as a list: ``0`` ASPP (256 channels), ``1`` 3x3 conv, ``2`` BN, ``3`` ReLU,
    ``4`` 1x1 conv to the classes. Shape: ``(N, H, W, in_channels)`` -> ``(N, H, W, num_classes)``."""
    return [ASPP(in_channels, atrous_rates, dropout=dropout), Conv2d(256, 256, 3, padding=1, bias=False),
            BatchNorm2d(256), nn.ReLU(), Conv2d(256, num_classes, 1)]


def fcn_head(in_channels: int, channels: int, dropout: float = 0.1) -> list:
    """torchvision's ``FCNHead`` as a list: ``0`` 3x3 conv to ``in_channels // 4``, ``1`` BN, ``2`` ReLU, ``3``
    dropout, ``4`` 1x1 conv to ``channels``. Shape: ``(N, H, W, in_channels)`` -> ``(N, H, W, channels)``."""
    inter = in_channels // 4
    return [Conv2d(in_channels, inter, 3, padding=1, bias=False), BatchNorm2d(inter), nn.ReLU(),
            nn.Dropout(dropout), Conv2d(inter, channels, 1)]


class SegmentationModel(TorchCheckpointMixin, nn.Module):
    """torchvision's ``_SimpleSegmentationModel``: ``backbone`` maps, ``classifier`` on the last one,
    ``aux_classifier`` (optional) on the one before, both upsampled bilinearly to the input size.

    Args:
        backbone (nn.Module): has ``features(x)`` returning a list of maps, ``[-1]`` for ``out``, ``[-2]`` for
            ``aux``.
        classifier (list): the main head.
        aux_classifier (list, optional): the auxiliary head. Default: ``None``.
    Shape: ``(N, H, W, 3)`` -> ``{"out": (N, H, W, classes)}`` plus ``"aux"`` with an auxiliary head.
    """

    def __init__(self, backbone: nn.Module, classifier: list, aux_classifier: Optional[list] = None):
        super().__init__()
        self.backbone = backbone
        self.classifier = classifier
        if aux_classifier is not None:
            self.aux_classifier = aux_classifier

    def __call__(self, x: mx.array) -> dict:
        size = x.shape[1:3]
        maps = self.backbone.features(x)
        result = {"out": interpolate_bilinear(apply_sequence(self.classifier, maps[-1]), size)}
        if "aux_classifier" in self:
            result["aux"] = interpolate_bilinear(apply_sequence(self.aux_classifier, maps[-2]), size)
        return result


def _resnet_backbone(layers: list, widths: Sequence[int]) -> ResNet:
    """The dilated ResNet torchvision wraps in ``IntermediateLayerGetter``: ``layer3``/``layer4`` keep stride 8,
    and nothing after ``layer4`` (no ``fc``)."""
    backbone = ResNet(Bottleneck, layers, replace_stride_with_dilation=[False, True, True], widths=widths)
    backbone.pop("fc")
    return backbone


def _build(head: str, layers: list, num_classes: Optional[int], aux_loss: Optional[bool],
           widths: Sequence[int], head_dropout: Optional[float], **head_kwargs) -> SegmentationModel:
    num_classes = 21 if num_classes is None else num_classes
    backbone = _resnet_backbone(layers, widths)
    out_channels, aux_channels = widths[3] * Bottleneck.expansion, widths[2] * Bottleneck.expansion
    fcn_dropout = 0.1 if head_dropout is None else head_dropout
    if head == "fcn":
        classifier = fcn_head(out_channels, num_classes, dropout=fcn_dropout, **head_kwargs)
    else:
        classifier = deeplab_head(out_channels, num_classes, dropout=0.5 if head_dropout is None else head_dropout,
                                  **head_kwargs)
    aux = fcn_head(aux_channels, num_classes, dropout=fcn_dropout) if aux_loss else None
    return SegmentationModel(backbone, classifier, aux)


_DOC = ("``num_classes`` (default 21), ``aux_loss`` (an FCN head on ``layer3``; torchvision's weights have it); "
        "``head_dropout`` replaces the heads' fixed dropout (FCN 0.1, ASPP 0.5; 0 for deterministic training) and "
        "``widths`` shrinks the backbone (reduced models with the same names); DeepLabV3 also takes ``atrous_rates`` "
        "(torchvision's head fixes ``(12, 24, 36)``). Input ``(N, H, W, 3)``.")


def _register(name: str, head: str, layers: list, summary: str):
    @register_model(name, family=head, summary=summary, torch_model=f"torchvision.models.segmentation:{name}",
                    input_shape=(1, 3, 520, 520))
    def factory(num_classes: Optional[int] = None, aux_loss: Optional[bool] = None,
                widths: Sequence[int] = (64, 128, 256, 512), head_dropout: Optional[float] = None, **head_kwargs
                ) -> SegmentationModel:
        return _build(head, layers, num_classes, aux_loss, widths, head_dropout, **head_kwargs)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"{summary} (torchvision's ``{name}``). {_DOC}"
    return factory


fcn_resnet50 = _register("fcn_resnet50", "fcn", [3, 4, 6, 3], "FCN on a dilated ResNet-50, 35.3M parameters with aux")
fcn_resnet101 = _register("fcn_resnet101", "fcn", [3, 4, 23, 3],
                          "FCN on a dilated ResNet-101, 54.3M parameters with aux")
deeplabv3_resnet50 = _register("deeplabv3_resnet50", "deeplabv3", [3, 4, 6, 3],
                               "DeepLabV3 (ASPP) on a dilated ResNet-50, 42.0M parameters with aux")
deeplabv3_resnet101 = _register("deeplabv3_resnet101", "deeplabv3", [3, 4, 23, 3],
                                "DeepLabV3 (ASPP) on a dilated ResNet-101, 61.0M parameters with aux")
