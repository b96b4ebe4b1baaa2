"""MobileNetV3 small and large in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``features.0`` (stem ``Conv2dNormActivation``), ``features.<i>.block.<j>`` (inverted
residuals: expand, depthwise, ``SqueezeExcitation`` with ``fc1``/``fc2``, project), ``features.<last>`` (head conv),
``classifier.0``/``classifier.3`` (the two linear layers). Batch norm is torchvision's ``eps=0.001, momentum=0.01``.
LR-ASPP (``zoo/lraspp.py``) uses :attr:`MobileNetV3.features` as its backbone. Example::

    >>> model = zoo.create("mobilenet_v3_small", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm, Hardswish

from ._blocks import SqueezeExcitation, conv_norm_activation
from ._common import apply_sequence, make_divisible
from ._loading import TorchCheckpointMixin
from ._mobile_blocks import Hardsigmoid, ReLU
from .registry import register_model

_NORM = partial(BatchNorm, eps=0.001, momentum=0.01)


@dataclass
class BlockConfig:
    """One row of torchvision's ``InvertedResidualConfig`` (channels already scaled by ``width_mult``)."""

    input_channels: int
    kernel: int
    expanded_channels: int
    out_channels: int
    use_se: bool
    use_hs: bool
    stride: int
    dilation: int


