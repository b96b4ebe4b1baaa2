"""timm's EfficientFormerV2 (``timm/models/efficientformer_v2.py``) with timm's module structure and ``state_dict``
names: ``stem.conv1``/``conv2`` (``ConvNormAct``: ``conv``, ``bn`` a ``BatchNormAct2d`` with GELU), ``stages.<i>``
(``downsample``: ``conv`` a ``ConvNorm`` and, in the last stage, ``attn`` an ``Attention2dDownsample``; ``blocks.<j>``
with ``token_mixer`` (``Attention2d``, only in the last ``num_vit`` blocks of stages 2 and 3), ``ls1``/``ls2``
(``LayerScale2d.gamma``), ``mlp`` (``fc1``, ``mid``, ``fc2``)), ``norm``, ``head`` and ``head_dist``.

What the port meets: attention over 1x1-conv q/k/v reshaped by heads, a learnt bias per head and relative offset
gathered by a buffer of indices (``attention_biases[:, attention_bias_idxs]``), and in eval a per-device cache of
that gather (``attention_bias_cache``, a dict filled on the first call); "talking heads" (1x1 convs over the heads
before and after the softmax); a depthwise 3x3 ``v_local`` added to the attention's output; stage 2's strided
attention (a depthwise stride-2 conv in, bilinear ``nn.Upsample`` out); the downsampling attention's
``LocalGlobalQuery`` (a strided depthwise conv plus a 1x1 stride-2 average pool); the distilled head's two
classifiers averaged. The token grid is fixed by ``img_size`` (timm's ``fixed_input_size``): a port's second size is
another batch.
"""

from __future__ import annotations

import math
from typing import Dict

import torch
from torch import nn

from .timm_hybrid import _BiasCache
from .timm_norm_act import BatchNormAct2d


class ConvNormAct(nn.Module):
    """timm ``ConvNormAct``: ``conv`` (biased here, as EfficientFormerV2 asks) then ``bn`` with GELU inside."""

    def __init__(self, in_chs, out_chs, kernel_size=1, stride=1, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, stride, padding=(kernel_size - 1) // 2, groups=groups)
        self.bn = BatchNormAct2d(out_chs, act_layer=nn.GELU)

    def forward(self, x):
        return self.bn(self.conv(x))


class ConvNorm(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size=1, stride=1, groups=1):
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, stride, padding=(stride - 1 + kernel_size - 1) // 2,
                              groups=groups)
        self.bn = nn.BatchNorm2d(out_chs)

    def forward(self, x):
        return self.bn(self.conv(x))


def _grid(rows, cols, step=1):
    return torch.stack(torch.meshgrid(torch.arange(0, rows, step), torch.arange(0, cols, step),
                                      indexing="ij")).flatten(1)


class _BiasTable(_BiasCache, nn.Module):
    """The learnt ``attention_biases`` (heads, N) read through ``attention_bias_idxs``, cached per device in eval as
    timm does (``_BiasCache``); the q/k/v projections both attentions share."""

    attention_bias_cache: Dict[str, torch.Tensor]

    def _bias_table(self, heads, n, idxs):
        self.attention_biases = nn.Parameter(torch.zeros(heads, n))
        self.register_buffer("attention_bias_idxs", idxs, persistent=False)
        self.attention_bias_cache = {}

    def _project(self, x, queries):
        """q (B, heads, queries, key_dim), k (B, heads, key_dim, N), v (B, heads, N, d) and ``v_local(v)``."""
        B = x.shape[0]
        q = self.q(x).reshape(B, self.num_heads, -1, queries).permute(0, 1, 3, 2)
        k = self.k(x).reshape(B, self.num_heads, -1, self.N)
        v = self.v(x)
        v_local = self.v_local(v)
        return q, k, v.reshape(B, self.num_heads, -1, self.N).permute(0, 1, 3, 2), v_local


