"""Torch reference architectures shipped with Porter (imports torch; never used at runtime by a ported model).

ResNet-18/34/50/101/152, ResNeXt, Wide ResNet, VGG-11/13/16/19 with and without BatchNorm and MobileNetV2 reproduce
torchvision's architectures and module names, so ``resnet18().state_dict()`` has exactly the keys of
``torchvision.models.resnet18()`` (likewise every other factory here) and a torchvision checkpoint loads with ``strict=True``; torchvision is not a
dependency. They are the ``torch_model`` of the zoo entries of the same name (``porter convert --arch NAME``), and
each factory takes the keyword arguments of the zoo factory of the same name. Constructor arguments build reduced
models with the same names (ResNet ``widths``, VGG ``cfg``/``width_divisor``/``hidden``, MobileNetV2
``inverted_residual_setting``/``input_channel``/``last_channel``/``round_nearest``), used by the tests.
Weights are random (seeded by the caller); Porter ships no pretrained weights.

Example::

    >>> import torch
    >>> from porter.examples import EXAMPLES
    >>> model = EXAMPLES["resnet18"]().eval()
    >>> model(torch.randn(1, 3, 224, 224)).shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Type, Union

import torch
from torch import nn

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
           "resnext50_32x4d", "resnext101_32x8d", "resnext101_64x4d", "wide_resnet50_2", "wide_resnet101_2", "VGG",
           "VGG_CONFIGS", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
           "InvertedResidual", "MobileNetV2", "mobilenet_v2", "EXAMPLES"]


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1) -> nn.Conv2d:
    # Padding equals the dilation so a 3x3 conv keeps the spatial size at stride 1.
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=dilation, groups=groups, bias=False,
                     dilation=dilation)


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (ResNet-18/34).

    Args:
        inplanes (int): input channels.
        planes (int): output channels (``expansion`` is 1).
        stride (int, optional): stride of the first conv. Default: ``1``.
        downsample (nn.Module, optional): projection of the identity when shapes change. Default: ``None``.
    Shape: ``(N, inplanes, H, W)`` -> ``(N, planes, H / stride, W / stride)``.
    """

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: Optional[nn.Module] = None,
                 groups: int = 1, base_width: int = 64, dilation: int = 1,
                 norm_layer: Optional[Callable[[int], nn.Module]] = None):
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("[BasicBlock] 'groups' must be 1 and 'base_width' must be 64 "
                             f"but got groups={groups}, base_width={base_width}.")
        if dilation > 1:
            raise NotImplementedError("[BasicBlock] 'dilation' > 1 is not supported (as in torchvision).")
        norm_layer = norm_layer or nn.BatchNorm2d
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, as in torchvision's "ResNet v1.5"), 1x1 expand, with a residual connection.

    Args:
        inplanes (int): input channels.
        planes (int): bottleneck channels; the output has ``planes * 4``.
        stride (int, optional): stride of the 3x3 conv. Default: ``1``.
        downsample (nn.Module, optional): projection of the identity when shapes change. Default: ``None``.
        groups (int, optional): groups of the 3x3 conv (ResNeXt). Default: ``1``.
        base_width (int, optional): width per group (Wide ResNet / ResNeXt). Default: ``64``.
        dilation (int, optional): dilation (and padding) of the 3x3 conv. Default: ``1``.
    Shape: ``(N, inplanes, H, W)`` -> ``(N, 4 * planes, H / stride, W / stride)``.
    """

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: Optional[nn.Module] = None,
                 groups: int = 1, base_width: int = 64, dilation: int = 1,
                 norm_layer: Optional[Callable[[int], nn.Module]] = None):
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = _conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = _conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = _conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet with torchvision's module layout (``conv1, bn1, relu, maxpool, layer1..4, avgpool, fc``).

    Args:
        block (type): ``BasicBlock`` or ``Bottleneck``.
        layers (sequence of 4 ints): blocks per stage.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        zero_init_residual (bool, optional): zero the last BN gamma of every block. Default: ``False``.
        groups, width_per_group (int, optional): ResNeXt / Wide ResNet settings. Default: ``1``, ``64``.
        replace_stride_with_dilation (3 bools, optional): for layer2..4, keep the resolution and dilate instead
            of striding (segmentation backbones; Bottleneck only). Default: ``None`` (all strided).
        widths (sequence of 4 ints, optional): stage widths; torchvision uses ``(64, 128, 256, 512)``. Smaller
            widths give fast test models with the same structure and names. Default: ``(64, 128, 256, 512)``.
        in_channels (int, optional): input channels. Default: ``3``.
    Shape: ``(N, in_channels, H, W)`` -> ``(N, num_classes)``; any H, W >= 1 works (adaptive average pool).
    """

    def __init__(self, block: Type[Union[BasicBlock, Bottleneck]], layers: Sequence[int], num_classes: int = 1000,
                 zero_init_residual: bool = False, groups: int = 1, width_per_group: int = 64,
                 replace_stride_with_dilation: Optional[Sequence[bool]] = None,
                 widths: Sequence[int] = (64, 128, 256, 512), in_channels: int = 3,
                 norm_layer: Optional[Callable[[int], nn.Module]] = None):
        super().__init__()
        if len(layers) != 4 or len(widths) != 4:
            raise ValueError(f"[ResNet] 'layers' and 'widths' must have 4 entries but got {list(layers)} and "
                             f"{list(widths)}.")
        dilate = list(replace_stride_with_dilation or (False, False, False))
        if len(dilate) != 3:
            raise ValueError(f"[ResNet] 'replace_stride_with_dilation' must have 3 entries but got {dilate}.")
        self._norm_layer = norm_layer or nn.BatchNorm2d
        self.inplanes = widths[0]
        self.dilation = 1
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(in_channels, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, widths[0], layers[0])
        self.layer2 = self._make_layer(block, widths[1], layers[1], stride=2, dilate=dilate[0])
        self.layer3 = self._make_layer(block, widths[2], layers[2], stride=2, dilate=dilate[1])
        self.layer4 = self._make_layer(block, widths[3], layers[3], stride=2, dilate=dilate[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1, dilate: bool = False) -> nn.Sequential:
        previous_dilation = self.dilation
        if dilate:
            # Trade the stride for dilation: same receptive field growth, resolution kept.
            self.dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            # The identity must match the block output: a strided 1x1 projection plus BN.
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, planes * block.expansion, stride),
                self._norm_layer(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width, previous_dilation,
                        self._norm_layer)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups, base_width=self.base_width,
                                dilation=self.dilation, norm_layer=self._norm_layer))
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def _override(kwargs: dict, name: str, value) -> dict:
    # torchvision's builders fix some arguments and refuse a different value for them
    if name in kwargs and kwargs[name] != value:
        raise ValueError(f"The parameter '{name}' expected value {value} but got {kwargs[name]} instead.")
    return {**kwargs, name: value}


