"""ShuffleNetV2, ConvNeXt and RegNet at test size, with torchvision's module structure and names."""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ._common import ConvNormActivation, SqueezeExcitation, StochasticDepth


# ---------------------------------------------------------------------------------------------------- ShuffleNetV2
def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave channel groups: view (N, g, C/g, H, W), swap the two channel axes, view back."""
    n, c, h, w = x.size()
    x = x.view(n, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(n, c, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNetV2 unit (torchvision: ``InvertedResidual``): split channels with ``chunk`` (stride 1) or run
    two strided branches (stride 2), concatenate, shuffle."""

    def __init__(self, inp: int, oup: int, stride: int):
        super().__init__()
        if not 1 <= stride <= 3:
            raise ValueError(f"[InvertedResidual] 'stride' must be in [1, 3] but got {stride}.")
        self.stride = stride
        bf = oup // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(inp, inp, 3, stride, 1, bias=False, groups=inp), nn.BatchNorm2d(inp),
                nn.Conv2d(inp, bf, 1, 1, 0, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
            )
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(inp if stride > 1 else bf, bf, 1, 1, 0, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
            nn.Conv2d(bf, bf, 3, stride, 1, bias=False, groups=bf), nn.BatchNorm2d(bf),
            nn.Conv2d(bf, bf, 1, 1, 0, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """conv1, maxpool, stage2..4, conv5, spatial mean, fc."""

    def __init__(self, stages_repeats: Sequence[int], stages_out_channels: Sequence[int], num_classes: int = 1000):
        super().__init__()
        if len(stages_repeats) != 3 or len(stages_out_channels) != 5:
            raise ValueError("[ShuffleNetV2] expected 3 stage repeats and 5 output channel counts but got "
                             f"{list(stages_repeats)} and {list(stages_out_channels)}.")
        c = stages_out_channels[0]
        self.conv1 = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        for name, repeats, out in zip(("stage2", "stage3", "stage4"), stages_repeats, stages_out_channels[1:]):
            units = [ShuffleUnit(c, out, 2)] + [ShuffleUnit(out, out, 1) for _ in range(repeats - 1)]
            setattr(self, name, nn.Sequential(*units))
            c = out
        last = stages_out_channels[-1]
        self.conv5 = nn.Sequential(nn.Conv2d(c, last, 1, 1, 0, bias=False), nn.BatchNorm2d(last),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(last, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))


def shufflenet_v2_small(num_classes: int = 10) -> ShuffleNetV2:
    return ShuffleNetV2([2, 2, 1], [8, 16, 32, 48, 64], num_classes=num_classes)


# ---------------------------------------------------------------------------------------------------- ConvNeXt
class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) tensor: permute to NHWC, normalise, permute back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims: Sequence[int]):
        super().__init__()
        self.dims = list(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    """7x7 depthwise conv, permute to NHWC, LayerNorm, MLP (GELU), permute back, layer scale, residual."""

    def __init__(self, dim: int, layer_scale: float, stochastic_depth_prob: float):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
            Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6),
            nn.Linear(dim, 4 * dim, bias=True),
            nn.GELU(),
            nn.Linear(4 * dim, dim, bias=True),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.stochastic_depth(self.layer_scale * self.block(x))
        result += x
        return result


