"""torchvision.ops building blocks, channels-last, with torchvision's child names (shared by the zoo's families).

* :func:`conv_norm_activation`: ``Conv2dNormActivation``/``Conv3dNormActivation`` as a list ``[conv, norm, act]``
  (children ``0``, ``1``, ``2`` as in torchvision's ``nn.Sequential``).
* :class:`SqueezeExcitation`: ``avgpool`` -> ``fc1`` (1x1 conv) -> activation -> ``fc2`` -> scale activation.
* :class:`StochasticDepth`: ``torchvision.ops.StochasticDepth`` (drops a residual branch per sample in training).
"""

from __future__ import annotations

from typing import Callable, Optional

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm, Conv2d, Conv3d
from porter.layers import Sigmoid  # native CPU kernels (MLX's own are 15-35x slower)

__all__ = ["conv_norm_activation", "SqueezeExcitation", "StochasticDepth"]


def conv_norm_activation(in_channels: int, out_channels: int, kernel_size=3, stride=1, padding=None, groups: int = 1,
                         norm_layer: Optional[Callable] = BatchNorm, activation_layer: Optional[Callable] = nn.ReLU,
                         dilation=1, bias: Optional[bool] = None, nd: int = 2) -> list:
    """torchvision's ``Conv{2,3}dNormActivation`` as a list of modules (run it with ``apply_sequence``).

    Args follow torchvision: ``padding=None`` pads ``(k - 1) // 2 * dilation`` per dim; ``bias=None`` gives the conv
    a bias only without a norm layer; ``norm_layer``/``activation_layer`` are classes (``None`` to leave out).
    Shape: ``(N, *spatial, C_in)`` -> ``(N, *spatial', C_out)``.
    """
    conv_cls = {2: Conv2d, 3: Conv3d}[nd]
    ks = kernel_size if isinstance(kernel_size, (tuple, list)) else (kernel_size,) * nd
    dil = dilation if isinstance(dilation, (tuple, list)) else (dilation,) * nd
    if padding is None:
        padding = tuple((k - 1) // 2 * d for k, d in zip(ks, dil))
    if bias is None:
        bias = norm_layer is None
    layers = [conv_cls(in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation,
                       groups=groups, bias=bias)]
    if norm_layer is not None:
        layers.append(norm_layer(out_channels))
    if activation_layer is not None:
        layers.append(activation_layer())
    return layers


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: per-channel gates from the spatial mean.

    Args:
        input_channels (int): channels in and out.
        squeeze_channels (int): channels of the bottleneck.
        activation (callable, optional): after ``fc1``. Default: ``nn.ReLU``.
        scale_activation (callable, optional): the gate. Default: ``Sigmoid``.
    Shape: ``(N, H, W, C)`` -> same.
    """

    def __init__(self, input_channels: int, squeeze_channels: int, activation: Callable = nn.ReLU,
                 scale_activation: Callable = Sigmoid):
        super().__init__()
        self.fc1 = Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def __call__(self, x: mx.array) -> mx.array:
        scale = mx.mean(x, axis=tuple(range(1, x.ndim - 1)), keepdims=True)
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(scale))))
        return x * scale


class StochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth: in training, zero a residual branch with probability ``p`` ("row": per
    sample; "batch": for the whole batch) and scale survivors by ``1 / (1 - p)``; identity in eval or at ``p=0``.

    Args:
        p (float): drop probability, in ``[0, 1]``.
        mode (str): ``"row"`` or ``"batch"``.
    Shape: ``(N, ...)`` -> same.
    """

    def __init__(self, p: float, mode: str):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"[StochasticDepth] 'p' must be between 0 and 1 but got {p}.")
        if mode not in ("batch", "row"):
            raise ValueError(f"[StochasticDepth] 'mode' must be 'batch' or 'row' but got {mode!r}.")
        self.p = p
        self.mode = mode

    def __call__(self, x: mx.array) -> mx.array:
        if not self.training or self.p == 0.0:
            return x
        survival = 1.0 - self.p
        shape = (x.shape[0],) + (1,) * (x.ndim - 1) if self.mode == "row" else (1,) * x.ndim
        keep = mx.random.bernoulli(survival, shape).astype(x.dtype)
        if survival > 0.0:
            keep = keep / survival
        return x * keep
