"""timm's FastViT (``timm/models/fastvit.py``) with timm's module structure and ``state_dict`` names: ``stem`` (three
``MobileOneBlock``s), ``stages.<i>`` (``downsample``: a ``PatchEmbed`` whose ``proj`` is a ``ReparamLargeKernelConv``
(``large_conv``, ``small_conv``) then a 1x1 ``MobileOneBlock``; ``pos_emb``: a ``RepConditionalPosEnc`` (``pos_enc``)
in the last stage; ``blocks.<j>``: ``RepMixerBlock`` (``token_mixer.norm``/``mixer``/``layer_scale``, ``mlp``,
``layer_scale``) or, in the last stage, ``AttentionBlock`` (``norm``, ``token_mixer.qkv``/``proj``,
``layer_scale_1``/``_2``)), ``final_conv`` (a ``MobileOneBlock`` with squeeze-excite ``se.fc1``/``fc2``), ``head.fc``.

Train-time form: every ``MobileOneBlock`` sums its kxk conv+BN branches, a 1x1 ``conv_scale`` and a BN-only
``identity`` where shapes allow (RepMixer's ``norm`` is the identity branch alone); ``out += rc(x)`` in place.
``reparameterize_model`` does what ``timm.utils.reparameterize_model`` does to a FastViT: each module's
``reparameterize`` folds the branches into one biased ``reparam_conv`` (RepMixer folds ``x + gamma * (mixer(x) -
norm(x))`` into one depthwise conv with its layer scale; RepCPE folds its skip into the conv), the deploy form of a
timm checkpoint converted for inference. LayerScale2d keeps gamma as (dim, 1, 1), timm's FastViT shape.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .timm_reparam import ClassifierHead, ConvNormAct, _fuse, _identity_kernel


class SqueezeExcite(nn.Module):
    """timm ``SEModule`` (``SqueezeExcite``): mean pool, ``fc1``, ReLU, ``fc2``, sigmoid gate."""

    def __init__(self, channels: int, rd_ratio: float = 1 / 16):
        super().__init__()
        rd = max(1, int(channels * rd_ratio + 0.5))
        self.fc1 = nn.Conv2d(channels, rd, 1)
        self.bn = nn.Identity()
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(rd, channels, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x):
        s = self.fc2(self.act(self.bn(self.fc1(x.mean((2, 3), keepdim=True)))))
        return x * self.gate(s)


def _deploy_conv(like: nn.Conv2d, weight, bias) -> nn.Conv2d:
    conv = nn.Conv2d(like.in_channels, like.out_channels, like.kernel_size, like.stride, like.padding,
                     groups=like.groups, bias=True)
    conv.weight.data.copy_(weight)
    conv.bias.data.copy_(bias)
    return conv


class MobileOneBlock(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size, stride=1, depthwise=False, use_se=False, use_act=True,
                 use_scale_branch=True, num_conv_branches=1):
        super().__init__()
        self.in_chs, self.out_chs, self.kernel_size, self.stride = in_chs, out_chs, kernel_size, stride
        self.groups = in_chs if depthwise else 1
        self.se = SqueezeExcite(out_chs) if use_se else nn.Identity()
        self.reparam_conv = None
        self.identity = nn.BatchNorm2d(in_chs) if in_chs == out_chs and stride == 1 else None
        self.conv_kxk = nn.ModuleList([ConvNormAct(in_chs, out_chs, kernel_size, stride, self.groups)
                                       for _ in range(num_conv_branches)]) if num_conv_branches > 0 else None
        self.conv_scale = (ConvNormAct(in_chs, out_chs, 1, stride, self.groups)
                           if kernel_size > 1 and use_scale_branch else None)
        self.act = nn.GELU() if use_act else nn.Identity()

    def forward(self, x):
        if self.reparam_conv is not None:
            return self.act(self.se(self.reparam_conv(x)))
        identity_out = 0 if self.identity is None else self.identity(x)
        scale_out = 0 if self.conv_scale is None else self.conv_scale(x)
        out = scale_out + identity_out
        if self.conv_kxk is not None:
            for rc in self.conv_kxk:
                out += rc(x)
        return self.act(self.se(out))

    @property
    def id_tensor(self):
        return _identity_kernel(self.in_chs, self.groups, self.kernel_size, torch.empty(0))

    def reparameterize(self):
        if self.reparam_conv is not None:
            return
        k = self.kernel_size
        weight, bias = 0, 0
        if self.conv_scale is not None:
            ws, bs = _fuse(self.conv_scale.bn, F.pad(self.conv_scale.conv.weight, [k // 2] * 4))
            weight, bias = weight + ws, bias + bs
        if self.identity is not None:
            wi, bi = _fuse(self.identity, self.id_tensor)
            weight, bias = weight + wi, bias + bi
        for branch in self.conv_kxk or ():
            wk, bk = _fuse(branch.bn, branch.conv.weight)
            weight, bias = weight + wk, bias + bk
        like = nn.Conv2d(self.in_chs, self.out_chs, k, self.stride, (self.stride - 1 + k - 1) // 2,
                         groups=self.groups)
        self.reparam_conv = _deploy_conv(like, weight, bias)
        del self.conv_kxk, self.conv_scale, self.identity


class ReparamLargeKernelConv(nn.Module):
    def __init__(self, in_chs, out_chs, kernel_size, stride, small_kernel=3):
        super().__init__()
        self.reparam_conv = None
        self.large_conv = ConvNormAct(in_chs, out_chs, kernel_size, stride)
        self.small_conv = ConvNormAct(in_chs, out_chs, small_kernel, stride)
        self.se = nn.Identity()
        self.act = nn.Identity()  # timm's lkc_use_act=False (the original weights' form)

    def forward(self, x):
        if self.reparam_conv is not None:
            out = self.reparam_conv(x)
        else:
            out = self.large_conv(x) + self.small_conv(x)
        return self.act(self.se(out))

    def reparameterize(self):
        k, s = self.large_conv.conv.kernel_size[0], self.small_conv.conv.kernel_size[0]
        wk, bk = _fuse(self.large_conv.bn, self.large_conv.conv.weight)
        ws, bs = _fuse(self.small_conv.bn, F.pad(self.small_conv.conv.weight, [(k - s) // 2] * 4))
        self.reparam_conv = _deploy_conv(self.large_conv.conv, wk + ws, bk + bs)
        del self.large_conv, self.small_conv


class LayerScale2d(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim, 1, 1))

    def forward(self, x):
        return x * self.gamma


class RepMixer(nn.Module):
    def __init__(self, dim, kernel_size=3):
        super().__init__()
        self.dim, self.kernel_size = dim, kernel_size
        self.reparam_conv = None
        self.norm = MobileOneBlock(dim, dim, kernel_size, depthwise=True, use_act=False, use_scale_branch=False,
                                   num_conv_branches=0)
        self.mixer = MobileOneBlock(dim, dim, kernel_size, depthwise=True, use_act=False)
        self.layer_scale = LayerScale2d(dim)

    def forward(self, x):
        if self.reparam_conv is not None:
            return self.reparam_conv(x)
        return x + self.layer_scale(self.mixer(x) - self.norm(x))

    def reparameterize(self):
        self.mixer.reparameterize()
        self.norm.reparameterize()
        gamma = self.layer_scale.gamma
        weight = self.mixer.id_tensor + gamma.unsqueeze(-1) * (self.mixer.reparam_conv.weight
                                                               - self.norm.reparam_conv.weight)
        bias = gamma.squeeze() * (self.mixer.reparam_conv.bias - self.norm.reparam_conv.bias)
        self.reparam_conv = _deploy_conv(self.mixer.reparam_conv, weight, bias)
        del self.mixer, self.norm, self.layer_scale


class ConvMlp(nn.Module):
    def __init__(self, in_chs, hidden_channels, drop=0.0):
        super().__init__()
        self.conv = ConvNormAct(in_chs, in_chs, 7, groups=in_chs)
        self.fc1 = nn.Conv2d(in_chs, hidden_channels, 1)
        self.act = nn.GELU()
        self.fc2 = nn.Conv2d(hidden_channels, in_chs, 1)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(self.conv(x))))))


class RepConditionalPosEnc(nn.Module):
    def __init__(self, dim, spatial_shape=(7, 7)):
        super().__init__()
        self.dim, self.spatial_shape = dim, spatial_shape
        self.reparam_conv = None
        self.pos_enc = nn.Conv2d(dim, dim, spatial_shape, 1, spatial_shape[0] // 2, groups=dim)

    def forward(self, x):
        if self.reparam_conv is not None:
            return self.reparam_conv(x)
        return self.pos_enc(x) + x

    def reparameterize(self):
        weight = _identity_kernel(self.dim, self.dim, self.spatial_shape[0], self.pos_enc.weight)
        self.reparam_conv = _deploy_conv(self.pos_enc, weight + self.pos_enc.weight, self.pos_enc.bias)
        del self.pos_enc


class Attention(nn.Module):
    """timm FastViT ``Attention`` (heads of 32 channels, no qkv bias) over the flattened map; the explicit softmax
    form (``fused_attn`` off) or torch's SDPA."""

    def __init__(self, dim, head_dim=32, fused_attn=False):
        super().__init__()
        self.head_dim, self.num_heads, self.scale = head_dim, dim // head_dim, head_dim ** -0.5
        self.fused_attn = fused_attn
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)

    def forward(self, x):
        B, C, H, W = x.shape
        N = H * W
        x = x.flatten(2).transpose(-2, -1)
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            attn = self.attn_drop((q * self.scale @ k.transpose(-2, -1)).softmax(dim=-1))
            x = attn @ v
        x = self.proj_drop(self.proj(x.transpose(1, 2).reshape(B, N, C)))
        return x.transpose(-2, -1).reshape(B, C, H, W)


