"""Small twins of timm architectures (timm's module structure and ``state_dict`` names, so timm checkpoints load):

* ConvNeXt-V2 (``timm/models/convnext.py`` with ``use_grn=True``, ``ls_init_value=None``): ``LayerNorm2d`` stem and
  downsamples, depthwise 7x7, channels-last ``LayerNorm``, ``GlobalResponseNormMlp`` (``GlobalResponseNorm``: an L2
  norm over the spatial dims divided by its channel mean, ``addcmul``), ``NormMlpClassifierHead``;
* PoolFormer (``timm/models/poolformer.py``, sail-sg's layout): ``AvgPool2d(3, 1, 1, count_include_pad=False)``
  minus its input, ``GroupNorm(1, C)``, per-channel layer scales, 1x1-conv MLP;
* ResMLP (``timm/models/mlp_mixer.py``, ``ResBlock``): ``Affine`` (``addcmul``) norms, a token-mixing Linear over the
  transposed sequence, layer scales;
* BEiT (``timm/models/beit.py``): ``q_bias``/``v_bias`` with a zero ``k_bias`` buffer concatenated into one qkv bias,
  a relative position bias table gathered by a fixed index buffer (``persistent=False``), layer scales
  ``gamma_1``/``gamma_2``, mean-pooled ``fc_norm`` head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Mlp(nn.Module):
    """timm ``layers/mlp.py::Mlp`` (``use_conv`` for PoolFormer's 1x1 convs)."""

    def __init__(self, dim: int, hidden: int, use_conv: bool = False, grn: bool = False):
        super().__init__()
        linear = nn.Conv2d if use_conv else nn.Linear
        self.fc1 = linear(dim, hidden, 1) if use_conv else linear(dim, hidden)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(0.0)
        if grn:
            self.grn = GlobalResponseNorm(hidden)
        else:
            self.norm = nn.Identity()
        self.fc2 = linear(hidden, dim, 1) if use_conv else linear(hidden, dim)
        self.drop2 = nn.Dropout(0.0)

    def forward(self, x):
        x = self.drop1(self.act(self.fc1(x)))
        x = self.grn(x) if hasattr(self, "grn") else self.norm(x)
        return self.drop2(self.fc2(x))


# ---------------------------------------------------------------------------------------------------- ConvNeXt-V2
class LayerNorm2d(nn.LayerNorm):
    """timm ``layers/norm.py::LayerNorm2d``: LayerNorm over the channels of an NCHW map."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class GlobalResponseNorm(nn.Module):
    """timm ``layers/grn.py`` (channels-last)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        x_g = x.norm(p=2, dim=(1, 2), keepdim=True)
        x_n = x_g / (x_g.mean(dim=-1, keepdim=True) + self.eps)
        return x + torch.addcmul(self.bias.view(1, 1, 1, -1), self.weight.view(1, 1, 1, -1), x * x_n)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, 4 * dim, grn=True)
        self.shortcut = nn.Identity()
        self.drop_path = nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.conv_dw(x).permute(0, 2, 3, 1)
        x = self.mlp(self.norm(x)).permute(0, 3, 1, 2)
        return self.drop_path(x) + self.shortcut(shortcut)


class ConvNeXtStage(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, depth: int):
        super().__init__()
        if in_chs != out_chs:
            self.downsample = nn.Sequential(LayerNorm2d(in_chs, eps=1e-6), nn.Conv2d(in_chs, out_chs, 2, stride=2))
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.Sequential(*[ConvNeXtBlock(out_chs) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(self.downsample(x))


class NormMlpClassifierHead(nn.Module):
    def __init__(self, dim: int, num_classes: int):
        super().__init__()
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.norm = LayerNorm2d(dim, eps=1e-6)
        self.flatten = nn.Flatten(1)
        self.pre_logits = nn.Identity()
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.flatten(self.norm(self.global_pool(x)))
        return self.fc(self.drop(self.pre_logits(x)))


class ConvNeXtV2(nn.Module):
    def __init__(self, dims=(8, 16, 24), depths=(1, 2, 1), num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0], eps=1e-6))
        prev, stages = dims[0], []
        for dim, depth in zip(dims, depths):
            stages.append(ConvNeXtStage(prev, dim, depth))
            prev = dim
        self.stages = nn.Sequential(*stages)
        self.norm_pre = nn.Identity()
        self.head = NormMlpClassifierHead(prev, num_classes)

    def forward(self, x):
        return self.head(self.norm_pre(self.stages(self.stem(x))))


