"""ResNet-18/34/50/101/152, ResNeXt and Wide ResNet in MLX, channels-last, loading torchvision-format checkpoints.

Submodule names are torchvision's (``conv1, bn1, layer1.0.conv1, layer2.0.downsample.0, fc``), so a torchvision
``state_dict`` loads with :meth:`ResNet.load_torch_state_dict`. Example::

    >>> from porter import zoo
    >>> model = zoo.create("resnet18", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from typing import Optional, Sequence

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm2d, Conv2d, MaxPool2d

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from .registry import register_model


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1) -> Conv2d:
    # padding = dilation keeps the size at stride 1
    return Conv2d(in_planes, out_planes, 3, stride=stride, padding=dilation, groups=groups, dilation=dilation,
                  bias=False)


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
        groups, base_width, dilation: must be ``1``, ``64``, ``1`` (torchvision's BasicBlock has no other form).
    Shape: ``(N, H, W, inplanes)`` -> ``(N, ceil(H / stride), ceil(W / stride), planes)``.
    """

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: bool = False, groups: int = 1,
                 base_width: int = 64, dilation: int = 1):
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("[BasicBlock] only supports 'groups'=1 and 'base_width'=64 but got "
                             f"groups={groups}, base_width={base_width}.")
        if dilation > 1:
            raise NotImplementedError("[BasicBlock] 'dilation' > 1 is not supported (as in torchvision).")
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
        groups (int, optional): groups of the 3x3 conv (ResNeXt). Default: ``1``.
        base_width (int, optional): width per group; the 3x3 conv has ``int(planes * base_width / 64) * groups``
            channels (Wide ResNet: 128). Default: ``64``.
        dilation (int, optional): dilation (and padding) of the 3x3 conv. Default: ``1``.
    Shape: ``(N, H, W, inplanes)`` -> ``(N, ceil(H / stride), ceil(W / stride), 4 * planes)``.
    """

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: bool = False, groups: int = 1,
                 base_width: int = 64, dilation: int = 1):
        super().__init__()
        out = planes * self.expansion
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = _conv1x1(inplanes, width)
        self.bn1 = BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride, groups, dilation)
        self.bn2 = BatchNorm2d(width)
        self.conv3 = _conv1x1(width, out)
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
        zero_init_residual (bool, optional): zero the last BN weight of every block. Default: ``False``.
        groups (int, optional): groups of the bottleneck 3x3 convs (ResNeXt). Default: ``1``.
        width_per_group (int, optional): bottleneck width per group (Wide ResNet: 128). Default: ``64``.
        replace_stride_with_dilation (3 bools, optional): for ``layer2..4``, dilate instead of striding (output
            stride 8 or 16, for segmentation backbones). Default: ``None`` (all strided).
        widths (sequence of 4 ints, optional): stage widths; torchvision's are ``(64, 128, 256, 512)``. Smaller
            widths keep the structure and names (as ``porter.examples.ResNet``). Default: ``(64, 128, 256, 512)``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 1`` (global average pool).
    :meth:`features` returns every stage's map (``(N, H', W', C)``), as segmentation backbones need.
    """

    def __init__(self, block: type, layers: Sequence[int], num_classes: int = 1000, zero_init_residual: bool = False,
                 groups: int = 1, width_per_group: int = 64,
                 replace_stride_with_dilation: Optional[Sequence[bool]] = None,
                 widths: Sequence[int] = (64, 128, 256, 512)):
        super().__init__()
        if len(layers) != 4 or len(widths) != 4:
            raise ValueError(f"[ResNet] 'layers' and 'widths' must have 4 entries but got {list(layers)} and "
                             f"{list(widths)}.")
        dilate = list(replace_stride_with_dilation or (False, False, False))
        if len(dilate) != 3:
            raise ValueError("[ResNet] 'replace_stride_with_dilation' should be None or a 3-element tuple but got "
                             f"{replace_stride_with_dilation!r}.")
        if int(widths[0] * (width_per_group / 64.0)) * groups < 1 and block is Bottleneck:
            raise ValueError(f"[ResNet] 'groups'={groups} and 'width_per_group'={width_per_group} leave the "
                             f"bottleneck of widths {list(widths)} without channels.")
        self.conv1 = Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = BatchNorm2d(widths[0])
        self.maxpool = MaxPool2d(3, stride=2, padding=1)
        inplanes, dilation = widths[0], 1
        for i, (planes, blocks) in enumerate(zip(widths, layers)):
            stride, previous = (1 if i == 0 else 2), dilation
            if i > 0 and dilate[i - 1]:
                dilation, stride = dilation * stride, 1  # trade the stride for dilation: resolution kept
            stage = []
            for j in range(blocks):
                # The first block of a stage changes the shape, so its identity needs a projection.
                project = j == 0 and (stride != 1 or inplanes != planes * block.expansion)
                stage.append(block(inplanes, planes, stride if j == 0 else 1, downsample=project, groups=groups,
                                   base_width=width_per_group, dilation=previous if j == 0 else dilation))
                inplanes = planes * block.expansion
            setattr(self, f"layer{i + 1}", stage)
        self.fc = nn.Linear(inplanes, num_classes)
        if zero_init_residual:
            for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
                for b in stage:
                    last = b.bn3 if isinstance(b, Bottleneck) else b.bn2
                    last.weight = mx.zeros_like(last.weight)

    def features(self, x: mx.array) -> list:
        """The maps after ``layer1``, ``layer2``, ``layer3`` and ``layer4``, channels-last."""
        x = self.maxpool(nn.relu(self.bn1(self.conv1(x))))
        maps = []
        for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = apply_sequence(stage, x)
            maps.append(x)
        return maps

    def __call__(self, x: mx.array) -> mx.array:
        return self.fc(mx.mean(self.features(x)[-1], axis=(1, 2)))


