"""Twins of timm's Bring-Your-Own-Attention nets (``timm/models/byoanet.py`` configs on ``byobnet.ByobNet``):
``botnet26t`` (``layers/bottleneck_attn.py::BottleneckAttn``) and ``halonet26t`` (``layers/halo_attn.py::HaloAttn``),
narrowed, with timm's module structure and ``state_dict`` names: ``stem.conv<1-3>.conv``/``.bn`` (tiered stem, max
pool), ``stages.<i>.<j>.shortcut.conv``/``.bn``, ``conv1_1x1``, ``conv2_kxk``, ``conv3_1x1`` (bottleneck blocks);
``self_attn.qkv`` (BoTNet) or ``self_attn.q``/``self_attn.kv`` (HaloNet), ``self_attn.pos_embed.height_rel``/
``width_rel``, ``post_attn`` (a BatchNormAct2d) in the self-attention blocks; ``head.fc``.

Stresses: relative-position logits by the "rel_to_abs" trick (a matmul with the relative table, ``F.pad`` by one
column, flattened, padded again, reshaped to one row longer and sliced, then expanded over the other axis and
permuted), per axis, summed; BoTNet's global attention over a fixed-size map with the heads in the batch and q/k/v
split by ``torch.split`` of a 1x1 conv, an ``AvgPool2d`` after the attention where the block strides; HaloNet's local
attention: queries in non-overlapping blocks (a 6-d reshape/permute, or a strided 1x1 conv where the block strides),
keys/values in overlapping windows by ``F.pad`` and two ``Tensor.unfold`` calls, attention per block, folded back.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.ghostnet import make_divisible
from tests.models.timm_norm_act import BatchNormAct2d
from tests.models.timm_reparam import ClassifierHead


class ConvNormAct(nn.Module):
    """timm ``ConvNormAct``: ``conv`` (timm's symmetric padding for the stride, no bias), ``bn`` (BatchNormAct2d)."""

    def __init__(self, in_channels, out_channels, kernel_size=1, stride=1, groups=1, apply_act=True):
        super().__init__()
        padding = ((stride - 1) + (kernel_size - 1)) // 2
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=False)
        self.bn = BatchNormAct2d(out_channels, apply_act=apply_act)

    def forward(self, x):
        return self.bn(self.conv(x))


class Stem(nn.Sequential):
    """timm's tiered stem: three 3x3 ConvNormAct (the first stride 2) and a 3x3 stride-2 max pool."""

    def __init__(self, in_chs, out_chs: Tuple[int, int, int]):
        super().__init__()
        prev = in_chs
        for i, ch in enumerate(out_chs):
            self.add_module(f"conv{i + 1}", ConvNormAct(prev, ch, 3, stride=2 if i == 0 else 1))
            prev = ch
        self.add_module("pool", nn.MaxPool2d(kernel_size=3, stride=2, padding=1))


def _shortcut(in_chs, out_chs, stride):
    if in_chs != out_chs or stride != 1:
        return ConvNormAct(in_chs, out_chs, 1, stride=stride, apply_act=False)  # downsample 'conv1x1'
    return nn.Identity()


class BottleneckBlock(nn.Module):
    def __init__(self, in_chs, out_chs, stride=1, bottle_ratio=0.25, **_):
        super().__init__()
        mid_chs = make_divisible(out_chs * bottle_ratio)
        self.shortcut = _shortcut(in_chs, out_chs, stride)
        self.conv1_1x1 = ConvNormAct(in_chs, mid_chs, 1)
        self.conv2_kxk = ConvNormAct(mid_chs, mid_chs, 3, stride=stride)
        self.conv2b_kxk = nn.Identity()
        self.attn = nn.Identity()
        self.conv3_1x1 = ConvNormAct(mid_chs, out_chs, 1, apply_act=False)
        self.attn_last = nn.Identity()
        self.drop_path = nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        shortcut = x
        x = self.attn_last(self.conv3_1x1(self.attn(self.conv2b_kxk(self.conv2_kxk(self.conv1_1x1(x))))))
        x = self.drop_path(x)
        if self.shortcut is not None:
            x = x + self.shortcut(shortcut)
        return self.act(x)


