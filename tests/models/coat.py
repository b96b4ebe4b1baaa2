"""Twin of timm's ``CoaT`` (``timm/models/coat.py``: module structure and ``state_dict`` names ``patch_embed<i>.proj``/
``.norm``, ``cls_token<i>``, ``cpe<i>.proj``, ``crpe<i>.conv_list.<j>``, ``serial_blocks<i>.<j>.norm1``/
``factoratt_crpe.qkv``/``.proj``/``norm2``/``mlp.fc1``/``mlp.fc2`` (and the shared ``cpe``/``crpe`` again under each
block), ``parallel_blocks.<j>.norm1<2-4>``/``factoratt_crpe<2-4>``/``norm2<2-4>``/``mlp<2-4>`` (one MLP under three
names), ``norm2``-``norm4``, ``aggregate``, ``head``), as ``coat_tiny`` (serial and parallel blocks) and
``coat_lite_tiny`` (serial only) build it, narrowed to 16-32 channels on 64x64 images.

Stresses: factorized attention (softmax of the keys over the tokens, ``k^T v`` then ``q @``, no N x N matrix); the
convolutional relative position encoding: v's image tokens back to a map, split by channel into head groups each
convolved depthwise with its own window (3, 5, 7), concatenated, multiplied by q and padded with a zero row for the
class token (``F.pad`` of a token axis); one ConvPosEnc module shared by every block of a stage, and one MLP shared by
three branches of a parallel block (tied weights: several ``state_dict`` names, one tensor); parallel blocks mixing
the three scales by bilinear ``interpolate`` with ``scale_factor`` 2, 4, 0.5, 0.25 and ``recompute_scale_factor=
False``; the class tokens of three scales stacked and mixed by a ``Conv1d``.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.timm_more import Mlp


class LayerNorm(nn.LayerNorm):
    """timm ``layers/norm.py::LayerNorm``: eps 1e-6."""

    def __init__(self, num_channels, eps=1e-6, affine=True):
        super().__init__(num_channels, eps=eps, elementwise_affine=affine)


class PatchEmbed(nn.Module):
    """timm ``PatchEmbed`` at a fixed image size: a patch-size conv, tokens flattened, LayerNorm."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.img_size = tuple(img_size)
        self.patch_size = (patch_size, patch_size)
        self.grid_size = tuple(s // patch_size for s in img_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x):
        torch._assert(tuple(x.shape[2:]) == self.img_size, "input size must match the model's")
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class ConvRelPosEnc(nn.Module):
    """q times a depthwise convolution of v's image tokens, heads split into groups by window size."""

    def __init__(self, head_chs: int, num_heads: int, window: dict):
        super().__init__()
        self.window = window
        self.conv_list = nn.ModuleList()
        self.head_splits = []
        for cur_window, cur_head_split in window.items():
            chs = cur_head_split * head_chs
            self.conv_list.append(nn.Conv2d(chs, chs, kernel_size=(cur_window, cur_window),
                                            padding=(cur_window // 2, cur_window // 2), groups=chs))
            self.head_splits.append(cur_head_split)
        self.channel_splits = [x * head_chs for x in self.head_splits]

    def forward(self, q, v, size: Tuple[int, int]):
        B, num_heads, N, C = q.shape
        H, W = size
        torch._assert(N == 1 + H * W, "")
        q_img = q[:, :, 1:, :]
        v_img = v[:, :, 1:, :].transpose(-1, -2).reshape(B, num_heads * C, H, W)
        v_img_list = torch.split(v_img, self.channel_splits, dim=1)
        conv_v_img = torch.cat([conv(v_img_list[i]) for i, conv in enumerate(self.conv_list)], dim=1)
        conv_v_img = conv_v_img.reshape(B, num_heads, C, H * W).transpose(-1, -2)
        return F.pad(q_img * conv_v_img, (0, 0, 1, 0, 0, 0))


class FactorAttnConvRelPosEnc(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, shared_crpe=None):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)
        self.crpe = shared_crpe

    def forward(self, x, size: Tuple[int, int]):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        factor_att = q @ (k.softmax(dim=2).transpose(-1, -2) @ v)
        x = self.scale * factor_att + self.crpe(q, v, size=size)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(B, N, C)))


class ConvPosEnc(nn.Module):
    def __init__(self, dim: int, k: int = 3):
        super().__init__()
        self.proj = nn.Conv2d(dim, dim, k, 1, k // 2, groups=dim)

    def forward(self, x, size: Tuple[int, int]):
        B, N, C = x.shape
        H, W = size
        torch._assert(N == 1 + H * W, "")
        cls_token, img_tokens = x[:, :1], x[:, 1:]
        feat = img_tokens.transpose(1, 2).view(B, C, H, W)
        x = (self.proj(feat) + feat).flatten(2).transpose(1, 2)
        return torch.cat((cls_token, x), dim=1)


class SerialBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=False, norm_layer=LayerNorm, shared_cpe=None,
                 shared_crpe=None):
        super().__init__()
        self.cpe = shared_cpe
        self.norm1 = norm_layer(dim)
        self.factoratt_crpe = FactorAttnConvRelPosEnc(dim, num_heads=num_heads, qkv_bias=qkv_bias,
                                                      shared_crpe=shared_crpe)
        self.drop_path = nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x, size: Tuple[int, int]):
        x = self.cpe(x, size)
        x = x + self.drop_path(self.factoratt_crpe(self.norm1(x), size))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ParallelBlock(nn.Module):
    def __init__(self, dims, num_heads, mlp_ratios=None, qkv_bias=False, norm_layer=LayerNorm, shared_crpes=None):
        super().__init__()
        for i in (2, 3, 4):
            setattr(self, f"norm1{i}", norm_layer(dims[i - 1]))
            setattr(self, f"factoratt_crpe{i}", FactorAttnConvRelPosEnc(
                dims[i - 1], num_heads=num_heads, qkv_bias=qkv_bias, shared_crpe=shared_crpes[i - 1]))
        self.drop_path = nn.Identity()
        for i in (2, 3, 4):
            setattr(self, f"norm2{i}", norm_layer(dims[i - 1]))
        self.mlp2 = self.mlp3 = self.mlp4 = Mlp(dims[1], int(dims[1] * mlp_ratios[1]))

    def upsample(self, x, factor: float, size: Tuple[int, int]):
        return self.interpolate(x, scale_factor=factor, size=size)

    def downsample(self, x, factor: float, size: Tuple[int, int]):
        return self.interpolate(x, scale_factor=1.0 / factor, size=size)

    def interpolate(self, x, scale_factor: float, size: Tuple[int, int]):
        B, N, C = x.shape
        H, W = size
        torch._assert(N == 1 + H * W, "")
        cls_token, img_tokens = x[:, :1, :], x[:, 1:, :]
        img_tokens = img_tokens.transpose(1, 2).reshape(B, C, H, W)
        img_tokens = F.interpolate(img_tokens, scale_factor=scale_factor, recompute_scale_factor=False,
                                   mode="bilinear", align_corners=False)
        img_tokens = img_tokens.reshape(B, C, -1).transpose(1, 2)
        return torch.cat((cls_token, img_tokens), dim=1)

    def forward(self, x1, x2, x3, x4, sizes: List[Tuple[int, int]]):
        _, S2, S3, S4 = sizes
        cur2 = self.factoratt_crpe2(self.norm12(x2), size=S2)
        cur3 = self.factoratt_crpe3(self.norm13(x3), size=S3)
        cur4 = self.factoratt_crpe4(self.norm14(x4), size=S4)
        upsample3_2 = self.upsample(cur3, factor=2.0, size=S3)
        upsample4_3 = self.upsample(cur4, factor=2.0, size=S4)
        upsample4_2 = self.upsample(cur4, factor=4.0, size=S4)
        downsample2_3 = self.downsample(cur2, factor=2.0, size=S2)
        downsample3_4 = self.downsample(cur3, factor=2.0, size=S3)
        downsample2_4 = self.downsample(cur2, factor=4.0, size=S2)
        x2 = x2 + self.drop_path(cur2 + upsample3_2 + upsample4_2)
        x3 = x3 + self.drop_path(cur3 + upsample4_3 + downsample2_3)
        x4 = x4 + self.drop_path(cur4 + downsample3_4 + downsample2_4)
        x2 = x2 + self.drop_path(self.mlp2(self.norm22(x2)))
        x3 = x3 + self.drop_path(self.mlp3(self.norm23(x3)))
        x4 = x4 + self.drop_path(self.mlp4(self.norm24(x4)))
        return x1, x2, x3, x4