class RepMixerBlock(nn.Module):
    def __init__(self, dim, mlp_ratio, drop=0.0):
        super().__init__()
        self.token_mixer = RepMixer(dim)
        self.mlp = ConvMlp(dim, int(dim * mlp_ratio), drop)
        self.layer_scale = LayerScale2d(dim)
        self.drop_path = nn.Identity()

    def forward(self, x):
        x = self.token_mixer(x)
        return x + self.drop_path(self.layer_scale(self.mlp(x)))


class AttentionBlock(nn.Module):
    def __init__(self, dim, mlp_ratio, drop=0.0, fused_attn=False):
        super().__init__()
        self.norm = nn.BatchNorm2d(dim)
        self.token_mixer = Attention(dim, fused_attn=fused_attn)
        self.layer_scale_1 = LayerScale2d(dim)
        self.drop_path1 = nn.Identity()
        self.mlp = ConvMlp(dim, int(dim * mlp_ratio), drop)
        self.layer_scale_2 = LayerScale2d(dim)
        self.drop_path2 = nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.layer_scale_1(self.token_mixer(self.norm(x))))
        return x + self.drop_path2(self.layer_scale_2(self.mlp(x)))


class PatchEmbed(nn.Module):
    def __init__(self, patch_size, stride, in_chs, embed_dim):
        super().__init__()
        self.proj = nn.Sequential(ReparamLargeKernelConv(in_chs, embed_dim, patch_size, stride),
                                  MobileOneBlock(embed_dim, embed_dim, 1))

    def forward(self, x):
        return self.proj(x)