class ConvNeXt(nn.Module):
    """4x4/4 patchify stem with LayerNorm2d, CNBlock stages separated by (LayerNorm2d, 2x2/2 conv) downsamples,
    global average, ``classifier`` (LayerNorm2d, Flatten, Linear). ``stages``: (in, out or None, blocks)."""

    def __init__(self, stages: Sequence[tuple], stochastic_depth_prob: float = 0.1, layer_scale: float = 1e-6,
                 num_classes: int = 1000):
        super().__init__()
        norm_layer = partial(LayerNorm2d, eps=1e-6)
        first = stages[0][0]
        layers = [ConvNormActivation(3, first, kernel_size=4, stride=4, padding=0, norm_layer=norm_layer,
                                     activation_layer=None, bias=True)]
        total = sum(s[2] for s in stages)
        block_id = 0
        for cin, cout, n in stages:
            stage = []
            for _ in range(n):
                stage.append(CNBlock(cin, layer_scale, stochastic_depth_prob * block_id / (total - 1.0)))
                block_id += 1
            layers.append(nn.Sequential(*stage))
            if cout is not None:
                layers.append(nn.Sequential(norm_layer(cin), nn.Conv2d(cin, cout, kernel_size=2, stride=2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        last = stages[-1][1] if stages[-1][1] is not None else stages[-1][0]
        self.classifier = nn.Sequential(norm_layer(last), nn.Flatten(1), nn.Linear(last, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)))


def convnext_small(num_classes: int = 10) -> ConvNeXt:
    return ConvNeXt([(8, 16, 1), (16, 24, 1), (24, None, 1)], num_classes=num_classes)


# ---------------------------------------------------------------------------------------------------- RegNet
class BottleneckTransform(nn.Sequential):
    """``a`` (1x1), ``b`` (3x3 group conv, strided), optional ``se``, ``c`` (1x1, no activation)."""

    def __init__(self, width_in: int, width_out: int, stride: int, group_width: int, bottleneck_multiplier: float,
                 se_ratio: Optional[float]):
        layers = OrderedDict()
        w_b = int(round(width_out * bottleneck_multiplier))
        g = w_b // group_width
        layers["a"] = ConvNormActivation(width_in, w_b, kernel_size=1, stride=1)
        layers["b"] = ConvNormActivation(w_b, w_b, kernel_size=3, stride=stride, groups=g)
        if se_ratio:
            layers["se"] = SqueezeExcitation(w_b, int(round(se_ratio * width_in)), activation=nn.ReLU)
        layers["c"] = ConvNormActivation(w_b, width_out, kernel_size=1, stride=1, activation_layer=None)
        super().__init__(layers)


class ResBottleneckBlock(nn.Module):
    def __init__(self, width_in: int, width_out: int, stride: int, group_width: int, bottleneck_multiplier: float,
                 se_ratio: Optional[float]):
        super().__init__()
        self.proj = None
        if width_in != width_out or stride != 1:
            self.proj = ConvNormActivation(width_in, width_out, kernel_size=1, stride=stride, activation_layer=None)
        self.f = BottleneckTransform(width_in, width_out, stride, group_width, bottleneck_multiplier, se_ratio)
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x) + self.f(x) if self.proj is not None else x + self.f(x)
        return self.activation(x)


class AnyStage(nn.Sequential):
    """Blocks named ``block{stage}-{i}`` (names with a dash, as in torchvision)."""

    def __init__(self, width_in: int, width_out: int, stride: int, depth: int, group_width: int,
                 bottleneck_multiplier: float, se_ratio: Optional[float], stage_index: int):
        super().__init__()
        for i in range(depth):
            block = ResBottleneckBlock(width_in if i == 0 else width_out, width_out, stride if i == 0 else 1,
                                       group_width, bottleneck_multiplier, se_ratio)
            self.add_module(f"block{stage_index}-{i}", block)


class RegNet(nn.Module):
    """``stem`` (3x3/2), ``trunk_output`` (stages ``block1..``), avgpool, fc. ``stages``: (width, stride, depth,
    group_width, bottleneck_multiplier)."""

    def __init__(self, stages: Sequence[tuple], stem_width: int = 32, se_ratio: Optional[float] = 0.25,
                 num_classes: int = 1000):
        super().__init__()
        self.stem = ConvNormActivation(3, stem_width, kernel_size=3, stride=2)
        width, blocks = stem_width, []
        for i, (w, s, d, gw, bm) in enumerate(stages):
            blocks.append((f"block{i + 1}", AnyStage(width, w, s, d, gw, bm, se_ratio, stage_index=i + 1)))
            width = w
        self.trunk_output = nn.Sequential(OrderedDict(blocks))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.trunk_output(self.stem(x)))
        return self.fc(x.flatten(start_dim=1))


def regnet_small(num_classes: int = 10) -> RegNet:
    """RegNetY-like (SE) with group width 8: group convs with 2 and 4 groups."""
    return RegNet([(16, 2, 1, 8, 1.0), (32, 2, 2, 8, 1.0)], stem_width=8, num_classes=num_classes)
