"""Small twins of three more timm architectures (timm's module structure and ``state_dict`` names, so timm
checkpoints load; widths and depths as arguments):

* LeViT (``timm/models/levit.py``, ``LevitDistilled``): ``Stem16`` (four stride-2 ``ConvNorm`` with hardswish),
  ``LinearNorm`` (a bias-free Linear whose output is batch-normed over ``flatten(0, 1)``, ``reshape_as`` back),
  attention whose bias is ``attention_biases[:, attention_bias_idxs]`` (a gather by a non-persistent index buffer,
  cached per device in eval as timm does), ``AttentionDownsample`` (queries from a strided ``view``-slice of the
  token grid, ``Subsample``), ``NormLinear`` heads (BatchNorm1d + Linear), the two heads averaged in eval;
* DeiT distilled (``timm/models/deit.py``, ``VisionTransformerDistilled`` over ``vision_transformer.py``) with
  ``dynamic_img_size=True, dynamic_img_pad=True``: the patch embedding pads the image to a multiple of the patch
  and returns NHWC; the position embedding is resized to the patch grid by ``resample_abs_pos_embed`` (bicubic
  ``F.interpolate(antialias=True)``, the two prefix tokens kept); cls and dist tokens; fused SDPA attention;
  the cls and dist heads averaged;
* HRNet (``timm/models/hrnet.py``): stem, ``layer1`` of Bottlenecks, ``transition1..3``, ``stage2..4`` of
  ``HighResolutionModule`` (parallel branches of BasicBlocks; ``fuse_layers``: 1x1 conv + BN + ``nn.Upsample``
  nearest by 2, 4 or 8 from lower branches, chains of stride-2 3x3 conv + BN (+ ReLU) from higher ones, summed,
  ReLU), returning the four branches' maps (timm's ``features_only`` form, without the classification head).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from .timm_more import Mlp


# ---------------------------------------------------------------------------------------------------- LeViT
class ConvNorm(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size=1, stride=1, padding=0):
        super().__init__()
        self.linear = nn.Conv2d(in_chs, out_chs, kernel_size, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(out_chs)

    def forward(self, x):
        return self.bn(self.linear(x))


class LinearNorm(nn.Module):
    """Linear (no bias) + BatchNorm1d over every token: ``(B, N, C)`` flattened to ``(B * N, C)`` for the norm."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bn = nn.BatchNorm1d(out_features)

    def forward(self, x):
        x = self.linear(x)
        return self.bn(x.flatten(0, 1)).reshape_as(x)


class NormLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.bn = nn.BatchNorm1d(in_features)
        self.drop = nn.Dropout(0.0)
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(self.drop(self.bn(x)))


