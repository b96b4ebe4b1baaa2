"""DenseNet-121/161/169/201 in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``features.conv0``, ``features.norm0``, ``features.denseblock<i>.denselayer<j>.norm1/conv1/
norm2/conv2``, ``features.transition<i>.norm/conv``, ``features.norm5``, ``classifier``. torchvision's own weight
files predate those names (``denselayer1.norm.1.weight``); :meth:`DenseNet.load_torch_state_dict` renames them as
torchvision's loader does. Example::

    >>> model = zoo.create("densenet121", num_classes=10)
    >>> model(mx.zeros((1, 224, 224, 3))).shape
    (1, 10)
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

import mlx.core as mx
import mlx.nn as nn

from porter.layers import AvgPool2d, BatchNorm2d, Conv2d, MaxPool2d
from porter.layers.functional import concatenate

from ._loading import TorchCheckpointMixin
from .registry import register_model

# torchvision's pattern for the pre-0.3 names of its published weights ("norm.1" -> "norm1")
_LEGACY_KEY = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$")


class _DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (``bn_size * growth_rate``), BN-ReLU-3x3 conv (``growth_rate``) on the concatenation of
    every earlier map of the block; dropout ``drop_rate`` in training.

    Shape: list of ``(N, H, W, C_i)`` with ``sum(C_i) = num_input_features`` -> ``(N, H, W, growth_rate)``.
    """

    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int, drop_rate: float):
        super().__init__()
        self.norm1 = BatchNorm2d(num_input_features)
        self.conv1 = Conv2d(num_input_features, bn_size * growth_rate, 1, bias=False)
        self.norm2 = BatchNorm2d(bn_size * growth_rate)
        self.conv2 = Conv2d(bn_size * growth_rate, growth_rate, 3, padding=1, bias=False)
        self.dropout = nn.Dropout(drop_rate)
        self.drop_rate = float(drop_rate)

    def __call__(self, features: list) -> mx.array:
        x = concatenate(features, axis=-1)
        out = self.conv2(nn.relu(self.norm2(self.conv1(nn.relu(self.norm1(x))))))
        return self.dropout(out) if self.drop_rate > 0 else out


class _DenseBlock(nn.Module):
    """``num_layers`` dense layers ``denselayer1..``; output: the input and every layer's map, concatenated.

    Shape: ``(N, H, W, C)`` -> ``(N, H, W, C + num_layers * growth_rate)``.
    """

    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int, drop_rate: float):
        super().__init__()
        self.num_layers = num_layers
        for i in range(num_layers):
            setattr(self, f"denselayer{i + 1}",
                    _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size, drop_rate))

    def __call__(self, x: mx.array) -> mx.array:
        features = [x]
        for i in range(self.num_layers):
            features.append(getattr(self, f"denselayer{i + 1}")(features))
        return concatenate(features, axis=-1)


class _Transition(nn.Module):
    """BN, ReLU, 1x1 conv, 2x2 average pool. Shape: ``(N, H, W, C_in)`` -> ``(N, H // 2, W // 2, C_out)``."""

    def __init__(self, num_input_features: int, num_output_features: int):
        super().__init__()
        self.norm = BatchNorm2d(num_input_features)
        self.conv = Conv2d(num_input_features, num_output_features, 1, bias=False)
        self.pool = AvgPool2d(2, stride=2)

    def __call__(self, x: mx.array) -> mx.array:
        return self.pool(self.conv(nn.relu(self.norm(x))))