def convnextv2_small() -> nn.Module:
    return ConvNeXtV2()


# ---------------------------------------------------------------------------------------------------- PoolFormer
class Pooling(nn.Module):
    def __init__(self, pool_size: int = 3):
        super().__init__()
        self.pool = nn.AvgPool2d(pool_size, stride=1, padding=pool_size // 2, count_include_pad=False)

    def forward(self, x):
        return self.pool(x) - x


class PoolFormerBlock(nn.Module):
    def __init__(self, dim: int, mlp_ratio: int = 4):
        super().__init__()
        self.norm1 = nn.GroupNorm(1, dim)
        self.token_mixer = Pooling(3)
        self.norm2 = nn.GroupNorm(1, dim)
        self.mlp = Mlp(dim, dim * mlp_ratio, use_conv=True)
        self.drop_path = nn.Identity()
        self.layer_scale_1 = nn.Parameter(1e-5 * torch.ones(dim))
        self.layer_scale_2 = nn.Parameter(1e-5 * torch.ones(dim))

    def forward(self, x):
        x = x + self.drop_path(self.layer_scale_1.unsqueeze(-1).unsqueeze(-1) * self.token_mixer(self.norm1(x)))
        return x + self.drop_path(self.layer_scale_2.unsqueeze(-1).unsqueeze(-1) * self.mlp(self.norm2(x)))


class PatchEmbed(nn.Module):
    def __init__(self, patch: int, stride: int, padding: int, in_chs: int, dim: int):
        super().__init__()
        self.proj = nn.Conv2d(in_chs, dim, patch, stride=stride, padding=padding)
        self.norm = nn.Identity()

    def forward(self, x):
        return self.norm(self.proj(x))


class PoolFormer(nn.Module):
    def __init__(self, dims=(8, 16), layers=(2, 1), num_classes: int = 10):
        super().__init__()
        self.patch_embed = PatchEmbed(7, 4, 2, 3, dims[0])
        network = []
        for i, (dim, depth) in enumerate(zip(dims, layers)):
            network.append(nn.Sequential(*[PoolFormerBlock(dim) for _ in range(depth)]))
            if i + 1 < len(dims):
                network.append(PatchEmbed(3, 2, 1, dim, dims[i + 1]))
        self.network = nn.ModuleList(network)
        self.norm = nn.GroupNorm(1, dims[-1])
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        for block in self.network:
            x = block(x)
        return self.head(self.norm(x).mean([-2, -1]))


def poolformer_small() -> nn.Module:
    return PoolFormer()


# ---------------------------------------------------------------------------------------------------- ResMLP
class Affine(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones((1, 1, dim)))
        self.beta = nn.Parameter(torch.zeros((1, 1, dim)))

    def forward(self, x):
        return torch.addcmul(self.beta, self.alpha, x)


class ResBlock(nn.Module):
    def __init__(self, dim: int, seq_len: int, mlp_ratio: int = 4, init_values: float = 1e-4):
        super().__init__()
        self.norm1 = Affine(dim)
        self.linear_tokens = nn.Linear(seq_len, seq_len)
        self.drop_path = nn.Identity()
        self.norm2 = Affine(dim)
        self.mlp_channels = Mlp(dim, dim * mlp_ratio)
        self.ls1 = nn.Parameter(init_values * torch.ones(dim))
        self.ls2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        x = x + self.drop_path(self.ls1 * self.linear_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2))
        return x + self.drop_path(self.ls2 * self.mlp_channels(self.norm2(x)))


