"""Twin of MONAI's ``AttentionUnet`` (``monai.networks.nets.attentionunet``) with MONAI's module structure and
``state_dict`` names: ``model`` = (``ConvBlock`` head, nested ``AttentionLayer``s, 1x1 ``reduce_channels``). Each
``Convolution`` with a norm holds ``conv`` and an ``adn`` of norm ``N``, dropout ``D`` and activation ``A``: batch
norm + ReLU in the conv blocks and the transposed-conv ``UpConv``, MONAI's defaults (non-affine instance norm,
PReLU) in ``merge``. The attention gate: 1x1 convs + batch norm on the gating and skip maps, ReLU of their sum,
a 1x1 conv to one channel, batch norm, sigmoid, times the skip.
"""

from __future__ import annotations

import torch
from torch import nn


class Convolution(nn.Sequential):
    """MONAI ``Convolution``: ``conv``, then (unless ``conv_only``) ``adn`` = N, D (p=0), A."""

    def __init__(self, cin, cout, kernel_size=3, stride=1, norm="batch", act="relu", conv_only=False,
                 is_transposed=False):
        super().__init__()
        padding = (kernel_size - stride + 1) // 2 if not is_transposed else (kernel_size - 1) // 2
        if is_transposed:
            conv = nn.ConvTranspose3d(cin, cout, kernel_size, stride, padding, output_padding=stride - 1)
        else:
            conv = nn.Conv3d(cin, cout, kernel_size, stride, padding)
        self.add_module("conv", conv)
        if not conv_only:
            adn = nn.Sequential()
            adn.add_module("N", nn.BatchNorm3d(cout) if norm == "batch" else nn.InstanceNorm3d(cout))
            adn.add_module("D", nn.Dropout(0.0))
            adn.add_module("A", nn.ReLU() if act == "relu" else nn.PReLU())
            self.add_module("adn", adn)


class ConvBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv = nn.Sequential(Convolution(cin, cout, 3, stride), Convolution(cout, cout, 3, 1))

    def forward(self, x):
        return self.conv(x)


class UpConv(nn.Module):
    def __init__(self, cin, cout, stride=2):
        super().__init__()
        self.up = Convolution(cin, cout, 3, stride, is_transposed=True)

    def forward(self, x):
        return self.up(x)


class AttentionBlock(nn.Module):
    def __init__(self, f_int, f_g, f_l):
        super().__init__()
        self.W_g = nn.Sequential(Convolution(f_g, f_int, 1, conv_only=True), nn.BatchNorm3d(f_int))
        self.W_x = nn.Sequential(Convolution(f_l, f_int, 1, conv_only=True), nn.BatchNorm3d(f_int))
        self.psi = nn.Sequential(Convolution(f_int, 1, 1, conv_only=True), nn.BatchNorm3d(1), nn.Sigmoid())
        self.relu = nn.ReLU()

    def forward(self, g, x):
        return x * self.psi(self.relu(self.W_g(g) + self.W_x(x)))


class AttentionLayer(nn.Module):
    def __init__(self, in_channels, out_channels, submodule, stride=2):
        super().__init__()
        self.attention = AttentionBlock(in_channels // 2, in_channels, in_channels)
        self.upconv = UpConv(out_channels, in_channels, stride)
        self.merge = Convolution(2 * in_channels, in_channels, 3, norm="instance", act="prelu")
        self.submodule = submodule

    def forward(self, x):
        fromlower = self.upconv(self.submodule(x))
        att = self.attention(g=fromlower, x=x)
        return self.merge(torch.cat((att, fromlower), dim=1))


class AttentionUnet(nn.Module):
    """MONAI ``AttentionUnet(spatial_dims=3, in_channels, out_channels, channels, strides)``. D, H, W must be
    multiples of the strides' product (the up path doubles exactly; nothing is cropped)."""

    def __init__(self, in_channels, out_channels, channels, strides):
        super().__init__()
        head = ConvBlock(in_channels, channels[0])
        reduce_channels = Convolution(channels[0], out_channels, 1, conv_only=True)
        self.model = nn.Sequential(head, self._block(channels, strides), reduce_channels)

    def _block(self, channels, strides):
        if len(channels) > 2:
            sub = nn.Sequential(ConvBlock(channels[0], channels[1], strides[0]), self._block(channels[1:], strides[1:]))
        else:
            sub = ConvBlock(channels[0], channels[1], strides[0])
        return AttentionLayer(channels[0], channels[1], sub, strides[0])

    def forward(self, x):
        return self.model(x)


def attention_unet_small():
    return AttentionUnet(2, 3, channels=(4, 8, 16), strides=(2, 2))
