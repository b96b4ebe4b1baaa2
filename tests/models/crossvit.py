"""Twin of timm's ``CrossVit`` (``crossvit_9_240`` structure and ``state_dict`` names: ``cls_token_<i>``,
``pos_embed_<i>``, ``patch_embed.<i>.proj``, ``blocks.<k>.blocks.<i>.<j>.norm1``/``attn.qkv``/``attn.proj``/
``mlp.fc1``/``fc2``, ``blocks.<k>.projs.<i>.<0,2>``, ``blocks.<k>.fusion.<i>.norm1``/``attn.wq``/``wk``/``wv``/
``proj``, ``blocks.<k>.revert_projs.<i>.<0,2>``, ``norm.<i>``, ``head.<i>``), two narrow multi-scale blocks.

Stresses: two branches on one image, the second at a smaller scale (``F.interpolate(mode="bicubic")`` from 48x48 to
40x40, as ``crossvit_9_240`` takes 240 to 224) with their own patch sizes and widths; per-branch class tokens
expanded to the batch and position tables; the fusion: each branch's class token projected (LayerNorm, GELU,
Linear) to the other branch's width, concatenated with that branch's patch tokens, cross attention whose query is
that one token (``wq(x[:, 0:1])``), projected back and concatenated with its own patch tokens; the head's mean of
the two branches' logits (``torch.stack(...).mean(0)``).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.timm_hybrid import Block


class PatchEmbed(nn.Module):
    def __init__(self, img_size, patch_size, in_chans=3, embed_dim=768):
        super().__init__()
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.patch_size = (patch_size, patch_size)
        self.num_patches = (self.img_size[1] // patch_size) * (self.img_size[0] // patch_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        B, C, H, W = x.shape
        torch._assert(H == self.img_size[0], f"Input height ({H}) doesn't match model ({self.img_size[0]}).")
        torch._assert(W == self.img_size[1], f"Input width ({W}) doesn't match model ({self.img_size[1]}).")
        return self.proj(x).flatten(2).transpose(1, 2)


class CrossAttention(nn.Module):
    """Attention of the first token (the class token) over all tokens."""

    def __init__(self, dim, num_heads=8, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.wq = nn.Linear(dim, dim, bias=qkv_bias)
        self.wk = nn.Linear(dim, dim, bias=qkv_bias)
        self.wv = nn.Linear(dim, dim, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.)

    def forward(self, x):
        B, N, C = x.shape
        q = self.wq(x[:, 0:1, ...]).reshape(B, 1, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        k = self.wk(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        v = self.wv(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(B, 1, C)
        return self.proj_drop(self.proj(x))


class CrossAttentionBlock(nn.Module):
    def __init__(self, dim, num_heads, qkv_bias=False, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = CrossAttention(dim, num_heads=num_heads, qkv_bias=qkv_bias)
        self.drop_path = nn.Identity()

    def forward(self, x):
        return x[:, 0:1, ...] + self.drop_path(self.attn(self.norm1(x)))


def _proj(norm_layer, dim_in, dim_out):
    return nn.Sequential(norm_layer(dim_in), nn.GELU(), nn.Linear(dim_in, dim_out))


class MultiScaleBlock(nn.Module):
    def __init__(self, dim, depth, num_heads, mlp_ratio, qkv_bias=False, norm_layer=nn.LayerNorm):
        super().__init__()
        n = self.num_branches = len(dim)
        self.blocks = nn.ModuleList([
            nn.Sequential(*[Block(dim[d], num_heads[d], mlp_ratio[d]) for _ in range(depth[d])])
            for d in range(n)])
        self.projs = nn.ModuleList([_proj(norm_layer, dim[d], dim[(d + 1) % n]) for d in range(n)])
        # timm's configurations have depth[-1] == 0: one cross-attention block per branch, not wrapped
        self.fusion = nn.ModuleList([
            CrossAttentionBlock(dim[(d + 1) % n], num_heads[(d + 1) % n], qkv_bias, norm_layer) for d in range(n)])
        self.revert_projs = nn.ModuleList([_proj(norm_layer, dim[(d + 1) % n], dim[d]) for d in range(n)])

    def forward(self, x):
        outs_b = [block(x[i]) for i, block in enumerate(self.blocks)]
        proj_cls_token = [proj(outs_b[i][:, 0:1, ...]) for i, proj in enumerate(self.projs)]
        outs = []
        for i, (fusion, revert_proj) in enumerate(zip(self.fusion, self.revert_projs)):
            tmp = torch.cat((proj_cls_token[i], outs_b[(i + 1) % self.num_branches][:, 1:, ...]), dim=1)
            tmp = fusion(tmp)
            reverted_proj_cls_token = revert_proj(tmp[:, 0:1, ...])
            outs.append(torch.cat((reverted_proj_cls_token, outs_b[i][:, 1:, ...]), dim=1))
        return outs


def scale_image(x, ss, crop_scale=False):
    H, W = x.shape[-2:]
    if H != ss[0] or W != ss[1]:
        if crop_scale and ss[0] <= H and ss[1] <= W:
            cu, cl = int(round((H - ss[0]) / 2.)), int(round((W - ss[1]) / 2.))
            x = x[:, :, cu:cu + ss[0], cl:cl + ss[1]]
        else:
            x = F.interpolate(x, size=ss, mode='bicubic', align_corners=False)
    return x


class CrossVit(nn.Module):
    def __init__(self, img_size=48, img_scale=(1.0, 40 / 48), patch_size=(12, 8), in_chans=3, num_classes=10,
                 embed_dim=(16, 32), depth=((1, 2, 0), (1, 2, 0)), num_heads=(2, 2), mlp_ratio=(3., 3., 1.),
                 crop_scale=False, qkv_bias=True):
        super().__init__()
        self.num_classes = num_classes
        self.img_size = (img_size, img_size)
        self.img_size_scaled = [tuple(int(sj * si) for sj in self.img_size) for si in img_scale]
        self.crop_scale = crop_scale
        num_patches = [s[0] // p * s[1] // p for s, p in zip(self.img_size_scaled, patch_size)]
        self.num_branches = len(patch_size)
        self.embed_dim = embed_dim
        self.num_features = sum(embed_dim)
        self.patch_embed = nn.ModuleList()
        for i in range(self.num_branches):
            setattr(self, f"pos_embed_{i}", nn.Parameter(torch.zeros(1, 1 + num_patches[i], embed_dim[i])))
            setattr(self, f"cls_token_{i}", nn.Parameter(torch.zeros(1, 1, embed_dim[i])))
        for im_s, p, d in zip(self.img_size_scaled, patch_size, embed_dim):
            self.patch_embed.append(PatchEmbed(img_size=im_s, patch_size=p, in_chans=in_chans, embed_dim=d))
        self.pos_drop = nn.Dropout(0.)
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.blocks = nn.ModuleList([MultiScaleBlock(embed_dim, cfg, num_heads, mlp_ratio, qkv_bias, norm_layer)
                                     for cfg in depth])
        self.norm = nn.ModuleList([norm_layer(embed_dim[i]) for i in range(self.num_branches)])
        self.head_drop = nn.Dropout(0.)
        self.head = nn.ModuleList([nn.Linear(embed_dim[i], num_classes) for i in range(self.num_branches)])

    def forward(self, x):
        B = x.shape[0]
        xs = []
        for i, patch_embed in enumerate(self.patch_embed):
            x_ = patch_embed(scale_image(x, self.img_size_scaled[i], self.crop_scale))
            cls_tokens = (self.cls_token_0 if i == 0 else self.cls_token_1).expand(B, -1, -1)
            x_ = torch.cat((cls_tokens, x_), dim=1)
            x_ = x_ + (self.pos_embed_0 if i == 0 else self.pos_embed_1)
            xs.append(self.pos_drop(x_))
        for blk in self.blocks:
            xs = blk(xs)
        xs = [norm(xs[i]) for i, norm in enumerate(self.norm)]
        xs = [self.head_drop(x[:, 0]) for x in xs]
        return torch.mean(torch.stack([head(xs[i]) for i, head in enumerate(self.head)], dim=0), dim=0)


def crossvit_small() -> nn.Module:
    """``crossvit_9_240``'s form (the second branch on the image resized by 224/240; here 48 -> 40)."""
    return CrossVit()


def crossvit_crop_small() -> nn.Module:
    """``crop_scale=True``: the second branch's image is the centre crop instead of a resize."""
    return CrossVit(crop_scale=True)
