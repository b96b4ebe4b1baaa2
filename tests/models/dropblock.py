"""timm's ``DropBlock2d`` (``timm/layers/drop.py``) with timm's attributes and both of its forms, written here (no
timm wheel): ``fast`` (the default, what timm's ResNets get from ``drop_block_rate``): Bernoulli seeds at timm's seed
rate grown into blocks by a stride-1 max pool, the kept elements scaled by the kept fraction; the other form
(``fast=False``): uniform noise thresholded inside the region where a whole block fits (clip mask), blocks by a min
pool, optional ``batchwise`` and ``with_noise`` (dropped elements filled with normal noise). And a timm ResNet
``BasicBlock`` carrying it as ``drop_block`` after ``bn1`` and ``bn2`` (``conv1``, ``bn1``, ``drop_block``,
``act1``, ``conv2``, ``bn2``, ``act2``), in a two-block net.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _seed_rate(drop_prob, block_size, gamma_scale, h, w):
    k = min(block_size, h, w)
    return gamma_scale * drop_prob * h * w / k ** 2 / ((w - block_size + 1) * (h - block_size + 1)), k


def drop_block_fast_2d(x, drop_prob, block_size, gamma_scale, with_noise, inplace):
    gamma, k = _seed_rate(drop_prob, block_size, gamma_scale, x.shape[2], x.shape[3])
    dropped = F.max_pool2d(torch.empty_like(x).bernoulli_(gamma), kernel_size=k, stride=1, padding=k // 2)
    if with_noise:
        noise = torch.empty_like(x).normal_()
        return x.mul_(1.0 - dropped).add_(noise * dropped) if inplace else x * (1.0 - dropped) + noise * dropped
    keep = 1 - dropped
    scale = (keep.numel() / keep.to(torch.float32).sum().add(1e-6)).to(x.dtype)
    return x.mul_(keep * scale) if inplace else x * keep * scale


def drop_block_2d(x, drop_prob, block_size, gamma_scale, with_noise, inplace, batchwise):
    B, C, H, W = x.shape
    gamma, k = _seed_rate(drop_prob, block_size, gamma_scale, H, W)
    rows, cols = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    valid = ((rows >= k // 2) & (rows < H - (k - 1) // 2) & (cols >= k // 2) & (cols < W - (k - 1) // 2))
    valid = valid.reshape(1, 1, H, W).to(x.dtype)
    noise = torch.rand((1, C, H, W), dtype=x.dtype) if batchwise else torch.rand_like(x)
    keep = ((2 - gamma - valid + noise) >= 1).to(x.dtype)
    keep = -F.max_pool2d(-keep, kernel_size=k, stride=1, padding=k // 2)
    if with_noise:
        fill = torch.randn((1, C, H, W), dtype=x.dtype) if batchwise else torch.randn_like(x)
        return x * keep + fill * (1 - keep)
    scale = (keep.numel() / keep.to(torch.float32).sum().add(1e-7)).to(x.dtype)
    return x * keep * scale


class DropBlock2d(nn.Module):
    def __init__(self, drop_prob=0.1, block_size=7, gamma_scale=1.0, with_noise=False, inplace=False,
                 batchwise=False, fast=True):
        super().__init__()
        self.drop_prob = drop_prob
        self.gamma_scale = gamma_scale
        self.block_size = block_size
        self.with_noise = with_noise
        self.inplace = inplace
        self.batchwise = batchwise
        self.fast = fast

    def forward(self, x):
        if not self.training or not self.drop_prob:
            return x
        if self.fast:
            return drop_block_fast_2d(x, self.drop_prob, self.block_size, self.gamma_scale, self.with_noise,
                                      self.inplace)
        return drop_block_2d(x, self.drop_prob, self.block_size, self.gamma_scale, self.with_noise, self.inplace,
                             self.batchwise)


class BasicBlock(nn.Module):
    """timm ``resnet.BasicBlock`` (no downsample, no attention) with a ``drop_block``."""

    def __init__(self, chs: int, drop_block=None):
        super().__init__()
        self.conv1 = nn.Conv2d(chs, chs, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(chs)
        self.drop_block = drop_block() if drop_block is not None else nn.Identity()
        self.act1 = nn.ReLU(inplace=True)
        self.aa = nn.Identity()
        self.conv2 = nn.Conv2d(chs, chs, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(chs)
        self.act2 = nn.ReLU(inplace=True)

    def forward(self, x):
        shortcut = x
        x = self.aa(self.act1(self.drop_block(self.bn1(self.conv1(x)))))
        x = self.drop_block(self.bn2(self.conv2(x)))
        return self.act2(x + shortcut)


def resnet_blocks(drop_block=None, chs: int = 8) -> nn.Module:
    """A stem conv and two ``BasicBlock``s sharing a drop block kind (timm builds one per block)."""
    return nn.Sequential(nn.Conv2d(3, chs, 3, padding=1), BasicBlock(chs, drop_block), BasicBlock(chs, drop_block))
