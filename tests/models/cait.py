"""A twin of timm's ``Cait`` (``cait_xxs24`` structure and ``state_dict`` names: ``patch_embed.proj``,
``cls_token``, ``pos_embed``, ``blocks.<i>.norm1``/``attn.qkv``/``attn.proj_l``/``attn.proj_w``/``attn.proj``/
``norm2``/``mlp.fc1``/``mlp.fc2``/``gamma_1``/``gamma_2``, ``blocks_token_only.<i>.attn.q``/``k``/``v``/``proj``,
``norm``, ``head``), few blocks and small sizes. timm's ``ClassAttn`` lives here, as in timm (XCiT imports it).

Stresses: talking-heads attention (``proj_l`` and ``proj_w``: ``nn.Linear`` over the heads axis, reached by
``permute(0, 2, 3, 1)`` before and after the softmax); LayerScale (``gamma * branch``); class attention (a query
from the class token only, ``scaled_dot_product_attention`` on (B, heads, 1, d) against all tokens), the class
token carried apart and concatenated at the end; a learned ``pos_embed`` of the conversion grid's size and
``PatchEmbed``'s ``strict_img_size`` asserts: torch refuses another image size (the assert, or without it the
broadcast ``x + pos_embed``).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn


def _assert(condition: bool, message: str):
    assert condition, message


class PatchEmbed(nn.Module):
    def __init__(self, img_size=32, patch_size=4, in_chans=3, embed_dim=32, strict_img_size=True):
        super().__init__()
        self.patch_size = (patch_size, patch_size)
        self.img_size = (img_size, img_size)
        self.grid_size = (img_size // patch_size, img_size // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.strict_img_size = strict_img_size
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=True)
        self.norm = nn.Identity()

    def forward(self, x):
        B, C, H, W = x.shape
        if self.strict_img_size:
            _assert(H == self.img_size[0], f"Input height ({H}) doesn't match model ({self.img_size[0]}).")
            _assert(W == self.img_size[1], f"Input width ({W}) doesn't match model ({self.img_size[1]}).")
        x = self.proj(x)
        x = x.flatten(2).transpose(1, 2)
        return self.norm(x)


class Mlp(nn.Module):
    """timm.layers.Mlp: fc1 -> act -> drop1 -> norm (Identity) -> fc2 -> drop2."""

    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden_features, out_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.drop1(self.act(self.fc1(x)))
        return self.drop2(self.fc2(self.norm(x)))


class ClassAttn(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0., proj_drop=0., fused_attn=True):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.fused_attn = fused_attn
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.k = nn.Linear(dim, dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        q = self.q(x[:, 0]).unsqueeze(1).reshape(B, 1, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        k = self.k(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        v = self.v(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        if self.fused_attn:
            x_cls = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.)
        else:
            q = q * self.scale
            attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
            x_cls = self.attn_drop(attn) @ v
        x_cls = x_cls.transpose(1, 2).reshape(B, 1, C)
        return self.proj_drop(self.proj(x_cls))


class TalkingHeadAttn(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_l = nn.Linear(num_heads, num_heads)
        self.proj_w = nn.Linear(num_heads, num_heads)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)
        attn = self.proj_l(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        attn = attn.softmax(dim=-1)
        attn = self.proj_w(attn.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        attn = self.attn_drop(attn)
        x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class LayerScaleBlockClassAttn(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, act_layer=nn.GELU, norm_layer=nn.LayerNorm,
                 init_values=1e-4):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = ClassAttn(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.drop_path = nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer)
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x, x_cls):
        u = torch.cat((x_cls, x), dim=1)
        x_cls = x_cls + self.drop_path(self.gamma_1 * self.attn(self.norm1(u)))
        return x_cls + self.drop_path(self.gamma_2 * self.mlp(self.norm2(x_cls)))


class LayerScaleBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4., qkv_bias=False, act_layer=nn.GELU, norm_layer=nn.LayerNorm,
                 init_values=1e-4):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = TalkingHeadAttn(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.drop_path = nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer)
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        x = x + self.drop_path(self.gamma_1 * self.attn(self.norm1(x)))
        return x + self.drop_path(self.gamma_2 * self.mlp(self.norm2(x)))


class Cait(nn.Module):
    def __init__(self, img_size=32, patch_size=4, in_chans=3, num_classes=10, global_pool="token", embed_dim=32,
                 depth=3, num_heads=4, mlp_ratio=4., qkv_bias=True, init_values=1e-5, depth_token_only=2,
                 strict_img_size=True):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.global_pool = global_pool
        self.num_features = self.embed_dim = embed_dim
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim, strict_img_size=strict_img_size)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches, embed_dim))
        self.pos_drop = nn.Dropout(p=0.)
        self.blocks = nn.Sequential(*[
            LayerScaleBlock(embed_dim, num_heads, mlp_ratio, qkv_bias, norm_layer=norm_layer,
                            init_values=init_values) for _ in range(depth)])
        self.blocks_token_only = nn.ModuleList([
            LayerScaleBlockClassAttn(embed_dim, num_heads, 4.0, qkv_bias, norm_layer=norm_layer,
                                     init_values=init_values) for _ in range(depth_token_only)])
        self.norm = norm_layer(embed_dim)
        self.head_drop = nn.Dropout(0.)
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x):
        x = self.patch_embed(x)
        x = x + self.pos_embed
        x = self.pos_drop(x)
        x = self.blocks(x)
        cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)
        for blk in self.blocks_token_only:
            cls_tokens = blk(x, cls_tokens)
        x = torch.cat((cls_tokens, x), dim=1)
        return self.norm(x)

    def forward(self, x):
        x = self.forward_features(x)
        x = x[:, 1:].mean(dim=1) if self.global_pool == "avg" else x[:, 0]
        return self.head(self.head_drop(x))


def cait_small():
    return Cait()


def cait_loose_small():
    """``strict_img_size=False`` and the average-pooled head: no assert, torch fails at ``x + pos_embed``."""
    return Cait(strict_img_size=False, global_pool="avg")