class SelfAttnBlock(nn.Module):
    def __init__(self, in_chs, out_chs, stride=1, bottle_ratio=0.25, feat_size=None, self_attn=None):
        super().__init__()
        mid_chs = make_divisible(out_chs * bottle_ratio)
        self.shortcut = _shortcut(in_chs, out_chs, stride)
        self.conv1_1x1 = ConvNormAct(in_chs, mid_chs, 1)
        self.conv2_kxk = nn.Identity()
        self.self_attn = self_attn(mid_chs, stride=stride, feat_size=feat_size)
        self.post_attn = BatchNormAct2d(mid_chs)
        self.conv3_1x1 = ConvNormAct(mid_chs, out_chs, 1, apply_act=False)
        self.drop_path = nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        shortcut = x
        x = self.conv3_1x1(self.post_attn(self.self_attn(self.conv2_kxk(self.conv1_1x1(x)))))
        x = self.drop_path(x)
        if self.shortcut is not None:
            x = x + self.shortcut(shortcut)
        return self.act(x)


def _head_dims(attn: nn.Module, dim_out, num_heads, dim_head, qk_ratio, scale_pos_embed):
    """timm's attention sizes, the same in BottleneckAttn and HaloAttn: q/k heads of ``dim_head`` (or the output
    width times ``qk_ratio``, rounded to 8, per head), v heads of ``dim_out // num_heads``."""
    attn.num_heads = num_heads
    attn.dim_head_qk = dim_head or make_divisible(dim_out * qk_ratio, divisor=8) // num_heads
    attn.dim_head_v = dim_out // num_heads
    attn.dim_out_qk = num_heads * attn.dim_head_qk
    attn.dim_out_v = num_heads * attn.dim_head_v
    attn.scale = attn.dim_head_qk ** -0.5
    attn.scale_pos_embed = scale_pos_embed


# ------------------------------------------------------------------------------------------------ BoTNet attention
def bottleneck_rel_logits_1d(q, rel_k, permute_mask: List[int]):
    """Relative logits along one axis of a (B, H, W, dim) query, as absolute (.., W, W) logits over that axis."""
    B, H, W, dim = q.shape
    x = (q @ rel_k.transpose(-1, -2)).reshape(-1, W, 2 * W - 1)
    x_pad = F.pad(x, [0, 1]).flatten(1)
    x_pad = F.pad(x_pad, [0, W - 1])
    x = x_pad.reshape(-1, W + 1, 2 * W - 1)[:, :W, W - 1:]
    x = x.reshape(B, H, 1, W, W).expand(-1, -1, H, -1, -1)
    return x.permute(permute_mask)


class BottleneckPosEmbedRel(nn.Module):
    def __init__(self, feat_size: Tuple[int, int], dim_head: int, scale: float):
        super().__init__()
        self.height, self.width = feat_size
        self.dim_head, self.scale = dim_head, scale
        self.height_rel = nn.Parameter(torch.randn(self.height * 2 - 1, dim_head) * scale)
        self.width_rel = nn.Parameter(torch.randn(self.width * 2 - 1, dim_head) * scale)

    def forward(self, q):
        B, HW, _ = q.shape
        q = q.reshape(B, self.height, self.width, -1)
        rel_logits_w = bottleneck_rel_logits_1d(q, self.width_rel, permute_mask=(0, 1, 3, 2, 4))
        q = q.transpose(1, 2)
        rel_logits_h = bottleneck_rel_logits_1d(q, self.height_rel, permute_mask=(0, 3, 1, 4, 2))
        return (rel_logits_h + rel_logits_w).reshape(B, HW, HW)


class BottleneckAttn(nn.Module):
    def __init__(self, dim, dim_out=None, feat_size=None, stride=1, num_heads=4, dim_head=None, qk_ratio=1.0,
                 qkv_bias=False, scale_pos_embed=False):
        super().__init__()
        _head_dims(self, dim_out or dim, num_heads, dim_head, qk_ratio, scale_pos_embed)
        self.qkv = nn.Conv2d(dim, self.dim_out_qk * 2 + self.dim_out_v, 1, bias=qkv_bias)
        self.pos_embed = BottleneckPosEmbedRel(feat_size, dim_head=self.dim_head_qk, scale=self.scale)
        self.pool = nn.AvgPool2d(2, 2) if stride == 2 else nn.Identity()

    def forward(self, x):
        B, C, H, W = x.shape
        torch._assert(H == self.pos_embed.height, "")
        torch._assert(W == self.pos_embed.width, "")
        x = self.qkv(x)
        q, k, v = torch.split(x, [self.dim_out_qk, self.dim_out_qk, self.dim_out_v], dim=1)
        q = q.reshape(B * self.num_heads, self.dim_head_qk, -1).transpose(-1, -2)
        k = k.reshape(B * self.num_heads, self.dim_head_qk, -1)
        v = v.reshape(B * self.num_heads, self.dim_head_v, -1).transpose(-1, -2)
        if self.scale_pos_embed:
            attn = (q @ k + self.pos_embed(q)) * self.scale
        else:
            attn = (q @ k) * self.scale + self.pos_embed(q)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(-1, -2).reshape(B, self.dim_out_v, H, W)
        return self.pool(out)


