"""Models for benchmarks/models.py: torch builders and hand-written MLX equivalents.

The hand-written MLX forwards are the stand-in until ``porter.convert`` lands: they take the torch module's weights
(so the benchmark checks them against torch). ``*_to_porter_layers`` run the convolutions and max pooling through
``porter.layers.functional`` (which turns 1x1 convolutions into matmuls and runs depthwise ones as taps);
``*_to_mlx`` use plain ``mx`` ops (``mx.conv2d``; 1x1 as matmul unless ``PORTER_BENCH_1X1=conv``). Which path
produced a figure is printed in the benchmark table.
"""

from __future__ import annotations

import os

import mlx.core as mx
import numpy as np
import torch
from torch import nn

# ----------------------------------------------------------------------------------------------------- torch


def resnet18(num_classes: int = 1000) -> nn.Module:
    """torchvision-structured ResNet-18: porter.examples' when present, else a local copy of the architecture."""
    try:
        from porter.examples import resnet18 as build
    except ImportError:
        return _ResNet18(num_classes)
    return build(num_classes=num_classes)


class _Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + identity)


class _ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]
        for i, (cin, cout, stride) in enumerate(widths, 1):
            setattr(self, f"layer{i}", nn.Sequential(_Basic(cin, cout, stride), _Basic(cout, cout, 1)))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _conv_bn(cin, cout, k, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6(inplace=True)) if act else nn.Sequential(*layers)


class _InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = [_conv_bn(cin, hidden, 1)] if expand != 1 else []
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, cout, 1, act=False)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (width 1.0), torchvision's layer plan: 1x1 expand, 3x3 depthwise, 1x1 project."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        plan = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
        features, cin = [_conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in plan:
            for i in range(n):
                features.append(_InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(_conv_bn(cin, 1280, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def mobilenet_v2(num_classes: int = 1000) -> nn.Module:
    return MobileNetV2(num_classes)


# ----------------------------------------------------------------------------------------------------- MLX


def _pointwise_as_matmul() -> bool:
    # Set PORTER_BENCH_1X1=conv to time 1x1 convolutions through mx.conv2d instead of a matmul.
    return os.environ.get("PORTER_BENCH_1X1", "matmul") == "matmul"


class _Conv:
    """A torch Conv2d followed by an optional eval-mode BatchNorm, as an MLX NHWC forward.

    The BatchNorm stays a separate multiply-add (not folded into the weights) because torch's eval forward, the
    baseline, does not fold it either.
    """

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d | None = None, porter_layers: bool = False):
        w = conv.weight.detach().numpy()  # (out, in/groups, kh, kw)
        self.stride, self.padding, self.groups = conv.stride, conv.padding, conv.groups
        self.porter_layers = porter_layers
        self.pointwise = (w.shape[2:] == (1, 1) and conv.groups == 1 and conv.padding == (0, 0)
                          and _pointwise_as_matmul() and not porter_layers)
        if self.pointwise:
            self.w = mx.array(np.ascontiguousarray(w[:, :, 0, 0].T))  # (in, out)
        else:
            self.w = mx.array(np.ascontiguousarray(w.transpose(0, 2, 3, 1)))  # (out, kh, kw, in/groups)
        self.b = mx.array(conv.bias.detach().numpy()) if conv.bias is not None else None
        self.bn = None
        if bn is not None:
            scale = bn.weight.detach().numpy() / np.sqrt(bn.running_var.numpy() + bn.eps)
            shift = bn.bias.detach().numpy() - bn.running_mean.numpy() * scale
            self.bn = (mx.array(scale.astype(np.float32)), mx.array(shift.astype(np.float32)))

    def __call__(self, x):
        if self.porter_layers:
            from porter.layers.functional import conv2d

            y = conv2d(x, self.w, None, self.stride, self.padding, 1, self.groups)
        elif self.pointwise:
            if self.stride != (1, 1):
                x = x[:, :: self.stride[0], :: self.stride[1], :]
            y = x @ self.w
        else:
            y = mx.conv2d(x, self.w, stride=self.stride, padding=self.padding, groups=self.groups)
        if self.b is not None:
            y = y + self.b
        if self.bn is not None:
            y = y * self.bn[0] + self.bn[1]
        return y


def _max_pool_3x3_s2_p1(x):
    n, h, w, c = x.shape
    x = mx.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)], constant_values=-float("inf"))
    oh, ow = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    out = None
    for i in range(3):
        for j in range(3):
            tap = x[:, i: i + 2 * oh - 1: 2, j: j + 2 * ow - 1: 2, :]
            out = tap if out is None else mx.maximum(out, tap)
    return out


def resnet_to_mlx(model: nn.Module, x=None, porter_layers: bool = False):
    """MLX NHWC forward of a torchvision-structured BasicBlock ResNet with ``model``'s weights."""
    stem = _Conv(model.conv1, model.bn1, porter_layers)
    blocks = []
    for name in ("layer1", "layer2", "layer3", "layer4"):
        for blk in getattr(model, name):
            down = _Conv(blk.downsample[0], blk.downsample[1], porter_layers) if blk.downsample is not None else None
            blocks.append((_Conv(blk.conv1, blk.bn1, porter_layers), _Conv(blk.conv2, blk.bn2, porter_layers), down))
    if porter_layers:
        from porter.layers.functional import max_pool2d

        def pool(x):
            return max_pool2d(x, 3, 2, 1)
    else:
        pool = _max_pool_3x3_s2_p1
    fc_w = mx.array(model.fc.weight.detach().numpy().T.copy())
    fc_b = mx.array(model.fc.bias.detach().numpy())

    def forward(x):
        x = pool(mx.maximum(stem(x), 0))
        for c1, c2, down in blocks:
            identity = x if down is None else down(x)
            x = mx.maximum(c2(mx.maximum(c1(x), 0)) + identity, 0)
        return mx.mean(x, axis=(1, 2)) @ fc_w + fc_b

    return forward


def mobilenet_v2_to_mlx(model: nn.Module, x=None, porter_layers: bool = False):
    """MLX NHWC forward of :class:`MobileNetV2` with ``model``'s weights."""

    def conv_bn(seq):
        return _Conv(seq[0], seq[1], porter_layers), len(seq) == 3

    stem = conv_bn(model.features[0])
    blocks = [([conv_bn(s) for s in blk.conv], blk.use_res) for blk in model.features[1:-1]]
    head = conv_bn(model.features[-1])
    fc_w = mx.array(model.classifier[1].weight.detach().numpy().T.copy())
    fc_b = mx.array(model.classifier[1].bias.detach().numpy())

    def apply(layer, x):
        conv, act = layer
        y = conv(x)
        return mx.clip(y, 0, 6) if act else y

    def forward(x):
        x = apply(stem, x)
        for layers, use_res in blocks:
            y = x
            for layer in layers:
                y = apply(layer, y)
            x = x + y if use_res else y
        return mx.mean(apply(head, x), axis=(1, 2)) @ fc_w + fc_b

    return forward


def resnet_to_porter_layers(model: nn.Module, x=None):
    """:func:`resnet_to_mlx` with convolutions and max pooling from ``porter.layers.functional``."""
    return resnet_to_mlx(model, x, porter_layers=True)


def mobilenet_v2_to_porter_layers(model: nn.Module, x=None):
    """:func:`mobilenet_v2_to_mlx` with convolutions from ``porter.layers.functional``."""
    return mobilenet_v2_to_mlx(model, x, porter_layers=True)