class FastVitStage(nn.Module):
    def __init__(self, dim, dim_out, depth, token_mixer_type, downsample, pos_emb, mlp_ratio, drop, fused_attn):
        super().__init__()
        self.downsample = PatchEmbed(7, 2, dim, dim_out) if downsample else nn.Identity()
        self.pos_emb = RepConditionalPosEnc(dim_out) if pos_emb else nn.Identity()
        make = ((lambda: RepMixerBlock(dim_out, mlp_ratio, drop)) if token_mixer_type == "repmixer"
                else (lambda: AttentionBlock(dim_out, mlp_ratio, drop, fused_attn)))
        self.blocks = nn.Sequential(*[make() for _ in range(depth)])

    def forward(self, x):
        return self.blocks(self.pos_emb(self.downsample(x)))


class FastVit(nn.Module):
    """``fastvit_sa``-style: RepMixer stages then an attention stage with RepCPE; ``final_conv`` widens by
    ``cls_ratio`` 2 with squeeze-excite."""

    def __init__(self, layers=(1, 1, 1, 1), embed_dims=(8, 16, 32, 64), mlp_ratios=(3, 3, 3, 3),
                 token_mixers=("repmixer", "repmixer", "repmixer", "attention"), pos_embs=(False, False, False, True),
                 num_classes=10, drop_rate=0.0, fused_attn=False):
        super().__init__()
        d0 = embed_dims[0]
        self.stem = nn.Sequential(MobileOneBlock(3, d0, 3, 2), MobileOneBlock(d0, d0, 3, 2, depthwise=True),
                                  MobileOneBlock(d0, d0, 1))
        stages, prev = [], d0
        for i, depth in enumerate(layers):
            stages.append(FastVitStage(prev, embed_dims[i], depth, token_mixers[i], i > 0, pos_embs[i],
                                       mlp_ratios[i], drop_rate, fused_attn))
            prev = embed_dims[i]
        self.stages = nn.Sequential(*stages)
        self.final_conv = MobileOneBlock(prev, 2 * prev, 3, depthwise=True, use_se=True)
        self.head = ClassifierHead(2 * prev, num_classes)

    def forward(self, x):
        return self.head(self.final_conv(self.stages(self.stem(x))))



def reparameterize_model(model: nn.Module) -> nn.Module:
    """timm ``utils.reparameterize_model``: every module with a ``reparameterize`` folded, in ``modules()`` order
    (a RepMixer folds its own MobileOne blocks first; a folded block returns at once)."""
    for module in list(model.modules()):
        if hasattr(module, "reparameterize"):
            module.reparameterize()
    return model


def fastvit_small() -> FastVit:
    return FastVit()


def fastvit_sdpa_small() -> FastVit:
    return FastVit(fused_attn=True)