# ------------------------------------------------------------------------------------------------ HaloNet attention
def halo_rel_logits_1d(q, rel_k, permute_mask: List[int]):
    """Relative logits along one axis of a (B, H, W, dim) block query against its (2 * win - 1) window offsets."""
    B, H, W, dim = q.shape
    rel_size = rel_k.shape[0]
    win_size = (rel_size + 1) // 2
    x = (q @ rel_k.transpose(-1, -2)).reshape(-1, W, rel_size)
    x_pad = F.pad(x, [0, 1]).flatten(1)
    x_pad = F.pad(x_pad, [0, rel_size - W])
    x = x_pad.reshape(-1, W + 1, rel_size)[:, :W, win_size - 1:]
    x = x.reshape(B, H, 1, W, win_size).expand(-1, -1, win_size, -1, -1)
    return x.permute(permute_mask)


class HaloPosEmbedRel(nn.Module):
    def __init__(self, block_size, win_size, dim_head, scale):
        super().__init__()
        self.block_size, self.dim_head = block_size, dim_head
        self.height_rel = nn.Parameter(torch.randn(win_size * 2 - 1, dim_head) * scale)
        self.width_rel = nn.Parameter(torch.randn(win_size * 2 - 1, dim_head) * scale)

    def forward(self, q):
        B, BB, HW, _ = q.shape
        q = q.reshape(-1, self.block_size, self.block_size, self.dim_head)
        rel_logits_w = halo_rel_logits_1d(q, self.width_rel, permute_mask=(0, 1, 3, 2, 4))
        q = q.transpose(1, 2)
        rel_logits_h = halo_rel_logits_1d(q, self.height_rel, permute_mask=(0, 3, 1, 4, 2))
        return (rel_logits_h + rel_logits_w).reshape(B, BB, HW, -1)