class TokenPatchEmbed(nn.Module):
    """timm ``layers/patch_embed.py::PatchEmbed`` (flattened to tokens): ResMLP's ``stem``, BEiT's ``patch_embed``."""

    def __init__(self, patch: int, dim: int):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, stride=patch)
        self.norm = nn.Identity()

    def forward(self, x):
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class ResMLP(nn.Module):
    def __init__(self, img: int = 16, patch: int = 4, dim: int = 16, depth: int = 2, num_classes: int = 10):
        super().__init__()
        self.stem = TokenPatchEmbed(patch, dim)
        self.blocks = nn.Sequential(*[ResBlock(dim, (img // patch) ** 2) for _ in range(depth)])
        self.norm = Affine(dim)
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.norm(self.blocks(self.stem(x)))
        return self.head(self.head_drop(x.mean(dim=1)))


def resmlp_small() -> nn.Module:
    return ResMLP()


# ---------------------------------------------------------------------------------------------------- BEiT
def gen_relative_position_index(window_size):
    num_relative_distance = (2 * window_size[0] - 1) * (2 * window_size[1] - 1) + 3
    window_area = window_size[0] * window_size[1]
    coords = torch.stack(torch.meshgrid([torch.arange(window_size[0]), torch.arange(window_size[1])],
                                        indexing="ij"))
    coords_flatten = torch.flatten(coords, 1)
    relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
    relative_coords = relative_coords.permute(1, 2, 0).contiguous()
    relative_coords[:, :, 0] += window_size[0] - 1
    relative_coords[:, :, 1] += window_size[1] - 1
    relative_coords[:, :, 0] *= 2 * window_size[1] - 1
    relative_position_index = torch.zeros(size=(window_area + 1,) * 2, dtype=relative_coords.dtype)
    relative_position_index[1:, 1:] = relative_coords.sum(-1)
    relative_position_index[0, 0:] = num_relative_distance - 3
    relative_position_index[0:, 0] = num_relative_distance - 2
    relative_position_index[0, 0] = num_relative_distance - 1
    return relative_position_index


class BeitAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, window_size):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("k_bias", torch.zeros(dim), persistent=False)
        self.v_bias = nn.Parameter(torch.zeros(dim))
        self.window_size = window_size
        self.num_relative_distance = (2 * window_size[0] - 1) * (2 * window_size[1] - 1) + 3
        self.relative_position_bias_table = nn.Parameter(torch.zeros(self.num_relative_distance, num_heads))
        self.register_buffer("relative_position_index", gen_relative_position_index(window_size), persistent=False)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)

    def _get_rel_pos_bias(self):
        n = self.window_size[0] * self.window_size[1] + 1
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        return bias.permute(2, 0, 1).contiguous().unsqueeze(0)

    def forward(self, x):
        B, N, C = x.shape
        qkv_bias = torch.cat((self.q_bias, self.k_bias, self.v_bias))
        qkv = F.linear(x, weight=self.qkv.weight, bias=qkv_bias)
        q, k, v = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = (attn + self._get_rel_pos_bias()).softmax(dim=-1)
        x = (self.attn_drop(attn) @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class BeitBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, window_size, init_values: float = 0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = BeitAttention(dim, num_heads, window_size)
        self.drop_path1 = nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, dim * 4)
        self.drop_path2 = nn.Identity()
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        x = x + self.drop_path1(self.gamma_1 * self.attn(self.norm1(x)))
        return x + self.drop_path2(self.gamma_2 * self.mlp(self.norm2(x)))


class Beit(nn.Module):
    def __init__(self, img: int = 16, patch: int = 4, dim: int = 16, depth: int = 2, heads: int = 2,
                 num_classes: int = 10):
        super().__init__()
        window = (img // patch, img // patch)
        self.patch_embed = TokenPatchEmbed(patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_drop = nn.Dropout(0.0)
        self.blocks = nn.ModuleList([BeitBlock(dim, heads, window) for _ in range(depth)])
        self.norm = nn.Identity()
        self.fc_norm = nn.LayerNorm(dim, eps=1e-6)
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = self.pos_drop(x)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        x = self.fc_norm(x[:, 1:].mean(dim=1))
        return self.head(self.head_drop(x))


def beit_small() -> nn.Module:
    return Beit()
