"""Swin Transformer v1 (swin_t/s/b) and v2 (swin_v2_t/s/b) in MLX, channels-last, loading torchvision checkpoints.

torchvision's names: ``features.0.0`` (patch conv), ``features.0.2`` (LayerNorm), stages ``features.1, 3, 5, 7``
of blocks ``<j>.{norm1, attn.{qkv, proj, relative_position_bias_table | logit_scale, cpb_mlp.0/2}, norm2, mlp.0/3}``,
patch merging ``features.2, 4, 6`` (``reduction``, ``norm``), ``norm``, ``head``. The position buffers
(``relative_position_index``, v2's ``relative_coords_table``) are part of the checkpoint, as in torch.

Shifted-window attention follows torchvision exactly: maps padded (bottom/right) to multiples of the window, no
shift where the window covers the padded map, cyclic shift with the -100 attention mask, crop after. Any input size
works (patch merging pads odd sizes). Example::

    >>> model = zoo.create("swin_t", num_classes=10)
    >>> model(mx.zeros((1, 64, 96, 3))).shape
    (1, 10)
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

import porter.layers.functional as F
from porter.layers import Conv2d
from porter.layers import GELU, LayerNorm  # native CPU kernels (MLX's own are 15-35x slower)

from ._blocks import StochasticDepth
from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from ._transformer import BufferMixin, attention, mlp, relative_position_index
from .registry import register_model


def _same(w: np.ndarray) -> np.ndarray:
    return w


@lru_cache(maxsize=64)
def _shift_mask(pad_h: int, pad_w: int, window: tuple, shift: tuple) -> np.ndarray:
    """torchvision's attention mask of the shifted windows: ``(num_windows, N, N)``, -100 between positions that
    came from different regions of the cyclically shifted map, else 0."""
    (wh, ww), (sh, sw) = window, shift
    regions = np.zeros((pad_h, pad_w), np.float32)
    count = 0
    # torchvision's slices, including their reading of a zero shift (-0 == 0)
    for h in ((0, -wh), (-wh, -sh), (-sh, None)):
        for w in ((0, -ww), (-ww, -sw), (-sw, None)):
            regions[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    regions = regions.reshape(pad_h // wh, wh, pad_w // ww, ww).transpose(0, 2, 1, 3).reshape(-1, wh * ww)
    diff = regions[:, None, :] - regions[:, :, None]
    return np.where(diff != 0, -100.0, 0.0).astype(np.float32)


class ShiftedWindowAttention(BufferMixin, nn.Module):
    """torchvision's ``ShiftedWindowAttention`` (v1): window attention with a learned relative position table.

    Args:
        dim (int): channels.
        window_size (sequence of 2 ints): window height and width.
        shift_size (sequence of 2 ints): cyclic shift (0 for regular windows).
        num_heads (int): heads; must divide ``dim``.
        qkv_bias (bool, optional): bias of ``qkv``. Default: ``True``.
        proj_bias (bool, optional): bias of ``proj``. Default: ``True``.
        attention_dropout (float, optional): dropout on attention weights. Default: ``0.0``.
        dropout (float, optional): dropout after ``proj``. Default: ``0.0``.
    Shape: ``(N, H, W, dim)`` -> same.
    """

    _buffers = ("relative_position_index",)

    def __init__(self, dim: int, window_size: Sequence[int], shift_size: Sequence[int], num_heads: int,
                 qkv_bias: bool = True, proj_bias: bool = True, attention_dropout: float = 0.0, dropout: float = 0.0):
        super().__init__()
        if len(window_size) != 2 or len(shift_size) != 2:
            raise ValueError(f"[{type(self).__name__}] 'window_size' and 'shift_size' must be of length 2 but got "
                             f"{list(window_size)} and {list(shift_size)}.")
        if num_heads <= 0 or dim % num_heads:
            raise ValueError(f"[{type(self).__name__}] 'dim' ({dim}) must be divisible by 'num_heads' ({num_heads}).")
        self.window_size, self.shift_size = tuple(window_size), tuple(shift_size)
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.attention_dropout = attention_dropout
        self.proj_drop = nn.Dropout(dropout)
        self.relative_position_index = mx.array(relative_position_index(*self.window_size).reshape(-1), mx.int32)
        self._define_table()
        self._freeze_buffers()

    def _define_table(self):
        wh, ww = self.window_size
        self.relative_position_bias_table = mx.clip(0.02 * mx.random.normal(((2 * wh - 1) * (2 * ww - 1),
                                                                              self.num_heads)), -0.04, 0.04)

    def torch_parameter_specs(self) -> list:
        names = ["relative_position_bias_table", "relative_position_index"]
        return [(n, tuple(self[n].shape), _same) for n in names]

    def _bias_table(self) -> mx.array:
        return self.relative_position_bias_table

    def relative_position_bias(self) -> mx.array:
        """``(1, heads, N, N)`` with ``N = wh * ww``."""
        n = self.window_size[0] * self.window_size[1]
        bias = self._bias_table()[self.relative_position_index].reshape(n, n, -1)
        return bias.transpose(2, 0, 1)[None]

    def _qkv(self, x: mx.array) -> mx.array:
        return self.qkv(x)

    def _scaled_qk(self, q: mx.array, k: mx.array):
        """(q, k, scale) for ``softmax(q @ k^T * scale + bias)``."""
        return q, k, q.shape[-1] ** -0.5

    def __call__(self, x: mx.array) -> mx.array:
        b, h, w, c = x.shape
        wh, ww = self.window_size
        pad_b, pad_r = (wh - h % wh) % wh, (ww - w % ww) % ww
        if pad_b or pad_r:
            x = mx.pad(x, [(0, 0), (0, pad_b), (0, pad_r), (0, 0)])
        ph, pw = h + pad_b, w + pad_r
        # no shift along a dim the window already covers
        shift = (0 if wh >= ph else self.shift_size[0], 0 if ww >= pw else self.shift_size[1])
        if sum(shift) > 0:
            x = mx.roll(x, (-shift[0], -shift[1]), axis=(1, 2))
        nh, nw = ph // wh, pw // ww
        n = wh * ww
        x = x.reshape(b, nh, wh, nw, ww, c).transpose(0, 1, 3, 2, 4, 5).reshape(b * nh * nw, n, c)
        heads = self.num_heads
        qkv = self._qkv(x).reshape(b * nh * nw, n, 3, heads, c // heads).transpose(2, 0, 3, 1, 4)
        q, k, scale = self._scaled_qk(qkv[0], qkv[1])
        bias = self.relative_position_bias()  # (1, heads, N, N)
        if sum(shift) > 0:
            mask = mx.array(_shift_mask(ph, pw, (wh, ww), shift))[:, None]  # (windows, 1, N, N)
            bias = mx.broadcast_to((bias + mask)[None], (b, nh * nw, heads, n, n)).reshape(-1, heads, n, n)
        x = attention(q, k, qkv[2], scale=scale, bias=bias.astype(q.dtype), dropout_p=self.attention_dropout,
                      training=self.training)
        x = self.proj_drop(self.proj(x.transpose(0, 2, 1, 3).reshape(b * nh * nw, n, c)))
        x = x.reshape(b, nh, nw, wh, ww, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, ph, pw, c)
        if sum(shift) > 0:
            x = mx.roll(x, shift, axis=(1, 2))
        return x[:, :h, :w, :] if pad_b or pad_r else x


class ShiftedWindowAttentionV2(ShiftedWindowAttention):
    """torchvision's ``ShiftedWindowAttentionV2``: cosine attention scaled by a per-head ``logit_scale`` (clamped
    at log 100), the relative position bias from a small MLP (``cpb_mlp``) on log-spaced coordinates
    (``16 * sigmoid``), and no key bias (the middle third of ``qkv.bias`` is ignored). Arguments as v1; both
    window sizes must be at least 2."""

    _buffers = ("relative_position_index", "relative_coords_table")

    def _define_table(self):
        wh, ww = self.window_size
        if wh < 2 or ww < 2:
            raise ValueError(f"[ShiftedWindowAttentionV2] 'window_size' must be at least 2 in each dim but got "
                             f"{list(self.window_size)} (the coordinate table divides by window_size - 1).")
        self.logit_scale = mx.log(10 * mx.ones((self.num_heads, 1, 1)))
        self.cpb_mlp = [nn.Linear(2, 512), nn.ReLU(), nn.Linear(512, self.num_heads, bias=False)]
        rh = np.arange(-(wh - 1), wh, dtype=np.float32) / (wh - 1)
        rw = np.arange(-(ww - 1), ww, dtype=np.float32) / (ww - 1)
        table = np.stack(np.meshgrid(rh, rw, indexing="ij"), axis=-1)[None] * 8  # normalized to [-8, 8]
        table = np.sign(table) * np.log2(np.abs(table) + 1.0) / 3.0
        self.relative_coords_table = mx.array(table.astype(np.float32))
        dim = self.qkv.weight.shape[1]
        self._key_bias_mask = np.concatenate([np.ones(dim), np.zeros(dim), np.ones(dim)]).astype(np.float32)

    def torch_parameter_specs(self) -> list:
        names = ["logit_scale", "relative_coords_table", "relative_position_index"]
        return [(n, tuple(self[n].shape), _same) for n in names]

    def _bias_table(self) -> mx.array:
        return apply_sequence(self.cpb_mlp, self.relative_coords_table).reshape(-1, self.num_heads)

    def relative_position_bias(self) -> mx.array:
        return 16 * F.sigmoid(super().relative_position_bias())

    def _qkv(self, x: mx.array) -> mx.array:
        if "bias" not in self.qkv:
            return self.qkv(x)
        bias = self.qkv.bias * mx.array(self._key_bias_mask, self.qkv.bias.dtype)  # torchvision zeroes the key bias
        return mx.addmm(bias, x, self.qkv.weight.T)

    def _scaled_qk(self, q: mx.array, k: mx.array):
        def normalize(t):
            # F.normalize: t / max(||t||, 1e-12), as sqrt(max(||t||^2, 1e-24)) so that a zero vector (a padded
            # position's key: no key bias) gets torch's gradient rather than 0/0
            return t / mx.sqrt(mx.maximum(mx.sum(t * t, axis=-1, keepdims=True), 1e-24))

        logit_scale = F.exp(mx.minimum(self.logit_scale, math.log(100.0)))
        return normalize(q) * logit_scale, normalize(k), 1.0


class SwinTransformerBlock(nn.Module):
    """v1 block: ``x + sd(attn(norm1(x)))``, ``x + sd(mlp(norm2(x)))`` (pre-norm).

    Shape: ``(N, H, W, dim)`` -> same.
    """

    attn_layer = ShiftedWindowAttention

    def __init__(self, dim: int, num_heads: int, window_size: Sequence[int], shift_size: Sequence[int],
                 mlp_ratio: float = 4.0, dropout: float = 0.0, attention_dropout: float = 0.0,
                 stochastic_depth_prob: float = 0.0):
        super().__init__()
        self.norm1 = LayerNorm(dim)
        self.attn = self.attn_layer(dim, window_size, shift_size, num_heads, attention_dropout=attention_dropout,
                                    dropout=dropout)
        self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
        self.norm2 = LayerNorm(dim)
        self.mlp = mlp(dim, [int(dim * mlp_ratio), dim], GELU, dropout)

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.stochastic_depth(self.attn(self.norm1(x)))
        return x + self.stochastic_depth(apply_sequence(self.mlp, self.norm2(x)))


class SwinTransformerBlockV2(SwinTransformerBlock):
    """v2 block: ``x + sd(norm1(attn(x)))``, ``x + sd(norm2(mlp(x)))`` (post-norm, res-post-norm)."""

    attn_layer = ShiftedWindowAttentionV2

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.stochastic_depth(self.norm1(self.attn(x)))
        return x + self.stochastic_depth(self.norm2(apply_sequence(self.mlp, x)))


def _merge_patches(x: mx.array) -> mx.array:
    """Pad H and W to even, then concatenate the 2x2 neighbours on channels in torchvision's order
    ``(0,0), (1,0), (0,1), (1,1)``: ``(N, H, W, C)`` -> ``(N, ceil(H/2), ceil(W/2), 4C)``."""
    h, w = x.shape[1:3]
    if h % 2 or w % 2:
        x = mx.pad(x, [(0, 0), (0, h % 2), (0, w % 2), (0, 0)])
    return mx.concatenate([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], axis=-1)


class PatchMerging(nn.Module):
    """v1 patch merging: merge 2x2, LayerNorm(4C), ``reduction`` Linear 4C -> 2C (no bias).

    Shape: ``(N, H, W, C)`` -> ``(N, ceil(H/2), ceil(W/2), 2C)``.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = LayerNorm(4 * dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.reduction(self.norm(_merge_patches(x)))


class PatchMergingV2(nn.Module):
    """v2 patch merging: merge 2x2, ``reduction`` Linear 4C -> 2C, LayerNorm(2C)."""

    def __init__(self, dim: int):
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = LayerNorm(2 * dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.norm(self.reduction(_merge_patches(x)))


class SwinTransformer(TorchCheckpointMixin, nn.Module):
    """torchvision's ``SwinTransformer``.

    Args:
        patch_size (sequence of 2 ints): patch embedding kernel and stride.
        embed_dim (int): channels of the first stage (doubled per stage).
        depths (sequence of ints): blocks per stage.
        num_heads (sequence of ints): heads per stage.
        window_size (sequence of 2 ints): attention window.
        mlp_ratio (float, optional): MLP width over channels. Default: ``4.0``.
        dropout (float, optional): dropout after attention and in the MLP. Default: ``0.0``.
        attention_dropout (float, optional): dropout on attention weights. Default: ``0.0``.
        stochastic_depth_prob (float, optional): the last block's; block ``i`` of ``n`` gets ``p * i / (n - 1)``.
            Default: ``0.1``.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        v2 (bool, optional): Swin v2 blocks and patch merging. Default: ``False``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= patch size``.
    """

    def __init__(self, patch_size: Sequence[int], embed_dim: int, depths: Sequence[int], num_heads: Sequence[int],
                 window_size: Sequence[int], mlp_ratio: float = 4.0, dropout: float = 0.0,
                 attention_dropout: float = 0.0, stochastic_depth_prob: float = 0.1, num_classes: int = 1000,
                 v2: bool = False):
        super().__init__()
        if len(depths) != len(num_heads) or not depths:
            raise ValueError(f"[SwinTransformer] 'depths' and 'num_heads' must be non-empty and of equal length but "
                             f"got {list(depths)} and {list(num_heads)}.")
        if sum(depths) < 2 and stochastic_depth_prob:
            raise ValueError("[SwinTransformer] 'stochastic_depth_prob' needs at least 2 blocks (torchvision divides "
                             "by the block count - 1).")
        block = SwinTransformerBlockV2 if v2 else SwinTransformerBlock
        merging = PatchMergingV2 if v2 else PatchMerging
        patch = tuple(patch_size)
        # children 0, 1, 2 as torchvision's nn.Sequential(conv, Permute, norm); Permute is a no-op channels-last
        self.features = [[Conv2d(3, embed_dim, patch, stride=patch), nn.Identity(), LayerNorm(embed_dim)]]
        total, block_id = sum(depths), 0
        for i, (depth, heads) in enumerate(zip(depths, num_heads)):
            dim = embed_dim * 2 ** i
            stage = []
            for j in range(depth):
                sd_prob = stochastic_depth_prob * float(block_id) / max(total - 1, 1)
                stage.append(block(dim, heads, window_size, [0 if j % 2 == 0 else w // 2 for w in window_size],
                                   mlp_ratio=mlp_ratio, dropout=dropout, attention_dropout=attention_dropout,
                                   stochastic_depth_prob=sd_prob))
                block_id += 1
            self.features.append(stage)
            if i < len(depths) - 1:
                self.features.append(merging(dim))
        num_features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = LayerNorm(num_features)
        self.head = nn.Linear(num_features, num_classes)

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim != 4 or x.shape[-1] != 3:
            raise ValueError(f"[SwinTransformer] expected input (N, H, W, 3) but got shape {x.shape}.")
        x = self.norm(apply_sequence(self.features, x))
        return self.head(mx.mean(x, axis=(1, 2)))


_CONFIGS = {  # embed_dim, depths, num_heads, window_size, stochastic_depth_prob (torchvision's builders)
    "swin_t": (96, [2, 2, 6, 2], [3, 6, 12, 24], [7, 7], 0.2),
    "swin_s": (96, [2, 2, 18, 2], [3, 6, 12, 24], [7, 7], 0.3),
    "swin_b": (128, [2, 2, 18, 2], [4, 8, 16, 32], [7, 7], 0.5),
    "swin_v2_t": (96, [2, 2, 6, 2], [3, 6, 12, 24], [8, 8], 0.2),
    "swin_v2_s": (96, [2, 2, 18, 2], [3, 6, 12, 24], [8, 8], 0.3),
    "swin_v2_b": (128, [2, 2, 18, 2], [4, 8, 16, 32], [8, 8], 0.5),
}
_KEYS = ("embed_dim", "depths", "num_heads", "window_size", "stochastic_depth_prob")


def _builder(name: str, summary: str):
    v2 = name.startswith("swin_v2")
    defaults = dict(zip(_KEYS, _CONFIGS[name]), patch_size=[4, 4])

    @register_model(name, family="swin_v2" if v2 else "swin", summary=summary,
                    torch_model=f"torchvision.models:{name}")
    def build(num_classes: int = 1000, **kwargs) -> SwinTransformer:
        return SwinTransformer(num_classes=num_classes, v2=v2, **{**defaults, **kwargs})

    build.__name__ = name
    build.__doc__ = (f"torchvision's ``{name}`` ({summary}). ``kwargs``: ``dropout``, ``attention_dropout``, "
                     f"``stochastic_depth_prob``, ``mlp_ratio``, and {', '.join(_KEYS[:4])}, ``patch_size`` to "
                     f"build reduced models.")
    return build


swin_t = _builder("swin_t", "Swin-T: 96 wide, depths 2-2-6-2, window 7, 28.3M parameters")
swin_s = _builder("swin_s", "Swin-S: 96 wide, depths 2-2-18-2, window 7, 49.6M parameters")
swin_b = _builder("swin_b", "Swin-B: 128 wide, depths 2-2-18-2, window 7, 87.8M parameters")
swin_v2_t = _builder("swin_v2_t", "Swin-V2-T: cosine attention, 96 wide, depths 2-2-6-2, window 8, 28.4M parameters")
swin_v2_s = _builder("swin_v2_s", "Swin-V2-S: cosine attention, 96 wide, depths 2-2-18-2, window 8, 49.7M parameters")
swin_v2_b = _builder("swin_v2_b", "Swin-V2-B: cosine attention, 128 wide, depths 2-2-18-2, window 8, 87.9M parameters")
