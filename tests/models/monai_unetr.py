"""Twin of MONAI's ``UNETR`` (``monai.networks.nets.unetr``) and its ``ViT`` encoder (``monai.networks.nets.vit``,
``blocks.patchembedding``, ``blocks.transformerblock``, ``blocks.selfattention``, ``blocks.mlp``), with MONAI's
module structure and ``state_dict`` names (MONAI >= 1.4: a block without cross attention holds no
``cross_attn`` weights). Convolutional blocks: ``monai_blocks.py``.

The position embedding fixes the number of patches, so a port takes only the volume size it was converted at.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.models.monai_blocks import Convolution, UnetBasicBlock, UnetOutBlock, UnetResBlock, UnetUpBlock


class PatchEmbeddingBlock(nn.Module):
    """``patch_embeddings`` (Conv3d, kernel = stride = patch), flattened to tokens, plus ``position_embeddings``."""

    def __init__(self, in_channels, img_size, patch_size, hidden_size, dropout_rate=0.0):
        super().__init__()
        n_patches = 1
        for size in img_size:
            n_patches *= size // patch_size
        self.patch_embeddings = nn.Conv3d(in_channels, hidden_size, patch_size, patch_size)
        self.position_embeddings = nn.Parameter(torch.zeros(1, n_patches, hidden_size))
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x):
        x = self.patch_embeddings(x).flatten(2).transpose(-1, -2)
        return self.dropout(x + self.position_embeddings)


class MLPBlock(nn.Module):
    def __init__(self, hidden_size, mlp_dim, dropout_rate=0.0):
        super().__init__()
        self.linear1 = nn.Linear(hidden_size, mlp_dim)
        self.linear2 = nn.Linear(mlp_dim, hidden_size)
        self.fn = nn.GELU()
        self.drop1 = nn.Dropout(dropout_rate)
        self.drop2 = nn.Dropout(dropout_rate)

    def forward(self, x):
        return self.drop2(self.linear2(self.drop1(self.fn(self.linear1(x)))))


class SABlock(nn.Module):
    """Self-attention: ``qkv`` (no bias by default) split as ``(qkv, heads, head_dim)``, softmax(q k^T * scale) v,
    ``out_proj``."""

    def __init__(self, hidden_size, num_heads, dropout_rate=0.0, qkv_bias=False):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.out_proj = nn.Linear(hidden_size, hidden_size)
        self.qkv = nn.Linear(hidden_size, hidden_size * 3, bias=qkv_bias)
        self.drop_output = nn.Dropout(dropout_rate)
        self.drop_weights = nn.Dropout(dropout_rate)
        self.scale = self.head_dim ** -0.5

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        att = self.drop_weights((q @ k.transpose(-1, -2) * self.scale).softmax(dim=-1))
        x = (att @ v).transpose(1, 2).reshape(b, n, -1)
        return self.drop_output(self.out_proj(x))


class TransformerBlock(nn.Module):
    def __init__(self, hidden_size, mlp_dim, num_heads, dropout_rate=0.0, qkv_bias=False):
        super().__init__()
        self.mlp = MLPBlock(hidden_size, mlp_dim, dropout_rate)
        self.norm1 = nn.LayerNorm(hidden_size)
        self.attn = SABlock(hidden_size, num_heads, dropout_rate, qkv_bias)
        self.norm2 = nn.LayerNorm(hidden_size)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """``patch_embedding``, ``blocks``, ``norm``; returns the normed tokens and every block's output."""

    def __init__(self, in_channels, img_size, patch_size, hidden_size, mlp_dim, num_layers, num_heads,
                 dropout_rate=0.0, qkv_bias=False):
        super().__init__()
        self.patch_embedding = PatchEmbeddingBlock(in_channels, img_size, patch_size, hidden_size, dropout_rate)
        self.blocks = nn.ModuleList(TransformerBlock(hidden_size, mlp_dim, num_heads, dropout_rate, qkv_bias)
                                    for _ in range(num_layers))
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, x):
        x = self.patch_embedding(x)
        hidden_states_out = []
        for blk in self.blocks:
            x = blk(x)
            hidden_states_out.append(x)
        return self.norm(x), hidden_states_out


