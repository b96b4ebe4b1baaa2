"""Shared pieces of the torch reference models: torchvision-style building blocks and seeded weights.

The blocks here mirror torchvision.ops.misc (``Conv2dNormActivation``, ``SqueezeExcitation``) and
torchvision.ops.StochasticDepth in module structure and parameter names, so models built from them have
torchvision's ``state_dict`` keys.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn


def make_divisible(v: float, divisor: int = 8, min_value: Optional[int] = None) -> int:
    """Round a channel count to a multiple of ``divisor`` without losing more than 10% (MobileNet rule)."""
    min_value = divisor if min_value is None else min_value
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvNormActivation(nn.Sequential):
    """Conv, optional norm, optional activation as children ``0``, ``1``, ``2`` (torchvision's names).

    Args:
        in_channels, out_channels (int): channels.
        kernel_size, stride, dilation, groups (int, optional): conv settings. Padding keeps "same" size at
            stride 1 unless ``padding`` is given.
        norm_layer (callable or None): e.g. ``nn.BatchNorm2d``; ``None`` gives a conv with bias.
        activation_layer (callable or None): e.g. ``nn.ReLU``; built with ``inplace=True`` like torchvision.
        conv_layer (type): ``nn.Conv2d`` or ``nn.Conv3d``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1,
                 padding: Optional[int] = None, groups: int = 1,
                 norm_layer: Optional[Callable[[int], nn.Module]] = nn.BatchNorm2d,
                 activation_layer: Optional[Callable[..., nn.Module]] = nn.ReLU, dilation: int = 1,
                 bias: Optional[bool] = None, conv_layer: type = nn.Conv2d):
        if padding is None:
            padding = (kernel_size - 1) // 2 * dilation
        if bias is None:
            bias = norm_layer is None
        layers = [conv_layer(in_channels, out_channels, kernel_size, stride, padding, dilation=dilation,
                             groups=groups, bias=bias)]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """Channel attention: global average, 1x1 reduce, activation, 1x1 expand, gate, multiply.

    Names ``avgpool, fc1, fc2, activation, scale_activation`` as in torchvision.ops.SqueezeExcitation.
    """

    def __init__(self, input_channels: int, squeeze_channels: int,
                 activation: Callable[..., nn.Module] = nn.ReLU,
                 scale_activation: Callable[..., nn.Module] = nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class StochasticDepth(nn.Module):
    """Randomly drop whole residual branches while training ("row": per sample); identity in eval mode."""

    def __init__(self, p: float, mode: str = "row"):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"[StochasticDepth] 'p' must be between 0 and 1 but got {p}.")
        if mode not in ("row", "batch"):
            raise ValueError(f"[StochasticDepth] 'mode' must be 'row' or 'batch' but got {mode!r}.")
        self.p = p
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        shape = [x.shape[0]] + [1] * (x.ndim - 1) if self.mode == "row" else [1] * x.ndim
        keep = 1.0 - self.p
        noise = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(keep)
        return x * noise.div_(keep)


# ---------------------------------------------------------------------------------------------------- weights
_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


@torch.no_grad()
def randomize_(model: nn.Module, seed: int) -> nn.Module:
    """Give every float parameter and buffer seeded, non-trivial values and put the model in eval mode.

    Norm weights land in [0.5, 1.5], biases and running means are small and non-zero, running variances lie in
    [0.5, 1.5] (so eval-mode BatchNorm really normalises with stored statistics), weights of rank >= 2 get a
    fan-in-scaled uniform draw, and zero- or one-initialised tensors (class tokens, layer scales) become random,
    so no part of the forward is an identity by accident.
    """
    gen = torch.Generator().manual_seed(seed)

    def uniform(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=gen) * (hi - lo) + lo)

    def normal(t, std):
        t.copy_(torch.randn(t.shape, generator=gen) * std)

    norm_tensors = set()
    for module in model.modules():
        if isinstance(module, _NORMS):
            for name in ("weight", "running_var"):
                t = getattr(module, name, None)
                if t is not None:
                    norm_tensors.add(id(t))
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not t.dtype.is_floating_point:
            continue  # num_batches_tracked
        leaf = name.rsplit(".", 1)[-1]
        if id(t) in norm_tensors or "scale" in leaf:
            uniform(t, 0.5, 1.5)
        elif leaf == "running_mean" or t.ndim <= 1:
            normal(t, 0.2)
        elif t.shape[0] == 1:
            normal(t, 0.5)  # tokens and position embeddings, shaped (1, ...)
        else:
            fan_in = math.prod(t.shape[1:])
            bound = math.sqrt(6.0 / fan_in)  # He-uniform: keeps activations O(1) through ReLU stacks
            uniform(t, -bound, bound)
    return model.eval()
