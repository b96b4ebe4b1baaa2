"""Twins of MONAI's convolutional 3-D segmentation networks, with MONAI's module structure and ``state_dict``
names: ``SegResNet`` (``monai.networks.nets.segresnet``) and ``DynUNet`` (``monai.networks.nets.dynunet``, MONAI
>= 0.6's form: deep supervision heads stacked on dim 1 in training mode). Blocks: ``monai_blocks.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.monai_blocks import (Convolution, UnetBasicBlock, UnetOutBlock, UnetResBlock, UnetUpBlock,
                                       get_norm_layer)


# ---------------------------------------------------------------------------------------------------- SegResNet
class ResBlock(nn.Module):
    """norm1 -> act -> conv1 -> norm2 -> act -> conv2, plus the input (MONAI ``segresnet_block.ResBlock``)."""

    def __init__(self, channels, norm):
        super().__init__()
        self.norm1 = get_norm_layer(norm, channels)
        self.norm2 = get_norm_layer(norm, channels)
        self.act = nn.ReLU(inplace=True)
        self.conv1 = Convolution(channels, channels, 3, padding=1)
        self.conv2 = Convolution(channels, channels, 3, padding=1)

    def forward(self, x):
        identity = x
        x = self.conv1(self.act(self.norm1(x)))
        x = self.conv2(self.act(self.norm2(x)))
        x += identity
        return x


class UpSample(nn.Sequential):
    """MONAI ``UpSample`` by 2: child ``deconv`` (ConvTranspose3d, kernel 2) or ``upsample_non_trainable``
    (trilinear, align_corners=False)."""

    def __init__(self, channels, mode):
        super().__init__()
        if mode == "deconv":
            self.add_module("deconv", nn.ConvTranspose3d(channels, channels, 2, 2))
        elif mode == "nontrainable":
            self.add_module("upsample_non_trainable", nn.Upsample(scale_factor=2, mode="trilinear",
                                                                  align_corners=False))
        else:
            raise ValueError(f"upsample_mode {mode!r} is not one of the twin's")


class SegResNet(nn.Module):
    """MONAI ``SegResNet(spatial_dims=3)``: ``convInit``, ``down_layers`` (a stride-2 ``Convolution`` then ResBlocks),
    ``up_samples`` (1x1 conv, upsample) and ``up_layers`` added to the skips, ``conv_final`` (norm, act, 1x1 conv).

    Input ``(N, in_channels, D, H, W)`` with D, H, W divisible by ``2 ** (len(blocks_down) - 1)`` (MONAI neither
    pads nor crops: other sizes fail in torch at the skip addition).
    """

    def __init__(self, init_filters=8, in_channels=1, out_channels=2, norm=("group", {"num_groups": 8}),
                 blocks_down=(1, 2, 2, 4), blocks_up=(1, 1, 1), upsample_mode="nontrainable"):
        super().__init__()
        self.act = nn.ReLU(inplace=True)
        self.convInit = Convolution(in_channels, init_filters, 3, padding=1)
        self.down_layers = nn.ModuleList()
        for i, blocks in enumerate(blocks_down):
            channels = init_filters * 2 ** i
            pre_conv = Convolution(channels // 2, channels, 3, stride=2, padding=1) if i > 0 else nn.Identity()
            self.down_layers.append(nn.Sequential(pre_conv, *[ResBlock(channels, norm) for _ in range(blocks)]))
        self.up_layers, self.up_samples = nn.ModuleList(), nn.ModuleList()
        for i, blocks in enumerate(blocks_up):
            channels = init_filters * 2 ** (len(blocks_up) - i)
            self.up_layers.append(nn.Sequential(*[ResBlock(channels // 2, norm) for _ in range(blocks)]))
            self.up_samples.append(nn.Sequential(Convolution(channels, channels // 2, 1, padding=0),
                                                 UpSample(channels // 2, upsample_mode)))
        self.conv_final = nn.Sequential(get_norm_layer(norm, init_filters), self.act,
                                        Convolution(init_filters, out_channels, 1, bias=True, padding=0))

    def forward(self, x):
        x = self.convInit(x)
        down_x = []
        for down in self.down_layers:
            x = down(x)
            down_x.append(x)
        down_x.reverse()
        for i, (up, upl) in enumerate(zip(self.up_samples, self.up_layers)):
            x = upl(up(x) + down_x[i + 1])
        return self.conv_final(x)


def segresnet_small(upsample_mode="nontrainable"):
    return SegResNet(init_filters=8, in_channels=2, out_channels=3, norm=("group", {"num_groups": 4}),
                     blocks_down=(1, 2, 1), blocks_up=(1, 1), upsample_mode=upsample_mode)


# ---------------------------------------------------------------------------------------------------- DynUNet
class DynUNetSkipLayer(nn.Module):
    """One level of the recursion: ``downsample``, ``next_layer``, ``upsample(next, down)``; a level with a
    ``super_head`` writes its deep supervision output into the shared ``heads`` list."""

    def __init__(self, index, downsample, upsample, next_layer, heads=None, super_head=None):
        super().__init__()
        self.downsample = downsample
        self.next_layer = next_layer
        self.upsample = upsample
        self.super_head = super_head
        self.heads = heads
        self.index = index

    def forward(self, x):
        downout = self.downsample(x)
        nextout = self.next_layer(downout)
        upout = self.upsample(nextout, downout)
        if self.super_head is not None and self.heads is not None and self.index > 0:
            self.heads[self.index - 1] = self.super_head(upout)
        return upout


class DynUNet(nn.Module):
    """MONAI ``DynUNet(spatial_dims=3, ...)``: ``input_block``, ``downsamples``, ``bottleneck``, ``upsamples``,
    ``output_block``, ``deep_supervision_heads``, and ``skip_layers``, the recursion over the same modules (so
    every weight is in the ``state_dict`` twice, as in MONAI). Eval returns the output; training with
    ``deep_supervision`` stacks it with the ``deep_supr_num`` heads, each nearest-resized to the output's size.
    Every stride's product must divide D, H, W (the skips are concatenated, not cropped).
    """

    def __init__(self, in_channels, out_channels, kernel_size, strides, upsample_kernel_size, filters,
                 norm_name=("instance", {"affine": True}), deep_supervision=False, deep_supr_num=1, res_block=False):
        super().__init__()
        self.deep_supervision = deep_supervision
        self.deep_supr_num = deep_supr_num
        block = UnetResBlock if res_block else UnetBasicBlock
        self.input_block = block(in_channels, filters[0], kernel_size[0], strides[0], norm_name)
        self.downsamples = nn.ModuleList(
            block(cin, cout, k, s, norm_name)
            for cin, cout, k, s in zip(filters[:-2], filters[1:-1], kernel_size[1:-1], strides[1:-1]))
        self.bottleneck = block(filters[-2], filters[-1], kernel_size[-1], strides[-1], norm_name)
        self.upsamples = nn.ModuleList(
            UnetUpBlock(cin, cout, k, up, norm_name)
            for cin, cout, k, up in zip(filters[1:][::-1], filters[:-1][::-1], kernel_size[1:][::-1],
                                        upsample_kernel_size[::-1]))
        self.output_block = UnetOutBlock(filters[0], out_channels)
        self.deep_supervision_heads = nn.ModuleList(
            UnetOutBlock(filters[i + 1], out_channels) for i in range(deep_supr_num))
        self.heads = [torch.rand(1)] * deep_supr_num
        self.skip_layers = self._skips(0, [self.input_block, *self.downsamples], list(self.upsamples[::-1]),
                                       list(self.deep_supervision_heads))

    def _skips(self, index, downsamples, upsamples, superheads):
        if not downsamples:
            return self.bottleneck
        head, rest = (None, superheads) if index == 0 or not superheads else (superheads[0], superheads[1:])
        next_layer = self._skips(index + 1, downsamples[1:], upsamples[1:], rest)
        if head is None:
            return DynUNetSkipLayer(index, downsamples[0], upsamples[0], next_layer)
        return DynUNetSkipLayer(index, downsamples[0], upsamples[0], next_layer, self.heads, head)

    def forward(self, x):
        out = self.output_block(self.skip_layers(x))
        if self.training and self.deep_supervision:
            out_all = [out] + [F.interpolate(head, out.shape[2:]) for head in self.heads]
            return torch.stack(out_all, dim=1)
        return out


def dynunet_small(deep_supervision=True, res_block=False):
    """Anisotropic first levels (nnU-Net's thin-slice plan): kernels (3,3,1) and strides (2,2,1) before isotropic
    ones; D, H must be multiples of 8 and W of 4."""
    return DynUNet(2, 3, kernel_size=[[3, 3, 1], [3, 3, 1], [3, 3, 3], [3, 3, 3]],
                   strides=[[1, 1, 1], [2, 2, 1], [2, 2, 2], [2, 2, 2]],
                   upsample_kernel_size=[[2, 2, 1], [2, 2, 2], [2, 2, 2]], filters=[4, 8, 12, 16],
                   deep_supervision=deep_supervision, deep_supr_num=2, res_block=res_block)
