"""torch twin of torchvision's MobileNetV3 (``torchvision.models.mobilenetv3``): same modules, names and builders."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from . import Case
from ._mobile_ops import Conv2dNormActivation, SqueezeExcitation, make_divisible


class InvertedResidualConfig:
    def __init__(self, input_channels, kernel, expanded_channels, out_channels, use_se, activation, stride, dilation,
                 width_mult):
        self.input_channels = make_divisible(input_channels * width_mult, 8)
        self.kernel = kernel
        self.expanded_channels = make_divisible(expanded_channels * width_mult, 8)
        self.out_channels = make_divisible(out_channels * width_mult, 8)
        self.use_se = use_se
        self.use_hs = activation == "HS"
        self.stride = stride
        self.dilation = dilation


class InvertedResidual(nn.Module):
    def __init__(self, cnf, norm_layer):
        super().__init__()
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        act = nn.Hardswish if cnf.use_hs else nn.ReLU
        layers = []
        if cnf.expanded_channels != cnf.input_channels:
            layers.append(Conv2dNormActivation(cnf.input_channels, cnf.expanded_channels, kernel_size=1,
                                               norm_layer=norm_layer, activation_layer=act))
        stride = 1 if cnf.dilation > 1 else cnf.stride
        layers.append(Conv2dNormActivation(cnf.expanded_channels, cnf.expanded_channels, kernel_size=cnf.kernel,
                                           stride=stride, dilation=cnf.dilation, groups=cnf.expanded_channels,
                                           norm_layer=norm_layer, activation_layer=act))
        if cnf.use_se:
            layers.append(SqueezeExcitation(cnf.expanded_channels, make_divisible(cnf.expanded_channels // 4, 8),
                                            scale_activation=nn.Hardsigmoid))
        layers.append(Conv2dNormActivation(cnf.expanded_channels, cnf.out_channels, kernel_size=1,
                                           norm_layer=norm_layer, activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels
        self._is_cn = cnf.stride > 1

    def forward(self, x):
        result = self.block(x)
        return result + x if self.use_res_connect else result


class MobileNetV3(nn.Module):
    def __init__(self, inverted_residual_setting, last_channel, num_classes=1000, dropout=0.2):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        layers = [Conv2dNormActivation(3, inverted_residual_setting[0].input_channels, kernel_size=3, stride=2,
                                       norm_layer=norm_layer, activation_layer=nn.Hardswish)]
        layers += [InvertedResidual(cnf, norm_layer) for cnf in inverted_residual_setting]
        last_in = inverted_residual_setting[-1].out_channels
        layers.append(Conv2dNormActivation(last_in, 6 * last_in, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last_in, last_channel), nn.Hardswish(inplace=True),
                                        nn.Dropout(p=dropout, inplace=True), nn.Linear(last_channel, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _conf(arch, width_mult=1.0, reduced_tail=False, dilated=False, **kwargs):
    rd = 2 if reduced_tail else 1
    d = 2 if dilated else 1
    b = partial(InvertedResidualConfig, width_mult=width_mult)
    if arch == "mobilenet_v3_large":
        setting = [b(16, 3, 16, 16, False, "RE", 1, 1), b(16, 3, 64, 24, False, "RE", 2, 1),
                   b(24, 3, 72, 24, False, "RE", 1, 1), b(24, 5, 72, 40, True, "RE", 2, 1),
                   b(40, 5, 120, 40, True, "RE", 1, 1), b(40, 5, 120, 40, True, "RE", 1, 1),
                   b(40, 3, 240, 80, False, "HS", 2, 1), b(80, 3, 200, 80, False, "HS", 1, 1),
                   b(80, 3, 184, 80, False, "HS", 1, 1), b(80, 3, 184, 80, False, "HS", 1, 1),
                   b(80, 3, 480, 112, True, "HS", 1, 1), b(112, 3, 672, 112, True, "HS", 1, 1),
                   b(112, 5, 672, 160 // rd, True, "HS", 2, d),
                   b(160 // rd, 5, 960 // rd, 160 // rd, True, "HS", 1, d),
                   b(160 // rd, 5, 960 // rd, 160 // rd, True, "HS", 1, d)]
        last = make_divisible(1280 // rd * width_mult, 8)
    else:
        setting = [b(16, 3, 16, 16, True, "RE", 2, 1), b(16, 3, 72, 24, False, "RE", 2, 1),
                   b(24, 3, 88, 24, False, "RE", 1, 1), b(24, 5, 96, 40, True, "HS", 2, 1),
                   b(40, 5, 240, 40, True, "HS", 1, 1), b(40, 5, 240, 40, True, "HS", 1, 1),
                   b(40, 5, 120, 48, True, "HS", 1, 1), b(48, 5, 144, 48, True, "HS", 1, 1),
                   b(48, 5, 288, 96 // rd, True, "HS", 2, d),
                   b(96 // rd, 5, 576 // rd, 96 // rd, True, "HS", 1, d),
                   b(96 // rd, 5, 576 // rd, 96 // rd, True, "HS", 1, d)]
        last = make_divisible(1024 // rd * width_mult, 8)
    return setting, last


def _model_kwargs(kwargs):
    return {k: v for k, v in kwargs.items() if k not in ("width_mult", "reduced_tail", "dilated")}


def mobilenet_v3_large(*, weights=None, progress=True, **kwargs):
    setting, last = _conf("mobilenet_v3_large", **kwargs)
    return MobileNetV3(setting, last, **_model_kwargs(kwargs))


def mobilenet_v3_small(*, weights=None, progress=True, **kwargs):
    setting, last = _conf("mobilenet_v3_small", **kwargs)
    return MobileNetV3(setting, last, **_model_kwargs(kwargs))


# the reduced configurations run the dilated, reduced-tail variant (the segmentation backbones' path)
CASES = {
    "mobilenet_v3_large": Case(mobilenet_v3_large, {"num_classes": 7, "width_mult": 0.5, "dilated": True,
                                                    "reduced_tail": True}, num_params=5483032),
    "mobilenet_v3_small": Case(mobilenet_v3_small, {"num_classes": 7, "width_mult": 0.5}, train=True,
                               train_input=(4, 3, 64, 64), train_kwargs={"dropout": 0.0}, num_params=2542856),
}
