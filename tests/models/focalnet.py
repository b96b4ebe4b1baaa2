"""Twins of timm's ``FocalNet`` (the 2023 NCHW form, ``focalnet_tiny_srf`` and ``focalnet_large_fl3``-like
structure and ``state_dict`` names: ``stem.proj``/``stem.norm``, ``layers.<i>.downsample.proj``/``.norm``,
``layers.<i>.blocks.<j>.norm1``/``modulation.f``/``modulation.h``/``modulation.focal_layers.<l>.0``/
``modulation.proj``/``modulation.norm``/``norm1_post``/``ls1.gamma``/``norm2``/``mlp.fc1``/``mlp.fc2``/
``norm2_post``/``ls2.gamma``, ``norm``, ``head.fc`` or ``head.norm``/``head.pre_logits.fc``/``head.fc``), few
blocks and narrow widths. Maps are NCHW throughout; ``LayerNorm2d`` normalises the channel dim by a permute to
channels-last and back.

Stresses: focal modulation (a 1x1 conv to query, context and ``focal_level + 1`` gates, ``torch.split`` on the
channel dim, a chain of depthwise convs of growing kernel (3, 5, 7) with GELU, each level's context times its gate
channel summed, the global context ``GELU(ctx.mean((2, 3)))`` times the last gate, an optional division by the
level count, ``h`` (1x1) and the product with the query); the post-norm variant's norms after the branch instead of
before it, the norm inside the modulation, the overlapping downsamples (7x7 stride 4 pad 2, 3x3 stride 2 pad 1: odd
maps), ``LayerScale2d`` (``gamma.view(1, -1, 1, 1)``) and the ``NormMlpClassifierHead``.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW map."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Mlp(nn.Module):
    """timm.layers.Mlp with ``use_conv=True``: 1x1 convs."""

    def __init__(self, in_features, hidden_features, act_layer=nn.GELU, drop=0.):
        super().__init__()
        self.fc1 = nn.Conv2d(in_features, hidden_features, kernel_size=1)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = nn.Identity()
        self.fc2 = nn.Conv2d(hidden_features, in_features, kernel_size=1)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.drop1(self.act(self.fc1(x)))
        return self.drop2(self.fc2(self.norm(x)))


class FocalModulation(nn.Module):
    def __init__(self, dim, focal_window, focal_level, focal_factor=2, bias=True, use_post_norm=False,
                 normalize_modulator=False, proj_drop=0., norm_layer=LayerNorm2d):
        super().__init__()
        self.dim = dim
        self.focal_level = focal_level
        self.normalize_modulator = normalize_modulator
        self.input_split = [dim, dim, focal_level + 1]
        self.f = nn.Conv2d(dim, 2 * dim + (focal_level + 1), kernel_size=1, bias=bias)
        self.h = nn.Conv2d(dim, dim, kernel_size=1, bias=bias)
        self.act = nn.GELU()
        self.proj = nn.Conv2d(dim, dim, kernel_size=1)
        self.proj_drop = nn.Dropout(proj_drop)
        self.focal_layers = nn.ModuleList()
        self.kernel_sizes = []
        for k in range(focal_level):
            kernel_size = focal_factor * k + focal_window
            self.focal_layers.append(nn.Sequential(
                nn.Conv2d(dim, dim, kernel_size=kernel_size, groups=dim, padding=kernel_size // 2, bias=False),
                nn.GELU()))
            self.kernel_sizes.append(kernel_size)
        self.norm = norm_layer(dim) if use_post_norm else nn.Identity()

    def forward(self, x):
        q, ctx, gates = torch.split(self.f(x), self.input_split, 1)
        ctx_all = 0
        for level, focal_layer in enumerate(self.focal_layers):
            ctx = focal_layer(ctx)
            ctx_all = ctx_all + ctx * gates[:, level:level + 1]
        ctx_global = self.act(ctx.mean((2, 3), keepdim=True))
        ctx_all = ctx_all + ctx_global * gates[:, self.focal_level:]
        if self.normalize_modulator:
            ctx_all = ctx_all / (self.focal_level + 1)
        x_out = q * self.h(ctx_all)
        x_out = self.norm(x_out)
        return self.proj_drop(self.proj(x_out))


class LayerScale2d(nn.Module):
    def __init__(self, dim, init_values=1e-5, inplace=False):
        super().__init__()
        self.inplace = inplace
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        gamma = self.gamma.view(1, -1, 1, 1)
        return x.mul_(gamma) if self.inplace else x * gamma


class FocalNetBlock(nn.Module):
    def __init__(self, dim, mlp_ratio=4., focal_level=1, focal_window=3, use_post_norm=False,
                 use_post_norm_in_modulation=False, normalize_modulator=False, layerscale_value=1e-4,
                 norm_layer=LayerNorm2d):
        super().__init__()
        self.norm1 = norm_layer(dim) if not use_post_norm else nn.Identity()
        self.modulation = FocalModulation(dim, focal_window=focal_window, focal_level=focal_level,
                                          use_post_norm=use_post_norm_in_modulation,
                                          normalize_modulator=normalize_modulator, norm_layer=norm_layer)
        self.norm1_post = norm_layer(dim) if use_post_norm else nn.Identity()
        self.ls1 = LayerScale2d(dim, layerscale_value) if layerscale_value is not None else nn.Identity()
        self.drop_path1 = nn.Identity()
        self.norm2 = norm_layer(dim) if not use_post_norm else nn.Identity()
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.norm2_post = norm_layer(dim) if use_post_norm else nn.Identity()
        self.ls2 = LayerScale2d(dim, layerscale_value) if layerscale_value is not None else nn.Identity()
        self.drop_path2 = nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.norm1_post(self.modulation(self.norm1(x)))
        x = shortcut + self.drop_path1(self.ls1(x))
        return x + self.drop_path2(self.ls2(self.norm2_post(self.mlp(self.norm2(x)))))


class Downsample(nn.Module):
    def __init__(self, in_chs, out_chs, stride=4, overlap=False, norm_layer=None):
        super().__init__()
        kernel_size, padding = stride, 0
        if overlap:
            kernel_size, padding = (7, 2) if stride == 4 else (3, 1)
        self.proj = nn.Conv2d(in_chs, out_chs, kernel_size=kernel_size, stride=stride, padding=padding)
        self.norm = norm_layer(out_chs) if norm_layer is not None else nn.Identity()

    def forward(self, x):
        return self.norm(self.proj(x))


class FocalNetStage(nn.Module):
    def __init__(self, dim, out_dim, depth, mlp_ratio=4., downsample=True, focal_level=1, focal_window=1,
                 use_overlap_down=False, use_post_norm=False, use_post_norm_in_modulation=False,
                 normalize_modulator=False, layerscale_value=1e-4, norm_layer=LayerNorm2d):
        super().__init__()
        if downsample:
            self.downsample = Downsample(dim, out_dim, stride=2, overlap=use_overlap_down, norm_layer=norm_layer)
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.ModuleList([
            FocalNetBlock(out_dim, mlp_ratio=mlp_ratio, focal_level=focal_level, focal_window=focal_window,
                          use_post_norm=use_post_norm, use_post_norm_in_modulation=use_post_norm_in_modulation,
                          normalize_modulator=normalize_modulator, layerscale_value=layerscale_value,
                          norm_layer=norm_layer)
            for _ in range(depth)])

    def forward(self, x):
        x = self.downsample(x)
        for blk in self.blocks:
            x = blk(x)
        return x


class ClassifierHead(nn.Module):
    """timm's ClassifierHead (average pool, flatten, fc)."""

    def __init__(self, in_features, num_classes):
        super().__init__()
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.)
        self.fc = nn.Linear(in_features, num_classes)
        self.flatten = nn.Identity()

    def forward(self, x):
        return self.flatten(self.fc(self.drop(self.global_pool(x).flatten(1))))


