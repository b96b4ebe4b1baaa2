"""ResNet-18/34/50 in MLX, channels-last, loading torchvision-format checkpoints.

Submodule names are torchvision's (``conv1, bn1, layer1.0.conv1, layer2.0.downsample.0, fc``), so a torchvision
``state_dict`` loads with :meth:`ResNet.load_torch_state_dict`. Example::

    >>> from porter import zoo
    >>> model = zoo.create("resnet18", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm2d, Conv2d, MaxPool2d

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from .registry import register_model


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> Conv2d:
    return Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> Conv2d:
    return Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (ResNet-18/34).

    Args:
        inplanes (int): input channels.
        planes (int): output channels.
        stride (int, optional): stride of the first conv. Default: ``1``.
        downsample (bool, optional): project the identity with a strided 1x1 conv + BN (``downsample.0/1``).
            Default: ``False``.
    Shape: ``(N, H, W, inplanes)`` -> ``(N, ceil(H / stride), ceil(W / stride), planes)``.
    """

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: bool = False):
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = BatchNorm2d(planes)
        if downsample:
            self.downsample = [_conv1x1(inplanes, planes, stride), BatchNorm2d(planes)]

    def __call__(self, x: mx.array) -> mx.array:
        identity = apply_sequence(self.downsample, x) if "downsample" in self else x
        out = nn.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return nn.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided: torchvision's "ResNet v1.5"), 1x1 expand by 4, with a residual connection.

    Args:
        inplanes (int): input channels.
        planes (int): bottleneck channels; the output has ``4 * planes``.
        stride (int, optional): stride of the 3x3 conv. Default: ``1``.
        downsample (bool, optional): project the identity with a strided 1x1 conv + BN. Default: ``False``.
    Shape: ``(N, H, W, inplanes)`` -> ``(N, ceil(H / stride), ceil(W / stride), 4 * planes)``.
    """

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: bool = False):
        super().__init__()
        out = planes * self.expansion
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, out)
        self.bn3 = BatchNorm2d(out)
        if downsample:
            self.downsample = [_conv1x1(inplanes, out, stride), BatchNorm2d(out)]

    def __call__(self, x: mx.array) -> mx.array:
        identity = apply_sequence(self.downsample, x) if "downsample" in self else x
        out = nn.relu(self.bn1(self.conv1(x)))
        out = nn.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return nn.relu(out + identity)


class ResNet(TorchCheckpointMixin, nn.Module):
    """ResNet with torchvision's module names (``conv1, bn1, layer1..4, fc``).

    Args:
        block (type): :class:`BasicBlock` or :class:`Bottleneck`.
        layers (sequence of 4 ints): blocks per stage.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        widths (sequence of 4 ints, optional): stage widths; torchvision's are ``(64, 128, 256, 512)``. Smaller
            widths keep the structure and names (as ``porter.examples.ResNet``). Default: ``(64, 128, 256, 512)``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 1`` (global average pool).
    """

    def __init__(self, block: type, layers: Sequence[int], num_classes: int = 1000,
                 widths: Sequence[int] = (64, 128, 256, 512)):
        super().__init__()
        if len(layers) != 4 or len(widths) != 4:
            raise ValueError(f"[ResNet] 'layers' and 'widths' must have 4 entries but got {list(layers)} and "
                             f"{list(widths)}.")
        self.conv1 = Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = BatchNorm2d(widths[0])
        self.maxpool = MaxPool2d(3, stride=2, padding=1)
        inplanes = widths[0]
        for i, (planes, blocks) in enumerate(zip(widths, layers)):
            stride = 1 if i == 0 else 2
            stage = []
            for j in range(blocks):
                # The first block of a stage changes the shape, so its identity needs a projection.
                project = j == 0 and (stride != 1 or inplanes != planes * block.expansion)
                stage.append(block(inplanes, planes, stride if j == 0 else 1, downsample=project))
                inplanes = planes * block.expansion
            setattr(self, f"layer{i + 1}", stage)
        self.fc = nn.Linear(inplanes, num_classes)

    def __call__(self, x: mx.array) -> mx.array:
        x = self.maxpool(nn.relu(self.bn1(self.conv1(x))))
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = apply_sequence(stage, x)
        return self.fc(mx.mean(x, axis=(1, 2)))


_TORCH = "porter.examples:{}"


@register_model("resnet18", family="resnet", summary="ResNet-18: BasicBlock 2-2-2-2, 11.7M parameters",
                torch_model=_TORCH.format("resnet18"))
def resnet18(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNet-18 (BasicBlock, 2-2-2-2). ``kwargs``: ``widths``."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes=num_classes, **kwargs)


@register_model("resnet34", family="resnet", summary="ResNet-34: BasicBlock 3-4-6-3, 21.8M parameters",
                torch_model=_TORCH.format("resnet34"))
def resnet34(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNet-34 (BasicBlock, 3-4-6-3). ``kwargs``: ``widths``."""
    return ResNet(BasicBlock, [3, 4, 6, 3], num_classes=num_classes, **kwargs)


@register_model("resnet50", family="resnet", summary="ResNet-50: Bottleneck 3-4-6-3 (v1.5), 25.6M parameters",
                torch_model=_TORCH.format("resnet50"))
def resnet50(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNet-50 (Bottleneck, 3-4-6-3, stride on the 3x3 conv). ``kwargs``: ``widths``."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes=num_classes, **kwargs)
