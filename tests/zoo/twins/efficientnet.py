"""torch twin of torchvision's EfficientNet V1/V2 (``torchvision.models.efficientnet``): same modules, names and
builders. ``width_mult`` (Porter's, also taken by the zoo factories) builds reduced models with the same names."""

from __future__ import annotations

import copy
import math
from functools import partial

import torch
from torch import nn

from . import Case
from ._mobile_ops import Conv2dNormActivation, SqueezeExcitation, StochasticDepth, make_divisible


class _MBConvConfig:
    def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels, num_layers, block):
        self.expand_ratio, self.kernel, self.stride = expand_ratio, kernel, stride
        self.input_channels, self.out_channels, self.num_layers, self.block = (input_channels, out_channels,
                                                                             num_layers, block)

    @staticmethod
    def adjust_channels(channels, width_mult, min_value=None):
        return make_divisible(channels * width_mult, 8, min_value)


class MBConvConfig(_MBConvConfig):
    def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels, num_layers, width_mult=1.0,
                 depth_mult=1.0):
        super().__init__(expand_ratio, kernel, stride, self.adjust_channels(input_channels, width_mult),
                         self.adjust_channels(out_channels, width_mult), int(math.ceil(num_layers * depth_mult)),
                         MBConv)


class FusedMBConvConfig(_MBConvConfig):
    def __init__(self, expand_ratio, kernel, stride, input_channels, out_channels, num_layers):
        super().__init__(expand_ratio, kernel, stride, input_channels, out_channels, num_layers, FusedMBConv)


class MBConv(nn.Module):
    def __init__(self, cnf, stochastic_depth_prob, norm_layer):
        super().__init__()
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        layers = []
        expanded = cnf.adjust_channels(cnf.input_channels, cnf.expand_ratio)
        if expanded != cnf.input_channels:
            layers.append(Conv2dNormActivation(cnf.input_channels, expanded, kernel_size=1, norm_layer=norm_layer,
                                               activation_layer=nn.SiLU))
        layers.append(Conv2dNormActivation(expanded, expanded, kernel_size=cnf.kernel, stride=cnf.stride,
                                           groups=expanded, norm_layer=norm_layer, activation_layer=nn.SiLU))
        layers.append(SqueezeExcitation(expanded, max(1, cnf.input_channels // 4),
                                        activation=partial(nn.SiLU, inplace=True)))
        layers.append(Conv2dNormActivation(expanded, cnf.out_channels, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=None))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, x):
        result = self.block(x)
        return self.stochastic_depth(result) + x if self.use_res_connect else result


class FusedMBConv(nn.Module):
    def __init__(self, cnf, stochastic_depth_prob, norm_layer):
        super().__init__()
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        expanded = cnf.adjust_channels(cnf.input_channels, cnf.expand_ratio)
        if expanded != cnf.input_channels:
            layers = [Conv2dNormActivation(cnf.input_channels, expanded, kernel_size=cnf.kernel, stride=cnf.stride,
                                           norm_layer=norm_layer, activation_layer=nn.SiLU),
                      Conv2dNormActivation(expanded, cnf.out_channels, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=None)]
        else:
            layers = [Conv2dNormActivation(cnf.input_channels, cnf.out_channels, kernel_size=cnf.kernel,
                                           stride=cnf.stride, norm_layer=norm_layer, activation_layer=nn.SiLU)]
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, x):
        result = self.block(x)
        return self.stochastic_depth(result) + x if self.use_res_connect else result


