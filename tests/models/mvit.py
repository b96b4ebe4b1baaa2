"""Twin of torchvision's ``MViT`` as ``mvit_v2_s`` builds it (``torchvision.models.video.mvit``: module structure and
``state_dict`` names ``conv_proj``, ``pos_encoding.class_token``, ``blocks.<i>.norm1``/``attn.qkv``/
``attn.project.0``/``attn.pool_{q,k,v}.pool``/``attn.pool_{q,k,v}.norm_act.0``/``attn.rel_pos_{h,w,t}``/``norm2``/
``mlp.<0,3>``/``project``, ``norm``, ``head.1``), four narrow blocks on 4 frames of 32x32.

Stresses: pooled attention (q, k and v each pooled by a depthwise ``Conv3d`` over (T, H, W) per head, the class
token split off by ``tensor_split`` and put back by ``cat``, then a LayerNorm); MViT v2's decomposed relative
positions (distance tables from ``arange`` and float ratios, ``.long()`` gathers from the three tables, resized by a
linear ``interpolate`` where the map is not square, two einsums and a batched matmul, an 8-d broadcast sum, added
into ``attn[:, :, 1:, 1:]`` in place); the residual pooling added in place into the attention output's tokens but the
class token (``x[:, :, 1:, :] += q[:, :, 1:, :]``); the skip path's ``MaxPool3d`` on tokens; the projection after
attention where the width changes; the class token read at the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import List, Optional, Sequence, Tuple

import torch
from torch import nn

from tests.zoo.twins._mobile_ops import StochasticDepth
from tests.zoo.twins.vit import MLP


@dataclass
class MSBlockConfig:
    num_heads: int
    input_channels: int
    output_channels: int
    kernel_q: List[int]
    kernel_kv: List[int]
    stride_q: List[int]
    stride_kv: List[int]


def _prod(s: Sequence[int]) -> int:
    return math.prod(s)


def _unsqueeze(x, target_dim, expand_dim):
    tensor_dim = x.dim()
    if tensor_dim == target_dim - 1:
        x = x.unsqueeze(expand_dim)
    elif tensor_dim != target_dim:
        raise ValueError(f"Unsupported input dimension {x.shape}")
    return x, tensor_dim


def _squeeze(x, target_dim, expand_dim, tensor_dim):
    return x.squeeze(expand_dim) if tensor_dim == target_dim - 1 else x


class Pool(nn.Module):
    """Pools tokens (B, heads, 1 + T*H*W, C) over (T, H, W), the class token left out; then an optional norm."""

    def __init__(self, pool: nn.Module, norm: Optional[nn.Module], activation=None, norm_before_pool=False):
        super().__init__()
        self.pool = pool
        layers = [m for m in (norm, activation) if m is not None]
        self.norm_act = nn.Sequential(*layers) if layers else None
        self.norm_before_pool = norm_before_pool

    def forward(self, x, thw: Tuple[int, int, int]):
        x, tensor_dim = _unsqueeze(x, 4, 1)
        class_token, x = torch.tensor_split(x, indices=(1,), dim=2)
        x = x.transpose(2, 3)
        B, N, C = x.shape[:3]
        x = x.reshape((B * N, C) + tuple(thw)).contiguous()
        if self.norm_before_pool and self.norm_act is not None:
            x = self.norm_act(x)
        x = self.pool(x)
        T, H, W = x.shape[2:]
        x = x.reshape(B, N, C, -1).transpose(2, 3)
        x = torch.cat((class_token, x), dim=2)
        if not self.norm_before_pool and self.norm_act is not None:
            x = self.norm_act(x)
        return _squeeze(x, 4, 1, tensor_dim), (T, H, W)


def _interpolate(embedding, d: int):
    if embedding.shape[0] == d:
        return embedding
    resized = nn.functional.interpolate(embedding.permute(1, 0).unsqueeze(0), size=d, mode="linear")
    return resized.squeeze(0).permute(1, 0)


def _distances(q_n: int, k_n: int):
    """Relative distance of each query position to each key position, both scaled to the longer axis."""
    q_ratio, k_ratio = max(k_n / q_n, 1.0), max(q_n / k_n, 1.0)
    return torch.arange(q_n)[:, None] * q_ratio - (torch.arange(k_n)[None, :] + (1.0 - k_n)) * k_ratio


def _add_rel_pos(attn, q, q_thw, k_thw, rel_pos_h, rel_pos_w, rel_pos_t):
    q_t, q_h, q_w = q_thw
    k_t, k_h, k_w = k_thw
    Rh = _interpolate(rel_pos_h, int(2 * max(q_h, k_h) - 1))[_distances(q_h, k_h).long()]
    Rw = _interpolate(rel_pos_w, int(2 * max(q_w, k_w) - 1))[_distances(q_w, k_w).long()]
    Rt = _interpolate(rel_pos_t, int(2 * max(q_t, k_t) - 1))[_distances(q_t, k_t).long()]

    B, n_head, _, dim = q.shape
    r_q = q[:, :, 1:].reshape(B, n_head, q_t, q_h, q_w, dim)
    rel_h_q = torch.einsum("bythwc,hkc->bythwk", r_q, Rh)
    rel_w_q = torch.einsum("bythwc,wkc->bythwk", r_q, Rw)
    r_q = r_q.permute(2, 0, 1, 3, 4, 5).reshape(q_t, B * n_head * q_h * q_w, dim)
    rel_q_t = torch.matmul(r_q, Rt.transpose(1, 2)).transpose(0, 1)
    rel_q_t = rel_q_t.view(B, n_head, q_h, q_w, q_t, k_t).permute(0, 1, 4, 2, 3, 5)
    rel_pos = (
        rel_h_q[:, :, :, :, :, None, :, None]
        + rel_w_q[:, :, :, :, :, None, None, :]
        + rel_q_t[:, :, :, :, :, :, None, None]
    ).reshape(B, n_head, q_t * q_h * q_w, k_t * k_h * k_w)
    attn[:, :, 1:, 1:] += rel_pos
    return attn


def _add_shortcut(x, shortcut, residual_with_cls_embed: bool):
    if residual_with_cls_embed:
        x.add_(shortcut)
    else:
        x[:, :, 1:, :] += shortcut[:, :, 1:, :]
    return x


def _conv_pool(head_dim, kernel, stride, norm_layer):
    conv = nn.Conv3d(head_dim, head_dim, kernel, stride=stride, padding=[k // 2 for k in kernel], groups=head_dim,
                     bias=False)
    return Pool(conv, norm_layer(head_dim))


class MultiscaleAttention(nn.Module):
    def __init__(self, input_size, embed_dim, output_dim, num_heads, kernel_q, kernel_kv, stride_q, stride_kv,
                 residual_pool, residual_with_cls_embed, rel_pos_embed, dropout=0.0, norm_layer=nn.LayerNorm):
        super().__init__()
        self.embed_dim, self.output_dim, self.num_heads = embed_dim, output_dim, num_heads
        self.head_dim = output_dim // num_heads
        self.scaler = 1.0 / math.sqrt(self.head_dim)
        self.residual_pool, self.residual_with_cls_embed = residual_pool, residual_with_cls_embed
        self.qkv = nn.Linear(embed_dim, 3 * output_dim)
        layers: List[nn.Module] = [nn.Linear(output_dim, output_dim)]
        if dropout > 0.0:
            layers.append(nn.Dropout(dropout, inplace=True))
        self.project = nn.Sequential(*layers)
        self.pool_q = self.pool_k = self.pool_v = None
        if _prod(kernel_q) > 1 or _prod(stride_q) > 1:
            self.pool_q = _conv_pool(self.head_dim, kernel_q, stride_q, norm_layer)
        if _prod(kernel_kv) > 1 or _prod(stride_kv) > 1:
            self.pool_k = _conv_pool(self.head_dim, kernel_kv, stride_kv, norm_layer)
            self.pool_v = _conv_pool(self.head_dim, kernel_kv, stride_kv, norm_layer)
        self.rel_pos_h = self.rel_pos_w = self.rel_pos_t = None
        if rel_pos_embed:
            size = max(input_size[1:])
            q_size = size // stride_q[1] if len(stride_q) > 0 else size
            kv_size = size // stride_kv[1] if len(stride_kv) > 0 else size
            spatial_dim = 2 * max(q_size, kv_size) - 1
            self.rel_pos_h = nn.Parameter(torch.zeros(spatial_dim, self.head_dim))
            self.rel_pos_w = nn.Parameter(torch.zeros(spatial_dim, self.head_dim))
            self.rel_pos_t = nn.Parameter(torch.zeros(2 * input_size[0] - 1, self.head_dim))

    def forward(self, x, thw):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).transpose(1, 3).unbind(dim=2)
        k_thw = thw
        if self.pool_k is not None:
            k, k_thw = self.pool_k(k, thw)
        if self.pool_v is not None:
            v = self.pool_v(v, thw)[0]
        if self.pool_q is not None:
            q, thw = self.pool_q(q, thw)
        attn = torch.matmul(self.scaler * q, k.transpose(2, 3))
        if self.rel_pos_h is not None:
            attn = _add_rel_pos(attn, q, thw, k_thw, self.rel_pos_h, self.rel_pos_w, self.rel_pos_t)
        attn = attn.softmax(dim=-1)
        x = torch.matmul(attn, v)
        if self.residual_pool:
            _add_shortcut(x, q, self.residual_with_cls_embed)
        x = x.transpose(1, 2).reshape(B, -1, self.output_dim)
        return self.project(x), thw


class MultiscaleBlock(nn.Module):
    def __init__(self, input_size, cnf: MSBlockConfig, residual_pool, residual_with_cls_embed, rel_pos_embed,
                 proj_after_attn, dropout=0.0, stochastic_depth_prob=0.0, norm_layer=nn.LayerNorm):
        super().__init__()
        self.proj_after_attn = proj_after_attn
        self.pool_skip = None
        if _prod(cnf.stride_q) > 1:
            kernel_skip = [s + 1 if s > 1 else s for s in cnf.stride_q]
            self.pool_skip = Pool(nn.MaxPool3d(kernel_skip, stride=cnf.stride_q,
                                               padding=[k // 2 for k in kernel_skip]), None)
        attn_dim = cnf.output_channels if proj_after_attn else cnf.input_channels
        self.norm1 = norm_layer(cnf.input_channels)
        self.norm2 = norm_layer(attn_dim)
        self.needs_transposal = isinstance(self.norm1, nn.BatchNorm1d)
        self.attn = MultiscaleAttention(
            input_size, cnf.input_channels, attn_dim, cnf.num_heads, kernel_q=cnf.kernel_q, kernel_kv=cnf.kernel_kv,
            stride_q=cnf.stride_q, stride_kv=cnf.stride_kv, rel_pos_embed=rel_pos_embed, residual_pool=residual_pool,
            residual_with_cls_embed=residual_with_cls_embed, dropout=dropout, norm_layer=norm_layer)
        self.mlp = MLP(attn_dim, [4 * attn_dim, cnf.output_channels], activation_layer=nn.GELU, dropout=dropout)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.project = None
        if cnf.input_channels != cnf.output_channels:
            self.project = nn.Linear(cnf.input_channels, cnf.output_channels)

    def forward(self, x, thw):
        x_norm1 = self.norm1(x.transpose(1, 2)).transpose(1, 2) if self.needs_transposal else self.norm1(x)
        x_attn, thw_new = self.attn(x_norm1, thw)
        x = x if self.project is None or not self.proj_after_attn else self.project(x_norm1)
        x_skip = x if self.pool_skip is None else self.pool_skip(x, thw)[0]
        x = x_skip + self.stochastic_depth(x_attn)
        x_norm2 = self.norm2(x.transpose(1, 2)).transpose(1, 2) if self.needs_transposal else self.norm2(x)
        x_proj = x if self.project is None or self.proj_after_attn else self.project(x_norm2)
        return x_proj + self.stochastic_depth(self.mlp(x_norm2)), thw_new


class PositionalEncoding(nn.Module):
    def __init__(self, embed_size, spatial_size, temporal_size, rel_pos_embed):
        super().__init__()
        self.spatial_size, self.temporal_size = spatial_size, temporal_size
        self.class_token = nn.Parameter(torch.zeros(embed_size))
        self.spatial_pos = self.temporal_pos = self.class_pos = None
        if not rel_pos_embed:
            self.spatial_pos = nn.Parameter(torch.zeros(spatial_size[0] * spatial_size[1], embed_size))
            self.temporal_pos = nn.Parameter(torch.zeros(temporal_size, embed_size))
            self.class_pos = nn.Parameter(torch.zeros(embed_size))

    def forward(self, x):
        class_token = self.class_token.expand(x.size(0), -1).unsqueeze(1)
        x = torch.cat((class_token, x), dim=1)
        if self.spatial_pos is not None:
            hw_size, embed_size = self.spatial_pos.shape
            pos_embedding = torch.repeat_interleave(self.temporal_pos, hw_size, dim=0)
            pos_embedding.add_(self.spatial_pos.unsqueeze(0).expand(self.temporal_size, -1, -1).reshape(-1, embed_size))
            pos_embedding = torch.cat((self.class_pos.unsqueeze(0), pos_embedding), dim=0).unsqueeze(0)
            x.add_(pos_embedding)
        return x


class MViT(nn.Module):
    def __init__(self, spatial_size, temporal_size, block_setting, residual_pool, residual_with_cls_embed,
                 rel_pos_embed, proj_after_attn, dropout=0.5, attention_dropout=0.0, stochastic_depth_prob=0.0,
                 num_classes=400, patch_embed_kernel=(3, 7, 7), patch_embed_stride=(2, 4, 4),
                 patch_embed_padding=(1, 3, 3)):
        super().__init__()
        norm_layer = partial(nn.LayerNorm, eps=1e-6)
        self.conv_proj = nn.Conv3d(3, block_setting[0].input_channels, kernel_size=patch_embed_kernel,
                                   stride=patch_embed_stride, padding=patch_embed_padding)
        input_size = [size // stride for size, stride in zip((temporal_size,) + tuple(spatial_size),
                                                             self.conv_proj.stride)]
        self.pos_encoding = PositionalEncoding(block_setting[0].input_channels, (input_size[1], input_size[2]),
                                               input_size[0], rel_pos_embed)
        self.blocks = nn.ModuleList()
        total = len(block_setting)
        for stage_block_id, cnf in enumerate(block_setting):
            self.blocks.append(MultiscaleBlock(
                input_size=input_size, cnf=cnf, residual_pool=residual_pool,
                residual_with_cls_embed=residual_with_cls_embed, rel_pos_embed=rel_pos_embed,
                proj_after_attn=proj_after_attn, dropout=attention_dropout,
                stochastic_depth_prob=stochastic_depth_prob * stage_block_id / (total - 1.0), norm_layer=norm_layer))
            if len(cnf.stride_q) > 0:
                input_size = [size // stride for size, stride in zip(input_size, cnf.stride_q)]
        self.norm = norm_layer(block_setting[-1].output_channels)
        self.head = nn.Sequential(nn.Dropout(dropout, inplace=True),
                                  nn.Linear(block_setting[-1].output_channels, num_classes))

    def forward(self, x):
        x = _unsqueeze(x, 5, 2)[0]
        x = self.conv_proj(x)
        x = x.flatten(2).transpose(1, 2)
        x = self.pos_encoding(x)
        thw = (self.pos_encoding.temporal_size,) + self.pos_encoding.spatial_size
        for block in self.blocks:
            x, thw = block(x, thw)
        x = self.norm(x)
        return self.head(x[:, 0])


def _settings():
    """mvit_v2_s's pattern, narrowed: a kv stride that shrinks with the map, q pooled (stride 2) where the width
    doubles, then plain 3x3x3 pooling with stride 1."""
    rows = [  # heads, in, out, stride_q, stride_kv
        (1, 16, 16, [1, 1, 1], [1, 4, 4]),
        (2, 16, 32, [1, 2, 2], [1, 2, 2]),
        (2, 32, 32, [1, 1, 1], [1, 2, 2]),
        (4, 32, 64, [1, 2, 2], [1, 1, 1]),
    ]
    return [MSBlockConfig(h, i, o, [3, 3, 3], [3, 3, 3], sq, skv) for h, i, o, sq, skv in rows]


def mvit_v2_small(spatial_size=(32, 32), temporal_size=4, num_classes=10):
    """``mvit_v2_s``'s options (residual pooling without the class token, relative positions, projection after
    attention) at 16-64 channels; dropout 0 so train mode is deterministic."""
    return MViT(spatial_size, temporal_size, _settings(), residual_pool=True, residual_with_cls_embed=False,
                rel_pos_embed=True, proj_after_attn=True, dropout=0.0, num_classes=num_classes)


def mvit_v2_wide(num_classes=10):
    """Frames of 32x48: the relative-position tables are sized for the longer side, so the width's table is used
    as is and the height's is resized by ``interpolate(mode="linear")`` in every block."""
    return mvit_v2_small(spatial_size=(32, 48), num_classes=num_classes)


def mvit_v1_small(num_classes=10):
    """``mvit_v1_b``'s options: absolute positions (spatial, temporal, class, added in place), no residual pooling."""
    return MViT((32, 32), 4, _settings(), residual_pool=False, residual_with_cls_embed=False, rel_pos_embed=False,
                proj_after_attn=False, dropout=0.0, num_classes=num_classes)
