"""MONAI's shared building blocks (``monai.networks.blocks``), with MONAI's module structure and ``state_dict`` names,
for the twins of its 3-D networks (``monai_nets.py``, ``monai_unetr.py``; the older ``MonaiUNet`` lives in
``segmentation.py``).

``Convolution`` is an ``nn.Sequential`` whose only child here is ``conv`` (MONAI adds ``adn`` only with a norm, an
activation or dropout, which these blocks apply themselves). Padding follows ``dynunet_block.get_padding``
(``(k - s + 1) // 2``) and transposed convs get ``2p + s - k`` output padding, so a stride-s conv maps n to
``ceil(n / s)`` for the kernels used here, and the up path multiplies back by s.
"""

from __future__ import annotations

import torch
from torch import nn


def _per_dim(value, dims):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * dims


def get_padding(kernel_size, stride, dims=3):
    return tuple((k - s + 1) // 2 for k, s in zip(_per_dim(kernel_size, dims), _per_dim(stride, dims)))


def get_output_padding(kernel_size, stride, padding, dims=3):
    return tuple(2 * p + s - k for k, s, p in zip(_per_dim(kernel_size, dims), _per_dim(stride, dims), padding))


class Convolution(nn.Sequential):
    """A conv-only MONAI ``Convolution``: child ``conv`` (Conv3d, or ConvTranspose3d with ``is_transposed``)."""

    def __init__(self, cin, cout, kernel_size=3, stride=1, bias=False, is_transposed=False, padding=None):
        super().__init__()
        padding = get_padding(kernel_size, stride) if padding is None else _per_dim(padding, 3)
        if is_transposed:
            conv = nn.ConvTranspose3d(cin, cout, kernel_size, stride, padding,
                                      get_output_padding(kernel_size, stride, padding), bias=bias)
        else:
            conv = nn.Conv3d(cin, cout, kernel_size, stride, padding, bias=bias)
        self.add_module("conv", conv)


def get_norm_layer(norm_name, channels):
    """``("instance", {"affine": True})``-style names: instance norm (affine or not) or group norm."""
    name, args = norm_name if isinstance(norm_name, tuple) else (norm_name, {})
    if name == "instance":
        return nn.InstanceNorm3d(channels, **args)
    if name == "group":
        return nn.GroupNorm(num_channels=channels, **args)
    raise ValueError(f"norm_name {name!r} is not one of the twins' norms")


class UnetBasicBlock(nn.Module):
    """conv1 -> norm1 -> lrelu -> conv2 -> norm2 -> lrelu (leaky slope 0.01)."""

    def __init__(self, cin, cout, kernel_size, stride, norm_name):
        super().__init__()
        self.conv1 = Convolution(cin, cout, kernel_size, stride)
        self.conv2 = Convolution(cout, cout, kernel_size, 1)
        self.lrelu = nn.LeakyReLU(0.01, inplace=True)
        self.norm1 = get_norm_layer(norm_name, cout)
        self.norm2 = get_norm_layer(norm_name, cout)

    def forward(self, inp):
        out = self.lrelu(self.norm1(self.conv1(inp)))
        return self.lrelu(self.norm2(self.conv2(out)))


class UnetResBlock(UnetBasicBlock):
    """The basic block with a residual: a 1x1 ``conv3``/``norm3`` projection when the channels or the stride change."""

    def __init__(self, cin, cout, kernel_size, stride, norm_name):
        super().__init__(cin, cout, kernel_size, stride, norm_name)
        if cin != cout or any(s != 1 for s in _per_dim(stride, 3)):
            self.conv3 = Convolution(cin, cout, 1, stride)
            self.norm3 = get_norm_layer(norm_name, cout)

    def forward(self, inp):
        residual = inp
        out = self.lrelu(self.norm1(self.conv1(inp)))
        out = self.norm2(self.conv2(out))
        if hasattr(self, "conv3"):
            residual = self.norm3(self.conv3(residual))
        out += residual
        return self.lrelu(out)


class UnetUpBlock(nn.Module):
    """``transp_conv`` (kernel = stride = the upsample kernel), concatenation with the skip, a basic block."""

    def __init__(self, cin, cout, kernel_size, upsample_kernel_size, norm_name, res_block=False):
        super().__init__()
        self.transp_conv = Convolution(cin, cout, upsample_kernel_size, upsample_kernel_size, is_transposed=True)
        block = UnetResBlock if res_block else UnetBasicBlock
        self.conv_block = block(cout + cout, cout, kernel_size, 1, norm_name)

    def forward(self, inp, skip):
        return self.conv_block(torch.cat((self.transp_conv(inp), skip), dim=1))


class UnetOutBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = Convolution(cin, cout, 1, 1, bias=True)

    def forward(self, inp):
        return self.conv(inp)