class EfficientNet(nn.Module):
    def __init__(self, inverted_residual_setting, dropout, stochastic_depth_prob=0.2, num_classes=1000,
                 norm_layer=None, last_channel=None):
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        layers = [Conv2dNormActivation(3, inverted_residual_setting[0].input_channels, kernel_size=3, stride=2,
                                       norm_layer=norm_layer, activation_layer=nn.SiLU)]
        total = sum(cnf.num_layers for cnf in inverted_residual_setting)
        block_id = 0
        for cnf in inverted_residual_setting:
            stage = []
            for _ in range(cnf.num_layers):
                block_cnf = copy.copy(cnf)
                if stage:
                    block_cnf.input_channels = block_cnf.out_channels
                    block_cnf.stride = 1
                stage.append(block_cnf.block(block_cnf, stochastic_depth_prob * float(block_id) / total, norm_layer))
                block_id += 1
            layers.append(nn.Sequential(*stage))
        last_in = inverted_residual_setting[-1].out_channels
        last_out = last_channel if last_channel is not None else 4 * last_in
        layers.append(Conv2dNormActivation(last_in, last_out, kernel_size=1, norm_layer=norm_layer,
                                           activation_layer=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(last_out, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def _conf(arch, width_mult=1.0, depth_mult=1.0, v2_scale=None):
    if arch.startswith("efficientnet_b"):
        b = partial(MBConvConfig, width_mult=width_mult, depth_mult=depth_mult)
        return [b(1, 3, 1, 32, 16, 1), b(6, 3, 2, 16, 24, 2), b(6, 5, 2, 24, 40, 2), b(6, 3, 2, 40, 80, 3),
                b(6, 5, 1, 80, 112, 3), b(6, 5, 2, 112, 192, 4), b(6, 3, 1, 192, 320, 1)], None
    f = FusedMBConvConfig

    def m(e, k, s, i, o, n):
        return MBConvConfig(e, k, s, i, o, n)

    rows = {"efficientnet_v2_s": [(f, 1, 3, 1, 24, 24, 2), (f, 4, 3, 2, 24, 48, 4), (f, 4, 3, 2, 48, 64, 4),
                                  (m, 4, 3, 2, 64, 128, 6), (m, 6, 3, 1, 128, 160, 9), (m, 6, 3, 2, 160, 256, 15)],
            "efficientnet_v2_m": [(f, 1, 3, 1, 24, 24, 3), (f, 4, 3, 2, 24, 48, 5), (f, 4, 3, 2, 48, 80, 5),
                                  (m, 4, 3, 2, 80, 160, 7), (m, 6, 3, 1, 160, 176, 14), (m, 6, 3, 2, 176, 304, 18),
                                  (m, 6, 3, 1, 304, 512, 5)],
            "efficientnet_v2_l": [(f, 1, 3, 1, 32, 32, 4), (f, 4, 3, 2, 32, 64, 7), (f, 4, 3, 2, 64, 96, 7),
                                  (m, 4, 3, 2, 96, 192, 10), (m, 6, 3, 1, 192, 224, 19), (m, 6, 3, 2, 224, 384, 25),
                                  (m, 6, 3, 1, 384, 640, 7)]}[arch]
    scale = v2_scale or 1.0
    return [cls(e, k, s, make_divisible(i * scale, 8), make_divisible(o * scale, 8), n)
            for cls, e, k, s, i, o, n in rows], 1280


def _builder(arch, width, depth, dropout, norm_layer=None):
    def builder(*, weights=None, progress=True, width_mult=None, **kwargs):
        if arch.startswith("efficientnet_b"):
            setting, last = _conf(arch, width if width_mult is None else width_mult, depth)
        else:
            setting, last = _conf(arch, v2_scale=width_mult)
        extra = {"norm_layer": norm_layer} if norm_layer else {}
        return EfficientNet(setting, kwargs.pop("dropout", dropout), last_channel=last, **extra, **kwargs)

    builder.__name__ = arch
    return builder


_TF_NORM = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
_V2_NORM = partial(nn.BatchNorm2d, eps=1e-03)
efficientnet_b0 = _builder("efficientnet_b0", 1.0, 1.0, 0.2)
efficientnet_b1 = _builder("efficientnet_b1", 1.0, 1.1, 0.2)
efficientnet_b2 = _builder("efficientnet_b2", 1.1, 1.2, 0.3)
efficientnet_b3 = _builder("efficientnet_b3", 1.2, 1.4, 0.3)
efficientnet_b4 = _builder("efficientnet_b4", 1.4, 1.8, 0.4)
efficientnet_b5 = _builder("efficientnet_b5", 1.6, 2.2, 0.4, _TF_NORM)
efficientnet_b6 = _builder("efficientnet_b6", 1.8, 2.6, 0.5, _TF_NORM)
efficientnet_b7 = _builder("efficientnet_b7", 2.0, 3.1, 0.5, _TF_NORM)
efficientnet_v2_s = _builder("efficientnet_v2_s", None, None, 0.2, _V2_NORM)
efficientnet_v2_m = _builder("efficientnet_v2_m", None, None, 0.3, _V2_NORM)
efficientnet_v2_l = _builder("efficientnet_v2_l", None, None, 0.4, _V2_NORM)

# stochastic_depth_prob is kept (it is the identity in eval) for the forward tests, off for training
_SMALL = {"num_classes": 7, "width_mult": 0.25}
_INPUTS = ((1, 3, 32, 32), (1, 3, 35, 29))
CASES = {
    "efficientnet_b0": Case(efficientnet_b0, _SMALL, inputs=((2, 3, 32, 32), (1, 3, 35, 29)), train=True,
                            train_input=(4, 3, 64, 64), train_kwargs={"dropout": 0.0, "stochastic_depth_prob": 0.0},
                            num_params=5288548),
    "efficientnet_b1": Case(efficientnet_b1, _SMALL, inputs=_INPUTS, num_params=7794184),
    "efficientnet_b2": Case(efficientnet_b2, _SMALL, inputs=_INPUTS, num_params=9109994),
    "efficientnet_b3": Case(efficientnet_b3, _SMALL, inputs=_INPUTS, num_params=12233232),
    "efficientnet_b4": Case(efficientnet_b4, _SMALL, inputs=_INPUTS, num_params=19341616),
    "efficientnet_b5": Case(efficientnet_b5, _SMALL, inputs=_INPUTS, num_params=30389784),
    "efficientnet_b6": Case(efficientnet_b6, _SMALL, inputs=_INPUTS, num_params=43040704),
    "efficientnet_b7": Case(efficientnet_b7, _SMALL, inputs=_INPUTS, num_params=66347960),
    "efficientnet_v2_s": Case(efficientnet_v2_s, _SMALL, inputs=_INPUTS, num_params=21458488),
    "efficientnet_v2_m": Case(efficientnet_v2_m, _SMALL, inputs=_INPUTS, num_params=54139356),
    "efficientnet_v2_l": Case(efficientnet_v2_l, _SMALL, inputs=_INPUTS, num_params=118515272),
}
