"""A twin of timm's ``Xcit`` (``xcit_nano_12_p16`` structure and ``state_dict`` names: ``patch_embed.proj.<0,2,4,6>``
(``conv3x3``: conv ``.0`` + BatchNorm ``.1``), ``cls_token``, ``pos_embed.token_projection``, ``blocks.<i>.norm1``/
``attn.temperature``/``attn.qkv``/``attn.proj``/``norm3``/``local_mp.conv1``/``bn``/``conv2``/``norm2``/``mlp.fc1``/
``fc2``/``gamma1``/``gamma3``/``gamma2``, ``cls_attn_blocks.<i>.attn.q``/``k``/``v``/``proj``, ``norm``,
``head``), two blocks and small widths.

Stresses: cross-covariance attention (q, k, v as (B, heads, d, N); ``F.normalize`` of q and k over the tokens,
``(q @ k^T) * temperature`` (a (heads, 1, 1) parameter), softmax over channels); ``PositionalEncodingFourier`` built
in the forward from the patch grid's H and W (``torch.arange(1, H + 1)``, cumulative normalisation by the last
entry, ``temperature ** (2 * floor(i / 2) / hidden_dim)``, sin/cos of alternate channels stacked and flattened,
a 1x1 conv, ``repeat(B, 1, 1, 1)``); ``LPI`` (tokens -> map -> depthwise 3x3, GELU, BatchNorm, depthwise 3x3 ->
tokens); class-attention blocks that rewrite only the class token (``torch.cat`` of the attended class token
with the untouched patch tokens); ``ConvPatchEmbed``'s four stride-2 conv + BatchNorm stages.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn

from tests.models.cait import ClassAttn, Mlp


class PositionalEncodingFourier(nn.Module):
    def __init__(self, hidden_dim=32, dim=768, temperature=10000):
        super().__init__()
        self.token_projection = nn.Conv2d(hidden_dim * 2, dim, kernel_size=1)
        self.scale = 2 * math.pi
        self.temperature = temperature
        self.hidden_dim = hidden_dim
        self.dim = dim
        self.eps = 1e-6

    def forward(self, B: int, H: int, W: int):
        device = self.token_projection.weight.device
        dtype = self.token_projection.weight.dtype
        y_embed = torch.arange(1, H + 1, device=device).to(torch.float32).unsqueeze(1).repeat(1, 1, W)
        x_embed = torch.arange(1, W + 1, device=device).to(torch.float32).repeat(1, H, 1)
        y_embed = y_embed / (y_embed[:, -1:, :] + self.eps) * self.scale
        x_embed = x_embed / (x_embed[:, :, -1:] + self.eps) * self.scale
        dim_t = torch.arange(self.hidden_dim, device=device).to(torch.float32)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.hidden_dim)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack([pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()], dim=4).flatten(3)
        pos_y = torch.stack([pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()], dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        pos = self.token_projection(pos.to(dtype))
        return pos.repeat(B, 1, 1, 1)  # (B, C, H, W)


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Sequential(nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(out_planes))


class ConvPatchEmbed(nn.Module):
    def __init__(self, patch_size=16, in_chans=3, embed_dim=768, act_layer=nn.GELU):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Sequential(
            conv3x3(in_chans, embed_dim // 8, 2), act_layer(),
            conv3x3(embed_dim // 8, embed_dim // 4, 2), act_layer(),
            conv3x3(embed_dim // 4, embed_dim // 2, 2), act_layer(),
            conv3x3(embed_dim // 2, embed_dim, 2))

    def forward(self, x):
        x = self.proj(x)
        Hp, Wp = x.shape[2], x.shape[3]
        return x.flatten(2).transpose(1, 2), (Hp, Wp)


class LPI(nn.Module):
    def __init__(self, in_features, out_features=None, act_layer=nn.GELU, kernel_size=3):
        super().__init__()
        out_features = out_features or in_features
        padding = kernel_size // 2
        self.conv1 = nn.Conv2d(in_features, in_features, kernel_size=kernel_size, padding=padding,
                               groups=in_features)
        self.act = act_layer()
        self.bn = nn.BatchNorm2d(in_features)
        self.conv2 = nn.Conv2d(in_features, out_features, kernel_size=kernel_size, padding=padding,
                               groups=out_features)

    def forward(self, x, H: int, W: int):
        B, N, C = x.shape
        x = x.permute(0, 2, 1).reshape(B, C, H, W)
        x = self.conv2(self.bn(self.act(self.conv1(x))))
        return x.reshape(B, C, N).permute(0, 2, 1)


class ClassAttentionBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, act_layer=nn.GELU, norm_layer=nn.LayerNorm,
                 eta=1., tokens_norm=False):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = ClassAttn(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.drop_path = nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer)
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))
        self.tokens_norm = tokens_norm

    def forward(self, x):
        x_norm1 = self.norm1(x)
        x_attn = torch.cat([self.attn(x_norm1), x_norm1[:, 1:]], dim=1)
        x = x + self.drop_path(self.gamma1 * x_attn)
        if self.tokens_norm:
            x = self.norm2(x)
        else:
            x = torch.cat([self.norm2(x[:, 0:1]), x[:, 1:]], dim=1)
        x_res = x
        cls_token = self.gamma2 * self.mlp(x[:, 0:1])
        x = torch.cat([cls_token, x[:, 1:]], dim=1)
        return x_res + self.drop_path(x)


class XCA(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        self.temperature = nn.Parameter(torch.ones(num_heads, 1, 1))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 4, 1)
        q, k, v = qkv.unbind(0)
        q = torch.nn.functional.normalize(q, dim=-1)
        k = torch.nn.functional.normalize(k, dim=-1)
        attn = (q @ k.transpose(-2, -1)) * self.temperature
        attn = self.attn_drop(attn.softmax(dim=-1))
        x = (attn @ v).permute(0, 3, 1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class XCABlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, act_layer=nn.GELU, norm_layer=nn.LayerNorm,
                 eta=1.):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = XCA(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.drop_path = nn.Identity()
        self.norm3 = norm_layer(dim)
        self.local_mp = LPI(in_features=dim, act_layer=act_layer)
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer)
        self.gamma1 = nn.Parameter(eta * torch.ones(dim))
        self.gamma3 = nn.Parameter(eta * torch.ones(dim))
        self.gamma2 = nn.Parameter(eta * torch.ones(dim))

    def forward(self, x, H: int, W: int):
        x = x + self.drop_path(self.gamma1 * self.attn(self.norm1(x)))
        x = x + self.drop_path(self.gamma3 * self.local_mp(self.norm3(x), H, W))
        return x + self.drop_path(self.gamma2 * self.mlp(self.norm2(x)))


class Xcit(nn.Module):
    def __init__(self, patch_size=16, in_chans=3, num_classes=10, global_pool="token", embed_dim=32, depth=2,
                 num_heads=4, mlp_ratio=4., qkv_bias=True, cls_attn_layers=2, eta=1., tokens_norm=False):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        act_layer = nn.GELU
        self.global_pool = global_pool
        self.num_features = self.embed_dim = embed_dim
        self.patch_embed = ConvPatchEmbed(patch_size, in_chans, embed_dim, act_layer=act_layer)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = PositionalEncodingFourier(dim=embed_dim)
        self.pos_drop = nn.Dropout(p=0.)
        self.blocks = nn.ModuleList([
            XCABlock(embed_dim, num_heads, mlp_ratio, qkv_bias, act_layer, norm_layer, eta) for _ in range(depth)])
        self.cls_attn_blocks = nn.ModuleList([
            ClassAttentionBlock(embed_dim, num_heads, mlp_ratio, qkv_bias, act_layer, norm_layer, eta, tokens_norm)
            for _ in range(cls_attn_layers)])
        self.norm = norm_layer(embed_dim)
        self.head_drop = nn.Dropout(0.)
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x):
        B = x.shape[0]
        x, (Hp, Wp) = self.patch_embed(x)
        pos_encoding = self.pos_embed(B, Hp, Wp).reshape(B, -1, x.shape[1]).permute(0, 2, 1)
        x = self.pos_drop(x + pos_encoding)
        for blk in self.blocks:
            x = blk(x, Hp, Wp)
        x = torch.cat((self.cls_token.expand(B, -1, -1), x), dim=1)
        for blk in self.cls_attn_blocks:
            x = blk(x)
        return self.norm(x)

    def forward(self, x):
        x = self.forward_features(x)
        x = x[:, 1:].mean(dim=1) if self.global_pool == "avg" else x[:, 0]
        return self.head(self.head_drop(x))


def xcit_small():
    return Xcit()


def xcit_tokens_norm_small():
    """``tokens_norm=True`` (timm's xcit_*_24+ models): the class blocks normalise every token."""
    return Xcit(tokens_norm=True, global_pool="avg")