class Stem16(nn.Module):
    def __init__(self, in_chs, out_chs):
        super().__init__()
        self.stride = 16
        self.conv1 = ConvNorm(in_chs, out_chs // 8, 3, stride=2, padding=1)
        self.act1 = nn.Hardswish()
        self.conv2 = ConvNorm(out_chs // 8, out_chs // 4, 3, stride=2, padding=1)
        self.act2 = nn.Hardswish()
        self.conv3 = ConvNorm(out_chs // 4, out_chs // 2, 3, stride=2, padding=1)
        self.act3 = nn.Hardswish()
        self.conv4 = ConvNorm(out_chs // 2, out_chs, 3, stride=2, padding=1)

    def forward(self, x):
        x = self.act1(self.conv1(x))
        x = self.act2(self.conv2(x))
        x = self.act3(self.conv3(x))
        return self.conv4(x)


def _bias_index(q_rows, q_cols, resolution):
    """timm's ``attention_bias_idxs``: |dy| * W + |dx| between every query and key position of the grid."""
    k_pos = torch.stack(torch.meshgrid(torch.arange(resolution[0]), torch.arange(resolution[1]), indexing="ij"))
    q_pos = torch.stack(torch.meshgrid(q_rows, q_cols, indexing="ij"))
    rel = (q_pos.flatten(1)[..., :, None] - k_pos.flatten(1)[..., None, :]).abs()
    return rel[0] * resolution[1] + rel[1]


class _BiasCache:
    """timm's eval-mode cache of the gathered attention bias (per device), cleared by ``train()``."""

    def get_attention_biases(self, device):
        if torch.jit.is_tracing() or self.training:
            return self.attention_biases[:, self.attention_bias_idxs]
        key = str(device)
        if key not in self.attention_bias_cache:
            self.attention_bias_cache[key] = self.attention_biases[:, self.attention_bias_idxs]
        return self.attention_bias_cache[key]

    @torch.no_grad()
    def train(self, mode=True):
        super().train(mode)
        if mode and self.attention_bias_cache:
            self.attention_bias_cache = {}
        return self


class Attention(_BiasCache, nn.Module):
    def __init__(self, dim, key_dim, num_heads, attn_ratio, resolution):
        super().__init__()
        self.num_heads = num_heads
        self.scale = key_dim ** -0.5
        self.key_dim = key_dim
        self.key_attn_dim = key_dim * num_heads
        self.val_dim = int(attn_ratio * key_dim)
        self.val_attn_dim = self.val_dim * num_heads
        self.qkv = LinearNorm(dim, self.val_attn_dim + self.key_attn_dim * 2)
        self.proj = nn.Sequential(OrderedDict([("act", nn.Hardswish()), ("ln", LinearNorm(self.val_attn_dim, dim))]))
        self.attention_biases = nn.Parameter(torch.zeros(num_heads, resolution[0] * resolution[1]))
        idx = _bias_index(torch.arange(resolution[0]), torch.arange(resolution[1]), resolution)
        self.register_buffer("attention_bias_idxs", idx, persistent=False)
        self.attention_bias_cache = {}

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, self.num_heads, -1).split([self.key_dim, self.key_dim, self.val_dim], dim=3)
        q, k, v = q.permute(0, 2, 1, 3), k.permute(0, 2, 3, 1), v.permute(0, 2, 1, 3)
        attn = q @ k * self.scale + self.get_attention_biases(x.device)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, self.val_attn_dim)
        return self.proj(x)


class Subsample(nn.Module):
    def __init__(self, stride, resolution):
        super().__init__()
        self.stride, self.resolution = stride, resolution

    def forward(self, x):
        B, N, C = x.shape
        x = x.view(B, self.resolution[0], self.resolution[1], C)[:, ::self.stride, ::self.stride]
        return x.reshape(B, -1, C)


class AttentionDownsample(_BiasCache, nn.Module):
    def __init__(self, in_dim, out_dim, key_dim, num_heads, attn_ratio, stride, resolution):
        super().__init__()
        self.stride, self.resolution = stride, resolution
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.key_attn_dim = key_dim * num_heads
        self.val_dim = int(attn_ratio * key_dim)
        self.val_attn_dim = self.val_dim * num_heads
        self.scale = key_dim ** -0.5
        self.kv = LinearNorm(in_dim, self.val_attn_dim + self.key_attn_dim)
        self.q = nn.Sequential(OrderedDict([("down", Subsample(stride, resolution)),
                                            ("ln", LinearNorm(in_dim, self.key_attn_dim))]))
        self.proj = nn.Sequential(OrderedDict([("act", nn.Hardswish()),
                                               ("ln", LinearNorm(self.val_attn_dim, out_dim))]))
        self.attention_biases = nn.Parameter(torch.zeros(num_heads, resolution[0] * resolution[1]))
        idx = _bias_index(torch.arange(0, resolution[0], stride), torch.arange(0, resolution[1], stride), resolution)
        self.register_buffer("attention_bias_idxs", idx, persistent=False)
        self.attention_bias_cache = {}

    def forward(self, x):
        B, N, C = x.shape
        k, v = self.kv(x).view(B, N, self.num_heads, -1).split([self.key_dim, self.val_dim], dim=3)
        k, v = k.permute(0, 2, 3, 1), v.permute(0, 2, 1, 3)
        q = self.q(x).view(B, -1, self.num_heads, self.key_dim).permute(0, 2, 1, 3)
        attn = q @ k * self.scale + self.get_attention_biases(x.device)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, -1, self.val_attn_dim)
        return self.proj(x)


class LevitMlp(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.ln1 = LinearNorm(in_features, hidden_features)
        self.act = nn.Hardswish()
        self.drop = nn.Dropout(0.0)
        self.ln2 = LinearNorm(hidden_features, in_features)

    def forward(self, x):
        return self.ln2(self.drop(self.act(self.ln1(x))))


class LevitDownsample(nn.Module):
    def __init__(self, in_dim, out_dim, key_dim, num_heads, resolution):
        super().__init__()
        self.attn_downsample = AttentionDownsample(in_dim, out_dim, key_dim, num_heads, 4.0, 2, resolution)
        self.mlp = LevitMlp(out_dim, out_dim * 2)
        self.drop_path = nn.Identity()

    def forward(self, x):
        x = self.attn_downsample(x)
        return x + self.drop_path(self.mlp(x))


class LevitBlock(nn.Module):
    def __init__(self, dim, key_dim, num_heads, attn_ratio, mlp_ratio, resolution):
        super().__init__()
        self.attn = Attention(dim, key_dim, num_heads, attn_ratio, resolution)
        self.drop_path1 = nn.Identity()
        self.mlp = LevitMlp(dim, int(dim * mlp_ratio))
        self.drop_path2 = nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.attn(x))
        return x + self.drop_path2(self.mlp(x))


class LevitStage(nn.Module):
    def __init__(self, in_dim, out_dim, key_dim, depth, num_heads, attn_ratio, mlp_ratio, resolution, downsample):
        super().__init__()
        if downsample:
            self.downsample = LevitDownsample(in_dim, out_dim, key_dim, in_dim // key_dim, resolution)
            resolution = tuple((r - 1) // 2 + 1 for r in resolution)
        else:
            self.downsample = nn.Identity()
        self.blocks = nn.Sequential(*[LevitBlock(out_dim, key_dim, num_heads, attn_ratio, mlp_ratio, resolution)
                                      for _ in range(depth)])

    def forward(self, x):
        return self.blocks(self.downsample(x))


class LevitDistilled(nn.Module):
    """timm ``LevitDistilled`` (linear mode, ``down_op='subsample'``, hardswish). The attention biases fix the
    token grid: ``img_size`` is the only input size (the batch is free)."""

    def __init__(self, img_size=64, num_classes=10, embed_dim=(16, 24), key_dim=4, depth=(1, 1), num_heads=(2, 3),
                 attn_ratio=2.0, mlp_ratio=2.0):
        super().__init__()
        self.num_classes = num_classes
        self.num_features = embed_dim[-1]
        self.stem = Stem16(3, embed_dim[0])
        resolution = (img_size // 16, img_size // 16)
        stages, in_dim = [], embed_dim[0]
        for i in range(len(embed_dim)):
            stride = 2 if i > 0 else 1
            stages.append(LevitStage(in_dim, embed_dim[i], key_dim, depth[i], num_heads[i], attn_ratio, mlp_ratio,
                                     resolution, downsample=stride == 2))
            resolution = tuple((r - 1) // stride + 1 for r in resolution)
            in_dim = embed_dim[i]
        self.stages = nn.Sequential(*stages)
        self.head = NormLinear(self.num_features, num_classes)
        self.head_dist = NormLinear(self.num_features, num_classes)
        self.distilled_training = False

    def forward(self, x):
        x = self.stem(x)
        x = self.stages(x.flatten(2).transpose(1, 2))
        x = x.mean(dim=1)
        x, x_dist = self.head(x), self.head_dist(x)
        if self.distilled_training and self.training:
            return x, x_dist
        return (x + x_dist) / 2


def levit_small() -> nn.Module:
    """64x64 images: a 4x4 token grid, then 2x2 after the attention downsample."""
    return LevitDistilled()


# ---------------------------------------------------------------------------------------------------- DeiT
def resample_abs_pos_embed(posemb, new_size, old_size, num_prefix_tokens=1, interpolation="bicubic", antialias=True):
    """timm ``layers/pos_embed.py``."""
    num_pos_tokens = posemb.shape[1]
    num_new_tokens = new_size[0] * new_size[1] + num_prefix_tokens
    if num_new_tokens == num_pos_tokens and new_size[0] == new_size[1]:
        return posemb
    if num_prefix_tokens:
        posemb_prefix, posemb = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
    else:
        posemb_prefix = None
    embed_dim = posemb.shape[-1]
    orig_dtype = posemb.dtype
    posemb = posemb.float().reshape(1, old_size[0], old_size[1], -1).permute(0, 3, 1, 2)
    posemb = F.interpolate(posemb, size=new_size, mode=interpolation, antialias=antialias)
    posemb = posemb.permute(0, 2, 3, 1).reshape(1, -1, embed_dim).to(orig_dtype)
    if posemb_prefix is not None:
        posemb = torch.cat([posemb_prefix, posemb], dim=1)
    return posemb


class PatchEmbed(nn.Module):
    """timm ``layers/patch_embed.py`` with ``dynamic_img_pad=True``, ``output_fmt='NHWC'``."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.patch_size = (patch_size, patch_size)
        self.grid_size = (img_size // patch_size, img_size // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, patch_size, patch_size)
        self.norm = nn.Identity()

    def forward(self, x):
        _, _, H, W = x.shape
        pad_h = (self.patch_size[0] - H % self.patch_size[0]) % self.patch_size[0]
        pad_w = (self.patch_size[1] - W % self.patch_size[1]) % self.patch_size[1]
        x = F.pad(x, (0, pad_w, 0, pad_h))
        x = self.proj(x).permute(0, 2, 3, 1)
        return self.norm(x)


class VitAttention(nn.Module):
    """timm ``vision_transformer.Attention`` (fused: ``F.scaled_dot_product_attention``)."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.q_norm = nn.Identity()
        self.k_norm = nn.Identity()
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = VitAttention(dim, num_heads)
        self.ls1 = nn.Identity()
        self.drop_path1 = nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = nn.Identity()
        self.drop_path2 = nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class VisionTransformerDistilled(nn.Module):
    def __init__(self, img_size=48, patch_size=8, num_classes=10, embed_dim=32, depth=2, num_heads=4):
        super().__init__()
        self.num_classes = num_classes
        self.num_prefix_tokens = 2
        self.no_embed_class = False
        self.dynamic_img_size = True
        self.patch_embed = PatchEmbed(img_size, patch_size, 3, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + 2, embed_dim))
        self.pos_drop = nn.Dropout(0.0)
        self.patch_drop = nn.Identity()
        self.norm_pre = nn.Identity()
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.fc_norm = nn.Identity()
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(embed_dim, num_classes)
        self.head_dist = nn.Linear(embed_dim, num_classes)
        self.distilled_training = False

    def _pos_embed(self, x):
        B, H, W, C = x.shape
        pos_embed = resample_abs_pos_embed(self.pos_embed, (H, W), self.patch_embed.grid_size,
                                           num_prefix_tokens=self.num_prefix_tokens)
        x = x.view(B, -1, C)
        x = torch.cat((self.cls_token.expand(B, -1, -1), self.dist_token.expand(B, -1, -1), x), dim=1)
        return self.pos_drop(x + pos_embed)

    def forward(self, x):
        x = self.patch_embed(x)
        x = self._pos_embed(x)
        x = self.norm(self.blocks(self.norm_pre(self.patch_drop(x))))
        x, x_dist = x[:, 0], x[:, 1]
        x, x_dist = self.head(self.head_drop(x)), self.head_dist(x_dist)
        if self.distilled_training and self.training:
            return x, x_dist
        return (x + x_dist) / 2


def deit_small() -> nn.Module:
    """Pretrained on 48x48 (a 6x6 grid of 8x8 patches); other sizes pad to the patch and resize the positions
    (smaller grids: antialiased bicubic downsampling)."""
    return VisionTransformerDistilled()


# ---------------------------------------------------------------------------------------------------- HRNet
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        x = self.act1(self.bn1(self.conv1(x)))
        return self.act2(self.bn2(self.conv2(x)) + shortcut)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = nn.ReLU(inplace=True)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.act3 = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.act2(self.bn2(self.conv2(x)))
        return self.act3(self.bn3(self.conv3(x)) + shortcut)


def _layer(block, inplanes, planes, blocks):
    downsample = None
    if inplanes != planes * block.expansion:
        downsample = nn.Sequential(nn.Conv2d(inplanes, planes * block.expansion, 1, bias=False),
                                   nn.BatchNorm2d(planes * block.expansion))
    layers = [block(inplanes, planes, 1, downsample)]
    layers += [block(planes * block.expansion, planes) for _ in range(1, blocks)]
    return nn.Sequential(*layers)


class HighResolutionModule(nn.Module):
    def __init__(self, num_branches, num_blocks, num_in_chs, num_channels, multi_scale_output=True):
        super().__init__()
        self.num_branches = num_branches
        self.num_in_chs = list(num_in_chs)
        self.multi_scale_output = multi_scale_output
        self.branches = nn.ModuleList([_layer(BasicBlock, self.num_in_chs[i], num_channels[i], num_blocks[i])
                                       for i in range(num_branches)])
        self.fuse_layers = self._make_fuse_layers()
        self.fuse_act = nn.ReLU(False)

    def _make_fuse_layers(self):
        chs = self.num_in_chs
        fuse_layers = []
        for i in range(self.num_branches if self.multi_scale_output else 1):
            fuse_layer = []
            for j in range(self.num_branches):
                if j > i:
                    fuse_layer.append(nn.Sequential(nn.Conv2d(chs[j], chs[i], 1, 1, 0, bias=False),
                                                    nn.BatchNorm2d(chs[i]),
                                                    nn.Upsample(scale_factor=2 ** (j - i), mode="nearest")))
                elif j == i:
                    fuse_layer.append(nn.Identity())
                else:
                    convs = []
                    for k in range(i - j):
                        if k == i - j - 1:
                            convs.append(nn.Sequential(nn.Conv2d(chs[j], chs[i], 3, 2, 1, bias=False),
                                                       nn.BatchNorm2d(chs[i])))
                        else:
                            convs.append(nn.Sequential(nn.Conv2d(chs[j], chs[j], 3, 2, 1, bias=False),
                                                       nn.BatchNorm2d(chs[j]), nn.ReLU(False)))
                    fuse_layer.append(nn.Sequential(*convs))
            fuse_layers.append(nn.ModuleList(fuse_layer))
        return nn.ModuleList(fuse_layers)

    def forward(self, x):
        for i, branch in enumerate(self.branches):
            x[i] = branch(x[i])
        x_fuse = []
        for fuse_outer in self.fuse_layers:
            y = None
            for j, f in enumerate(fuse_outer):
                y = f(x[j]) if y is None else y + f(x[j])
            x_fuse.append(self.fuse_act(y))
        return x_fuse


class HighResolutionNet(nn.Module):
    """timm ``HighResolutionNet`` up to ``stage4`` (``features_only``'s four maps, strides 4, 8, 16, 32): inputs
    must be multiples of 32 (the nearest upsamplings by 2, 4, 8 meet the strided branches exactly there)."""

    def __init__(self, stem_width=16, layer1_planes=8, channels=(8, 16, 24, 32), blocks=1):
        super().__init__()
        self.conv1 = nn.Conv2d(3, stem_width, 3, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem_width)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(stem_width, stem_width, 3, 2, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(stem_width)
        self.act2 = nn.ReLU(inplace=True)
        self.layer1 = _layer(Bottleneck, stem_width, layer1_planes, blocks)
        pre = [layer1_planes * Bottleneck.expansion]
        for stage in (2, 3, 4):
            chs = list(channels[:stage])
            setattr(self, f"transition{stage - 1}", self._make_transition_layer(pre, chs))
            setattr(self, f"stage{stage}", nn.Sequential(HighResolutionModule(stage, [blocks] * stage, chs, chs)))
            pre = chs

    @staticmethod
    def _make_transition_layer(pre, cur):
        layers = []
        for i in range(len(cur)):
            if i < len(pre):
                if cur[i] != pre[i]:
                    layers.append(nn.Sequential(nn.Conv2d(pre[i], cur[i], 3, 1, 1, bias=False),
                                                nn.BatchNorm2d(cur[i]), nn.ReLU(inplace=True)))
                else:
                    layers.append(nn.Identity())
            else:
                convs = []
                for j in range(i + 1 - len(pre)):
                    in_chs = pre[-1]
                    out_chs = cur[i] if j == i - len(pre) else in_chs
                    convs.append(nn.Sequential(nn.Conv2d(in_chs, out_chs, 3, 2, 1, bias=False),
                                               nn.BatchNorm2d(out_chs), nn.ReLU(inplace=True)))
                layers.append(nn.Sequential(*convs))
        return nn.ModuleList(layers)

    def forward(self, x):
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.act2(self.bn2(self.conv2(x)))
        x = self.layer1(x)
        xl = [t(x) for t in self.transition1]
        yl = self.stage2(xl)
        xl = [t(yl[-1]) if not isinstance(t, nn.Identity) else yl[i] for i, t in enumerate(self.transition2)]
        yl = self.stage3(xl)
        xl = [t(yl[-1]) if not isinstance(t, nn.Identity) else yl[i] for i, t in enumerate(self.transition3)]
        return self.stage4(xl)


def hrnet_small() -> nn.Module:
    return HighResolutionNet()
