"""Torch twin of torchvision's Swin Transformer v1 and v2 (torchvision.models.swin_transformer) and their cases.

Module structure, ``state_dict`` names (buffers included) and builders are torchvision's; the builders also take the
architecture arguments (``embed_dim``, ``depths``, ``num_heads``, ``window_size``, ``stochastic_depth_prob``) so the
tests can build reduced models.
"""

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from . import Case
from ._mobile_ops import StochasticDepth
from ._randomize import randomize_constants
from .convnext import Permute
from .vit import MLP


def _patch_merging_pad(x):
    H, W, _ = x.shape[-3:]
    x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
    x0 = x[..., 0::2, 0::2, :]
    x1 = x[..., 1::2, 0::2, :]
    x2 = x[..., 0::2, 1::2, :]
    x3 = x[..., 1::2, 1::2, :]
    return torch.cat([x0, x1, x2, x3], -1)


def _get_relative_position_bias(relative_position_bias_table, relative_position_index, window_size):
    N = window_size[0] * window_size[1]
    relative_position_bias = relative_position_bias_table[relative_position_index]
    relative_position_bias = relative_position_bias.view(N, N, -1)
    return relative_position_bias.permute(2, 0, 1).contiguous().unsqueeze(0)


class PatchMerging(nn.Module):
    def __init__(self, dim, norm_layer=nn.LayerNorm):
        super().__init__()
        self.dim = dim
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = norm_layer(4 * dim)

    def forward(self, x):
        return self.reduction(self.norm(_patch_merging_pad(x)))


class PatchMergingV2(nn.Module):
    def __init__(self, dim, norm_layer=nn.LayerNorm):
        super().__init__()
        self.dim = dim
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = norm_layer(2 * dim)

    def forward(self, x):
        return self.norm(self.reduction(_patch_merging_pad(x)))


def region_mask(ids):
    """Window token region ids (num_windows, N) -> the shift mask: -100 between tokens of different regions."""
    mask = ids.unsqueeze(1) - ids.unsqueeze(2)
    return mask.masked_fill(mask != 0, float(-100.0)).masked_fill(mask == 0, float(0.0))