def _resnet(block, layers, num_classes: int, kwargs: dict, **fixed) -> ResNet:
    for key, value in fixed.items():
        kwargs = _override(kwargs, key, value)
    return ResNet(block, layers, num_classes=num_classes, **kwargs)


def resnet18(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNet-18 (BasicBlock, 2-2-2-2), torchvision's names; random weights."""
    return _resnet(BasicBlock, [2, 2, 2, 2], num_classes, kwargs)


def resnet34(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNet-34 (BasicBlock, 3-4-6-3), torchvision's names; random weights."""
    return _resnet(BasicBlock, [3, 4, 6, 3], num_classes, kwargs)


def resnet50(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNet-50 (Bottleneck, 3-4-6-3), torchvision's names; random weights."""
    return _resnet(Bottleneck, [3, 4, 6, 3], num_classes, kwargs)


def resnet101(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNet-101 (Bottleneck, 3-4-23-3), torchvision's names; random weights."""
    return _resnet(Bottleneck, [3, 4, 23, 3], num_classes, kwargs)


def resnet152(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNet-152 (Bottleneck, 3-8-36-3), torchvision's names; random weights."""
    return _resnet(Bottleneck, [3, 8, 36, 3], num_classes, kwargs)


def resnext50_32x4d(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNeXt-50 32x4d (groups 32, width per group 4), torchvision's names; random weights."""
    return _resnet(Bottleneck, [3, 4, 6, 3], num_classes, kwargs, groups=32, width_per_group=4)


def resnext101_32x8d(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNeXt-101 32x8d (groups 32, width per group 8), torchvision's names; random weights."""
    return _resnet(Bottleneck, [3, 4, 23, 3], num_classes, kwargs, groups=32, width_per_group=8)


def resnext101_64x4d(num_classes: int = 1000, **kwargs) -> ResNet:
    """ResNeXt-101 64x4d (groups 64, width per group 4), torchvision's names; random weights."""
    return _resnet(Bottleneck, [3, 4, 23, 3], num_classes, kwargs, groups=64, width_per_group=4)


def wide_resnet50_2(num_classes: int = 1000, **kwargs) -> ResNet:
    """Wide ResNet-50-2 (width per group 128), torchvision's names; random weights."""
    return _resnet(Bottleneck, [3, 4, 6, 3], num_classes, kwargs, width_per_group=128)


def wide_resnet101_2(num_classes: int = 1000, **kwargs) -> ResNet:
    """Wide ResNet-101-2 (width per group 128), torchvision's names; random weights."""
    return _resnet(Bottleneck, [3, 4, 23, 3], num_classes, kwargs, width_per_group=128)


# ---------------------------------------------------------------------------------------------------- VGG
VGG_CONFIGS = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(nn.Module):
    """torchvision's VGG: ``features`` (flat numbering), ``avgpool`` (7x7), ``classifier.0/3/6``.

    Args:
        cfg (sequence): channels per 3x3 conv (each followed by BN if ``batch_norm``, and ReLU), ``"M"`` for a
            2x2 max pool.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        width_divisor (int, optional): divide every conv width by this (a reduced model with the same names).
            Default: ``1``.
        hidden (int, optional): width of the two hidden classifier layers. Default: ``4096``.
        dropout (float, optional): dropout probability in the classifier (inactive in eval). Default: ``0.5``.
        batch_norm (bool, optional): a BatchNorm after every conv (the ``_bn`` models). Default: ``True``.
    Shape: ``(N, 3, H, W)`` -> ``(N, num_classes)``; the adaptive pool accepts any feature-map size, also
    smaller than 7 (windows then repeat input elements).
    """

    def __init__(self, cfg: Sequence[Union[int, str]], num_classes: int = 1000, width_divisor: int = 1,
                 hidden: int = 4096, dropout: float = 0.5, batch_norm: bool = True):
        super().__init__()
        layers, channels = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                continue
            width = max(1, v // width_divisor)
            layers += [nn.Conv2d(channels, width, kernel_size=3, padding=1)]
            layers += [nn.BatchNorm2d(width), nn.ReLU(True)] if batch_norm else [nn.ReLU(True)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(channels * 7 * 7, hidden), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(hidden, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def vgg11(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-11 (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg11"], num_classes, batch_norm=False, **kwargs)


def vgg11_bn(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-11 with BatchNorm (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg11"], num_classes, batch_norm=True, **kwargs)


def vgg13(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-13 (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg13"], num_classes, batch_norm=False, **kwargs)


def vgg13_bn(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-13 with BatchNorm (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg13"], num_classes, batch_norm=True, **kwargs)


def vgg16(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-16 (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg16"], num_classes, batch_norm=False, **kwargs)


def vgg16_bn(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-16 with BatchNorm (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg16"], num_classes, batch_norm=True, **kwargs)


def vgg19(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-19 (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg19"], num_classes, batch_norm=False, **kwargs)


def vgg19_bn(num_classes: int = 1000, **kwargs) -> VGG:
    """VGG-19 with BatchNorm (random weights); ``kwargs``: ``width_divisor``, ``hidden``, ``dropout``."""
    return VGG(VGG_CONFIGS["vgg19"], num_classes, batch_norm=True, **kwargs)



# ---------------------------------------------------------------------------------------------------- MobileNetV2
def _make_divisible(v: float, divisor: int = 8) -> int:
    # Round to a multiple of ``divisor`` without losing more than 10% of the channels (torchvision's rule).
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNReLU6(nn.Sequential):
    """torchvision's ``Conv2dNormActivation`` with ReLU6: children ``0`` (conv, no bias), ``1`` (BN), ``2``."""

    def __init__(self, inp: int, oup: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(nn.Conv2d(inp, oup, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(oup), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """1x1 expand (ReLU6), 3x3 depthwise (ReLU6), linear 1x1 projection; residual when the shape is kept.

    Args:
        inp (int): input channels.
        oup (int): output channels.
        stride (int): stride of the depthwise conv, 1 or 2.
        expand_ratio (int): hidden width is ``round(inp * expand_ratio)``; ``1`` drops the expansion conv.
    Shape: ``(N, inp, H, W)`` -> ``(N, oup, ceil(H / stride), ceil(W / stride))``; children ``conv.0 ..``.
    """

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"[InvertedResidual] 'stride' must be 1 or 2 but got {stride}.")
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers = [ConvBNReLU6(inp, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2: ``features.0`` stem, inverted residuals, 1x1 head conv, ``classifier.1``.

    Args:
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        width_mult (float, optional): width multiplier of every layer. Default: ``1.0``.
        inverted_residual_setting (list of [t, c, n, s], optional): per stage the expansion, output channels,
            repeats and first stride. Default: ``None`` (torchvision's 7 stages, 17 blocks).
        round_nearest (int, optional): channel counts are rounded to multiples of this. Default: ``8``.
        dropout (float, optional): dropout before the classifier (inactive in eval). Default: ``0.2``.
        input_channel (int, optional): stem width before ``width_mult``. Default: ``32``.
        last_channel (int, optional): head width before ``width_mult`` (never scaled below it). Default: ``1280``.
    Shape: ``(N, 3, H, W)`` -> ``(N, num_classes)``; any ``H, W >= 1``.
    """

    SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
               [6, 320, 1, 1]]

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0,
                 inverted_residual_setting: Optional[Sequence[Sequence[int]]] = None, round_nearest: int = 8,
                 dropout: float = 0.2, input_channel: int = 32, last_channel: int = 1280):
        super().__init__()
        setting = self.SETTING if inverted_residual_setting is None else inverted_residual_setting
        if not setting or any(len(row) != 4 for row in setting):
            raise ValueError("[MobileNetV2] 'inverted_residual_setting' must be a non-empty list of [t, c, n, s] "
                             f"rows but got {setting!r}.")
        channels = _make_divisible(input_channel * width_mult, round_nearest)
        last = _make_divisible(last_channel * max(1.0, width_mult), round_nearest)
        features = [ConvBNReLU6(3, channels, stride=2)]
        for t, c, n, s in setting:
            out = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(channels, out, s if i == 0 else 1, t))
                channels = out
        features.append(ConvBNReLU6(channels, last, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(num_classes: int = 1000, **kwargs) -> MobileNetV2:
    """MobileNetV2 (random weights); ``kwargs``: ``width_mult``, ``dropout`` and the other constructor arguments."""
    return MobileNetV2(num_classes, **kwargs)


#: Builders the CLI offers as ``porter convert --example NAME``; each takes ``num_classes``. VGG is left out on
#: purpose: its 133M+ parameters make a 0.5 GB example checkpoint; ``--arch vgg11_bn`` still reaches it.
EXAMPLES = {"resnet18": resnet18, "resnet34": resnet34, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2}
