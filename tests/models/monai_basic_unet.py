"""Twin of MONAI's ``BasicUNet`` (``monai.networks.nets.basic_unet``) with MONAI's module structure and
``state_dict`` names: ``Convolution`` blocks with ``conv`` and an ``adn`` of norm (``N``, affine instance norm),
dropout (``D``) and activation (``A``, leaky ReLU 0.1); max-pool ``Down`` blocks; ``UpCat`` (transposed conv,
replicate padding of the upsampled map where a max pool floored an odd size, concatenation, two convs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Convolution(nn.Sequential):
    def __init__(self, cin, cout, dropout=0.0):
        super().__init__()
        self.add_module("conv", nn.Conv3d(cin, cout, 3, padding=1))
        adn = nn.Sequential()
        adn.add_module("N", nn.InstanceNorm3d(cout, affine=True))
        adn.add_module("D", nn.Dropout(dropout))
        adn.add_module("A", nn.LeakyReLU(0.1, inplace=True))
        self.add_module("adn", adn)


class TwoConv(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__()
        self.add_module("conv_0", Convolution(cin, cout))
        self.add_module("conv_1", Convolution(cout, cout))


class Down(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__()
        self.add_module("max_pooling", nn.MaxPool3d(2))
        self.add_module("convs", TwoConv(cin, cout))


class UpSample(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__()
        self.add_module("deconv", nn.ConvTranspose3d(cin, cout, 2, 2))


class UpCat(nn.Module):
    def __init__(self, in_chns, cat_chns, out_chns, halves=True):
        super().__init__()
        up_chns = in_chns // 2 if halves else in_chns
        self.upsample = UpSample(in_chns, up_chns)
        self.convs = TwoConv(cat_chns + up_chns, out_chns)

    def forward(self, x, x_e):
        x_0 = self.upsample(x)
        # a 2x max pool floors odd sizes: the upsampled map is one short there, padded at its end
        pad = [0] * 6
        for i in range(3):
            if x_e.shape[-i - 1] != x_0.shape[-i - 1]:
                pad[i * 2 + 1] = 1
        x_0 = F.pad(x_0, pad, "replicate")
        return self.convs(torch.cat([x_e, x_0], dim=1))


class BasicUNet(nn.Module):
    """MONAI ``BasicUNet(spatial_dims=3, features=...)``: ``conv_0``, ``down_1..4``, ``upcat_4..1``,
    ``final_conv``. Any D, H, W >= 32 (instance norm needs two elements at the bottom); each odd size on the way down is
    one pad on the way up (a branch on the sizes, so a port keeps the parity pattern of the volume it was converted
    at)."""

    def __init__(self, in_channels=1, out_channels=2, features=(32, 32, 64, 128, 256, 32)):
        super().__init__()
        fea = features
        self.conv_0 = TwoConv(in_channels, fea[0])
        self.down_1 = Down(fea[0], fea[1])
        self.down_2 = Down(fea[1], fea[2])
        self.down_3 = Down(fea[2], fea[3])
        self.down_4 = Down(fea[3], fea[4])
        self.upcat_4 = UpCat(fea[4], fea[3], fea[3])
        self.upcat_3 = UpCat(fea[3], fea[2], fea[2])
        self.upcat_2 = UpCat(fea[2], fea[1], fea[1])
        self.upcat_1 = UpCat(fea[1], fea[0], fea[5], halves=False)
        self.final_conv = nn.Conv3d(fea[5], out_channels, 1)

    def forward(self, x):
        x0 = self.conv_0(x)
        x1 = self.down_1(x0)
        x2 = self.down_2(x1)
        x3 = self.down_3(x2)
        x4 = self.down_4(x3)
        u4 = self.upcat_4(x4, x3)
        u3 = self.upcat_3(u4, x2)
        u2 = self.upcat_2(u3, x1)
        return self.final_conv(self.upcat_1(u2, x0))


def basic_unet_small():
    return BasicUNet(2, 3, features=(4, 4, 8, 8, 16, 4))
