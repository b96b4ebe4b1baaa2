"""RegNet X and Y (every torchvision size, 400MF to 128GF) in MLX, channels-last, loading torchvision checkpoints.

Names are torchvision's: ``stem.0/1``, ``trunk_output.block<s>.block<s>-<i>`` (``proj.0/1`` where the shape
changes; ``f.a``, ``f.b``, ``f.se`` (Y only), ``f.c``), ``fc``. Stage widths and depths come from the RegNet
parameters ``(depth, w_0, w_a, w_m, group_width)`` computed in float32 as torchvision does, so the quantized widths
are torchvision's. Example::

    >>> model = zoo.create("regnet_y_400mf", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

import math
from typing import Optional

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ._blocks import SqueezeExcitation, conv_norm_activation
from ._common import apply_sequence, make_divisible
from ._loading import TorchCheckpointMixin
from ._mobile_blocks import ReLU
from .registry import register_model


def block_params(depth: int, w_0: int, w_a: float, w_m: float, group_width: int, bottleneck_multiplier: float = 1.0,
                 se_ratio: Optional[float] = None) -> list:
    """torchvision's ``BlockParams.from_init_params``: per stage ``(width, depth, group_width, bottleneck)``.

    Widths grow linearly (``w_0 + w_a * i``), are snapped to powers of ``w_m`` times ``w_0`` in log space and
    quantized to multiples of 8; consecutive equal widths form a stage. Computed in float32, as torch does.
    """
    if w_a < 0 or w_0 <= 0 or w_m <= 1 or w_0 % 8 != 0:
        raise ValueError(f"[RegNet] invalid RegNet settings: need w_a >= 0, w_0 > 0 and a multiple of 8, w_m > 1; "
                         f"got w_0={w_0}, w_a={w_a}, w_m={w_m}.")
    f32 = np.float32
    widths_cont = np.arange(depth).astype(f32) * f32(w_a) + f32(w_0)
    capacity = np.round(np.log(widths_cont / f32(w_0)) / f32(math.log(w_m)))
    block_widths = (np.round(f32(w_0) * np.power(f32(w_m), capacity) / f32(8)) * f32(8)).astype(np.int64).tolist()
    stage_widths, stage_depths = [], []
    for w in block_widths:
        if stage_widths and stage_widths[-1] == w:
            stage_depths[-1] += 1
        else:
            stage_widths.append(w)
            stage_depths.append(1)
    # widths and group widths made compatible (torchvision's _adjust_widths_groups_compatibilty)
    stages = []
    for w, d in zip(stage_widths, stage_depths):
        w_bot = int(w * bottleneck_multiplier)
        g = min(group_width, w_bot)
        w_bot = make_divisible(w_bot, g)
        stages.append((int(w_bot / bottleneck_multiplier), d, g, bottleneck_multiplier))
    return stages


class BottleneckTransform(nn.Module):
    """1x1 (``a``), grouped 3x3 (``b``, strided), [squeeze-excitation ``se``], linear 1x1 (``c``).

    Args:
        width_in (int), width_out (int), stride (int): channels in and out, stride of ``b``.
        group_width (int): channels per group of ``b``.
        bottleneck_multiplier (float): inner width is ``round(width_out * bottleneck_multiplier)``.
        se_ratio (float or None): SE width is ``round(se_ratio * width_in)``; ``None`` for no SE (RegNetX).
    """

    def __init__(self, width_in: int, width_out: int, stride: int, group_width: int, bottleneck_multiplier: float,
                 se_ratio: Optional[float]):
        super().__init__()
        w_b = int(round(width_out * bottleneck_multiplier))
        self.a = conv_norm_activation(width_in, w_b, 1, activation_layer=ReLU)
        self.b = conv_norm_activation(w_b, w_b, 3, stride=stride, groups=w_b // group_width,
                                      activation_layer=ReLU)
        if se_ratio:
            self.se = SqueezeExcitation(w_b, int(round(se_ratio * width_in)), activation=ReLU)
        self.c = conv_norm_activation(w_b, width_out, 1, activation_layer=None)

    def __call__(self, x: mx.array) -> mx.array:
        x = apply_sequence(self.b, apply_sequence(self.a, x))
        if "se" in self:
            x = self.se(x)
        return apply_sequence(self.c, x)


class ResBottleneckBlock(nn.Module):
    """``relu(proj(x) + f(x))``, ``proj`` a strided 1x1 conv + BN where the shape changes (else the identity).

    Shape: ``(N, H, W, width_in)`` -> ``(N, ceil(H / stride), ceil(W / stride), width_out)``.
    """

    def __init__(self, width_in: int, width_out: int, stride: int, group_width: int, bottleneck_multiplier: float,
                 se_ratio: Optional[float]):
        super().__init__()
        if width_in != width_out or stride != 1:
            self.proj = conv_norm_activation(width_in, width_out, 1, stride=stride, activation_layer=None)
        self.f = BottleneckTransform(width_in, width_out, stride, group_width, bottleneck_multiplier, se_ratio)
        self.activation = ReLU()

    def __call__(self, x: mx.array) -> mx.array:
        shortcut = apply_sequence(self.proj, x) if "proj" in self else x
        return self.activation(shortcut + self.f(x))


class AnyStage(nn.Module):
    """A stage of ``depth`` blocks named ``block<stage_index>-<i>`` (torchvision's names); only the first strides."""

    def __init__(self, width_in: int, width_out: int, stride: int, depth: int, group_width: int,
                 bottleneck_multiplier: float, se_ratio: Optional[float], stage_index: int):
        super().__init__()
        self.depth, self.stage_index = depth, stage_index
        for i in range(depth):
            block = ResBottleneckBlock(width_in if i == 0 else width_out, width_out, stride if i == 0 else 1,
                                       group_width, bottleneck_multiplier, se_ratio)
            setattr(self, f"block{stage_index}-{i}", block)

    def __call__(self, x: mx.array) -> mx.array:
        for i in range(self.depth):
            x = self[f"block{self.stage_index}-{i}"](x)
        return x


class RegNet(TorchCheckpointMixin, nn.Module):
    """RegNet: 3x3 stride-2 stem, stages of residual bottleneck blocks (stride 2 each), global average, ``fc``.

    Args:
        stages (list): ``(width, depth, group_width, bottleneck_multiplier)`` per stage (:func:`block_params`).
        se_ratio (float or None): squeeze-excitation ratio (RegNetY: 0.25; RegNetX: None).
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        stem_width (int, optional): stem channels. Default: ``32``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 1``.
    """

    def __init__(self, stages: list, se_ratio: Optional[float], num_classes: int = 1000, stem_width: int = 32):
        super().__init__()
        self.stem = conv_norm_activation(3, stem_width, 3, stride=2, activation_layer=ReLU)
        self.trunk_output = {}
        width = stem_width
        for i, (width_out, depth, group_width, bottleneck) in enumerate(stages):
            self.trunk_output[f"block{i + 1}"] = AnyStage(width, width_out, 2, depth, group_width, bottleneck,
                                                          se_ratio, i + 1)
            width = width_out
        self.fc = nn.Linear(width, num_classes)

    def __call__(self, x: mx.array) -> mx.array:
        x = apply_sequence(self.stem, x)
        for i in range(len(self.trunk_output)):
            x = self.trunk_output[f"block{i + 1}"](x)
        return self.fc(mx.mean(x, axis=(1, 2)))


# depth, w_0, w_a, w_m, group_width, parameters (torchvision's builders)
_SIZES = {
    "regnet_y_400mf": (16, 48, 27.89, 2.09, 8, "4.3M"), "regnet_y_800mf": (14, 56, 38.84, 2.4, 16, "6.4M"),
    "regnet_y_1_6gf": (27, 48, 20.71, 2.65, 24, "11.2M"), "regnet_y_3_2gf": (21, 80, 42.63, 2.66, 24, "19.4M"),
    "regnet_y_8gf": (17, 192, 76.82, 2.19, 56, "39.4M"), "regnet_y_16gf": (18, 200, 106.23, 2.48, 112, "83.6M"),
    "regnet_y_32gf": (20, 232, 115.89, 2.53, 232, "145.0M"), "regnet_y_128gf": (27, 456, 160.83, 2.52, 264, "644.8M"),
    "regnet_x_400mf": (22, 24, 24.48, 2.54, 16, "5.5M"), "regnet_x_800mf": (16, 56, 35.73, 2.28, 16, "7.3M"),
    "regnet_x_1_6gf": (18, 80, 34.01, 2.25, 24, "9.2M"), "regnet_x_3_2gf": (25, 88, 26.31, 2.25, 48, "15.3M"),
    "regnet_x_8gf": (23, 80, 49.56, 2.88, 120, "39.6M"), "regnet_x_16gf": (22, 216, 55.59, 2.1, 128, "54.3M"),
    "regnet_x_32gf": (23, 320, 69.86, 2.0, 168, "107.8M"),
}


def _register(name: str):
    depth, w_0, w_a, w_m, group_width, params = _SIZES[name]
    y = name.startswith("regnet_y")
    label = name[len("regnet_x_"):].replace("_", ".").upper()

    @register_model(name, family="regnet", summary=f"RegNet{'Y' if y else 'X'}-{label}, {params} parameters",
                    torch_model=f"torchvision.models:{name}")
    def factory(num_classes: int = 1000, stem_width: int = 32, **overrides) -> RegNet:
        settings = {"depth": depth, "w_0": w_0, "w_a": w_a, "w_m": w_m, "group_width": group_width,
                    "bottleneck_multiplier": 1.0, "se_ratio": 0.25 if y else None}
        unknown = sorted(set(overrides) - set(settings))
        if unknown:
            raise TypeError(f"[RegNet] unexpected keyword arguments {unknown}; the RegNet parameters are "
                            f"{sorted(settings)}.")
        settings.update(overrides)
        se_ratio = settings.pop("se_ratio")
        return RegNet(block_params(**settings), se_ratio, num_classes=num_classes, stem_width=stem_width)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (f"torchvision's ``{name}``: ``depth={depth}, w_0={w_0}, w_a={w_a}, w_m={w_m}, "
                       f"group_width={group_width}``. Keyword arguments named like those (Porter's) override them "
                       "for reduced models; ``stem_width`` as torchvision's.")
    return factory


for _name in _SIZES:
    globals()[_name] = _register(_name)