def insert_cls(x, cls_token):
    return torch.cat((cls_token.expand(x.shape[0], -1, -1), x), dim=1)


def remove_cls(x):
    return x[:, 1:, :]


class CoaT(nn.Module):
    def __init__(self, img_size=224, patch_size=16, in_chans=3, num_classes=1000, embed_dims=(64, 128, 320, 512),
                 serial_depths=(3, 4, 6, 3), parallel_depth=0, num_heads=8, mlp_ratios=(4, 4, 4, 4), qkv_bias=True,
                 crpe_window=None, global_pool="token"):
        super().__init__()
        crpe_window = crpe_window or {3: 2, 5: 3, 7: 3}
        self.embed_dims = embed_dims
        self.num_features = embed_dims[-1]
        self.global_pool = global_pool
        img_size = (img_size, img_size)
        sizes = (img_size, [x // 4 for x in img_size], [x // 8 for x in img_size], [x // 16 for x in img_size])
        chans = (in_chans,) + tuple(embed_dims[:3])
        for i in range(4):
            setattr(self, f"patch_embed{i + 1}", PatchEmbed(sizes[i], patch_size if i == 0 else 2, chans[i],
                                                            embed_dims[i]))
        for i in range(4):
            setattr(self, f"cls_token{i + 1}", nn.Parameter(torch.zeros(1, 1, embed_dims[i])))
        for i in range(4):
            setattr(self, f"cpe{i + 1}", ConvPosEnc(embed_dims[i], k=3))
        for i in range(4):
            setattr(self, f"crpe{i + 1}", ConvRelPosEnc(embed_dims[i] // num_heads, num_heads, crpe_window))
        for i in range(4):
            setattr(self, f"serial_blocks{i + 1}", nn.ModuleList([
                SerialBlock(embed_dims[i], num_heads, mlp_ratio=mlp_ratios[i], qkv_bias=qkv_bias,
                            shared_cpe=getattr(self, f"cpe{i + 1}"), shared_crpe=getattr(self, f"crpe{i + 1}"))
                for _ in range(serial_depths[i])]))
        self.parallel_depth = parallel_depth
        self.parallel_blocks = None
        if parallel_depth > 0:
            crpes = (self.crpe1, self.crpe2, self.crpe3, self.crpe4)
            self.parallel_blocks = nn.ModuleList([
                ParallelBlock(embed_dims, num_heads, mlp_ratios=mlp_ratios, qkv_bias=qkv_bias, shared_crpes=crpes)
                for _ in range(parallel_depth)])
            self.norm2 = LayerNorm(embed_dims[1])
            self.norm3 = LayerNorm(embed_dims[2])
        else:
            self.norm2 = self.norm3 = None
        self.norm4 = LayerNorm(embed_dims[3])
        self.aggregate = nn.Conv1d(3, 1, kernel_size=1) if parallel_depth > 0 else None
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(self.num_features, num_classes)

    def _stage(self, i, x, B):
        embed = getattr(self, f"patch_embed{i}")
        x = insert_cls(embed(x), getattr(self, f"cls_token{i}"))
        H, W = embed.grid_size
        for blk in getattr(self, f"serial_blocks{i}"):
            x = blk(x, size=(H, W))
        return x, (H, W), remove_cls(x).reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous()

    def forward_features(self, x0):
        B = x0.shape[0]
        x1, S1, x1_nocls = self._stage(1, x0, B)
        x2, S2, x2_nocls = self._stage(2, x1_nocls, B)
        x3, S3, x3_nocls = self._stage(3, x2_nocls, B)
        x4, S4, _ = self._stage(4, x3_nocls, B)
        if self.parallel_blocks is None:
            return self.norm4(x4)
        for blk in self.parallel_blocks:
            x2, x3, x4 = self.cpe2(x2, S2), self.cpe3(x3, S3), self.cpe4(x4, S4)
            x1, x2, x3, x4 = blk(x1, x2, x3, x4, sizes=[S1, S2, S3, S4])
        return [self.norm2(x2), self.norm3(x3), self.norm4(x4)]

    def forward_head(self, x_feat):
        if isinstance(x_feat, list):
            if self.global_pool == "avg":
                x = torch.cat([xl[:, 1:].mean(dim=1, keepdim=True) for xl in x_feat], dim=1)
            else:
                x = torch.stack([xl[:, 0] for xl in x_feat], dim=1)
            x = self.aggregate(x).squeeze(dim=1)
        else:
            x = x_feat[:, 1:].mean(dim=1) if self.global_pool == "avg" else x_feat[:, 0]
        return self.head(self.head_drop(x))

    def forward(self, x):
        return self.forward_head(self.forward_features(x))


def coat_tiny_small():
    """``coat_tiny``'s layout (equal widths from stage 2, serial then parallel blocks, class-token aggregation)."""
    return CoaT(img_size=64, patch_size=4, embed_dims=(16, 32, 32, 32), serial_depths=(1, 1, 1, 1),
                parallel_depth=2, num_classes=10)


def coat_lite_small():
    """``coat_lite_tiny``'s layout (serial blocks only, MLP ratios 8, 8, 4, 4), average-pooled tokens."""
    return CoaT(img_size=64, patch_size=4, embed_dims=(16, 32, 40, 48), serial_depths=(2, 1, 1, 1),
                mlp_ratios=(8, 8, 4, 4), num_classes=10, global_pool="avg")
