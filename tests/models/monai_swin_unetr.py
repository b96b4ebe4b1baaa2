"""Twin of MONAI's ``SwinUNETR`` (``monai.networks.nets.swin_unetr``) with MONAI's module structure and
``state_dict`` names: a 3-D Swin encoder (``swinViT``: ``patch_embed``, ``layers1..4`` each a ``BasicLayer`` of
shifted-window blocks and a patch merging), ``UnetrBasicBlock`` encoders on the input and every stage, and
``UnetrUpBlock`` decoders. Windows of 7 (a dim no larger than the window is one window, unshifted: MONAI's
``get_window_size``), the volume padded up to whole windows and cropped back, the shifted blocks' mask built from
the padded sizes, relative position bias gathered through a persistent ``relative_position_index``. Patch merging
is MONAI's ``PatchMergingV2`` (``downsample="mergingv2"``: the eight strided sub-volumes in ``itertools.product``
order).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.monai_blocks import UnetOutBlock, UnetUpBlock
from tests.models.monai_unetr import MLPBlock, UnetrBasicBlock


def get_window_size(x_size, window_size, shift_size):
    window, shift = list(window_size), list(shift_size)
    for i, size in enumerate(x_size):
        if size <= window_size[i]:
            window[i], shift[i] = size, 0
    return tuple(window), tuple(shift)


def window_partition(x, ws):
    b, d, h, w, c = x.shape
    x = x.view(b, d // ws[0], ws[0], h // ws[1], ws[1], w // ws[2], ws[2], c)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).contiguous().view(-1, ws[0] * ws[1] * ws[2], c)


def window_reverse(windows, ws, dims):
    b, d, h, w = dims
    x = windows.view(b, d // ws[0], h // ws[1], w // ws[2], ws[0], ws[1], ws[2], -1)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).contiguous().view(b, d, h, w, -1)


def compute_mask(dims, ws, shift):
    """-100 between tokens of one window that came from different regions of the rolled volume, else 0."""
    img_mask = torch.zeros((1, *dims, 1))
    regions = [(slice(-w), slice(-w, -s), slice(-s, None)) for w, s in zip(ws, shift)]
    for cnt, (d, h, w) in enumerate(itertools.product(*regions)):
        img_mask[:, d, h, w, :] = cnt
    windows = window_partition(img_mask, ws).squeeze(-1)
    mask = windows.unsqueeze(1) - windows.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)


class WindowAttention(nn.Module):
    def __init__(self, dim, num_heads, window_size, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        w0, w1, w2 = window_size
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * w0 - 1) * (2 * w1 - 1) * (2 * w2 - 1),
                                                                     num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(w0), torch.arange(w1), torch.arange(w2), indexing="ij"))
        flat = torch.flatten(coords, 1)
        rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += w0 - 1
        rel[:, :, 1] += w1 - 1
        rel[:, :, 2] += w2 - 1
        rel[:, :, 0] *= (2 * w1 - 1) * (2 * w2 - 1)
        rel[:, :, 1] *= 2 * w2 - 1
        self.register_buffer("relative_position_index", rel.sum(-1))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, mask):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        index = self.relative_position_index.clone()[:n, :n].reshape(-1)
        bias = self.relative_position_bias_table[index].reshape(n, n, -1).permute(2, 0, 1).contiguous()
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(b // nw, nw, self.num_heads, n, n) + mask.to(attn.dtype).unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, n, n)
        attn = self.attn_drop(self.softmax(attn)).to(v.dtype)
        x = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(x))


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, window_size, shift_size, mlp_ratio=4.0):
        super().__init__()
        self.window_size, self.shift_size = window_size, shift_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, num_heads, window_size)
        self.drop_path = nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLPBlock(dim, int(dim * mlp_ratio))

    def forward_part1(self, x, mask_matrix):
        x = self.norm1(x)
        b, d, h, w, c = x.shape
        ws, shift = get_window_size((d, h, w), self.window_size, self.shift_size)
        pad_d1, pad_b, pad_r = ((ws[0] - d % ws[0]) % ws[0], (ws[1] - h % ws[1]) % ws[1],
                                (ws[2] - w % ws[2]) % ws[2])
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b, 0, pad_d1))
        _, dp, hp, wp, _ = x.shape
        if any(s > 0 for s in shift):
            shifted, mask = torch.roll(x, shifts=tuple(-s for s in shift), dims=(1, 2, 3)), mask_matrix
        else:
            shifted, mask = x, None
        windows = self.attn(window_partition(shifted, ws), mask=mask).view(-1, *(ws + (c,)))
        shifted = window_reverse(windows, ws, [b, dp, hp, wp])
        x = torch.roll(shifted, shifts=shift, dims=(1, 2, 3)) if any(s > 0 for s in shift) else shifted
        if pad_d1 > 0 or pad_r > 0 or pad_b > 0:
            x = x[:, :d, :h, :w, :].contiguous()
        return x

    def forward(self, x, mask_matrix):
        x = x + self.drop_path(self.forward_part1(x, mask_matrix))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMergingV2(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.reduction = nn.Linear(8 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(8 * dim)

    def forward(self, x):
        b, d, h, w, c = x.shape
        if d % 2 or h % 2 or w % 2:
            x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2, 0, d % 2))
        x = torch.cat([x[:, i::2, j::2, k::2, :] for i, j, k in itertools.product(range(2), repeat=3)], -1)
        return self.reduction(self.norm(x))


class BasicLayer(nn.Module):
    def __init__(self, dim, depth, num_heads, window_size):
        super().__init__()
        self.window_size = window_size
        self.shift_size = tuple(i // 2 for i in window_size)
        self.no_shift = tuple(0 for _ in window_size)
        self.blocks = nn.ModuleList(
            SwinTransformerBlock(dim, num_heads, window_size, self.no_shift if i % 2 == 0 else self.shift_size)
            for i in range(depth))
        self.downsample = PatchMergingV2(dim)

    def forward(self, x):
        b, c, d, h, w = x.shape
        ws, shift = get_window_size((d, h, w), self.window_size, self.shift_size)
        x = x.permute(0, 2, 3, 4, 1)
        dims = [-(-size // win) * win for size, win in zip((d, h, w), ws)]
        attn_mask = compute_mask(dims, ws, shift)
        for blk in self.blocks:
            x = blk(x, attn_mask)
        x = self.downsample(x.view(b, d, h, w, -1))
        return x.permute(0, 4, 1, 2, 3)


class PatchEmbed(nn.Module):
    def __init__(self, in_chans, embed_dim, patch_size=2):
        super().__init__()
        self.proj = nn.Conv3d(in_chans, embed_dim, patch_size, patch_size)

    def forward(self, x):
        return self.proj(x)


class SwinTransformer(nn.Module):
    def __init__(self, in_chans, embed_dim, window_size, depths, num_heads):
        super().__init__()
        self.patch_embed = PatchEmbed(in_chans, embed_dim)
        self.pos_drop = nn.Dropout(0.0)
        for i, (depth, heads) in enumerate(zip(depths, num_heads)):
            setattr(self, f"layers{i + 1}", nn.ModuleList([BasicLayer(embed_dim * 2 ** i, depth, heads, window_size)]))

    @staticmethod
    def proj_out(x):
        ch = x.shape[1]
        return F.layer_norm(x.permute(0, 2, 3, 4, 1), [ch]).permute(0, 4, 1, 2, 3)

    def forward(self, x):
        x0 = self.pos_drop(self.patch_embed(x))
        x1 = self.layers1[0](x0.contiguous())
        x2 = self.layers2[0](x1.contiguous())
        x3 = self.layers3[0](x2.contiguous())
        x4 = self.layers4[0](x3.contiguous())
        return [self.proj_out(t) for t in (x0, x1, x2, x3, x4)]


class SwinUNETR(nn.Module):
    """MONAI ``SwinUNETR(in_channels, out_channels, feature_size, depths, num_heads, downsample="mergingv2")``.
    D, H, W must be multiples of 32 (MONAI checks), and the bottom (a 32nd) must hold two voxels or more for its
    instance norms."""

    def __init__(self, in_channels, out_channels, depths=(2, 2, 2, 2), num_heads=(3, 6, 12, 24), feature_size=24,
                 norm_name="instance"):
        super().__init__()
        f = feature_size
        self.swinViT = SwinTransformer(in_channels, f, (7, 7, 7), depths, num_heads)
        self.encoder1 = UnetrBasicBlock(in_channels, f, 3, 1, norm_name, True)
        self.encoder2 = UnetrBasicBlock(f, f, 3, 1, norm_name, True)
        self.encoder3 = UnetrBasicBlock(2 * f, 2 * f, 3, 1, norm_name, True)
        self.encoder4 = UnetrBasicBlock(4 * f, 4 * f, 3, 1, norm_name, True)
        self.encoder10 = UnetrBasicBlock(16 * f, 16 * f, 3, 1, norm_name, True)
        self.decoder5 = UnetUpBlock(16 * f, 8 * f, 3, 2, norm_name, res_block=True)
        self.decoder4 = UnetUpBlock(8 * f, 4 * f, 3, 2, norm_name, res_block=True)
        self.decoder3 = UnetUpBlock(4 * f, 2 * f, 3, 2, norm_name, res_block=True)
        self.decoder2 = UnetUpBlock(2 * f, f, 3, 2, norm_name, res_block=True)
        self.decoder1 = UnetUpBlock(f, f, 3, 2, norm_name, res_block=True)
        self.out = UnetOutBlock(f, out_channels)

    def forward(self, x_in):
        if any(s % 32 for s in x_in.shape[2:]):
            raise ValueError(f"spatial dimensions {list(x_in.shape[2:])} of input image must be divisible by 32")
        hidden = self.swinViT(x_in)
        enc0 = self.encoder1(x_in)
        enc1 = self.encoder2(hidden[0])
        enc2 = self.encoder3(hidden[1])
        enc3 = self.encoder4(hidden[2])
        dec4 = self.encoder10(hidden[4])
        dec3 = self.decoder5(dec4, hidden[3])
        dec2 = self.decoder4(dec3, enc3)
        dec1 = self.decoder3(dec2, enc2)
        dec0 = self.decoder2(dec1, enc1)
        return self.out(self.decoder1(dec0, enc0))


def swin_unetr_small():
    return SwinUNETR(2, 3, depths=(2, 2, 2, 2), num_heads=(3, 3, 3, 3), feature_size=12)