class HaloAttn(nn.Module):
    def __init__(self, dim, dim_out=None, feat_size=None, stride=1, num_heads=8, dim_head=None, block_size=8,
                 halo_size=3, qk_ratio=1.0, qkv_bias=False, avg_down=False, scale_pos_embed=False):
        super().__init__()
        _head_dims(self, dim_out or dim, num_heads, dim_head, qk_ratio, scale_pos_embed)
        self.block_size = self.block_size_ds = block_size
        self.halo_size = halo_size
        self.win_size = block_size + halo_size * 2
        self.block_stride = 1
        use_avg_pool = False
        if stride > 1:
            use_avg_pool = avg_down or block_size % stride != 0
            self.block_stride = 1 if use_avg_pool else stride
            self.block_size_ds = self.block_size // self.block_stride
        self.q = nn.Conv2d(dim, self.dim_out_qk, 1, stride=self.block_stride, bias=qkv_bias)
        self.kv = nn.Conv2d(dim, self.dim_out_qk + self.dim_out_v, 1, bias=qkv_bias)
        self.pos_embed = HaloPosEmbedRel(self.block_size_ds, self.win_size, self.dim_head_qk, self.scale)
        self.pool = nn.AvgPool2d(2, 2) if use_avg_pool else nn.Identity()

    def forward(self, x):
        B, C, H, W = x.shape
        torch._assert(H % self.block_size == 0, "")
        torch._assert(W % self.block_size == 0, "")
        num_h_blocks, num_w_blocks = H // self.block_size, W // self.block_size
        num_blocks = num_h_blocks * num_w_blocks
        q = self.q(x).reshape(-1, self.dim_head_qk, num_h_blocks, self.block_size_ds, num_w_blocks,
                              self.block_size_ds).permute(0, 1, 3, 5, 2, 4)
        q = q.reshape(B * self.num_heads, self.dim_head_qk, -1, num_blocks).transpose(1, 3)
        kv = F.pad(self.kv(x), [self.halo_size] * 4)
        kv = kv.unfold(2, self.win_size, self.block_size).unfold(3, self.win_size, self.block_size).reshape(
            B * self.num_heads, self.dim_head_qk + self.dim_head_v, num_blocks, -1).permute(0, 2, 3, 1)
        k, v = torch.split(kv, [self.dim_head_qk, self.dim_head_v], dim=-1)
        if self.scale_pos_embed:
            attn = (q @ k.transpose(-1, -2) + self.pos_embed(q)) * self.scale
        else:
            attn = (q @ k.transpose(-1, -2)) * self.scale + self.pos_embed(q)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 3)
        out = out.reshape(-1, self.block_size_ds, self.block_size_ds, num_h_blocks, num_w_blocks)
        out = out.permute(0, 3, 1, 4, 2).contiguous().view(
            B, self.dim_out_v, H // self.block_stride, W // self.block_stride)
        return self.pool(out)


# ------------------------------------------------------------------------------------------------ the net
class ByobNet(nn.Module):
    """``stem`` (stride 4), ``stages`` of (type, depth, width, stride) rows, ``final_conv`` (identity), ``head``.
    ``feat_size`` follows the map through the strides; a strided block gets the size before its stride."""

    def __init__(self, stages, self_attn, stem_chs=16, img_size=64, num_classes=10):
        super().__init__()
        self.stem = Stem(3, (3 * stem_chs // 8, stem_chs // 2, stem_chs))
        feat, prev, built = img_size // 4, stem_chs, []
        for types, width, stride in stages:
            blocks = []
            for j, kind in enumerate(types):
                s = stride if j == 0 else 1
                if kind == "bottle":
                    blocks.append(BottleneckBlock(prev, width, stride=s))
                else:
                    blocks.append(SelfAttnBlock(prev, width, stride=s, feat_size=(feat, feat), self_attn=self_attn))
                prev = width
                feat //= s
            built.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*built)
        self.final_conv = nn.Identity()
        self.head = ClassifierHead(prev, num_classes)

    def forward(self, x):
        return self.head(self.final_conv(self.stages(self.stem(x))))


# botnet26t / halonet26t's layout: bottleneck stages, then bottle + self-attention interleaved, then self-attention
_STAGES = ((("bottle",), 32, 1), (("bottle", "self_attn"), 64, 2), (("self_attn",), 64, 2))


def botnet26t_small():
    """Fixed 64x64 input (the position tables are sized for the map): 8x8 maps, then 8x8 pooled to 4x4."""
    return ByobNet(_STAGES, BottleneckAttn)


def halonet26t_small():
    """Blocks of 4 with halo 1 (6x6 windows); the strided block strides its queries (block 4 -> 2)."""
    def halo(dim, stride, feat_size):
        return HaloAttn(dim, stride=stride, feat_size=feat_size, block_size=4, halo_size=1)
    return ByobNet(_STAGES, halo)


def halonet_avg_down_small():
    """Blocks of 3 with halo 2 (7x7 windows): 3 does not divide by the stride, so the strided block attends at
    full size and average-pools after (``avg_down``); two heads (``num_heads=2``)."""
    def halo(dim, stride, feat_size):
        return HaloAttn(dim, stride=stride, feat_size=feat_size, num_heads=2, block_size=3, halo_size=2)
    return ByobNet(_STAGES, halo, img_size=96)


@torch.no_grad()
def soften_attention(model: nn.Module, factor: float = 0.25):
    """Scale the q/k/v projections of every self-attention layer by ``factor``. At the test suite's random
    (He-uniform) weights the attention logits reach O(100) and the softmax saturates: torch's own float32 gradients
    are then 1.5e-3 from its float64 ones (BoTNet), past the gradient check's bar; at a quarter they are 3e-6."""
    for module in model.modules():
        if isinstance(module, (BottleneckAttn, HaloAttn)):
            for conv in (getattr(module, "qkv", None), getattr(module, "q", None), getattr(module, "kv", None)):
                if conv is not None:
                    conv.weight.mul_(factor)