class InvertedResidual(nn.Module):
    """MobileNetV3 block: [1x1 expand], kxk depthwise (dilated in the segmentation backbones), [squeeze-excitation
    with a hard-sigmoid gate], linear 1x1 projection; a residual when the shape is kept.

    Args:
        cnf (BlockConfig): the block's row.
    Shape: ``(N, H, W, input_channels)`` -> ``(N, ceil(H / stride), ceil(W / stride), out_channels)`` (stride 1 when
    dilated, as torchvision).
    """

    def __init__(self, cnf: BlockConfig):
        super().__init__()
        if cnf.stride not in (1, 2):
            raise ValueError(f"[InvertedResidual] 'stride' must be 1 or 2 but got {cnf.stride}.")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        act = Hardswish if cnf.use_hs else ReLU
        self.block = []
        if cnf.expanded_channels != cnf.input_channels:
            self.block.append(conv_norm_activation(cnf.input_channels, cnf.expanded_channels, 1, norm_layer=_NORM,
                                                   activation_layer=act))
        stride = 1 if cnf.dilation > 1 else cnf.stride
        self.block.append(conv_norm_activation(cnf.expanded_channels, cnf.expanded_channels, cnf.kernel, stride=stride,
                                               dilation=cnf.dilation, groups=cnf.expanded_channels, norm_layer=_NORM,
                                               activation_layer=act))
        if cnf.use_se:
            squeeze = make_divisible(cnf.expanded_channels // 4, 8)
            self.block.append(SqueezeExcitation(cnf.expanded_channels, squeeze, activation=ReLU,
                                                scale_activation=Hardsigmoid))
        self.block.append(conv_norm_activation(cnf.expanded_channels, cnf.out_channels, 1, norm_layer=_NORM,
                                               activation_layer=None))
        self.out_channels = cnf.out_channels
        self.is_strided = cnf.stride > 1  # torchvision's ``_is_cn``: where the segmentation heads tap features

    def __call__(self, x: mx.array) -> mx.array:
        out = apply_sequence(self.block, x)
        return out + x if self.use_res_connect else out


# input, kernel, expanded, output, SE, hard-swish, stride, dilated (torchvision's tables; C4 rows may be dilated)
_LARGE = [(16, 3, 16, 16, False, False, 1, False), (16, 3, 64, 24, False, False, 2, False),
          (24, 3, 72, 24, False, False, 1, False), (24, 5, 72, 40, True, False, 2, False),
          (40, 5, 120, 40, True, False, 1, False), (40, 5, 120, 40, True, False, 1, False),
          (40, 3, 240, 80, False, True, 2, False), (80, 3, 200, 80, False, True, 1, False),
          (80, 3, 184, 80, False, True, 1, False), (80, 3, 184, 80, False, True, 1, False),
          (80, 3, 480, 112, True, True, 1, False), (112, 3, 672, 112, True, True, 1, False),
          (112, 5, 672, 160, True, True, 2, True), (160, 5, 960, 160, True, True, 1, True),
          (160, 5, 960, 160, True, True, 1, True)]
_SMALL = [(16, 3, 16, 16, True, False, 2, False), (16, 3, 72, 24, False, False, 2, False),
          (24, 3, 88, 24, False, False, 1, False), (24, 5, 96, 40, True, True, 2, False),
          (40, 5, 240, 40, True, True, 1, False), (40, 5, 240, 40, True, True, 1, False),
          (40, 5, 120, 48, True, True, 1, False), (48, 5, 144, 48, True, True, 1, False),
          (48, 5, 288, 96, True, True, 2, True), (96, 5, 576, 96, True, True, 1, True),
          (96, 5, 576, 96, True, True, 1, True)]
_TABLES = {"mobilenet_v3_large": (_LARGE, 1280), "mobilenet_v3_small": (_SMALL, 1024)}


def mobilenet_v3_config(arch: str, width_mult: float = 1.0, reduced_tail: bool = False, dilated: bool = False):
    """torchvision's ``_mobilenet_v3_conf``: the block rows and ``last_channel`` of ``arch``.

    ``reduced_tail`` halves the channels of the last stage; ``dilated`` gives it dilation 2 instead of stride 2
    (the segmentation backbones).
    """
    if not width_mult > 0:
        raise ValueError(f"[MobileNetV3] 'width_mult' must be positive but got {width_mult!r}.")
    rows, last = _TABLES[arch]
    divider = 2 if reduced_tail else 1

    def adjust(channels):
        return make_divisible(channels * width_mult, 8)

    config = []
    for i, (inp, k, exp, out, se, hs, stride, tail) in enumerate(rows):
        in_tail = i > 0 and rows[i - 1][7]  # the rows after C4's first take the reduced width in too
        inp = inp // divider if in_tail else inp
        exp = exp // divider if in_tail else exp
        out = out // divider if tail else out
        config.append(BlockConfig(adjust(inp), k, adjust(exp), adjust(out), se, hs, stride,
                                  2 if tail and dilated else 1))
    return config, adjust(last // divider)


def mobilenet_v3_features(config: list) -> list:
    """torchvision's ``MobileNetV3.features`` as a list: stem, the blocks of ``config``, 1x1 head conv (6x the last
    block's width). The segmentation heads use it as their backbone (``backbone.<i>`` in their checkpoints)."""
    if not config:
        raise ValueError("[MobileNetV3] the block configuration must not be empty.")
    features = [conv_norm_activation(3, config[0].input_channels, 3, stride=2, norm_layer=_NORM,
                                     activation_layer=Hardswish)]
    features += [InvertedResidual(cnf) for cnf in config]
    features.append(conv_norm_activation(config[-1].out_channels, 6 * config[-1].out_channels, 1, norm_layer=_NORM,
                                         activation_layer=Hardswish))
    return features


def stage_indices(features: list) -> list:
    """Indices in ``features`` where torchvision's segmentation heads may tap: the stem, every strided block (its
    ``_is_cn``, also when dilation replaced the stride) and the head conv."""
    return [0] + [i for i, f in enumerate(features) if getattr(f, "is_strided", False)] + [len(features) - 1]


class MobileNetV3(TorchCheckpointMixin, nn.Module):
    """MobileNetV3: hard-swish stem, inverted residuals, 1x1 head conv (6x), global average, ``classifier``
    (Linear, Hardswish, Dropout, Linear).

    Args:
        config (list of BlockConfig): the blocks (:func:`mobilenet_v3_config`).
        last_channel (int): width of the first classifier layer.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        dropout (float, optional): dropout in the classifier (inactive in eval). Default: ``0.2``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 1``.
    """

    def __init__(self, config: list, last_channel: int, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        self.features = mobilenet_v3_features(config)
        head = 6 * config[-1].out_channels
        self.classifier = [nn.Linear(head, last_channel), Hardswish(), nn.Dropout(dropout),
                           nn.Linear(last_channel, num_classes)]

    def __call__(self, x: mx.array) -> mx.array:
        x = apply_sequence(self.features, x)
        return apply_sequence(self.classifier, mx.mean(x, axis=(1, 2)))


def _build(arch: str, num_classes: int, width_mult: float = 1.0, reduced_tail: bool = False, dilated: bool = False,
           dropout: float = 0.2) -> MobileNetV3:
    config, last_channel = mobilenet_v3_config(arch, width_mult, reduced_tail, dilated)
    return MobileNetV3(config, last_channel, num_classes=num_classes, dropout=dropout)


_TORCH = "torchvision.models:{}"


@register_model("mobilenet_v3_large", family="mobilenet_v3", summary="MobileNetV3-Large, 5.5M parameters",
                torch_model=_TORCH.format("mobilenet_v3_large"))
def mobilenet_v3_large(num_classes: int = 1000, **kwargs) -> MobileNetV3:
    """torchvision's ``mobilenet_v3_large``. ``kwargs``: ``width_mult``, ``reduced_tail``, ``dilated``, ``dropout``."""
    return _build("mobilenet_v3_large", num_classes, **kwargs)


@register_model("mobilenet_v3_small", family="mobilenet_v3", summary="MobileNetV3-Small, 2.5M parameters",
                torch_model=_TORCH.format("mobilenet_v3_small"))
def mobilenet_v3_small(num_classes: int = 1000, **kwargs) -> MobileNetV3:
    """torchvision's ``mobilenet_v3_small``. ``kwargs``: ``width_mult``, ``reduced_tail``, ``dilated``, ``dropout``."""
    return _build("mobilenet_v3_small", num_classes, **kwargs)
