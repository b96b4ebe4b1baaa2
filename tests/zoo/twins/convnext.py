"""torch twin of torchvision's ConvNeXt (``torchvision.models.convnext``): same modules, names and builders.
``widths`` (Porter's, also taken by the zoo factories) builds narrower models with the same names."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.nn import functional as F

from . import Case
from ._mobile_ops import Conv2dNormActivation, StochasticDepth


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias,
                            self.eps).permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    def __init__(self, dim, layer_scale, stochastic_depth_prob):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
                                   Permute([0, 2, 3, 1]), nn.LayerNorm(dim, eps=1e-6),
                                   nn.Linear(dim, 4 * dim, bias=True), nn.GELU(), nn.Linear(4 * dim, dim, bias=True),
                                   Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, x):
        return self.stochastic_depth(self.layer_scale * self.block(x)) + x


class CNBlockConfig:
    def __init__(self, input_channels, out_channels, num_layers):
        self.input_channels, self.out_channels, self.num_layers = input_channels, out_channels, num_layers


class ConvNeXt(nn.Module):
    def __init__(self, block_setting, stochastic_depth_prob=0.0, layer_scale=1e-6, num_classes=1000):
        super().__init__()
        norm_layer = partial(LayerNorm2d, eps=1e-6)
        layers = [Conv2dNormActivation(3, block_setting[0].input_channels, kernel_size=4, stride=4, padding=0,
                                       norm_layer=norm_layer, activation_layer=None, bias=True)]
        total = sum(cnf.num_layers for cnf in block_setting)
        block_id = 0
        for cnf in block_setting:
            stage = []
            for _ in range(cnf.num_layers):
                stage.append(CNBlock(cnf.input_channels, layer_scale, stochastic_depth_prob * block_id / (total - 1.0)))
                block_id += 1
            layers.append(nn.Sequential(*stage))
            if cnf.out_channels is not None:
                layers.append(nn.Sequential(norm_layer(cnf.input_channels),
                                            nn.Conv2d(cnf.input_channels, cnf.out_channels, kernel_size=2, stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last = block_setting[-1]
        c = last.out_channels if last.out_channels is not None else last.input_channels
        self.classifier = nn.Sequential(norm_layer(c), nn.Flatten(1), nn.Linear(c, num_classes))

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


_SIZES = {"convnext_tiny": ((96, 192, 384, 768), (3, 3, 9, 3), 0.1),
          "convnext_small": ((96, 192, 384, 768), (3, 3, 27, 3), 0.4),
          "convnext_base": ((128, 256, 512, 1024), (3, 3, 27, 3), 0.5),
          "convnext_large": ((192, 384, 768, 1536), (3, 3, 27, 3), 0.5)}


def _builder(name):
    def builder(*, weights=None, progress=True, widths=None, **kwargs):
        w, depths, sd = _SIZES[name]
        w = widths or w
        setting = [CNBlockConfig(w[i], w[i + 1] if i < 3 else None, depths[i]) for i in range(4)]
        return ConvNeXt(setting, stochastic_depth_prob=kwargs.pop("stochastic_depth_prob", sd), **kwargs)

    builder.__name__ = name
    return builder


# layer_scale 0.5 instead of 1e-6 so the blocks' branches count in the comparison
_SMALL = {"num_classes": 7, "widths": (8, 16, 24, 32), "layer_scale": 0.5}
CASES = {
    "convnext_tiny": Case(_builder("convnext_tiny"), _SMALL, inputs=((2, 3, 32, 32), (1, 3, 45, 38)), train=True,
                          train_input=(4, 3, 96, 96), train_kwargs={"stochastic_depth_prob": 0.0},
                          num_params=28589128),
    "convnext_small": Case(_builder("convnext_small"), _SMALL, inputs=((1, 3, 32, 32), (1, 3, 45, 38)),
                           num_params=50223688),
    "convnext_base": Case(_builder("convnext_base"), _SMALL, inputs=((1, 3, 32, 32), (1, 3, 45, 38)),
                          num_params=88591464),
    "convnext_large": Case(_builder("convnext_large"), _SMALL, inputs=((1, 3, 32, 32), (1, 3, 45, 38)),
                           num_params=197767336),
}
