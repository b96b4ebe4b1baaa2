"""ShuffleNetV2 x0.5/x1.0/x1.5/x2.0 in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``conv1.0/1`` (stem), ``stage2``-``stage4`` (``<i>.branch1.<j>``, ``<i>.branch2.<j>``),
``conv5.0/1``, ``fc``. Channels-last makes torch's channel split a slice of the last axis and its channel shuffle a
shuffle of that axis (one native copy on the CPU). Example::

    >>> model = zoo.create("shufflenet_v2_x1_0", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm2d, Conv2d, MaxPool2d
from porter.layers.functional import channel_shuffle as shuffle_last_axis

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from ._mobile_blocks import ReLU
from .registry import register_model


def channel_shuffle(x: mx.array, groups: int) -> mx.array:
    """torchvision's ``channel_shuffle`` on ``(N, H, W, C)``: channel ``g * (C / groups) + i`` moves to
    ``i * groups + g`` (``porter.layers.functional.channel_shuffle``: a native copy on the CPU)."""
    return shuffle_last_axis(x, groups)


def _depthwise(channels: int, stride: int) -> Conv2d:
    return Conv2d(channels, channels, 3, stride=stride, padding=1, groups=channels, bias=False)


class InvertedResidual(nn.Module):
    """ShuffleNetV2 unit: stride 1 keeps half the channels and transforms the other half (``branch2``); stride > 1
    transforms the input twice (``branch1`` and ``branch2``); the halves are concatenated and shuffled.

    Args:
        inp (int): input channels.
        oup (int): output channels (even).
        stride (int): 1, 2 or 3.
    Shape: ``(N, H, W, inp)`` -> ``(N, ceil(H / stride), ceil(W / stride), oup)``.
    """

    def __init__(self, inp: int, oup: int, stride: int):
        super().__init__()
        if not 1 <= stride <= 3:
            raise ValueError(f"[ShuffleNetV2] 'stride' must be 1, 2 or 3 but got {stride}.")
        branch = oup // 2
        if stride == 1 and inp != branch * 2:
            raise ValueError(f"[ShuffleNetV2] with stride 1, 'inp' ({inp}) must equal 'oup' ({oup}) rounded down to "
                             "an even number.")
        self.stride = stride
        self.branch1 = [] if stride == 1 else [
            _depthwise(inp, stride), BatchNorm2d(inp), Conv2d(inp, branch, 1, bias=False), BatchNorm2d(branch),
            ReLU()]
        self.branch2 = [Conv2d(inp if stride > 1 else branch, branch, 1, bias=False), BatchNorm2d(branch), ReLU(),
                        _depthwise(branch, stride), BatchNorm2d(branch),
                        Conv2d(branch, branch, 1, bias=False), BatchNorm2d(branch), ReLU()]

    def __call__(self, x: mx.array) -> mx.array:
        if self.stride == 1:
            half = x.shape[-1] // 2
            out = mx.concatenate([x[..., :half], apply_sequence(self.branch2, x[..., half:])], axis=-1)
        else:
            out = mx.concatenate([apply_sequence(self.branch1, x), apply_sequence(self.branch2, x)], axis=-1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(TorchCheckpointMixin, nn.Module):
    """ShuffleNetV2: 3x3 stem, max pool, three stages of units, 1x1 ``conv5``, global average, ``fc``.

    Args:
        stages_repeats (sequence of 3 ints): units per stage.
        stages_out_channels (sequence of 5 ints): stem, three stages, ``conv5``.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 1``.
    """

    def __init__(self, stages_repeats: Sequence[int], stages_out_channels: Sequence[int], num_classes: int = 1000):
        super().__init__()
        if len(stages_repeats) != 3:
            raise ValueError(f"[ShuffleNetV2] 'stages_repeats' must have 3 entries but got {list(stages_repeats)}.")
        if len(stages_out_channels) != 5:
            raise ValueError("[ShuffleNetV2] 'stages_out_channels' must have 5 entries but got "
                             f"{list(stages_out_channels)}.")
        channels = stages_out_channels[0]
        self.conv1 = [Conv2d(3, channels, 3, stride=2, padding=1, bias=False), BatchNorm2d(channels), ReLU()]
        self.maxpool = MaxPool2d(3, stride=2, padding=1)
        for i, (repeats, out) in enumerate(zip(stages_repeats, stages_out_channels[1:4])):
            setattr(self, f"stage{i + 2}", [InvertedResidual(channels if j == 0 else out, out, 2 if j == 0 else 1)
                                            for j in range(repeats)])
            channels = out
        last = stages_out_channels[-1]
        self.conv5 = [Conv2d(channels, last, 1, bias=False), BatchNorm2d(last), ReLU()]
        self.fc = nn.Linear(last, num_classes)

    def __call__(self, x: mx.array) -> mx.array:
        x = self.maxpool(apply_sequence(self.conv1, x))
        for stage in (self.stage2, self.stage3, self.stage4):
            x = apply_sequence(stage, x)
        return self.fc(mx.mean(apply_sequence(self.conv5, x), axis=(1, 2)))


def _register(name: str, label: str, channels: list, params: str):
    @register_model(name, family="shufflenet_v2", summary=f"ShuffleNetV2 {label}, {params} parameters",
                    torch_model=f"torchvision.models:{name}")
    def factory(num_classes: int = 1000) -> ShuffleNetV2:
        return ShuffleNetV2([4, 8, 4], channels, num_classes=num_classes)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"torchvision's ``{name}``: stages 4-8-4, channels {channels}."
    return factory


shufflenet_v2_x0_5 = _register("shufflenet_v2_x0_5", "x0.5", [24, 48, 96, 192, 1024], "1.4M")
shufflenet_v2_x1_0 = _register("shufflenet_v2_x1_0", "x1.0", [24, 116, 232, 464, 1024], "2.3M")
shufflenet_v2_x1_5 = _register("shufflenet_v2_x1_5", "x1.5", [24, 176, 352, 704, 1024], "3.5M")
shufflenet_v2_x2_0 = _register("shufflenet_v2_x2_0", "x2.0", [24, 244, 488, 976, 2048], "7.4M")
