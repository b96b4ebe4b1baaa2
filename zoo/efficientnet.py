"""EfficientNet B0-B7 and EfficientNetV2 S/M/L in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``features.0`` (stem ``Conv2dNormActivation``), ``features.<stage>.<block>.block.<j>``
(MBConv: expand, depthwise, ``SqueezeExcitation``, project; FusedMBConv: fused expand, project),
``features.<last>`` (head conv), ``classifier.1``. Residual blocks drop their branch per sample in training
(stochastic depth, linearly increasing with depth as torchvision). Example::

    >>> model = zoo.create("efficientnet_b0", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Optional

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm
from porter.layers import SiLU  # native CPU kernels (MLX's own are 15-35x slower)

from ._blocks import SqueezeExcitation, StochasticDepth, conv_norm_activation
from ._common import apply_sequence, make_divisible
from ._loading import TorchCheckpointMixin
from .registry import register_model


@dataclass
class StageConfig:
    """One row of torchvision's ``MBConvConfig``/``FusedMBConvConfig`` (channels and depth already scaled)."""

    expand_ratio: float
    kernel: int
    stride: int
    input_channels: int
    out_channels: int
    num_layers: int
    fused: bool


class MBConv(nn.Module):
    """[1x1 expand], depthwise kxk, squeeze-excitation (SiLU, sigmoid gate, ``input_channels // 4`` wide), linear
    1x1 projection; residual with stochastic depth when the shape is kept.

    Args:
        cnf (StageConfig): the block's row (stride and input already those of this block).
        stochastic_depth_prob (float): drop probability of the residual branch.
        norm_layer (callable): the batch norm class.
    Shape: ``(N, H, W, input_channels)`` -> ``(N, ceil(H / stride), ceil(W / stride), out_channels)``.
    """

    def __init__(self, cnf: StageConfig, stochastic_depth_prob: float, norm_layer: Callable):
        super().__init__()
        if cnf.stride not in (1, 2):
            raise ValueError(f"[MBConv] 'stride' must be 1 or 2 but got {cnf.stride}.")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        expanded = make_divisible(cnf.input_channels * cnf.expand_ratio, 8)
        self.block = []
        if expanded != cnf.input_channels:
            self.block.append(conv_norm_activation(cnf.input_channels, expanded, 1, norm_layer=norm_layer,
                                                   activation_layer=SiLU))
        self.block.append(conv_norm_activation(expanded, expanded, cnf.kernel, stride=cnf.stride, groups=expanded,
                                               norm_layer=norm_layer, activation_layer=SiLU))
        self.block.append(SqueezeExcitation(expanded, max(1, cnf.input_channels // 4), activation=SiLU))
        self.block.append(conv_norm_activation(expanded, cnf.out_channels, 1, norm_layer=norm_layer,
                                               activation_layer=None))
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def __call__(self, x: mx.array) -> mx.array:
        out = apply_sequence(self.block, x)
        return self.stochastic_depth(out) + x if self.use_res_connect else out


class FusedMBConv(nn.Module):
    """EfficientNetV2's fused block: a full kxk conv expands (or, at expansion 1, maps straight to the output),
    then a linear 1x1 projection; residual with stochastic depth when the shape is kept.

    Args, shape: as :class:`MBConv`.
    """

    def __init__(self, cnf: StageConfig, stochastic_depth_prob: float, norm_layer: Callable):
        super().__init__()
        if cnf.stride not in (1, 2):
            raise ValueError(f"[FusedMBConv] 'stride' must be 1 or 2 but got {cnf.stride}.")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        expanded = make_divisible(cnf.input_channels * cnf.expand_ratio, 8)
        if expanded != cnf.input_channels:
            self.block = [conv_norm_activation(cnf.input_channels, expanded, cnf.kernel, stride=cnf.stride,
                                               norm_layer=norm_layer, activation_layer=SiLU),
                          conv_norm_activation(expanded, cnf.out_channels, 1, norm_layer=norm_layer,
                                               activation_layer=None)]
        else:
            self.block = [conv_norm_activation(cnf.input_channels, cnf.out_channels, cnf.kernel, stride=cnf.stride,
                                               norm_layer=norm_layer, activation_layer=SiLU)]
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def __call__(self, x: mx.array) -> mx.array:
        out = apply_sequence(self.block, x)
        return self.stochastic_depth(out) + x if self.use_res_connect else out


class EfficientNet(TorchCheckpointMixin, nn.Module):
    """EfficientNet (V1 and V2): SiLU stem, stages of (Fused)MBConv blocks, 1x1 head conv, global average,
    ``classifier`` (Dropout, Linear).

    Args:
        setting (list of StageConfig): the stages.
        dropout (float): dropout before the classifier (inactive in eval).
        stochastic_depth_prob (float, optional): the last block's drop probability; block ``i`` of ``n`` uses
            ``p * i / n``. Default: ``0.2``.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        norm_layer (callable, optional): the batch norm class. Default: ``porter.layers.BatchNorm``.
        last_channel (int, optional): head conv width; ``None`` for 4x the last stage's. Default: ``None``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 1``.
    """

    def __init__(self, setting: list, dropout: float, stochastic_depth_prob: float = 0.2, num_classes: int = 1000,
                 norm_layer: Callable = BatchNorm, last_channel: Optional[int] = None):
        super().__init__()
        if not setting:
            raise ValueError("[EfficientNet] the stage configuration must not be empty.")
        if not 0.0 <= stochastic_depth_prob <= 1.0:
            raise ValueError(f"[EfficientNet] 'stochastic_depth_prob' must be in [0, 1] but got "
                             f"{stochastic_depth_prob!r}.")
        self.features = [conv_norm_activation(3, setting[0].input_channels, 3, stride=2, norm_layer=norm_layer,
                                              activation_layer=SiLU)]
        total = sum(cnf.num_layers for cnf in setting)
        block_id = 0
        for cnf in setting:
            stage = []
            for i in range(cnf.num_layers):
                block_cnf = cnf if i == 0 else replace(cnf, input_channels=cnf.out_channels, stride=1)
                block = FusedMBConv if cnf.fused else MBConv
                stage.append(block(block_cnf, stochastic_depth_prob * block_id / total, norm_layer))
                block_id += 1
            self.features.append(stage)
        head_in = setting[-1].out_channels
        head = last_channel if last_channel is not None else 4 * head_in
        self.features.append(conv_norm_activation(head_in, head, 1, norm_layer=norm_layer, activation_layer=SiLU))
        self.classifier = [nn.Dropout(dropout), nn.Linear(head, num_classes)]

    def __call__(self, x: mx.array) -> mx.array:
        x = apply_sequence(self.features, x)
        return apply_sequence(self.classifier, mx.mean(x, axis=(1, 2)))


# expand, kernel, stride, in, out, layers: EfficientNet's Table 1 and EfficientNetV2's Table 4 (torchvision's)
_V1 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3),
       (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
# (fused, expand, kernel, stride, in, out, layers)
_V2 = {
    "s": [(True, 1, 3, 1, 24, 24, 2), (True, 4, 3, 2, 24, 48, 4), (True, 4, 3, 2, 48, 64, 4),
          (False, 4, 3, 2, 64, 128, 6), (False, 6, 3, 1, 128, 160, 9), (False, 6, 3, 2, 160, 256, 15)],
    "m": [(True, 1, 3, 1, 24, 24, 3), (True, 4, 3, 2, 24, 48, 5), (True, 4, 3, 2, 48, 80, 5),
          (False, 4, 3, 2, 80, 160, 7), (False, 6, 3, 1, 160, 176, 14), (False, 6, 3, 2, 176, 304, 18),
          (False, 6, 3, 1, 304, 512, 5)],
    "l": [(True, 1, 3, 1, 32, 32, 4), (True, 4, 3, 2, 32, 64, 7), (True, 4, 3, 2, 64, 96, 7),
          (False, 4, 3, 2, 96, 192, 10), (False, 6, 3, 1, 192, 224, 19), (False, 6, 3, 2, 224, 384, 25),
          (False, 6, 3, 1, 384, 640, 7)],
}
# width_mult, depth_mult, dropout, batch norm eps/momentum (B5-B7 carry TensorFlow's)
_V1_SIZES = {"b0": (1.0, 1.0, 0.2, False), "b1": (1.0, 1.1, 0.2, False), "b2": (1.1, 1.2, 0.3, False),
             "b3": (1.2, 1.4, 0.3, False), "b4": (1.4, 1.8, 0.4, False), "b5": (1.6, 2.2, 0.4, True),
             "b6": (1.8, 2.6, 0.5, True), "b7": (2.0, 3.1, 0.5, True)}
_V2_DROPOUT = {"s": 0.2, "m": 0.3, "l": 0.4}
_PARAMS = {"b0": "5.3M", "b1": "7.8M", "b2": "9.1M", "b3": "12.2M", "b4": "19.3M", "b5": "30.4M", "b6": "43.0M",
           "b7": "66.3M", "s": "21.5M", "m": "54.1M", "l": "118.5M"}


def efficientnet_config(size: str, width_mult: Optional[float] = None) -> tuple:
    """``(stages, last_channel, dropout, norm_layer)`` of torchvision's ``efficientnet_<size>`` (``size`` in
    ``b0``..``b7``, ``s``, ``m``, ``l``).

    ``width_mult`` (Porter's, for reduced models) replaces a V1 size's width multiplier, or scales V2's channels
    (rounded to multiples of 8); ``None`` keeps torchvision's configuration.
    """
    if width_mult is not None and not width_mult > 0:
        raise ValueError(f"[EfficientNet] 'width_mult' must be positive but got {width_mult!r}.")
    if size in _V1_SIZES:
        width, depth, dropout, tf_norm = _V1_SIZES[size]
        width = width if width_mult is None else width_mult
        stages = [StageConfig(e, k, s, make_divisible(i * width, 8), make_divisible(o * width, 8),
                              int(math.ceil(n * depth)), False) for e, k, s, i, o, n in _V1]
        norm = partial(BatchNorm, eps=0.001, momentum=0.01) if tf_norm else BatchNorm
        return stages, None, dropout, norm
    scale = 1.0 if width_mult is None else width_mult
    stages = [StageConfig(e, k, s, make_divisible(i * scale, 8), make_divisible(o * scale, 8), n, fused)
              for fused, e, k, s, i, o, n in _V2[size]]
    return stages, 1280, _V2_DROPOUT[size], partial(BatchNorm, eps=1e-03)


def _register(size: str):
    name = f"efficientnet_{size}" if size.startswith("b") else f"efficientnet_v2_{size}"
    label = f"EfficientNet-{size.upper()}" if size.startswith("b") else f"EfficientNetV2-{size.upper()}"

    @register_model(name, family="efficientnet", summary=f"{label}, {_PARAMS[size]} parameters",
                    torch_model=f"torchvision.models:{name}")
    def factory(num_classes: int = 1000, dropout: Optional[float] = None, stochastic_depth_prob: float = 0.2,
                width_mult: Optional[float] = None) -> EfficientNet:
        stages, last_channel, default_dropout, norm = efficientnet_config(size, width_mult)
        return EfficientNet(stages, default_dropout if dropout is None else dropout, stochastic_depth_prob,
                            num_classes=num_classes, norm_layer=norm, last_channel=last_channel)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (f"torchvision's ``{name}``. ``dropout`` defaults to torchvision's for the size; "
                       "``width_mult`` (Porter's) builds a narrower model with the same structure and names.")
    return factory


efficientnet_b0, efficientnet_b1, efficientnet_b2, efficientnet_b3 = (_register(s) for s in ("b0", "b1", "b2", "b3"))
efficientnet_b4, efficientnet_b5, efficientnet_b6, efficientnet_b7 = (_register(s) for s in ("b4", "b5", "b6", "b7"))
efficientnet_v2_s, efficientnet_v2_m, efficientnet_v2_l = (_register(s) for s in ("s", "m", "l"))
