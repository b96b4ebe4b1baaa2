"""timm's InceptionNeXt (``timm/models/inception_next.py``: ``MetaNeXt``) at test size, with its module structure and
``state_dict`` names: a 4x4 stride-4 stem conv + BatchNorm, stages of a BatchNorm + 2x2 stride-2 conv downsample and
MetaNeXt blocks whose token mixer splits the channels unevenly (``torch.split`` into identity, 3x3, 1x11 and 11x1
depthwise branches, ``cat``; the band kernels' padding of 5 exceeds the last stages' maps), BatchNorm, a 1x1-conv
MLP with GELU, and a per-channel layer scale ``gamma``; the head pools, then Linear, GELU, LayerNorm, Linear."""

from __future__ import annotations

from functools import partial

import torch
from torch import nn


class InceptionDWConv2d(nn.Module):
    def __init__(self, in_chs, square_kernel_size=3, band_kernel_size=11, branch_ratio=0.125):
        super().__init__()
        gc = int(in_chs * branch_ratio)
        self.dwconv_hw = nn.Conv2d(gc, gc, square_kernel_size, padding=square_kernel_size // 2, groups=gc)
        self.dwconv_w = nn.Conv2d(gc, gc, kernel_size=(1, band_kernel_size), padding=(0, band_kernel_size // 2),
                                  groups=gc)
        self.dwconv_h = nn.Conv2d(gc, gc, kernel_size=(band_kernel_size, 1), padding=(band_kernel_size // 2, 0),
                                  groups=gc)
        self.split_indexes = (in_chs - 3 * gc, gc, gc, gc)

    def forward(self, x):
        x_id, x_hw, x_w, x_h = torch.split(x, self.split_indexes, dim=1)
        return torch.cat((x_id, self.dwconv_hw(x_hw), self.dwconv_w(x_w), self.dwconv_h(x_h)), dim=1)


class ConvMlp(nn.Module):
    def __init__(self, in_features, hidden_features, act_layer=nn.GELU):
        super().__init__()
        self.fc1 = nn.Conv2d(in_features, hidden_features, kernel_size=1)
        self.norm = nn.Identity()
        self.act = act_layer()
        self.drop = nn.Dropout(0.0)
        self.fc2 = nn.Conv2d(hidden_features, in_features, kernel_size=1)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.norm(self.fc1(x)))))


class MlpClassifierHead(nn.Module):
    def __init__(self, dim, num_classes, mlp_ratio=3):
        super().__init__()
        hidden = int(mlp_ratio * dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.norm = partial(nn.LayerNorm, eps=1e-6)(hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        return self.fc2(self.drop(self.norm(self.act(self.fc1(x.mean((2, 3)))))))


class MetaNeXtBlock(nn.Module):
    def __init__(self, dim, mlp_ratio=4, ls_init_value=1e-6):
        super().__init__()
        self.token_mixer = InceptionDWConv2d(dim)
        self.norm = nn.BatchNorm2d(dim)
        self.mlp = ConvMlp(dim, int(mlp_ratio * dim))
        self.gamma = nn.Parameter(ls_init_value * torch.ones(dim))
        self.drop_path = nn.Identity()

    def forward(self, x):
        out = self.mlp(self.norm(self.token_mixer(x)))
        return self.drop_path(out.mul(self.gamma.reshape(1, -1, 1, 1))) + x


class MetaNeXtStage(nn.Module):
    def __init__(self, in_chs, out_chs, ds_stride=2, depth=2, mlp_ratio=4):
        super().__init__()
        if ds_stride > 1:
            self.downsample = nn.Sequential(nn.BatchNorm2d(in_chs),
                                            nn.Conv2d(in_chs, out_chs, kernel_size=ds_stride, stride=ds_stride))
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.Sequential(*[MetaNeXtBlock(out_chs, mlp_ratio) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(self.downsample(x))


class MetaNeXt(nn.Module):
    def __init__(self, in_chans=3, num_classes=5, depths=(1, 1, 2, 1), dims=(16, 24, 32, 48),
                 mlp_ratios=(4, 4, 4, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_chans, dims[0], kernel_size=4, stride=4), nn.BatchNorm2d(dims[0]))
        stages, prev = [], dims[0]
        for i, (depth, out) in enumerate(zip(depths, dims)):
            stages.append(MetaNeXtStage(prev, out, ds_stride=2 if i > 0 else 1, depth=depth, mlp_ratio=mlp_ratios[i]))
            prev = out
        self.stages = nn.Sequential(*stages)
        self.num_features = prev
        self.head = MlpClassifierHead(prev, num_classes)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)))


def inception_next_small() -> nn.Module:
    """Widths 16-48 (the token mixer's branches 2, 3, 4, 6 channels: splits 10/2/2/2 ... 30/6/6/6), depths 1, 1, 2,
    1; 64x64 images give maps of 16, 8, 4, 2."""
    return MetaNeXt()
