"""MobileNetV2, MobileNetV3 and EfficientNet at test size, with torchvision's module structure and names.

MobileNetV2 is the package's own (:class:`porter.examples.MobileNetV2`) with a small configuration.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

import torch
from torch import nn

from porter.examples import MobileNetV2

from ._common import ConvNormActivation, SqueezeExcitation, StochasticDepth, make_divisible


# ---------------------------------------------------------------------------------------------------- V2
def mobilenet_v2_small(num_classes: int = 10) -> MobileNetV2:
    # round_nearest=4 keeps the 12-channel stage (multiples of 8 would round it to 16).
    setting = [[1, 8, 1, 1], [4, 12, 2, 2], [4, 16, 2, 2]]
    return MobileNetV2(num_classes, inverted_residual_setting=setting, round_nearest=4, input_channel=8,
                       last_channel=32)


# ---------------------------------------------------------------------------------------------------- V3
class InvertedResidualConfig:
    """One MobileNetV3 block: (in, kernel, expanded, out, use_se, "RE"|"HS", stride, dilation)."""

    def __init__(self, input_channels: int, kernel: int, expanded_channels: int, out_channels: int, use_se: bool,
                 activation: str, stride: int, dilation: int = 1):
        self.input_channels = input_channels
        self.kernel = kernel
        self.expanded_channels = expanded_channels
        self.out_channels = out_channels
        self.use_se = use_se
        self.use_hs = activation == "HS"
        self.stride = stride
        self.dilation = dilation


class InvertedResidualV3(nn.Module):
    """Expand, depthwise (kxk), optional squeeze-excitation gated by hardsigmoid, project; children ``block.i``."""

    def __init__(self, cnf: InvertedResidualConfig, norm_layer: Callable[[int], nn.Module]):
        super().__init__()
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        act = nn.Hardswish if cnf.use_hs else nn.ReLU
        layers = []
        if cnf.expanded_channels != cnf.input_channels:
            layers.append(ConvNormActivation(cnf.input_channels, cnf.expanded_channels, kernel_size=1,
                                             norm_layer=norm_layer, activation_layer=act))
        stride = 1 if cnf.dilation > 1 else cnf.stride
        layers.append(ConvNormActivation(cnf.expanded_channels, cnf.expanded_channels, kernel_size=cnf.kernel,
                                         stride=stride, dilation=cnf.dilation, groups=cnf.expanded_channels,
                                         norm_layer=norm_layer, activation_layer=act))
        if cnf.use_se:
            squeeze = make_divisible(cnf.expanded_channels // 4, 8)
            layers.append(SqueezeExcitation(cnf.expanded_channels, squeeze, scale_activation=nn.Hardsigmoid))
        layers.append(ConvNormActivation(cnf.expanded_channels, cnf.out_channels, kernel_size=1,
                                         norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


class MobileNetV3(nn.Module):
    """Hardswish stem, inverted residuals (some with SE), 1x1 head conv, ``classifier`` with Hardswish."""

    def __init__(self, settings: Sequence[InvertedResidualConfig], last_channel: int, num_classes: int = 1000,
                 dropout: float = 0.2):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        first = settings[0].input_channels
        layers = [ConvNormActivation(3, first, kernel_size=3, stride=2, norm_layer=norm_layer,
                                     activation_layer=nn.Hardswish)]
        layers += [InvertedResidualV3(cnf, norm_layer) for cnf in settings]
        last_in = settings[-1].out_channels
        last_out = 6 * last_in
        layers.append(ConvNormActivation(last_in, last_out, kernel_size=1, norm_layer=norm_layer,
                                         activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(last_out, last_channel), nn.Hardswish(inplace=True), nn.Dropout(p=dropout, inplace=True),
            nn.Linear(last_channel, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v3_small(num_classes: int = 10) -> MobileNetV3:
    # Channel counts are multiples of 8, which torchvision's config would round them to anyway.
    c = InvertedResidualConfig
    settings = [
        c(8, 3, 8, 8, True, "RE", 2),
        c(8, 3, 24, 16, False, "RE", 2),
        c(16, 3, 32, 16, False, "RE", 1),
        c(16, 5, 48, 24, True, "HS", 2),
        c(24, 5, 48, 24, True, "HS", 1),
    ]
    return MobileNetV3(settings, last_channel=64, num_classes=num_classes)


# ---------------------------------------------------------------------------------------------------- EfficientNet
class MBConvConfig:
    """One EfficientNet stage: (expand_ratio, kernel, stride, in, out, num_layers)."""

    def __init__(self, expand_ratio: float, kernel: int, stride: int, input_channels: int, out_channels: int,
                 num_layers: int):
        self.expand_ratio = expand_ratio
        self.kernel = kernel
        self.stride = stride
        self.input_channels = input_channels
        self.out_channels = out_channels
        self.num_layers = num_layers


class MBConv(nn.Module):
    """SiLU expand, depthwise, SE (SiLU, sigmoid), linear project; residual through StochasticDepth."""

    def __init__(self, cnf: MBConvConfig, stochastic_depth_prob: float, norm_layer: Callable[[int], nn.Module]):
        super().__init__()
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        layers = []
        expanded = make_divisible(cnf.input_channels * cnf.expand_ratio, 8)
        if expanded != cnf.input_channels:
            layers.append(ConvNormActivation(cnf.input_channels, expanded, kernel_size=1, norm_layer=norm_layer,
                                             activation_layer=nn.SiLU))
        layers.append(ConvNormActivation(expanded, expanded, kernel_size=cnf.kernel, stride=cnf.stride,
                                         groups=expanded, norm_layer=norm_layer, activation_layer=nn.SiLU))
        squeeze = max(1, cnf.input_channels // 4)
        layers.append(SqueezeExcitation(expanded, squeeze, activation=partial(nn.SiLU, inplace=True)))
        layers.append(ConvNormActivation(expanded, cnf.out_channels, kernel_size=1, norm_layer=norm_layer,
                                         activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.out_channels = cnf.out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.block(x)
        if self.use_res_connect:
            result = self.stochastic_depth(result)
            result += x
        return result


class EfficientNet(nn.Module):
    """SiLU stem, MBConv stages (stochastic depth probability rising with depth), 1x1 head, dropout-linear."""

    def __init__(self, settings: Sequence[MBConvConfig], stochastic_depth_prob: float = 0.2,
                 num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        norm_layer = nn.BatchNorm2d
        layers = [ConvNormActivation(3, settings[0].input_channels, kernel_size=3, stride=2, norm_layer=norm_layer,
                                     activation_layer=nn.SiLU)]
        total = sum(cnf.num_layers for cnf in settings)
        block_id = 0
        for cnf in settings:
            stage = []
            for i in range(cnf.num_layers):
                block_cnf = MBConvConfig(cnf.expand_ratio, cnf.kernel, cnf.stride if i == 0 else 1,
                                         cnf.input_channels if i == 0 else cnf.out_channels, cnf.out_channels, 1)
                stage.append(MBConv(block_cnf, stochastic_depth_prob * block_id / total, norm_layer))
                block_id += 1
            layers.append(nn.Sequential(*stage))
        last_in = settings[-1].out_channels
        last_out = 4 * last_in
        layers.append(ConvNormActivation(last_in, last_out, kernel_size=1, norm_layer=norm_layer,
                                         activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(last_out, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def efficientnet_small(num_classes: int = 10) -> EfficientNet:
    settings = [MBConvConfig(1, 3, 1, 8, 8, 1), MBConvConfig(6, 3, 2, 8, 16, 2), MBConvConfig(6, 5, 2, 16, 24, 2)]
    return EfficientNet(settings, num_classes=num_classes)
