"""Pieces GoogLeNet and Inception v3 share: torchvision's ``BasicConv2d`` and the ``transform_input`` rescaling."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm2d, Conv2d

# (scale, shift) per RGB channel: ImageNet normalization -> the (x - 0.5) / 0.5 the ported weights were trained on
_TRANSFORM = ((0.229 / 0.5, (0.485 - 0.5) / 0.5), (0.224 / 0.5, (0.456 - 0.5) / 0.5), (0.225 / 0.5, (0.406 - 0.5) / 0.5))


class BasicConv2d(nn.Module):
    """Conv (no bias), BatchNorm (``eps=0.001``), ReLU; children ``conv`` and ``bn``.

    Args:
        in_channels (int): input channels.
        out_channels (int): output channels.
        **kwargs: the conv's ``kernel_size``, ``stride``, ``padding``.
    Shape: ``(N, H, W, in_channels)`` -> ``(N, H', W', out_channels)``.
    """

    def __init__(self, in_channels: int, out_channels: int, **kwargs):
        super().__init__()
        self.conv = Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = BatchNorm2d(out_channels, eps=0.001)

    def __call__(self, x: mx.array) -> mx.array:
        return nn.relu(self.bn(self.conv(x)))


def transform_input(x: mx.array) -> mx.array:
    """torchvision's ``_transform_input``: re-normalize ImageNet-normalized RGB, ``(N, H, W, 3)`` -> same."""
    scale = mx.array([s for s, _ in _TRANSFORM], dtype=x.dtype)
    shift = mx.array([b for _, b in _TRANSFORM], dtype=x.dtype)
    return x * scale + shift


def scaled(width_divisor: int, owner: str):
    """The channel-count function of a reduced model: ``c -> c // width_divisor`` (validated once)."""
    if isinstance(width_divisor, bool) or not isinstance(width_divisor, int) or width_divisor <= 0:
        raise ValueError(f"[{owner}] 'width_divisor' must be a positive int but got {width_divisor!r}.")
    return lambda c: max(1, c // width_divisor)