class DenseNet(TorchCheckpointMixin, nn.Module):
    """torchvision's DenseNet-BC: stem (7x7/2 conv, BN, ReLU, 3x3/2 max pool), dense blocks joined by transitions
    halving channels and size, final BN, ReLU, global average, ``classifier``.

    Args:
        growth_rate (int, optional): channels each dense layer adds. Default: ``32``.
        block_config (sequence of ints, optional): layers per dense block. Default: ``(6, 12, 24, 16)``.
        num_init_features (int, optional): channels of the stem conv. Default: ``64``.
        bn_size (int, optional): bottleneck width factor of the 1x1 convs. Default: ``4``.
        drop_rate (float, optional): dropout after each dense layer (training only). Default: ``0``.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        memory_efficient (bool, optional): torch's gradient checkpointing; only ``False`` is supported (MLX has its
            own graph memory management). Default: ``False``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; ``H, W >= 29`` for four blocks.
    """

    def __init__(self, growth_rate: int = 32, block_config: Sequence[int] = (6, 12, 24, 16),
                 num_init_features: int = 64, bn_size: int = 4, drop_rate: float = 0, num_classes: int = 1000,
                 memory_efficient: bool = False):
        super().__init__()
        if memory_efficient:
            raise NotImplementedError("[DenseNet] 'memory_efficient'=True (torch's gradient checkpointing) is not "
                                      "supported; the outputs are the same with False.")
        if not block_config or any(n < 1 for n in block_config):
            raise ValueError(f"[DenseNet] 'block_config' must list positive layer counts but got {block_config!r}.")
        self.num_blocks = len(block_config)
        self.features = nn.Module()
        self.features.conv0 = Conv2d(3, num_init_features, 7, stride=2, padding=3, bias=False)
        self.features.norm0 = BatchNorm2d(num_init_features)
        self.features.pool0 = MaxPool2d(3, stride=2, padding=1)
        channels = num_init_features
        for i, num_layers in enumerate(block_config):
            setattr(self.features, f"denseblock{i + 1}",
                    _DenseBlock(num_layers, channels, bn_size, growth_rate, drop_rate))
            channels += num_layers * growth_rate
            if i != len(block_config) - 1:
                setattr(self.features, f"transition{i + 1}", _Transition(channels, channels // 2))
                channels //= 2
        self.features.norm5 = BatchNorm2d(channels)
        self.classifier = nn.Linear(channels, num_classes)

    def __call__(self, x: mx.array) -> mx.array:
        f = self.features
        x = f.pool0(nn.relu(f.norm0(f.conv0(x))))
        for i in range(self.num_blocks):
            x = getattr(f, f"denseblock{i + 1}")(x)
            if i != self.num_blocks - 1:
                x = getattr(f, f"transition{i + 1}")(x)
        x = nn.relu(f.norm5(x))
        return self.classifier(mx.mean(x, axis=(1, 2)))

    def load_torch_state_dict(self, state_dict: Mapping, strict: bool = True):
        """As :meth:`TorchCheckpointMixin.load_torch_state_dict`, after renaming the legacy keys of torchvision's
        published DenseNet weights (``...denselayer1.norm.1.weight`` -> ``...denselayer1.norm1.weight``)."""
        renamed = {}
        for key, value in state_dict.items():
            match = _LEGACY_KEY.match(key)
            renamed[match.group(1) + match.group(2) if match else key] = value
        return super().load_torch_state_dict(renamed, strict=strict)


def _register(name: str, growth_rate: int, block_config: tuple, num_init_features: int, params: str):
    summary = f"DenseNet-{name[8:]}: growth {growth_rate}, blocks {'-'.join(map(str, block_config))}, {params} parameters"

    @register_model(name, family="densenet", summary=summary, torch_model=f"torchvision.models:{name}")
    def factory(num_classes: int = 1000, **kwargs) -> DenseNet:
        config = {"growth_rate": growth_rate, "block_config": block_config, "num_init_features": num_init_features}
        return DenseNet(num_classes=num_classes, **{**config, **kwargs})

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (f"{summary} (torchvision's ``{name}``). ``kwargs``: ``bn_size``, ``drop_rate``, "
                       "``memory_efficient`` (and ``growth_rate``, ``num_init_features`` for reduced models).")
    return factory


densenet121 = _register("densenet121", 32, (6, 12, 24, 16), 64, "8.0M")
densenet161 = _register("densenet161", 48, (6, 12, 36, 24), 96, "28.7M")
densenet169 = _register("densenet169", 32, (6, 12, 32, 32), 64, "14.1M")
densenet201 = _register("densenet201", 32, (6, 12, 48, 32), 64, "20.0M")
