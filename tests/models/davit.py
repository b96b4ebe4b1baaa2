"""Twin of timm's ``DaViT`` (``timm/models/davit.py``: module structure and ``state_dict`` names ``stem.conv``/
``stem.norm``, ``stages.<i>.downsample.norm``/``.conv``, ``stages.<i>.blocks.<j>.<0,1>`` (or ``.spatial_block``/
``.channel_block`` with ``named_blocks``) ``.cpe1.proj``/``norm1``/``attn.qkv``/``attn.proj``/``cpe2.proj``/
``norm2``/``mlp.fc1``/``mlp.fc2``, ``head.norm``/``head.fc``), as ``davit_tiny`` and Florence-2's ``davit_base_fl``
build it, narrowed to four stages of 16-64 channels and 4x4 windows.

Stresses: dual attention: window attention over tokens (``F.scaled_dot_product_attention``, windows padded at the
bottom/right with ``F.pad`` of an NHWC map, partitioned and reversed by 6-d views/permutes, cropped back) and channel
attention (the heads' channels attend to each other: ``k^T @ v`` (C x C per head), softmax, then applied to q; v2:
``q^T @ k`` scaled by ``N ** -0.5``, the token count, a size in the forward's arithmetic); convolutional position
encodings (a depthwise 3x3 conv added back, around each attention and MLP); NCHW <-> tokens by
``flatten``/``transpose``/``view`` in every block; the stem and even-kernel downsamples padding the map to their
stride (``F.pad`` by ``(k - W % k) % k``); odd kernel downsamples (``down_kernel_size=3``, padding 1).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tests.models.timm_more import LayerNorm2d, Mlp, NormMlpClassifierHead


class ConvPosEnc(nn.Module):
    def __init__(self, dim: int, k: int = 3, act: bool = False):
        super().__init__()
        self.proj = nn.Conv2d(dim, dim, kernel_size=k, stride=1, padding=k // 2, groups=dim)
        self.act = nn.GELU() if act else nn.Identity()

    def forward(self, x: Tensor):
        return x + self.act(self.proj(x))


class Stem(nn.Module):
    """7x7 stride-4 conv on the image padded to a multiple of 4, then LayerNorm2d."""

    def __init__(self, in_chs=3, out_chs=96, stride=4, norm_layer=LayerNorm2d):
        super().__init__()
        self.stride = (stride, stride)
        self.in_chs, self.out_chs = in_chs, out_chs
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size=7, stride=self.stride, padding=3)
        self.norm = norm_layer(out_chs)

    def forward(self, x: Tensor):
        B, C, H, W = x.shape
        pad_r = (self.stride[1] - W % self.stride[1]) % self.stride[1]
        pad_b = (self.stride[0] - H % self.stride[0]) % self.stride[0]
        return self.norm(self.conv(F.pad(x, (0, pad_r, 0, pad_b))))


class Downsample(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size=3, norm_layer=LayerNorm2d):
        super().__init__()
        self.in_chs, self.out_chs = in_chs, out_chs
        self.norm = norm_layer(in_chs)
        self.even_k = kernel_size % 2 == 0
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size=kernel_size, stride=2,
                              padding=0 if self.even_k else kernel_size // 2)

    def forward(self, x: Tensor):
        B, C, H, W = x.shape
        x = self.norm(x)
        if self.even_k:
            k_h, k_w = self.conv.kernel_size
            x = F.pad(x, (0, (k_w - W % k_w) % k_w, 0, (k_h - H % k_h) % k_h))
        return self.conv(x)


class ChannelAttentionV2(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=True, dynamic_scale=True):
        super().__init__()
        self.groups = num_heads
        self.head_dim = dim // num_heads
        self.dynamic_scale = dynamic_scale
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.groups, C // self.groups).permute(2, 0, 3, 1, 4).unbind(0)
        q = q * N ** -0.5 if self.dynamic_scale else q * self.head_dim ** -0.5
        attn = (q.transpose(-1, -2) @ k).softmax(dim=-1)
        x = (attn @ v.transpose(-1, -2)).transpose(-1, -2)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class ChannelAttention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        k = k * self.scale
        attn = (k.transpose(-1, -2) @ v).softmax(dim=-1)
        x = (attn @ q.transpose(-1, -2)).transpose(-1, -2)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


def _add_position_and_mlp(block: nn.Module, dim, mlp_ratio, norm_layer, cpe_act):
    """The children both DaViT blocks register after their attention, in timm's order."""
    block.drop_path1 = nn.Identity()
    block.cpe2 = ConvPosEnc(dim=dim, k=3, act=cpe_act)
    block.norm2 = norm_layer(dim)
    block.mlp = Mlp(dim, int(dim * mlp_ratio))
    block.drop_path2 = nn.Identity()