class NormMlpClassifierHead(nn.Module):
    """timm's NormMlpClassifierHead: pool, LayerNorm2d, flatten, fc + tanh (``pre_logits``), fc."""

    def __init__(self, in_features, num_classes, hidden_size, norm_layer=LayerNorm2d):
        super().__init__()
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.norm = norm_layer(in_features)
        self.flatten = nn.Flatten(1)
        self.pre_logits = nn.Sequential()
        self.pre_logits.add_module("fc", nn.Linear(in_features, hidden_size))
        self.pre_logits.add_module("act", nn.Tanh())
        self.drop = nn.Dropout(0.)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        x = self.flatten(self.norm(self.global_pool(x)))
        return self.fc(self.drop(self.pre_logits(x)))


class FocalNet(nn.Module):
    def __init__(self, in_chans=3, num_classes=10, embed_dim=16, depths=(1, 1, 2, 1), mlp_ratio=2.,
                 focal_levels=(2, 2, 3, 2), focal_windows=(3, 3, 3, 3), use_overlap_down=False,
                 use_post_norm=False, use_post_norm_in_modulation=False, normalize_modulator=False,
                 head_hidden_size=None, layerscale_value=None, norm_layer=partial(LayerNorm2d, eps=1e-5)):
        super().__init__()
        num_layers = len(depths)
        dims = [embed_dim * (2 ** i) for i in range(num_layers)]
        self.num_features = dims[-1]
        self.stem = Downsample(in_chans, dims[0], overlap=use_overlap_down, norm_layer=norm_layer)
        in_dim = dims[0]
        layers = []
        for i in range(num_layers):
            layers.append(FocalNetStage(
                in_dim, dims[i], depths[i], mlp_ratio=mlp_ratio, downsample=i > 0, focal_level=focal_levels[i],
                focal_window=focal_windows[i], use_overlap_down=use_overlap_down, use_post_norm=use_post_norm,
                use_post_norm_in_modulation=use_post_norm_in_modulation, normalize_modulator=normalize_modulator,
                layerscale_value=layerscale_value, norm_layer=norm_layer))
            in_dim = dims[i]
        self.layers = nn.Sequential(*layers)
        if head_hidden_size:
            self.norm = nn.Identity()
            self.head = NormMlpClassifierHead(self.num_features, num_classes, head_hidden_size,
                                              norm_layer=norm_layer)
        else:
            self.norm = norm_layer(self.num_features)
            self.head = ClassifierHead(self.num_features, num_classes)

    def forward_features(self, x):
        return self.norm(self.layers(self.stem(x)))

    def forward(self, x):
        return self.head(self.forward_features(x))


def focalnet_small():
    """``focalnet_tiny_srf``-like: patchify downsamples, pre-norm blocks, no layer scale."""
    return FocalNet()


def focalnet_post_norm_small():
    """``focalnet_large_fl3``/``huge``-like: overlapping downsamples, post-norm blocks, the norm inside the
    modulation, the modulator divided by the level count, layer scale, the MLP head."""
    return FocalNet(use_overlap_down=True, use_post_norm=True, use_post_norm_in_modulation=True,
                    normalize_modulator=True, head_hidden_size=48, layerscale_value=1e-4)