def masked_windows(attn, mask, num_windows, num_heads):
    """Window attention logits (B * num_windows, heads, N, N) plus each window's ``mask`` (num_windows, N, N)."""
    n = attn.size(-1)
    attn = attn.view(attn.size(0) // num_windows, num_windows, num_heads, n, n)
    attn = attn + mask.unsqueeze(1).unsqueeze(0)
    return attn.view(-1, num_heads, n, n)


def attend_and_project(attn, v, C, proj_weight, proj_bias, attention_dropout, dropout, training):
    """Softmax over the logits, the values' weighted sum back to (windows, N, C), the output projection."""
    attn = F.softmax(attn, dim=-1)
    attn = F.dropout(attn, p=attention_dropout, training=training)
    x = attn.matmul(v).transpose(1, 2).reshape(v.size(0), v.size(2), C)
    x = F.linear(x, proj_weight, proj_bias)
    return F.dropout(x, p=dropout, training=training)


def shifted_window_attention(input, qkv_weight, proj_weight, relative_position_bias, window_size, num_heads,
                             shift_size, attention_dropout=0.0, dropout=0.0, qkv_bias=None, proj_bias=None,
                             logit_scale=None, training=True, mask_out_of_place=False):
    """torchvision's. ``mask_out_of_place`` (Porter's, for the converter tests' ``SwinSmall``) builds the same
    attention mask from index comparisons instead of slice assignments (``attn_mask[h0:h1, w0:w1] = count``),
    which Porter refuses (writes through views)."""
    B, H, W, C = input.shape
    pad_r = (window_size[1] - W % window_size[1]) % window_size[1]
    pad_b = (window_size[0] - H % window_size[0]) % window_size[0]
    x = F.pad(input, (0, 0, 0, pad_r, 0, pad_b))
    _, pad_H, pad_W, _ = x.shape

    shift_size = shift_size.copy()
    if window_size[0] >= pad_H:
        shift_size[0] = 0
    if window_size[1] >= pad_W:
        shift_size[1] = 0

    if sum(shift_size) > 0:
        x = torch.roll(x, shifts=(-shift_size[0], -shift_size[1]), dims=(1, 2))

    num_windows = (pad_H // window_size[0]) * (pad_W // window_size[1])
    x = x.view(B, pad_H // window_size[0], window_size[0], pad_W // window_size[1], window_size[1], C)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(B * num_windows, window_size[0] * window_size[1], C)

    if logit_scale is not None and qkv_bias is not None:
        qkv_bias = qkv_bias.clone()
        length = qkv_bias.numel() // 3
        qkv_bias[length: 2 * length].zero_()
    qkv = F.linear(x, qkv_weight, qkv_bias)
    qkv = qkv.reshape(x.size(0), x.size(1), 3, num_heads, C // num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if logit_scale is not None:
        attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        logit_scale = torch.clamp(logit_scale, max=math.log(100.0)).exp()
        attn = attn * logit_scale
    else:
        q = q * (C // num_heads) ** -0.5
        attn = q.matmul(k.transpose(-2, -1))
    attn = attn + relative_position_bias

    if sum(shift_size) > 0 and mask_out_of_place:
        # region ids of the three row and column bands (0, -ws), (-ws, -shift), (-shift, None), as below
        rows = torch.arange(pad_H, device=x.device)
        cols = torch.arange(pad_W, device=x.device)
        row_id = (rows >= pad_H - window_size[0]).to(x.dtype) + (rows >= pad_H - shift_size[0]).to(x.dtype)
        col_id = (cols >= pad_W - window_size[1]).to(x.dtype) + (cols >= pad_W - shift_size[1]).to(x.dtype)
        attn_mask = row_id[:, None] * 3 + col_id[None, :]
    elif sum(shift_size) > 0:
        attn_mask = x.new_zeros((pad_H, pad_W))
        h_slices = ((0, -window_size[0]), (-window_size[0], -shift_size[0]), (-shift_size[0], None))
        w_slices = ((0, -window_size[1]), (-window_size[1], -shift_size[1]), (-shift_size[1], None))
        count = 0
        for h in h_slices:
            for w in w_slices:
                attn_mask[h[0]: h[1], w[0]: w[1]] = count
                count += 1
    if sum(shift_size) > 0:
        attn_mask = attn_mask.view(pad_H // window_size[0], window_size[0], pad_W // window_size[1], window_size[1])
        attn_mask = attn_mask.permute(0, 2, 1, 3).reshape(num_windows, window_size[0] * window_size[1])
        attn = masked_windows(attn, region_mask(attn_mask), num_windows, num_heads)
    x = attend_and_project(attn, v, C, proj_weight, proj_bias, attention_dropout, dropout, training)

    x = x.view(B, pad_H // window_size[0], pad_W // window_size[1], window_size[0], window_size[1], C)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(B, pad_H, pad_W, C)

    if sum(shift_size) > 0:
        x = torch.roll(x, shifts=(shift_size[0], shift_size[1]), dims=(1, 2))

    return x[:, :H, :W, :].contiguous()


class ShiftedWindowAttention(nn.Module):
    def __init__(self, dim, window_size, shift_size, num_heads, qkv_bias=True, proj_bias=True,
                 attention_dropout=0.0, dropout=0.0, mask_out_of_place=False):
        super().__init__()
        if len(window_size) != 2 or len(shift_size) != 2:
            raise ValueError("window_size and shift_size must be of length 2")
        self.mask_out_of_place = mask_out_of_place  # Porter's (see shifted_window_attention)
        self.window_size = window_size
        self.shift_size = shift_size
        self.num_heads = num_heads
        self.attention_dropout = attention_dropout
        self.dropout = dropout
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.define_relative_position_bias_table()
        self.define_relative_position_index()

    def define_relative_position_bias_table(self):
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * self.window_size[0] - 1) * (2 * self.window_size[1] - 1), self.num_heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def define_relative_position_index(self):
        coords_h = torch.arange(self.window_size[0])
        coords_w = torch.arange(self.window_size[1])
        coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"))
        coords_flatten = torch.flatten(coords, 1)
        relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
        relative_coords = relative_coords.permute(1, 2, 0).contiguous()
        relative_coords[:, :, 0] += self.window_size[0] - 1
        relative_coords[:, :, 1] += self.window_size[1] - 1
        relative_coords[:, :, 0] *= 2 * self.window_size[1] - 1
        relative_position_index = relative_coords.sum(-1).flatten()
        self.register_buffer("relative_position_index", relative_position_index)

    def get_relative_position_bias(self):
        return _get_relative_position_bias(self.relative_position_bias_table, self.relative_position_index,
                                           self.window_size)

    def forward(self, x):
        return shifted_window_attention(x, self.qkv.weight, self.proj.weight, self.get_relative_position_bias(),
                                        self.window_size, self.num_heads, shift_size=self.shift_size,
                                        attention_dropout=self.attention_dropout, dropout=self.dropout,
                                        qkv_bias=self.qkv.bias, proj_bias=self.proj.bias, training=self.training,
                                        mask_out_of_place=self.mask_out_of_place)


class ShiftedWindowAttentionV2(ShiftedWindowAttention):
    def __init__(self, dim, window_size, shift_size, num_heads, qkv_bias=True, proj_bias=True,
                 attention_dropout=0.0, dropout=0.0):
        super().__init__(dim, window_size, shift_size, num_heads, qkv_bias=qkv_bias, proj_bias=proj_bias,
                         attention_dropout=attention_dropout, dropout=dropout)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((num_heads, 1, 1))))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True),
                                     nn.Linear(512, num_heads, bias=False))
        if qkv_bias:
            length = self.qkv.bias.numel() // 3
            self.qkv.bias[length: 2 * length].data.zero_()

    def define_relative_position_bias_table(self):
        relative_coords_h = torch.arange(-(self.window_size[0] - 1), self.window_size[0], dtype=torch.float32)
        relative_coords_w = torch.arange(-(self.window_size[1] - 1), self.window_size[1], dtype=torch.float32)
        relative_coords_table = torch.stack(torch.meshgrid([relative_coords_h, relative_coords_w], indexing="ij"))
        relative_coords_table = relative_coords_table.permute(1, 2, 0).contiguous().unsqueeze(0)
        relative_coords_table[:, :, :, 0] /= self.window_size[0] - 1
        relative_coords_table[:, :, :, 1] /= self.window_size[1] - 1
        relative_coords_table *= 8
        relative_coords_table = (torch.sign(relative_coords_table)
                                 * torch.log2(torch.abs(relative_coords_table) + 1.0) / 3.0)
        self.register_buffer("relative_coords_table", relative_coords_table)

    def get_relative_position_bias(self):
        relative_position_bias = _get_relative_position_bias(
            self.cpb_mlp(self.relative_coords_table).view(-1, self.num_heads), self.relative_position_index,
            self.window_size)
        return 16 * torch.sigmoid(relative_position_bias)

    def forward(self, x):
        return shifted_window_attention(x, self.qkv.weight, self.proj.weight, self.get_relative_position_bias(),
                                        self.window_size, self.num_heads, shift_size=self.shift_size,
                                        attention_dropout=self.attention_dropout, dropout=self.dropout,
                                        qkv_bias=self.qkv.bias, proj_bias=self.proj.bias,
                                        logit_scale=self.logit_scale, training=self.training)


class SwinTransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, window_size, shift_size, mlp_ratio=4.0, dropout=0.0, attention_dropout=0.0,
                 stochastic_depth_prob=0.0, norm_layer=nn.LayerNorm, attn_layer=ShiftedWindowAttention):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = attn_layer(dim, window_size, shift_size, num_heads, attention_dropout=attention_dropout,
                               dropout=dropout)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.norm2 = norm_layer(dim)
        self.mlp = MLP(dim, [int(dim * mlp_ratio), dim], activation_layer=nn.GELU, dropout=dropout)

    def forward(self, x):
        x = x + self.stochastic_depth(self.attn(self.norm1(x)))
        return x + self.stochastic_depth(self.mlp(self.norm2(x)))


class SwinTransformerBlockV2(SwinTransformerBlock):
    def __init__(self, dim, num_heads, window_size, shift_size, mlp_ratio=4.0, dropout=0.0, attention_dropout=0.0,
                 stochastic_depth_prob=0.0, norm_layer=nn.LayerNorm, attn_layer=ShiftedWindowAttentionV2):
        super().__init__(dim, num_heads, window_size, shift_size, mlp_ratio=mlp_ratio, dropout=dropout,
                         attention_dropout=attention_dropout, stochastic_depth_prob=stochastic_depth_prob,
                         norm_layer=norm_layer, attn_layer=attn_layer)

    def forward(self, x):
        x = x + self.stochastic_depth(self.norm1(self.attn(x)))
        return x + self.stochastic_depth(self.norm2(self.mlp(x)))


class SwinTransformer(nn.Module):
    def __init__(self, patch_size, embed_dim, depths, num_heads, window_size, mlp_ratio=4.0, dropout=0.0,
                 attention_dropout=0.0, stochastic_depth_prob=0.1, num_classes=1000, norm_layer=None, block=None,
                 downsample_layer=PatchMerging):
        super().__init__()
        if block is None:
            block = SwinTransformerBlock
        if norm_layer is None:
            norm_layer = partial(nn.LayerNorm, eps=1e-5)
        layers = [nn.Sequential(nn.Conv2d(3, embed_dim, kernel_size=(patch_size[0], patch_size[1]),
                                          stride=(patch_size[0], patch_size[1])),
                                Permute([0, 2, 3, 1]), norm_layer(embed_dim))]
        total_stage_blocks = sum(depths)
        stage_block_id = 0
        for i_stage in range(len(depths)):
            stage = []
            dim = embed_dim * 2 ** i_stage
            for i_layer in range(depths[i_stage]):
                sd_prob = stochastic_depth_prob * float(stage_block_id) / (total_stage_blocks - 1)
                stage.append(block(dim, num_heads[i_stage], window_size=window_size,
                                   shift_size=[0 if i_layer % 2 == 0 else w // 2 for w in window_size],
                                   mlp_ratio=mlp_ratio, dropout=dropout, attention_dropout=attention_dropout,
                                   stochastic_depth_prob=sd_prob, norm_layer=norm_layer))
                stage_block_id += 1
            layers.append(nn.Sequential(*stage))
            if i_stage < (len(depths) - 1):
                layers.append(downsample_layer(dim, norm_layer))
        self.features = nn.Sequential(*layers)
        num_features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = norm_layer(num_features)
        self.permute = Permute([0, 3, 1, 2])
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)
        self.head = nn.Linear(num_features, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = self.norm(x)
        x = self.permute(x)
        x = self.avgpool(x)
        x = self.flatten(x)
        return self.head(x)


def _swin_transformer(patch_size, embed_dim, depths, num_heads, window_size, stochastic_depth_prob, weights=None,
                      progress=True, **kwargs):
    return SwinTransformer(patch_size=patch_size, embed_dim=embed_dim, depths=depths, num_heads=num_heads,
                           window_size=window_size, stochastic_depth_prob=stochastic_depth_prob, **kwargs)


def _builder(embed_dim, depths, num_heads, window_size, stochastic_depth_prob, v2=False):
    defaults = dict(patch_size=[4, 4], embed_dim=embed_dim, depths=depths, num_heads=num_heads,
                    window_size=window_size, stochastic_depth_prob=stochastic_depth_prob)
    if v2:
        defaults.update(block=SwinTransformerBlockV2, downsample_layer=PatchMergingV2)

    def build(*, weights=None, progress=True, **kwargs):
        return randomize_v2(randomize_constants(_swin_transformer(weights=weights, progress=progress,
                                                                  **{**defaults, **kwargs})))

    return build


def randomize_v2(model):
    """A random logit scale per head, one above the clamp (log 100), so that the clamp is exercised."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, ShiftedWindowAttentionV2) and not module.logit_scale.is_meta:
                module.logit_scale.copy_(torch.rand(module.logit_scale.shape) * 2 + 1.5)
                module.logit_scale[0] = 4.9
    return model


swin_t = _builder(96, [2, 2, 6, 2], [3, 6, 12, 24], [7, 7], 0.2)
swin_s = _builder(96, [2, 2, 18, 2], [3, 6, 12, 24], [7, 7], 0.3)
swin_b = _builder(128, [2, 2, 18, 2], [4, 8, 16, 32], [7, 7], 0.5)
swin_v2_t = _builder(96, [2, 2, 6, 2], [3, 6, 12, 24], [8, 8], 0.2, v2=True)
swin_v2_s = _builder(96, [2, 2, 18, 2], [3, 6, 12, 24], [8, 8], 0.3, v2=True)
swin_v2_b = _builder(128, [2, 2, 18, 2], [4, 8, 16, 32], [8, 8], 0.5, v2=True)

# Four stages of 8, 16, 32, 64 channels; a non-square window that does not divide the maps, so every stage pads:
# at 32x32 the maps are 8x8, 4x4, 2x2, 1x1 (windows shifted in stages 1-2, the window covers the map after);
# at 45x38: 11x9, 6x5, 3x3, 2x2 (odd sizes through patch merging).
_SMALL = {"num_classes": 7, "embed_dim": 8, "depths": [2, 2, 2, 2], "num_heads": [1, 2, 2, 4], "window_size": [3, 4]}
_NO_DROP = {"stochastic_depth_prob": 0.0, "dropout": 0.0, "attention_dropout": 0.0}
_TRAIN = (3, 3, 48, 40)
# v2's cosine logits are scaled by up to 100 (the clamp): torch's own float32 output is up to 1.3e-4 (relative) off
# its float64 output at 45x38, the zoo model's 6e-5; so v2 is compared at 3e-4.
_V2_ATOL = 3e-4
# v2's training case is chaotic at its third step (docs/BENCHMARKS.md, session 11 helper): its last block's input
# gradient is ill-conditioned in its input, so a half-ulp change of GELU's rounding moves the worst parameter
# from 0.48 to 1.42 of test_training_matches_torch's bar, and torch's own float32 run with a one-ulp input nudge
# reaches 1.26 of it. A kernel change that fails only this case needs that check first.
CASES = {
    "swin_t": Case(swin_t, _SMALL, train=True, train_input=_TRAIN, train_kwargs=_NO_DROP, num_params=28288354),
    "swin_s": Case(swin_s, {**_SMALL, "depths": [2, 4, 2, 2]}, num_params=49606258),
    "swin_b": Case(swin_b, {**_SMALL, "window_size": [4, 4]}, num_params=87768224),
    "swin_v2_t": Case(swin_v2_t, _SMALL, train=True, train_input=_TRAIN, train_kwargs=_NO_DROP, num_params=28351570,
                      atol=_V2_ATOL),
    "swin_v2_s": Case(swin_v2_s, {**_SMALL, "depths": [2, 4, 2, 2]}, num_params=49737442, atol=_V2_ATOL),
    "swin_v2_b": Case(swin_v2_b, {**_SMALL, "window_size": [4, 4]}, num_params=87930848, atol=_V2_ATOL),
}