def _override(kwargs: dict, name: str, value) -> dict:
    """Set a builder's fixed argument, refusing a different value as torchvision does."""
    if name in kwargs and kwargs[name] != value:
        raise ValueError(f"[ResNet] the parameter '{name}' expected value {value} but got {kwargs[name]} instead.")
    return {**kwargs, name: value}


_TORCH = "porter.examples:{}"
_KWARGS = "``kwargs``: ``zero_init_residual``, ``groups``, ``width_per_group``, ``replace_stride_with_dilation``, ``widths``"


def _register(name: str, summary: str, block: type, layers: list, **fixed):
    @register_model(name, family="resnet", summary=summary, torch_model=_TORCH.format(name))
    def factory(num_classes: int = 1000, **kwargs) -> ResNet:
        for key, value in fixed.items():
            kwargs = _override(kwargs, key, value)
        return ResNet(block, layers, num_classes=num_classes, **kwargs)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"{summary} (torchvision's ``{name}``). {_KWARGS}."
    return factory


resnet18 = _register("resnet18", "ResNet-18: BasicBlock 2-2-2-2, 11.7M parameters", BasicBlock, [2, 2, 2, 2])
resnet34 = _register("resnet34", "ResNet-34: BasicBlock 3-4-6-3, 21.8M parameters", BasicBlock, [3, 4, 6, 3])
resnet50 = _register("resnet50", "ResNet-50: Bottleneck 3-4-6-3 (v1.5), 25.6M parameters", Bottleneck, [3, 4, 6, 3])
resnet101 = _register("resnet101", "ResNet-101: Bottleneck 3-4-23-3, 44.5M parameters", Bottleneck, [3, 4, 23, 3])
resnet152 = _register("resnet152", "ResNet-152: Bottleneck 3-8-36-3, 60.2M parameters", Bottleneck, [3, 8, 36, 3])
resnext50_32x4d = _register("resnext50_32x4d", "ResNeXt-50 32x4d: grouped Bottleneck 3-4-6-3, 25.0M parameters",
                            Bottleneck, [3, 4, 6, 3], groups=32, width_per_group=4)
resnext101_32x8d = _register("resnext101_32x8d", "ResNeXt-101 32x8d: grouped Bottleneck 3-4-23-3, 88.8M parameters",
                             Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=8)
resnext101_64x4d = _register("resnext101_64x4d", "ResNeXt-101 64x4d: grouped Bottleneck 3-4-23-3, 83.5M parameters",
                             Bottleneck, [3, 4, 23, 3], groups=64, width_per_group=4)
wide_resnet50_2 = _register("wide_resnet50_2", "Wide ResNet-50-2: Bottleneck 3-4-6-3, twice as wide, 68.9M parameters",
                            Bottleneck, [3, 4, 6, 3], width_per_group=128)
wide_resnet101_2 = _register("wide_resnet101_2",
                             "Wide ResNet-101-2: Bottleneck 3-4-23-3, twice as wide, 126.9M parameters", Bottleneck,
                             [3, 4, 23, 3], width_per_group=128)