def _position_and_mlp(block: nn.Module, x: Tensor, size) -> Tensor:
    """The tail both DaViT blocks share: ``cpe2`` on the map, then the MLP residual on its tokens, back to NCHW."""
    B, C, H, W = size
    x = block.cpe2(x.transpose(1, 2).view(B, C, H, W))
    x = x.flatten(2).transpose(1, 2)
    x = x + block.drop_path2(block.mlp(block.norm2(x)))
    return x.transpose(1, 2).view(B, C, H, W)


class ChannelBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=False, norm_layer=nn.LayerNorm, ffn=True,
                 cpe_act=False, v2=False):
        super().__init__()
        self.cpe1 = ConvPosEnc(dim=dim, k=3, act=cpe_act)
        self.ffn = ffn
        self.norm1 = norm_layer(dim)
        self.attn = (ChannelAttentionV2 if v2 else ChannelAttention)(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        _add_position_and_mlp(self, dim, mlp_ratio, norm_layer, cpe_act)

    def forward(self, x: Tensor):
        B, C, H, W = x.shape
        x = self.cpe1(x).flatten(2).transpose(1, 2)
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return _position_and_mlp(self, x, (B, C, H, W))


def window_partition(x: Tensor, window_size: Tuple[int, int]):
    B, H, W, C = x.shape
    x = x.view(B, H // window_size[0], window_size[0], W // window_size[1], window_size[1], C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size[0], window_size[1], C)


def window_reverse(windows: Tensor, window_size: Tuple[int, int], H: int, W: int):
    C = windows.shape[-1]
    x = windows.view(-1, H // window_size[0], W // window_size[1], window_size[0], window_size[1], C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, H, W, C)


class WindowAttention(nn.Module):
    def __init__(self, dim, window_size, num_heads, qkv_bias=True, fused_attn=True):
        super().__init__()
        self.dim, self.window_size, self.num_heads = dim, window_size, num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.fused_attn = fused_attn
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x: Tensor):
        B_, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            x = self.softmax((q * self.scale) @ k.transpose(-2, -1)) @ v
        return self.proj(x.transpose(1, 2).reshape(B_, N, C))


class SpatialBlock(nn.Module):
    def __init__(self, dim, num_heads, window_size=7, mlp_ratio=4.0, qkv_bias=True, norm_layer=nn.LayerNorm,
                 ffn=True, cpe_act=False, fused_attn=True):
        super().__init__()
        self.dim, self.ffn, self.num_heads = dim, ffn, num_heads
        self.window_size = (window_size, window_size)
        self.mlp_ratio = mlp_ratio
        self.cpe1 = ConvPosEnc(dim=dim, k=3, act=cpe_act)
        self.norm1 = norm_layer(dim)
        self.attn = WindowAttention(dim, self.window_size, num_heads=num_heads, qkv_bias=qkv_bias,
                                    fused_attn=fused_attn)
        _add_position_and_mlp(self, dim, mlp_ratio, norm_layer, cpe_act)

    def forward(self, x: Tensor):
        B, C, H, W = x.shape
        shortcut = self.cpe1(x).flatten(2).transpose(1, 2)
        x = self.norm1(shortcut).view(B, H, W, C)
        pad_r = (self.window_size[1] - W % self.window_size[1]) % self.window_size[1]
        pad_b = (self.window_size[0] - H % self.window_size[0]) % self.window_size[0]
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        _, Hp, Wp, _ = x.shape
        x_windows = window_partition(x, self.window_size).view(-1, self.window_size[0] * self.window_size[1], C)
        attn_windows = self.attn(x_windows).view(-1, self.window_size[0], self.window_size[1], C)
        x = window_reverse(attn_windows, self.window_size, Hp, Wp)
        x = x[:, :H, :W, :].contiguous().view(B, H * W, C)
        return _position_and_mlp(self, shortcut + self.drop_path1(x), (B, C, H, W))


class DaVitStage(nn.Module):
    def __init__(self, in_chs, out_chs, depth=1, downsample=True, num_heads=3, window_size=7, mlp_ratio=4.0,
                 qkv_bias=True, norm_layer=LayerNorm2d, norm_layer_cl=nn.LayerNorm, cpe_act=False,
                 down_kernel_size=2, named_blocks=False, channel_attn_v2=False, fused_attn=True):
        super().__init__()
        self.downsample = (Downsample(in_chs, out_chs, kernel_size=down_kernel_size, norm_layer=norm_layer)
                           if downsample else nn.Identity())
        stage_blocks = []
        for _ in range(depth):
            pair = [
                ("spatial_block", SpatialBlock(out_chs, num_heads, window_size=window_size, mlp_ratio=mlp_ratio,
                                               qkv_bias=qkv_bias, norm_layer=norm_layer_cl, cpe_act=cpe_act,
                                               fused_attn=fused_attn)),
                ("channel_block", ChannelBlock(out_chs, num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                                               norm_layer=norm_layer_cl, cpe_act=cpe_act, v2=channel_attn_v2)),
            ]
            stage_blocks.append(nn.Sequential(OrderedDict(pair)) if named_blocks
                                else nn.Sequential(*[b for _, b in pair]))
        self.blocks = nn.Sequential(*stage_blocks)

    def forward(self, x: Tensor):
        return self.blocks(self.downsample(x))


class DaVit(nn.Module):
    def __init__(self, depths=(1, 1, 3, 1), embed_dims=(96, 192, 384, 768), num_heads=(3, 6, 12, 24),
                 window_size=7, mlp_ratio=4, qkv_bias=True, norm_eps=1e-5, cpe_act=False, down_kernel_size=2,
                 channel_attn_v2=False, named_blocks=False, num_classes=1000, fused_attn=True):
        super().__init__()
        norm_layer = lambda dim: LayerNorm2d(dim, eps=norm_eps)  # noqa: E731
        norm_layer_cl = lambda dim: nn.LayerNorm(dim, eps=norm_eps)  # noqa: E731
        self.num_classes = num_classes
        self.num_features = embed_dims[-1]
        self.stem = Stem(3, embed_dims[0], norm_layer=norm_layer)
        in_chs, stages = embed_dims[0], []
        for i, out_chs in enumerate(embed_dims):
            stages.append(DaVitStage(
                in_chs, out_chs, depth=depths[i], downsample=i > 0, num_heads=num_heads[i], window_size=window_size,
                mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, norm_layer=norm_layer, norm_layer_cl=norm_layer_cl,
                cpe_act=cpe_act, down_kernel_size=down_kernel_size, named_blocks=named_blocks,
                channel_attn_v2=channel_attn_v2, fused_attn=fused_attn))
            in_chs = out_chs
        self.stages = nn.Sequential(*stages)
        self.norm_pre = nn.Identity()
        self.head = NormMlpClassifierHead(self.num_features, num_classes)
        self.head.norm.eps = norm_eps

    def forward(self, x):
        return self.head(self.norm_pre(self.stages(self.stem(x))))


def davit_small_twin():
    """``davit_tiny``'s options: 2x2 even-kernel downsamples, channel attention v1, SDPA window attention."""
    return DaVit(depths=(1, 1, 2, 1), embed_dims=(16, 32, 48, 64), num_heads=(2, 2, 4, 4), window_size=4,
                 num_classes=10)


def davit_fl_small_twin():
    """``davit_base_fl``'s options (Florence-2's vision tower): 3x3 downsamples, channel attention v2 (scaled by
    the token count), named blocks; the unfused window attention (``Softmax`` module)."""
    return DaVit(depths=(1, 1, 2, 1), embed_dims=(16, 32, 48, 64), num_heads=(2, 2, 4, 4), window_size=4,
                 down_kernel_size=3, channel_attn_v2=True, named_blocks=True, num_classes=10, fused_attn=False)
