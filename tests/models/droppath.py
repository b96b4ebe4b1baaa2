"""Stochastic depth and functional dropout as the libraries write them (no torchvision, timm or transformers wheel
here): torchvision's ``stochastic_depth``/``StochasticDepth`` (``torchvision/ops/stochastic_depth.py``), timm's
``drop_path``/``DropPath`` (``timm/layers/drop.py``), the old timm form (``keep_prob + rand``, floored), blocks that
use them (torchvision's ConvNeXt ``CNBlock``, a timm ViT/Swin-style block whose attention runs
``F.scaled_dot_product_attention(..., dropout_p=self.attn_drop.p if self.training else 0.)``) and Hugging Face
attention with functional dropout (BART's ``p=self.dropout, training=self.training``; CLIP's ``p=0.0 if not
self.training else self.dropout``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


# ---------------------------------------------------------------------------------------------------- torchvision
def stochastic_depth(input: Tensor, p: float, mode: str, training: bool = True) -> Tensor:
    """torchvision.ops.stochastic_depth (torchvision 0.2x), line for line."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
    if mode not in ["batch", "row"]:
        raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input

    survival_rate = 1.0 - p
    if mode == "row":
        size = [input.shape[0]] + [1] * (input.ndim - 1)
    else:
        size = [1] * input.ndim
    noise = torch.empty(size, dtype=input.dtype, device=input.device)
    noise = noise.bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return input * noise


class StochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth."""

    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, input: Tensor) -> Tensor:
        return stochastic_depth(input, self.p, self.mode, self.training)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(p={self.p}, mode={self.mode})"


# ---------------------------------------------------------------------------------------------------- timm
def drop_path(x, drop_prob: float = 0., training: bool = False, scale_by_keep: bool = True):
    """timm.layers.drop.drop_path."""
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    """timm.layers.drop.DropPath."""

    def __init__(self, drop_prob: float = 0., scale_by_keep: bool = True):
        super(DropPath, self).__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)

    def extra_repr(self):
        return f'drop_prob={round(self.drop_prob, 3):0.3f}'


class OldDropPath(nn.Module):
    """timm <= 0.4's form, copied into many repositories: ``keep_prob + rand`` floored, the input divided first."""

    def __init__(self, drop_prob=None):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0. or not self.training:
            return x
        keep_prob = 1 - self.drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        random_tensor = keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)
        random_tensor.floor_()  # binarize
        return x.div(keep_prob) * random_tensor


class KeepProbDropPath(nn.Module):
    """A look-alike whose ``p`` is the keep probability: what it drops at is not its attribute (not recognised)."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training:
            return x
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(self.p)
        return x * mask / self.p


# ---------------------------------------------------------------------------------------------------- blocks
class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    """torchvision.models.convnext.CNBlock (NCHW in, NCHW out; the branch computed channels-last)."""

    def __init__(self, dim, layer_scale: float, stochastic_depth_prob: float) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
                                   Permute([0, 2, 3, 1]), nn.LayerNorm(dim, eps=1e-6),
                                   nn.Linear(in_features=dim, out_features=4 * dim, bias=True), nn.GELU(),
                                   nn.Linear(in_features=4 * dim, out_features=dim, bias=True), Permute([0, 3, 1, 2]))
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

    def forward(self, input: Tensor) -> Tensor:
        result = self.layer_scale * self.block(input)
        result = self.stochastic_depth(result)
        result += input
        return result


class Attention(nn.Module):
    """timm.models.vision_transformer.Attention with ``fused_attn``: dropout inside SDPA, following the flag."""

    def __init__(self, dim, num_heads=2, qkv_bias=True, attn_drop=0., proj_drop=0.):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class Mlp(nn.Module):
    def __init__(self, dim, hidden, drop=0.):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Block(nn.Module):
    """timm's pre-norm transformer block (ViT/Swin-style): two residual branches, one DropPath each."""

    def __init__(self, dim=8, num_heads=2, attn_drop=0., drop_path=0.):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads, attn_drop=attn_drop)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0. else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 2 * dim)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, x):
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))


# ---------------------------------------------------------------------------------------------------- Hugging Face
class BartAttention(nn.Module):
    """transformers' BartAttention (eager): the attention probabilities dropped by ``nn.functional.dropout`` with
    ``training=self.training``; CLIP's form (``clip_style``) passes ``p=0.0`` in eval."""

    def __init__(self, embed_dim=8, num_heads=2, dropout=0.0, clip_style=False):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.clip_style = clip_style
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, tensor, seq_len, bsz):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self._shape(self.q_proj(hidden_states) * self.scaling, tgt_len, bsz)
        key_states = self._shape(self.k_proj(hidden_states), tgt_len, bsz)
        value_states = self._shape(self.v_proj(hidden_states), tgt_len, bsz)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        if self.clip_style:
            attn_probs = nn.functional.dropout(attn_weights, p=0.0 if not self.training else self.dropout,
                                               training=self.training)
        else:
            attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)
        attn_output = torch.matmul(attn_probs, value_states)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output)


class FunctionalDropout(nn.Module):
    """A parameter-free module whose forward is one functional dropout: it gets a ``Dropout`` layer in the tree."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)
