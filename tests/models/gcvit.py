"""Twin of timm's ``GlobalContextVit`` (``timm/models/gcvit.py``: module structure and ``state_dict`` names
``stem.conv1``, ``stem.down.norm1``/``conv_block.conv_dw``/``conv_block.se.fc1``/``.fc2``/``conv_block.conv_pw``/
``reduction``/``norm2``, ``stages.<i>.downsample...``, ``stages.<i>.global_block.blocks.conv<k>...``,
``stages.<i>.blocks.<j>.norm1``/``attn.rel_pos.relative_position_bias_table``/``attn.qkv``/``attn.proj``/``norm2``/
``mlp.fc1``/``mlp.fc2``, ``stages.3.norm``, ``head.fc``), as ``gcvit_xxtiny`` builds it, narrowed to 8-64 channels
on 64x64 images.

Stresses: global query tokens: each stage's map reduced to one window's size by a stack of MBConv blocks (depthwise
conv, GELU, squeeze-excitation, pointwise, residual) and stride-2 max pools, then used as the queries of every window
in the odd blocks (``q_global.repeat(B // q_global.shape[0], 1, 1, 1)``: tiled over the windows in batch-major
order, a 2-d ``kv`` projection instead of ``qkv``); window attention with a relative position bias gathered from its
table by a non-persistent index buffer; NHWC blocks inside NCHW stages (permutes at the stage boundary, LayerNorm2d
in the downsamples); fixed input size (the pooling depth and window counts are set at build time).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import nn

from tests.models.davit import window_partition
from tests.models.ghostnet import make_divisible
from tests.models.timm_more import LayerNorm2d, Mlp
from tests.models.timm_reparam import ClassifierHead


class SEModule(nn.Module):
    """timm ``SEModule`` (``rd_ratio`` 0.25, no bias, GELU): mean, ``fc1``, ``act``, ``fc2``, sigmoid gate."""

    def __init__(self, channels: int, rd_ratio: float = 0.25, act_layer=nn.GELU, bias: bool = False):
        super().__init__()
        rd_channels = make_divisible(channels * rd_ratio, 8, round_limit=0.0)
        self.fc1 = nn.Conv2d(channels, rd_channels, kernel_size=1, bias=bias)
        self.bn = nn.Identity()
        self.act = act_layer()
        self.fc2 = nn.Conv2d(rd_channels, channels, kernel_size=1, bias=bias)
        self.gate = nn.Sigmoid()

    def forward(self, x):
        x_se = self.fc2(self.act(self.bn(self.fc1(x.mean((2, 3), keepdim=True)))))
        return x * self.gate(x_se)


class MbConvBlock(nn.Module):
    def __init__(self, in_chs: int, out_chs: Optional[int] = None, expand_ratio: float = 1.0, act_layer=nn.GELU):
        super().__init__()
        out_chs = out_chs or in_chs
        mid_chs = int(expand_ratio * in_chs)
        self.conv_dw = nn.Conv2d(in_chs, mid_chs, 3, 1, 1, groups=in_chs, bias=False)
        self.act = act_layer()
        self.se = SEModule(mid_chs, act_layer=act_layer)
        self.conv_pw = nn.Conv2d(mid_chs, out_chs, 1, 1, 0, bias=False)

    def forward(self, x):
        return self.conv_pw(self.se(self.act(self.conv_dw(x)))) + x


class Downsample2d(nn.Module):
    def __init__(self, dim: int, dim_out: Optional[int] = None, norm_layer=LayerNorm2d):
        super().__init__()
        dim_out = dim_out or dim
        self.norm1 = norm_layer(dim)
        self.conv_block = MbConvBlock(dim)
        self.reduction = nn.Conv2d(dim, dim_out, 3, 2, 1, bias=False)
        self.norm2 = norm_layer(dim_out)

    def forward(self, x):
        return self.norm2(self.reduction(self.conv_block(self.norm1(x))))


class FeatureBlock(nn.Module):
    """``levels`` MBConv blocks, each followed by a 3x3 stride-2 max pool (one block and no pool for 0 levels)."""

    def __init__(self, dim: int, levels: int = 0):
        super().__init__()
        reductions, levels = levels, max(1, levels)
        self.blocks = nn.Sequential()
        for i in range(levels):
            self.blocks.add_module(f"conv{i + 1}", MbConvBlock(dim))
            if reductions:
                self.blocks.add_module(f"pool{i + 1}", nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
                reductions -= 1

    def forward(self, x):
        return self.blocks(x)


class Stem(nn.Module):
    def __init__(self, in_chs: int = 3, out_chs: int = 96, norm_layer=LayerNorm2d):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chs, out_chs, kernel_size=3, stride=2, padding=1)
        self.down = Downsample2d(out_chs, norm_layer=norm_layer)

    def forward(self, x):
        return self.down(self.conv1(x))


def gen_relative_position_index(size: Tuple[int, int]) -> torch.Tensor:
    coords = torch.stack(torch.meshgrid(torch.arange(size[0]), torch.arange(size[1]), indexing="ij")).flatten(1)
    relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)
    relative[:, :, 0] += size[0] - 1
    relative[:, :, 1] += size[1] - 1
    relative[:, :, 0] *= 2 * size[1] - 1
    return relative.sum(-1)


class RelPosBias(nn.Module):
    def __init__(self, window_size: Tuple[int, int], num_heads: int):
        super().__init__()
        self.window_size = window_size
        self.window_area = window_size[0] * window_size[1]
        self.bias_shape = (self.window_area, self.window_area, num_heads)
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads))
        self.register_buffer("relative_position_index", gen_relative_position_index(window_size).view(-1),
                             persistent=False)

    def forward(self, attn):
        bias = self.relative_position_bias_table[self.relative_position_index].view(self.bias_shape).permute(2, 0, 1)
        return attn + bias.unsqueeze(0).contiguous()


class WindowAttentionGlobal(nn.Module):
    def __init__(self, dim: int, num_heads: int, window_size: Tuple[int, int], use_global: bool = True,
                 qkv_bias: bool = True):
        super().__init__()
        self.window_size = window_size
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.use_global = use_global
        self.rel_pos = RelPosBias(window_size=window_size, num_heads=num_heads)
        self.qkv = nn.Linear(dim, dim * (2 if use_global else 3), bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)

    def forward(self, x, q_global: Optional[torch.Tensor] = None):
        B, N, C = x.shape
        if self.use_global and q_global is not None:
            k, v = self.qkv(x).reshape(B, N, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            q = q_global.repeat(B // q_global.shape[0], 1, 1, 1)
            q = q.reshape(B, N, self.num_heads, self.head_dim).permute(0, 2, 1, 3)
        else:
            q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        attn = self.rel_pos((q * self.scale) @ k.transpose(-2, -1).contiguous()).softmax(dim=-1)
        x = (self.attn_drop(attn) @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


def window_reverse(windows, window_size: Tuple[int, int], img_size: Tuple[int, int]):
    H, W = img_size
    C = windows.shape[-1]
    x = windows.view(-1, H // window_size[0], W // window_size[1], window_size[0], window_size[1], C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)


class GlobalContextVitBlock(nn.Module):
    def __init__(self, dim, feat_size, num_heads, window_size=7, mlp_ratio=4.0, use_global=True, qkv_bias=True,
                 norm_layer=nn.LayerNorm):
        super().__init__()
        self.window_size = window_size
        self.num_windows = (feat_size[0] // window_size[0]) * (feat_size[1] // window_size[1])
        self.norm1 = norm_layer(dim)
        self.attn = WindowAttentionGlobal(dim, num_heads=num_heads, window_size=window_size, use_global=use_global,
                                          qkv_bias=qkv_bias)
        self.ls1 = nn.Identity()
        self.drop_path1 = nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = nn.Identity()
        self.drop_path2 = nn.Identity()

    def _window_attn(self, x, q_global: Optional[torch.Tensor] = None):
        B, H, W, C = x.shape
        x_win = window_partition(x, self.window_size).view(-1, self.window_size[0] * self.window_size[1], C)
        return window_reverse(self.attn(x_win, q_global), self.window_size, (H, W))

    def forward(self, x, q_global: Optional[torch.Tensor] = None):
        x = x + self.drop_path1(self.ls1(self._window_attn(self.norm1(x), q_global)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class GlobalContextVitStage(nn.Module):
    def __init__(self, dim, depth, num_heads, feat_size, window_size, downsample=True, stage_norm=False,
                 mlp_ratio=4.0, qkv_bias=True, norm_layer=LayerNorm2d, norm_layer_cl=nn.LayerNorm):
        super().__init__()
        if downsample:
            self.downsample = Downsample2d(dim=dim, dim_out=dim * 2, norm_layer=norm_layer)
            dim, feat_size = dim * 2, (feat_size[0] // 2, feat_size[1] // 2)
        else:
            self.downsample = nn.Identity()
        self.feat_size = feat_size
        self.global_block = FeatureBlock(dim, int(math.log2(min(feat_size) / min(window_size))))
        self.global_norm = nn.Identity()
        self.blocks = nn.ModuleList([
            GlobalContextVitBlock(dim=dim, num_heads=num_heads, feat_size=feat_size, window_size=window_size,
                                  mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, use_global=(i % 2 != 0),
                                  norm_layer=norm_layer_cl)
            for i in range(depth)])
        self.norm = norm_layer_cl(dim) if stage_norm else nn.Identity()
        self.dim = dim

    def forward(self, x):
        x = self.downsample(x)
        global_query = self.global_block(x)
        x = x.permute(0, 2, 3, 1)
        global_query = self.global_norm(global_query.permute(0, 2, 3, 1))
        for blk in self.blocks:
            x = blk(x, global_query)
        return self.norm(x).permute(0, 3, 1, 2).contiguous()


class GlobalContextVit(nn.Module):
    def __init__(self, num_classes=1000, img_size=224, window_size=(7, 7, 14, 7), embed_dim=64,
                 depths=(3, 4, 19, 5), num_heads=(2, 4, 8, 16), mlp_ratio=3.0, qkv_bias=True, norm_eps=1e-5):
        super().__init__()
        norm_layer = lambda dim: LayerNorm2d(dim, eps=norm_eps)  # noqa: E731
        norm_layer_cl = lambda dim: nn.LayerNorm(dim, eps=norm_eps)  # noqa: E731
        feat_size = (img_size // 4, img_size // 4)
        num_stages = len(depths)
        self.num_features = int(embed_dim * 2 ** (num_stages - 1))
        self.stem = Stem(3, embed_dim, norm_layer=norm_layer)
        stages = []
        for i in range(num_stages):
            scale = 2 ** max(i - 1, 0)
            stages.append(GlobalContextVitStage(
                dim=embed_dim * scale, depth=depths[i], num_heads=num_heads[i],
                feat_size=(feat_size[0] // scale, feat_size[1] // scale),
                window_size=(window_size[i], window_size[i]), downsample=i != 0, stage_norm=i == num_stages - 1,
                mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, norm_layer=norm_layer, norm_layer_cl=norm_layer_cl))
        self.stages = nn.Sequential(*stages)
        self.head = ClassifierHead(self.num_features, num_classes)

    def forward(self, x):
        return self.head(self.stages(self.stem(x)))


def gcvit_small_twin():
    """Maps of 16, 8, 4, 2 under windows of 4, 4, 4, 2: global queries pooled twice, once, then not at all; two
    blocks per stage but the last (the second of each with global queries)."""
    return GlobalContextVit(num_classes=10, img_size=64, window_size=(4, 4, 4, 2), embed_dim=8,
                            depths=(2, 2, 2, 1), num_heads=(2, 2, 4, 4))
