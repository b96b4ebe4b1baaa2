"""Dense-prediction models: a SegNet-style encoder-decoder (max-pool indices + MaxUnpool2d), torchvision's DeepLabV3
(dilated convs, image pooling, bilinear ``F.interpolate``; the zoo tests' twin, ``tests/zoo/twins/segmentation.py``)
and a UNet (ConvTranspose2d upsampling, skip concatenation)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from porter.examples import Bottleneck, ResNet
from tests.zoo.twins.segmentation import DeepLabHead, DeepLabV3, IntermediateLayerGetter


def _conv_bn_relu(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


# ---------------------------------------------------------------------------------------------------- SegNet
class SegNetSmall(nn.Module):
    """Two conv stages, each followed by MaxPool2d(2, 2, return_indices=True); the decoder unpools with those
    indices to the encoder's exact sizes (``output_size``), so odd input sizes come back whole."""

    def __init__(self, widths: Sequence[int] = (8, 16), num_classes: int = 5):
        super().__init__()
        c1, c2 = widths
        self.enc1 = _conv_bn_relu(3, c1)
        self.pool1 = nn.MaxPool2d(2, 2, return_indices=True)
        self.enc2 = _conv_bn_relu(c1, c2)
        self.pool2 = nn.MaxPool2d(2, 2, return_indices=True)
        self.unpool2 = nn.MaxUnpool2d(2, 2)
        self.dec2 = _conv_bn_relu(c2, c1)
        self.unpool1 = nn.MaxUnpool2d(2, 2)
        self.dec1 = _conv_bn_relu(c1, c1)
        self.classifier = nn.Conv2d(c1, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.enc1(x)
        size1 = x.size()
        x, idx1 = self.pool1(x)
        x = self.enc2(x)
        size2 = x.size()
        x, idx2 = self.pool2(x)
        x = self.dec2(self.unpool2(x, idx2, output_size=size2))
        x = self.dec1(self.unpool1(x, idx1, output_size=size1))
        return self.classifier(x)


# ---------------------------------------------------------------------------------------------------- DeepLabV3
def deeplabv3_small(num_classes: int = 5) -> DeepLabV3:
    """torchvision's DeepLabV3 (the zoo tests' twin) on a one-block-per-stage ResNet, output stride 8: layer3 and
    layer4 dilate (2, 4) instead of striding; ASPP rates 2, 4, 6 and 16 channels. Returns ``{"out": logits}``."""
    resnet = ResNet(Bottleneck, [1, 1, 1, 1], widths=(4, 8, 8, 8), replace_stride_with_dilation=[False, True, True])
    backbone = IntermediateLayerGetter(resnet, {"layer4": "out"})
    return DeepLabV3(backbone, DeepLabHead(8 * Bottleneck.expansion, num_classes, atrous_rates=(2, 4, 6),
                                           channels=16))


# ---------------------------------------------------------------------------------------------------- UNet
class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class Down(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__(nn.MaxPool2d(2), DoubleConv(cin, cout))


class Up(nn.Module):
    """ConvTranspose2d (2x2, stride 2) halves the channels and doubles the size; the skip is concatenated first."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([skip, self.up(x)], dim=1))


class UNet(nn.Module):
    """Depth-2 UNet. Input sizes must be divisible by 4 (two 2x poolings undone by two 2x upsamplings)."""

    def __init__(self, in_channels: int = 3, num_classes: int = 4, base: int = 8):
        super().__init__()
        self.inc = DoubleConv(in_channels, base)
        self.down1 = Down(base, 2 * base)
        self.down2 = Down(2 * base, 4 * base)
        self.up1 = Up(4 * base, 2 * base)
        self.up2 = Up(2 * base, base)
        self.outc = nn.Conv2d(base, num_classes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        return self.outc(self.up2(self.up1(x3, x2), x1))


def segnet_small(num_classes: int = 5) -> SegNetSmall:
    return SegNetSmall(num_classes=num_classes)


def unet_small(num_classes: int = 4) -> UNet:
    return UNet(num_classes=num_classes)


# ---------------------------------------------------------------------------------------------------- MONAI UNet
class ADN(nn.Sequential):
    """MONAI's norm/dropout/activation block in "NDA" order: children ``N`` (InstanceNorm3d), ``D``, ``A`` (PReLU)."""

    def __init__(self, channels: int, affine: bool = False, shared_slope: bool = False):
        super().__init__()
        self.add_module("N", nn.InstanceNorm3d(channels, affine=affine))
        self.add_module("D", nn.Dropout(0.1))
        self.add_module("A", nn.PReLU(1 if shared_slope else channels))


class Convolution(nn.Sequential):
    """MONAI ``Convolution``: ``conv`` (Conv3d, or ConvTranspose3d with ``is_transposed``) then ``adn``."""

    def __init__(self, cin: int, cout: int, strides: int = 1, is_transposed: bool = False, conv_only: bool = False,
                 affine: bool = False, shared_slope: bool = False):
        super().__init__()
        if is_transposed:
            conv = nn.ConvTranspose3d(cin, cout, 3, strides, padding=1, output_padding=strides - 1)
        else:
            conv = nn.Conv3d(cin, cout, 3, strides, padding=1)
        self.add_module("conv", conv)
        if not conv_only:
            self.add_module("adn", ADN(cout, affine, shared_slope))


class SkipConnection(nn.Module):
    def __init__(self, submodule: nn.Module):
        super().__init__()
        self.submodule = submodule

    def forward(self, x):
        return torch.cat([x, self.submodule(x)], dim=1)


class MonaiUNet(nn.Module):
    """MONAI ``UNet(spatial_dims=3, channels=(c, 2c), strides=(2,))``-style: ``model`` = down, skip(bottom), up.

    PReLU after every instance norm (per channel, and one shared slope in the bottom block), affine instance norm
    in the bottom, ConvTranspose3d with output padding on the way up. Input ``(N, 1, D, H, W)``, even sizes.
    """

    def __init__(self, in_channels: int = 1, out_channels: int = 2, c: int = 4):
        super().__init__()
        down = Convolution(in_channels, c, strides=2)
        bottom = nn.Sequential(Convolution(c, 2 * c, affine=True, shared_slope=True), Convolution(2 * c, c))
        up = nn.Sequential(Convolution(2 * c, out_channels, strides=2, is_transposed=True),
                           Convolution(out_channels, out_channels, conv_only=True))
        self.model = nn.Sequential(down, SkipConnection(bottom), up)

    def forward(self, x):
        return self.model(x)


def monai_unet3d_small() -> nn.Module:
    return MonaiUNet()