class Attention2d(_BiasTable):
    def __init__(self, dim, key_dim=32, num_heads=8, attn_ratio=4, resolution=7, stride=None):
        super().__init__()
        self.num_heads, self.key_dim, self.scale = num_heads, key_dim, key_dim ** -0.5
        resolution = (resolution, resolution) if isinstance(resolution, int) else tuple(resolution)
        if stride is not None:
            resolution = tuple(math.ceil(r / stride) for r in resolution)
            self.stride_conv = ConvNorm(dim, dim, 3, stride, groups=dim)
            self.upsample = nn.Upsample(scale_factor=stride, mode="bilinear")
        else:
            self.stride_conv = None
            self.upsample = None
        self.resolution = resolution
        self.N = resolution[0] * resolution[1]
        self.d = int(attn_ratio * key_dim)
        self.dh = self.d * num_heads
        kh = key_dim * num_heads
        self.q = ConvNorm(dim, kh)
        self.k = ConvNorm(dim, kh)
        self.v = ConvNorm(dim, self.dh)
        self.v_local = ConvNorm(self.dh, self.dh, 3, groups=self.dh)
        self.talking_head1 = nn.Conv2d(num_heads, num_heads, 1)
        self.talking_head2 = nn.Conv2d(num_heads, num_heads, 1)
        self.act = nn.GELU()
        self.proj = ConvNorm(self.dh, dim)
        pos = _grid(*resolution)
        rel = (pos[..., :, None] - pos[..., None, :]).abs()
        self._bias_table(num_heads, self.N, rel[0] * resolution[1] + rel[1])

    def forward(self, x):
        if self.stride_conv is not None:
            x = self.stride_conv(x)
        q, k, v, v_local = self._project(x, self.N)
        attn = (q @ k) * self.scale + self.get_attention_biases(x.device)
        attn = self.talking_head2(self.talking_head1(attn).softmax(dim=-1))
        x = (attn @ v).transpose(2, 3).reshape(x.shape[0], self.dh, *self.resolution) + v_local
        if self.upsample is not None:
            x = self.upsample(x)
        return self.proj(self.act(x))


