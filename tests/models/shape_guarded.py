"""Models whose forward branches on input sizes: torch.export specialises on the example, so a port converted at
one size must either give torch's numbers at another size or refuse it clearly (issue 11).

- ``OddWidth``: ``if x.shape[-1] % 2 == 1: x = x * 2`` (the issue's minimal case).
- ``SwinSmall``: torchvision ``swin_t``'s structure (``features``/``norm``/``head``; the zoo twin's
  ``SwinTransformerBlock`` with ``norm1, attn (qkv, proj, relative_position_bias_table, relative_position_index),
  norm2, mlp``) and its ``shifted_window_attention``: pad to a multiple of the window, drop the shift when the window covers the map,
  cyclic roll, attention mask built by slice assignment, unpad.
- ``MobileViTSmall``: timm's MobileViT block (tests/models/vision_more.py; ``conv_kxk, conv_1x1, transformer,
  conv_proj, conv_fusion``): unfold into 2x2 patches, interpolating first when the map is not a multiple of the
  patch size (``if new_h != h or new_w != w``), fold back, interpolate back.
- ``BasicUNetSmall``: MONAI ``BasicUNet``'s names (``conv_0``, ``down_1``, ``upcat_1``, ``final_conv``) and its
  ``UpCat``: after the transposed-conv upsampling, pad by one (replicate) on each spatial side whose size
  differs from the skip's (odd sizes), then concatenate.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from tests.zoo.twins.convnext import Permute
from tests.zoo.twins.swin import ShiftedWindowAttention, SwinTransformerBlock

from .vision_more import MobileVitBlock


class OddWidth(nn.Module):
    def forward(self, x):
        if x.shape[-1] % 2 == 1:
            x = x * 2
        return x.relu()


# ---------------------------------------------------------------------------------------------------- Swin
class SwinSmall(nn.Module):
    """Patch embedding (4x4, stride 4), two Swin blocks (shift 0, then window // 2; MLP ratio 2), norm, pool, head.

    The blocks are the zoo tests' torchvision twin's (``tests/zoo/twins/swin.py``); ``mask_out_of_place`` builds
    their attention mask without slice assignments (see its ``shifted_window_attention``).
    """

    def __init__(self, dim: int = 16, num_heads: int = 2, window: int = 4, num_classes: int = 5,
                 mask_out_of_place: bool = False):
        super().__init__()
        stem = nn.Sequential(nn.Conv2d(3, dim, 4, 4), Permute([0, 2, 3, 1]), nn.LayerNorm(dim))
        attn = partial(ShiftedWindowAttention, mask_out_of_place=mask_out_of_place)
        blocks = nn.Sequential(*[SwinTransformerBlock(dim, num_heads, [window, window],
                                                      [0, 0] if i % 2 == 0 else [window // 2, window // 2],
                                                      mlp_ratio=2.0, attn_layer=attn)
                                 for i in range(2)])
        self.features = nn.Sequential(stem, blocks)
        self.norm = nn.LayerNorm(dim)
        self.permute = Permute([0, 3, 1, 2])
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.norm(self.features(x))
        return self.head(self.flatten(self.avgpool(self.permute(x))))


# ---------------------------------------------------------------------------------------------------- MobileViT
class MobileViTSmall(nn.Module):
    def __init__(self, channels: int = 8, dim: int = 16, num_classes: int = 5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 2, 1, bias=False), nn.BatchNorm2d(channels), nn.SiLU())
        self.block = MobileVitBlock(channels, channels, dim, depth=1)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(channels, num_classes))

    def forward(self, x):
        return self.head(self.block(self.stem(x)))


# ---------------------------------------------------------------------------------------------------- BasicUNet
class TwoConv(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        for i, (a, b) in enumerate(((cin, cout), (cout, cout))):
            self.add_module(f"conv_{i}", nn.Sequential(nn.Conv2d(a, b, 3, padding=1),
                                                       nn.InstanceNorm2d(b, affine=True),
                                                       nn.LeakyReLU(0.1, inplace=True)))


class Down(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.add_module("max_pooling", nn.MaxPool2d(2))
        self.add_module("convs", TwoConv(cin, cout))


class UpCat(nn.Module):
    def __init__(self, cin: int, cat: int, cout: int):
        super().__init__()
        self.upsample = nn.ConvTranspose2d(cin, cin // 2, 2, 2)
        self.convs = TwoConv(cat + cin // 2, cout)

    def forward(self, x, x_e):
        x_0 = self.upsample(x)
        # MONAI: handle the odd edge lengths the 2x max pooling dropped
        dimensions = len(x.shape) - 2
        sp = [0] * (dimensions * 2)
        for i in range(dimensions):
            if x_e.shape[-i - 1] != x_0.shape[-i - 1]:
                sp[i * 2 + 1] = 1
        x_0 = F.pad(x_0, sp, "replicate")
        return self.convs(torch.cat([x_e, x_0], dim=1))


class BasicUNetSmall(nn.Module):
    def __init__(self, features=(8, 8, 16), out_channels: int = 2):
        super().__init__()
        f = features
        self.conv_0 = TwoConv(3, f[0])
        self.down_1 = Down(f[0], f[1])
        self.down_2 = Down(f[1], f[2])
        self.upcat_2 = UpCat(f[2], f[1], f[1])
        self.upcat_1 = UpCat(f[1], f[0], f[0])
        self.final_conv = nn.Conv2d(f[0], out_channels, 1)

    def forward(self, x):
        x0 = self.conv_0(x)
        x1 = self.down_1(x0)
        x2 = self.down_2(x1)
        u2 = self.upcat_2(x2, x1)
        u1 = self.upcat_1(u2, x0)
        return self.final_conv(u1)


# ---------------------------------------------------------------------------------------------------- TF "same"
def get_same_padding(x: int, kernel_size: int, stride: int, dilation: int):
    """timm.layers.padding.get_same_padding: TensorFlow's "SAME" padding, computed from the input size."""
    return max((math.ceil(x / stride) - 1) * stride + (kernel_size - 1) * dilation + 1 - x, 0)


class Conv2dSame(nn.Conv2d):
    """timm.layers.conv2d_same.Conv2dSame: pads (asymmetrically) by ``pad_same`` on every call, then convolves."""

    def forward(self, x):
        ih, iw = x.size()[-2:]
        pad_h = get_same_padding(ih, self.kernel_size[0], self.stride[0], self.dilation[0])
        pad_w = get_same_padding(iw, self.kernel_size[1], self.stride[1], self.dilation[1])
        x = F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
        return F.conv2d(x, self.weight, self.bias, self.stride, (0, 0), self.dilation, self.groups)


class TFEfficientNetLiteSmall(nn.Module):
    """tf_efficientnet_lite-style: Conv2dSame stem and depthwise convs (k3/k5, stride 2), ReLU6, 1x1 convs."""

    def __init__(self, widths=(8, 12, 16, 24, 32), num_classes: int = 5):
        super().__init__()
        self.conv_stem = Conv2dSame(3, widths[0], 3, 2, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        blocks = []
        for i, (cin, cout) in enumerate(zip(widths[:-1], widths[1:])):
            k = 3 if i % 2 == 0 else 5
            blocks.append(nn.Sequential(Conv2dSame(cin, cin, k, 2, groups=cin, bias=False), nn.BatchNorm2d(cin),
                                        nn.ReLU6(), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout)))
        self.blocks = nn.Sequential(*blocks)
        self.classifier = nn.Linear(widths[-1], num_classes)

    def forward(self, x):
        x = self.blocks(F.relu6(self.bn1(self.conv_stem(x))))
        return self.classifier(x.mean((2, 3)))


odd_width = OddWidth
swin_small = partial(SwinSmall)
basic_unet_small = partial(BasicUNetSmall)
