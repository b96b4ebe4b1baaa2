"""Video ResNets R3D-18, MC3-18 and R(2+1)D-18 in MLX, channels-last, loading torchvision checkpoints.

torchvision.models.video's names: ``stem.<i>``, ``layer<k>.<j>.conv1.0`` (the conv, or for R(2+1)D the list
``conv1.0.0`` spatial conv, ``conv1.0.1`` BN, ``conv1.0.3`` temporal conv), ``conv1.1`` BN, ``conv2.*``,
``downsample.0/1``, ``fc``. Input ``(N, T, H, W, 3)``, output ``(N, num_classes)``. Example::

    >>> model = zoo.create("r3d_18", num_classes=10)
    >>> model(mx.zeros((1, 8, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm3d, Conv3d

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from .registry import register_model


def conv3d_simple(in_planes: int, out_planes: int, midplanes: int, stride: int = 1) -> Conv3d:
    """torchvision's ``Conv3DSimple``: a 3x3x3 conv (R3D)."""
    return Conv3d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)


def conv3d_no_temporal(in_planes: int, out_planes: int, midplanes: int, stride: int = 1) -> Conv3d:
    """torchvision's ``Conv3DNoTemporal``: a 1x3x3 conv, spatial stride only (MC3's later stages)."""
    return Conv3d(in_planes, out_planes, (1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1), bias=False)


def conv2plus1d(in_planes: int, out_planes: int, midplanes: int, stride: int = 1) -> list:
    """torchvision's ``Conv2Plus1D``: 1x3x3 conv to ``midplanes``, BN, ReLU, 3x1x1 conv (R(2+1)D)."""
    return [Conv3d(in_planes, midplanes, (1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1), bias=False),
            BatchNorm3d(midplanes), nn.ReLU(),
            Conv3d(midplanes, out_planes, (3, 1, 1), stride=(stride, 1, 1), padding=(1, 0, 0), bias=False)]


# The identity projection's stride per conv builder (torchvision's get_downsample_stride).
_DOWNSAMPLE_STRIDE = {conv3d_simple: lambda s: (s, s, s), conv3d_no_temporal: lambda s: (1, s, s),
                      conv2plus1d: lambda s: (s, s, s)}


class BasicBlock(nn.Module):
    """Two convs from ``conv_builder`` with BN, residual connection (torchvision's video ``BasicBlock``).

    Args:
        inplanes (int): input channels.
        planes (int): output channels.
        conv_builder (callable): :func:`conv3d_simple`, :func:`conv3d_no_temporal` or :func:`conv2plus1d`.
        stride (int, optional): stride of the first conv. Default: ``1``.
        downsample (bool, optional): project the identity (``downsample.0`` 1x1x1 conv, ``downsample.1`` BN).
            Default: ``False``.
    Shape: ``(N, T, H, W, inplanes)`` -> ``(N, T', H', W', planes)``.
    """

    def __init__(self, inplanes: int, planes: int, conv_builder, stride: int = 1, downsample: bool = False):
        super().__init__()
        midplanes = (inplanes * planes * 3 * 3 * 3) // (inplanes * 3 * 3 + 3 * planes)
        self.conv1 = [conv_builder(inplanes, planes, midplanes, stride), BatchNorm3d(planes), nn.ReLU()]
        self.conv2 = [conv_builder(planes, planes, midplanes), BatchNorm3d(planes)]
        if downsample:
            self.downsample = [Conv3d(inplanes, planes, 1, stride=_DOWNSAMPLE_STRIDE[conv_builder](stride),
                                      bias=False), BatchNorm3d(planes)]

    def __call__(self, x: mx.array) -> mx.array:
        residual = apply_sequence(self.downsample, x) if "downsample" in self else x
        out = apply_sequence(self.conv2, apply_sequence(self.conv1, x))
        return nn.relu(out + residual)


def basic_stem(width: int) -> list:
    """torchvision's ``BasicStem``: 3x7x7 conv, stride (1, 2, 2), BN, ReLU."""
    return [Conv3d(3, width, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False), BatchNorm3d(width),
            nn.ReLU()]


