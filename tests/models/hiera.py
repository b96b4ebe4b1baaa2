"""Twin of timm's ``Hiera`` (``timm/models/hiera.py``, written here from the reference's structure): a strided conv
patch embedding, tokens *unrolled* so that every q-pooling stride is a leading block of the token axis (q pooling is
``view(B, stride, -1, C).amax(1)``), mask-unit attention (windows cut from the token axis by ``reshape``, the six-dim
``permute(3, 0, 4, 2, 1, 5)`` of the fused qkv) in the first stages and global attention after, ``Reroll`` back to
spatial order for the stage intermediates, a ``ClNormMlpClassifierHead``. ``abs_win_pos_embed`` is Hiera's
absolute-window position embedding: a window table tiled over the mask units plus a global table resized by
antialiased bicubic interpolation. An optional keep-``mask`` over mask units drops tokens by boolean indexing (MAE
pre-training) and returns features. Module and ``state_dict`` names are timm's."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.droppath import DropPath


def _undo_windowing(x, shape, mu_shape):
    """[B, #MUs, *MU, C] -> [B, *shape, C]: mask units back into spatial order."""
    dims = len(shape)
    batch, channels = x.shape[0], x.shape[-1]
    x = x.view(batch, *[s // mu for s, mu in zip(shape, mu_shape)], *mu_shape, channels)
    order = [0] + [axis for pair in zip(range(1, 1 + dims), range(1 + dims, 1 + 2 * dims)) for axis in pair]
    return x.permute(order + [x.ndim - 1]).reshape(batch, *shape, channels)


class Unroll(nn.Module):
    """Token order [B, (Sy, Sx, H // Sy, W // Sx), C], once per stride of the schedule."""

    def __init__(self, input_size, patch_stride, unroll_schedule):
        super().__init__()
        self.size = [i // s for i, s in zip(input_size, patch_stride)]
        self.schedule = unroll_schedule

    def forward(self, x):
        batch, _, channels = x.shape
        size = self.size
        x = x.view(batch, *size, channels)
        for strides in self.schedule:
            size = [i // s for i, s in zip(size, strides)]
            split = [batch] + [d for pair in zip(size, strides) for d in pair] + [channels]
            x = x.view(split)
            rank = len(split)
            x = x.permute([0] + list(range(2, rank - 1, 2)) + list(range(1, rank - 1, 2)) + [rank - 1])
            x = x.flatten(0, len(strides))
            batch *= math.prod(strides)
        return x.reshape(-1, math.prod(self.size), channels)


class Reroll(nn.Module):
    """Undoes the unrolls still pending after a block: [B, N, C] -> [B, H, W, C] (or mask units with a mask)."""

    def __init__(self, input_size, patch_stride, unroll_schedule, stage_ends, q_pool):
        super().__init__()
        self.size = [i // s for i, s in zip(input_size, patch_stride)]
        self.schedule = {}
        size = self.size
        for i in range(stage_ends[-1] + 1):
            self.schedule[i] = unroll_schedule, size
            if i in stage_ends[:q_pool]:
                if len(unroll_schedule) > 0:
                    size = [n // s for n, s in zip(size, unroll_schedule[0])]
                unroll_schedule = unroll_schedule[1:]

    def forward(self, x, block_idx, mask=None):
        schedule, size = self.schedule[block_idx]
        batch, tokens, channels = x.shape
        dims = len(size)
        mu_shape = [1] * dims
        for strides in schedule:
            x = x.view(batch, *strides, tokens // math.prod(strides), *mu_shape, channels)
            rank = x.ndim
            inner = [axis for pair in zip(range(1, 1 + dims), range(2 + dims, rank - 1)) for axis in pair]
            x = x.permute([0, 1 + dims] + inner + [rank - 1])
            mu_shape = [m * s for m, s in zip(mu_shape, strides)]
            x = x.reshape(batch, -1, *mu_shape, channels)
            tokens = x.shape[1]
        x = x.view(batch, tokens, *mu_shape, channels)
        if mask is not None:
            return x
        return _undo_windowing(x, size, mu_shape)


class MaskUnitAttention(nn.Module):
    def __init__(self, dim, dim_out, heads, q_stride=1, window_size=0, use_mask_unit_attn=False):
        super().__init__()
        self.dim, self.dim_out, self.heads = dim, dim_out, heads
        self.q_stride = q_stride
        self.head_dim = dim_out // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)
        self.window_size = window_size
        self.use_mask_unit_attn = use_mask_unit_attn

    def forward(self, x):
        batch, tokens, _ = x.shape
        num_windows = tokens // (self.q_stride * self.window_size) if self.use_mask_unit_attn else 1
        qkv = self.qkv(x).reshape(batch, -1, num_windows, 3, self.heads, self.head_dim).permute(3, 0, 4, 2, 1, 5)
        q, k, v = qkv.unbind(0)
        if self.q_stride > 1:  # the unrolled order makes this a max pool
            q = q.view(batch, self.heads, num_windows, self.q_stride, -1, self.head_dim).amax(dim=3)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 3).reshape(batch, -1, self.dim_out)
        return self.proj(x)


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features, act_layer=nn.GELU):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(0.0)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop2 = nn.Dropout(0.0)

    def forward(self, x):
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


class HieraBlock(nn.Module):
    def __init__(self, dim, dim_out, heads, mlp_ratio=4.0, drop_path=0.0, init_values=None, q_stride=1,
                 window_size=0, use_expand_proj=True, use_mask_unit_attn=False):
        super().__init__()
        self.dim, self.dim_out = dim, dim_out
        self.norm1 = nn.LayerNorm(dim)
        self.do_expand = dim != dim_out
        self.proj = nn.Linear(dim, dim_out) if self.do_expand and use_expand_proj else None
        self.attn = MaskUnitAttention(dim, dim_out, heads, q_stride, window_size, use_mask_unit_attn)
        self.ls1 = LayerScale(dim_out, init_values) if init_values is not None else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim_out)
        self.mlp = Mlp(dim_out, int(dim_out * mlp_ratio))
        self.ls2 = LayerScale(dim_out, init_values) if init_values is not None else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x):
        x_norm = self.norm1(x)
        if self.do_expand:
            stride = self.attn.q_stride
            if self.proj is not None:
                x = self.proj(x_norm)
                x = x.view(x.shape[0], stride, -1, x.shape[-1]).amax(dim=1)
            else:  # channels doubled by a max pool and an average pool side by side
                x = torch.cat([x.view(x.shape[0], stride, -1, x.shape[-1]).amax(dim=1),
                               x.view(x.shape[0], stride, -1, x.shape[-1]).mean(dim=1)], dim=-1)
        x = x + self.drop_path1(self.ls1(self.attn(x_norm)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class PatchEmbed(nn.Module):
    def __init__(self, dim_in, dim_out, kernel, stride, padding):
        super().__init__()
        self.spatial_dims = len(kernel)
        self.proj = nn.Conv2d(dim_in, dim_out, kernel_size=kernel, stride=stride, padding=padding)

    def forward(self, x, mask=None):
        if mask is not None:
            if mask.shape[2:] != x.shape[2:]:
                mask = F.interpolate(mask.float(), size=x.shape[2:])
            x = self.proj(x * mask.to(torch.bool))
        else:
            x = self.proj(x)
        return x.reshape(x.shape[0], x.shape[1], -1).transpose(2, 1)


class ClNormMlpClassifierHead(nn.Module):
    """Average over the tokens (NLC), norm, classifier."""

    def __init__(self, in_features, num_classes, drop_rate=0.0):
        super().__init__()
        self.norm = nn.LayerNorm(in_features)
        self.pre_logits = nn.Identity()
        self.drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return self.fc(self.drop(self.pre_logits(self.norm(x.mean(dim=1)))))


class Hiera(nn.Module):
    def __init__(self, img_size=(32, 32), in_chans=3, embed_dim=8, num_heads=1, num_classes=5,
                 stages=(1, 2, 1, 1), q_pool=2, q_stride=(2, 2), mask_unit_size=(4, 4),
                 mask_unit_attn=(True, True, False, False), use_expand_proj=True, dim_mul=2.0, head_mul=2.0,
                 patch_kernel=(7, 7), patch_stride=(4, 4), patch_padding=(3, 3), mlp_ratio=2.0,
                 drop_path_rate=0.0, init_values=None, abs_win_pos_embed=False, global_pos_size=(4, 4),
                 return_intermediates=False):
        super().__init__()
        self.tokens_spatial_shape = [i // s for i, s in zip(img_size, patch_stride)]
        flat_mu_size, flat_q_stride = math.prod(mask_unit_size), math.prod(q_stride)
        self.q_pool, self.q_stride = q_pool, q_stride
        self.mu_size, self.mask_unit_size = flat_mu_size, mask_unit_size
        self.mask_spatial_shape = [i // s for i, s in zip(self.tokens_spatial_shape, mask_unit_size)]
        self.stage_ends = [sum(stages[:i]) - 1 for i in range(1, len(stages) + 1)]
        self.return_intermediates = return_intermediates
        self.patch_embed = PatchEmbed(in_chans, embed_dim, patch_kernel, patch_stride, patch_padding)
        self.pos_embed_win = None
        if abs_win_pos_embed:  # NCHW tables, tiled and resized before the add
            self.pos_embed = nn.Parameter(torch.zeros(1, embed_dim, *global_pos_size))
            self.pos_embed_win = nn.Parameter(torch.zeros(1, embed_dim, *mask_unit_size))
        else:
            self.pos_embed = nn.Parameter(torch.zeros(1, math.prod(self.tokens_spatial_shape), embed_dim))
        schedule = [q_stride] * len(self.stage_ends[:-1])
        self.unroll = Unroll(img_size, patch_stride, schedule)
        self.reroll = Reroll(img_size, patch_stride, schedule, self.stage_ends, q_pool)
        q_pool_blocks = [x + 1 for x in self.stage_ends[:q_pool]]
        depth = sum(stages)
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]
        self.blocks = nn.ModuleList()
        cur_stage = 0
        for i in range(depth):
            dim_out = embed_dim
            use_mask_unit_attn = mask_unit_attn[cur_stage]  # lags a block: global attention after pooling
            if i - 1 in self.stage_ends:
                dim_out = int(embed_dim * dim_mul)
                num_heads = int(num_heads * head_mul)
                cur_stage += 1
                if i in q_pool_blocks:
                    flat_mu_size //= flat_q_stride
            self.blocks.append(HieraBlock(embed_dim, dim_out, num_heads, mlp_ratio, dpr[i], init_values,
                                          flat_q_stride if i in q_pool_blocks else 1, flat_mu_size,
                                          use_expand_proj, use_mask_unit_attn))
            embed_dim = dim_out
        self.num_features = embed_dim
        self.head = ClNormMlpClassifierHead(embed_dim, num_classes)

    def _pos_embed(self, x):
        if self.pos_embed_win is not None:
            pos_embed_win = self.pos_embed_win.tile(self.mask_spatial_shape)
            pos_embed = F.interpolate(self.pos_embed, size=pos_embed_win.shape[-2:], mode="bicubic", antialias=True)
            pos_embed = (pos_embed + pos_embed_win).flatten(2).transpose(1, 2)
        else:
            pos_embed = self.pos_embed
        return x + pos_embed

    def forward_features(self, x, mask=None):
        patch_mask = None if mask is None else mask.view(x.shape[0], 1, *self.mask_spatial_shape)
        x = self.unroll(self._pos_embed(self.patch_embed(x, mask=patch_mask)))
        if mask is not None:  # drop the removed mask units' tokens
            x = x[mask[..., None].tile(1, self.mu_size, x.shape[2])].view(x.shape[0], -1, x.shape[-1])
        intermediates = []
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if self.return_intermediates and i in self.stage_ends:
                intermediates.append(self.reroll(x, i, mask=mask))
        if self.return_intermediates:
            return x, intermediates
        return x

    def forward(self, x, mask=None):
        out = self.forward_features(x, mask=mask)
        if mask is not None:
            return out
        if self.return_intermediates:
            return self.head(out[0]), out[1]
        return self.head(out)


def hiera_small() -> nn.Module:
    """32x32 inputs: 8x8 tokens, 2x2 mask units of 4x4; two q-pooled stages (mask units 16 -> 4 -> 1 tokens),
    dims 8 -> 64, heads 1 -> 8, layer scale; the four stage intermediates rerolled to NHWC as outputs too."""
    return Hiera(init_values=0.5, return_intermediates=True)


def hiera_abswin_small() -> nn.Module:
    """The absolute-window position embedding: 4x4 window tables tiled 2x2 plus a 5x12 global table resized to 8x8
    by antialiased bicubic interpolation (up in height, down in width); the channel expansion by max and average
    pooling instead of a projection (``use_expand_proj=False``); three q-pooled stages."""
    return Hiera(abs_win_pos_embed=True, global_pos_size=(5, 12), use_expand_proj=False, q_pool=3,
                 stages=(1, 1, 2, 1))