class UnetrBasicBlock(nn.Module):
    def __init__(self, cin, cout, kernel_size, stride, norm_name, res_block):
        super().__init__()
        self.layer = (UnetResBlock if res_block else UnetBasicBlock)(cin, cout, kernel_size, stride, norm_name)

    def forward(self, inp):
        return self.layer(inp)


class UnetrPrUpBlock(nn.Module):
    """``transp_conv_init`` then ``num_layer`` blocks of (transposed conv, conv block): tokens back to volume."""

    def __init__(self, cin, cout, num_layer, kernel_size, upsample_kernel_size, norm_name, res_block):
        super().__init__()
        up = upsample_kernel_size
        self.transp_conv_init = Convolution(cin, cout, up, up, is_transposed=True)
        block = UnetResBlock if res_block else UnetBasicBlock
        self.blocks = nn.ModuleList(
            nn.Sequential(Convolution(cout, cout, up, up, is_transposed=True), block(cout, cout, kernel_size, 1,
                                                                                     norm_name))
            for _ in range(num_layer))

    def forward(self, x):
        x = self.transp_conv_init(x)
        for blk in self.blocks:
            x = blk(x)
        return x


class UNETR(nn.Module):
    """MONAI ``UNETR(in_channels, out_channels, img_size, feature_size, hidden_size, mlp_dim, num_heads)``: a
    12-block ViT on 16^3 patches; blocks 3, 6 and 9 and the last (``proj_feat``: tokens -> (N, C, d, h, w))
    feed transposed-conv decoders joined with ``encoder1`` on the full volume."""

    def __init__(self, in_channels, out_channels, img_size, feature_size=16, hidden_size=768, mlp_dim=3072,
                 num_heads=12, norm_name="instance", res_block=True, dropout_rate=0.0, qkv_bias=False):
        super().__init__()
        patch = 16
        self.feat_size = tuple(s // patch for s in img_size)
        self.hidden_size = hidden_size
        self.vit = ViT(in_channels, img_size, patch, hidden_size, mlp_dim, 12, num_heads, dropout_rate, qkv_bias)
        f = feature_size
        self.encoder1 = UnetrBasicBlock(in_channels, f, 3, 1, norm_name, res_block)
        self.encoder2 = UnetrPrUpBlock(hidden_size, f * 2, 2, 3, 2, norm_name, res_block)
        self.encoder3 = UnetrPrUpBlock(hidden_size, f * 4, 1, 3, 2, norm_name, res_block)
        self.encoder4 = UnetrPrUpBlock(hidden_size, f * 8, 0, 3, 2, norm_name, res_block)
        self.decoder5 = UnetUpBlock(hidden_size, f * 8, 3, 2, norm_name, res_block)
        self.decoder4 = UnetUpBlock(f * 8, f * 4, 3, 2, norm_name, res_block)
        self.decoder3 = UnetUpBlock(f * 4, f * 2, 3, 2, norm_name, res_block)
        self.decoder2 = UnetUpBlock(f * 2, f, 3, 2, norm_name, res_block)
        self.out = UnetOutBlock(f, out_channels)
        self.proj_axes = (0, 4, 1, 2, 3)
        self.proj_view_shape = list(self.feat_size) + [hidden_size]

    def proj_feat(self, x):
        x = x.view([x.size(0)] + self.proj_view_shape)
        return x.permute(self.proj_axes).contiguous()

    def forward(self, x_in):
        x, hidden_states_out = self.vit(x_in)
        enc1 = self.encoder1(x_in)
        enc2 = self.encoder2(self.proj_feat(hidden_states_out[3]))
        enc3 = self.encoder3(self.proj_feat(hidden_states_out[6]))
        enc4 = self.encoder4(self.proj_feat(hidden_states_out[9]))
        dec3 = self.decoder5(self.proj_feat(x), enc4)
        dec2 = self.decoder4(dec3, enc3)
        dec1 = self.decoder3(dec2, enc2)
        return self.out(self.decoder2(dec1, enc1))


def unetr_small(img_size=(32, 32, 16)):
    """A 2x2x1 patch grid; 12 blocks of width 16 (2 heads), feature size 4."""
    return UNETR(2, 3, img_size, feature_size=4, hidden_size=16, mlp_dim=32, num_heads=2)