class LocalGlobalQuery(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.pool = nn.AvgPool2d(1, 2, 0)
        self.local = nn.Conv2d(in_dim, in_dim, 3, 2, 1, groups=in_dim)
        self.proj = ConvNorm(in_dim, out_dim)

    def forward(self, x):
        return self.proj(self.local(x) + self.pool(x))


class Attention2dDownsample(_BiasTable):
    def __init__(self, dim, key_dim=16, num_heads=8, attn_ratio=4, resolution=7, out_dim=None):
        super().__init__()
        self.num_heads, self.key_dim, self.scale = num_heads, key_dim, key_dim ** -0.5
        self.resolution = (resolution, resolution) if isinstance(resolution, int) else tuple(resolution)
        self.resolution2 = tuple(math.ceil(r / 2) for r in self.resolution)
        self.N = self.resolution[0] * self.resolution[1]
        self.N2 = self.resolution2[0] * self.resolution2[1]
        self.d = int(attn_ratio * key_dim)
        self.dh = self.d * num_heads
        kh = key_dim * num_heads
        self.q = LocalGlobalQuery(dim, kh)
        self.k = ConvNorm(dim, kh)
        self.v = ConvNorm(dim, self.dh)
        self.v_local = ConvNorm(self.dh, self.dh, 3, 2, groups=self.dh)
        self.act = nn.GELU()
        self.proj = ConvNorm(self.dh, out_dim or dim)
        # timm builds the key grid from resolution[1] twice (the same on square inputs)
        k_pos = _grid(self.resolution[1], self.resolution[1])
        q_pos = _grid(*self.resolution, step=2)
        rel = (q_pos[..., :, None] - k_pos[..., None, :]).abs()
        self._bias_table(num_heads, self.N, rel[0] * self.resolution[1] + rel[1])

    def forward(self, x):
        q, k, v, v_local = self._project(x, self.N2)
        attn = ((q @ k) * self.scale + self.get_attention_biases(x.device)).softmax(dim=-1)
        x = (attn @ v).transpose(2, 3).reshape(x.shape[0], self.dh, *self.resolution2) + v_local
        return self.proj(self.act(x))


class Downsample(nn.Module):
    def __init__(self, in_chs, out_chs, resolution, use_attn=False):
        super().__init__()
        self.conv = ConvNorm(in_chs, out_chs, 3, 2)
        self.attn = Attention2dDownsample(in_chs, resolution=resolution, out_dim=out_chs) if use_attn else None

    def forward(self, x):
        out = self.conv(x)
        return out if self.attn is None else self.attn(x) + out


class ConvMlpWithNorm(nn.Module):
    def __init__(self, in_features, hidden_features, drop=0.0):
        super().__init__()
        self.fc1 = ConvNormAct(in_features, hidden_features, 1)
        self.mid = ConvNormAct(hidden_features, hidden_features, 3, groups=hidden_features)
        self.drop1 = nn.Dropout(drop)
        self.fc2 = ConvNorm(hidden_features, in_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        return self.drop2(self.fc2(self.drop1(self.mid(self.fc1(x)))))


class LayerScale2d(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma.view(1, -1, 1, 1)


class EfficientFormerV2Block(nn.Module):
    def __init__(self, dim, mlp_ratio, resolution, stride=None, use_attn=True, drop=0.0):
        super().__init__()
        self.token_mixer = Attention2d(dim, resolution=resolution, stride=stride) if use_attn else None
        self.ls1 = LayerScale2d(dim) if use_attn else None
        self.drop_path1 = nn.Identity() if use_attn else None
        self.mlp = ConvMlpWithNorm(dim, int(dim * mlp_ratio), drop)
        self.ls2 = LayerScale2d(dim)
        self.drop_path2 = nn.Identity()

    def forward(self, x):
        if self.token_mixer is not None:
            x = x + self.drop_path1(self.ls1(self.token_mixer(x)))
        return x + self.drop_path2(self.ls2(self.mlp(x)))


class Stem4(nn.Sequential):
    def __init__(self, in_chs, out_chs):
        super().__init__()
        self.conv1 = ConvNormAct(in_chs, out_chs // 2, 3, 2)
        self.conv2 = ConvNormAct(out_chs // 2, out_chs, 3, 2)


class EfficientFormerV2Stage(nn.Module):
    def __init__(self, dim, dim_out, depth, resolution, downsample, block_stride, downsample_use_attn,
                 block_use_attn, num_vit, mlp_ratio, drop):
        super().__init__()
        if downsample:
            self.downsample = Downsample(dim, dim_out, resolution, downsample_use_attn)
            resolution = math.ceil(resolution / 2)
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.Sequential(*[
            EfficientFormerV2Block(dim_out, mlp_ratio, resolution, block_stride,
                                   block_use_attn and j > depth - num_vit - 1, drop)
            for j in range(depth)])

    def forward(self, x):
        return self.blocks(self.downsample(x))


class EfficientFormerV2(nn.Module):
    """Four stages at strides 4, 8, 16, 32 of a square ``img_size``; the distilled head's two classifiers averaged
    (``distilled_training`` off)."""

    def __init__(self, depths=(1, 1, 2, 2), embed_dims=(8, 16, 24, 32), img_size=64, mlp_ratios=(4, 4, 3, 3),
                 num_vit=1, num_classes=10, drop_rate=0.0):
        super().__init__()
        self.stem = Stem4(3, embed_dims[0])
        stages, prev, stride = [], embed_dims[0], 4
        for i, depth in enumerate(depths):
            stages.append(EfficientFormerV2Stage(
                prev, embed_dims[i], depth, math.ceil(img_size / stride), i > 0, 2 if i == 2 else None, i >= 3,
                i >= 2, num_vit, mlp_ratios[i], drop_rate))
            stride *= 2 if i > 0 else 1
            prev = embed_dims[i]
        self.stages = nn.Sequential(*stages)
        self.norm = nn.BatchNorm2d(embed_dims[-1])
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dims[-1], num_classes)
        self.head_dist = nn.Linear(embed_dims[-1], num_classes)

    def forward(self, x):
        x = self.norm(self.stages(self.stem(x))).mean(dim=(2, 3))
        x = self.head_drop(x)
        return (self.head(x) + self.head_dist(x)) / 2


def efficientformerv2_small() -> EfficientFormerV2:
    return EfficientFormerV2()