def r2plus1d_stem(width: int) -> list:
    """torchvision's ``R2Plus1dStem``: 1x7x7 conv to 45 channels, BN, ReLU, 3x1x1 conv, BN, ReLU."""
    return [Conv3d(3, 45, (1, 7, 7), stride=(1, 2, 2), padding=(0, 3, 3), bias=False), BatchNorm3d(45), nn.ReLU(),
            Conv3d(45, width, (3, 1, 1), padding=(1, 0, 0), bias=False), BatchNorm3d(width), nn.ReLU()]


class VideoResNet(TorchCheckpointMixin, nn.Module):
    """torchvision's ``VideoResNet`` with BasicBlocks.

    Args:
        conv_makers (sequence of 4 callables): the conv builder of each stage.
        layers (sequence of 4 ints): blocks per stage.
        stem (callable): :func:`basic_stem` or :func:`r2plus1d_stem`.
        num_classes (int, optional): classifier outputs. Default: ``400``.
        widths (sequence of 4 ints, optional): stage widths (the stem's is the first); torchvision's are
            ``(64, 128, 256, 512)``. Default: ``(64, 128, 256, 512)``.
    Shape: ``(N, T, H, W, 3)`` -> ``(N, num_classes)``; any ``T, H, W >= 1`` (global average pool).
    """

    def __init__(self, conv_makers: Sequence, layers: Sequence[int], stem, num_classes: int = 400,
                 widths: Sequence[int] = (64, 128, 256, 512)):
        super().__init__()
        if len(conv_makers) != 4 or len(layers) != 4 or len(widths) != 4:
            raise ValueError(f"[VideoResNet] 'conv_makers', 'layers' and 'widths' must have 4 entries but got "
                             f"{len(conv_makers)}, {list(layers)} and {list(widths)}.")
        self.stem = stem(widths[0])
        inplanes = widths[0]
        for i, (builder, planes, blocks) in enumerate(zip(conv_makers, widths, layers)):
            stride = 1 if i == 0 else 2
            stage = [BasicBlock(inplanes, planes, builder, stride, downsample=stride != 1 or inplanes != planes)]
            stage += [BasicBlock(planes, planes, builder) for _ in range(1, blocks)]
            setattr(self, f"layer{i + 1}", stage)
            inplanes = planes
        self.fc = nn.Linear(inplanes, num_classes)

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim != 5 or x.shape[-1] != 3:
            raise ValueError(f"[VideoResNet] expected input (N, T, H, W, 3) but got shape {x.shape}.")
        x = apply_sequence(self.stem, x)
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = apply_sequence(stage, x)
        return self.fc(mx.mean(x, axis=(1, 2, 3)))


_TORCH = "torchvision.models.video:{}"
_SHAPE = (1, 3, 16, 112, 112)


@register_model("r3d_18", family="video", summary="R3D-18: 3x3x3 convs, BasicBlock 2-2-2-2, 33.4M parameters",
                torch_model=_TORCH.format("r3d_18"), input_shape=_SHAPE)
def r3d_18(num_classes: int = 400, **kwargs) -> VideoResNet:
    """torchvision's ``r3d_18``. ``kwargs``: ``widths``."""
    return VideoResNet([conv3d_simple] * 4, [2, 2, 2, 2], basic_stem, num_classes=num_classes, **kwargs)


@register_model("mc3_18", family="video",
                summary="MC3-18: 3x3x3 convs in stage 1, 1x3x3 after, BasicBlock 2-2-2-2, 11.7M parameters",
                torch_model=_TORCH.format("mc3_18"), input_shape=_SHAPE)
def mc3_18(num_classes: int = 400, **kwargs) -> VideoResNet:
    """torchvision's ``mc3_18``. ``kwargs``: ``widths``."""
    return VideoResNet([conv3d_simple] + [conv3d_no_temporal] * 3, [2, 2, 2, 2], basic_stem,
                       num_classes=num_classes, **kwargs)


@register_model("r2plus1d_18", family="video",
                summary="R(2+1)D-18: (1x3x3, 3x1x1) factorized convs, BasicBlock 2-2-2-2, 31.5M parameters",
                torch_model=_TORCH.format("r2plus1d_18"), input_shape=_SHAPE)
def r2plus1d_18(num_classes: int = 400, **kwargs) -> VideoResNet:
    """torchvision's ``r2plus1d_18``. ``kwargs``: ``widths``."""
    return VideoResNet([conv2plus1d] * 4, [2, 2, 2, 2], r2plus1d_stem, num_classes=num_classes, **kwargs)
