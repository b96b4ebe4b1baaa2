"""torch twins of the torchvision.ops pieces the mobile and efficient families use (torchvision is not installed).

``Conv2dNormActivation`` and ``SqueezeExcitation`` with torchvision's structure and ``state_dict`` names, and
torchvision's ``_make_divisible``.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn


def make_divisible(v: float, divisor: int, min_value: Optional[int] = None) -> int:
    """torchvision.models._utils._make_divisible."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class Conv2dNormActivation(nn.Sequential):
    """torchvision.ops.Conv2dNormActivation: children 0 (conv), 1 (norm), 2 (activation), left out when None."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1,
                 padding: Optional[int] = None, groups: int = 1,
                 norm_layer: Optional[Callable[..., nn.Module]] = nn.BatchNorm2d,
                 activation_layer: Optional[Callable[..., nn.Module]] = nn.ReLU, dilation: int = 1,
                 inplace: Optional[bool] = True, bias: Optional[bool] = None):
        if padding is None:
            padding = (kernel_size - 1) // 2 * dilation
        if bias is None:
            bias = norm_layer is None
        layers = [nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation=dilation, groups=groups,
                            bias=bias)]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            params = {} if inplace is None else {"inplace": inplace}
            layers.append(activation_layer(**params))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: avgpool, fc1, activation, fc2, scale_activation."""

    def __init__(self, input_channels: int, squeeze_channels: int, activation: Callable[..., nn.Module] = nn.ReLU,
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
    """torchvision.ops.StochasticDepth (the tests run it at p=0 or in eval, where it is the identity)."""

    def __init__(self, p: float, mode: str):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"[StochasticDepth] 'p' must be between 0 and 1 but got {p}.")
        if mode not in ("row", "batch"):
            raise ValueError(f"[StochasticDepth] 'mode' must be 'row' or 'batch' but got {mode!r}.")
        self.p, self.mode = p, mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        survival = 1.0 - self.p
        shape = [x.shape[0]] + [1] * (x.ndim - 1) if self.mode == "row" else [1] * x.ndim
        noise = torch.empty(shape, dtype=x.dtype, device=x.device).bernoulli_(survival)
        if survival > 0.0:
            noise.div_(survival)
        return x * noise
