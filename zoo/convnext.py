"""ConvNeXt tiny/small/base/large in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``features.0.0/1`` (4x4 patchify conv, LayerNorm2d), ``features.<2k+1>.<i>`` (CNBlocks:
``block.0`` 7x7 depthwise conv, ``block.2`` LayerNorm, ``block.3``/``block.5`` the MLP, ``layer_scale``),
``features.<2k>.0/1`` (LayerNorm2d, 2x2 stride-2 conv), ``classifier.0`` (LayerNorm2d), ``classifier.2`` (Linear).
Channels-last makes torchvision's ``LayerNorm2d`` and its permutes around the block's LayerNorm plain
``porter.layers.LayerNorm`` over the last axis (the permutes stay as parameter-free placeholders, keeping the indices).
Example::

    >>> model = zoo.create("convnext_tiny", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from typing import Optional, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from porter.layers import Conv2d
from porter.layers import GELU, LayerNorm  # native CPU kernels (MLX's own are 15-35x slower)

from ._blocks import StochasticDepth
from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from .registry import register_model


def _layer_norm(channels: int) -> LayerNorm:
    return LayerNorm(channels, eps=1e-6)


class CNBlock(nn.Module):
    """7x7 depthwise conv, LayerNorm, Linear 4x, GELU, Linear, per-channel ``layer_scale``, stochastic depth, residual.

    Args:
        dim (int): channels.
        layer_scale (float): initial value of the per-channel scale.
        stochastic_depth_prob (float): drop probability of the residual branch in training.
    Shape: ``(N, H, W, dim)`` -> same.
    """

    def __init__(self, dim: int, layer_scale: float, stochastic_depth_prob: float):
        super().__init__()
        # indices 1 and 6 are torchvision's Permute modules: identities channels-last
        self.block = [Conv2d(dim, dim, 7, padding=3, groups=dim, bias=True), nn.Identity(), _layer_norm(dim),
                      nn.Linear(dim, 4 * dim), GELU(), nn.Linear(4 * dim, dim), nn.Identity()]
        self.layer_scale = mx.full((dim,), layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def torch_parameter_specs(self):
        """torch keeps ``layer_scale`` as ``(dim, 1, 1)`` (channels-first broadcasting); the zoo as ``(dim,)``."""
        return [("layer_scale", (self.layer_scale.shape[0], 1, 1), lambda w: np.ascontiguousarray(w.reshape(-1)))]

    def __call__(self, x: mx.array) -> mx.array:
        return self.stochastic_depth(self.layer_scale * apply_sequence(self.block, x)) + x


class ConvNeXt(TorchCheckpointMixin, nn.Module):
    """ConvNeXt: 4x4 stride-4 patchify stem, four stages of CNBlocks with LayerNorm + 2x2 stride-2 downsampling
    between them, global average, ``classifier`` (LayerNorm, flatten, Linear).

    Args:
        widths (sequence of 4 ints): stage channels.
        depths (sequence of 4 ints): blocks per stage.
        stochastic_depth_prob (float, optional): the last block's drop probability; block ``i`` of ``n`` uses
            ``p * i / (n - 1)``. Default: ``0.0``.
        layer_scale (float, optional): initial ``layer_scale``. Default: ``1e-6``.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; ``H, W >= 32`` (three 2x downsamplings after the 4x stem).
    """

    def __init__(self, widths: Sequence[int], depths: Sequence[int], stochastic_depth_prob: float = 0.0,
                 layer_scale: float = 1e-6, num_classes: int = 1000):
        super().__init__()
        if len(widths) != 4 or len(depths) != 4:
            raise ValueError(f"[ConvNeXt] 'widths' and 'depths' must have 4 entries but got {list(widths)} and "
                             f"{list(depths)}.")
        if not 0.0 <= stochastic_depth_prob <= 1.0:
            raise ValueError(f"[ConvNeXt] 'stochastic_depth_prob' must be in [0, 1] but got "
                             f"{stochastic_depth_prob!r}.")
        self.features = [[Conv2d(3, widths[0], 4, stride=4, bias=True), _layer_norm(widths[0])]]
        total = sum(depths)
        block_id = 0
        for i, (width, depth) in enumerate(zip(widths, depths)):
            stage = []
            for _ in range(depth):
                stage.append(CNBlock(width, layer_scale, stochastic_depth_prob * block_id / (total - 1.0)))
                block_id += 1
            self.features.append(stage)
            if i < 3:
                self.features.append([_layer_norm(width), Conv2d(width, widths[i + 1], 2, stride=2)])
        # index 1 is torchvision's Flatten: the pooled features are already (N, C)
        self.classifier = [_layer_norm(widths[-1]), nn.Identity(), nn.Linear(widths[-1], num_classes)]

    def __call__(self, x: mx.array) -> mx.array:
        x = apply_sequence(self.features, x)
        return apply_sequence(self.classifier, mx.mean(x, axis=(1, 2)))


# widths, depths, default stochastic depth (torchvision's builders)
_SIZES = {"convnext_tiny": ((96, 192, 384, 768), (3, 3, 9, 3), 0.1, "28.6M"),
          "convnext_small": ((96, 192, 384, 768), (3, 3, 27, 3), 0.4, "50.2M"),
          "convnext_base": ((128, 256, 512, 1024), (3, 3, 27, 3), 0.5, "88.6M"),
          "convnext_large": ((192, 384, 768, 1536), (3, 3, 27, 3), 0.5, "197.8M")}


def _register(name: str):
    widths, depths, sd_prob, params = _SIZES[name]

    @register_model(name, family="convnext", summary=f"ConvNeXt-{name.split('_')[1].capitalize()}, {params} "
                    "parameters", torch_model=f"torchvision.models:{name}")
    def factory(num_classes: int = 1000, stochastic_depth_prob: float = sd_prob, layer_scale: float = 1e-6,
                widths: Optional[Sequence[int]] = None) -> ConvNeXt:
        return ConvNeXt(widths or _SIZES[name][0], depths, stochastic_depth_prob, layer_scale, num_classes)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (f"torchvision's ``{name}`` (widths {widths}, depths {depths}). ``widths`` (Porter's) builds "
                       "a narrower model with the same structure and names.")
    return factory


convnext_tiny, convnext_small, convnext_base, convnext_large = (_register(n) for n in _SIZES)
