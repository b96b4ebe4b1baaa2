"""MaxViT-T in MLX, channels-last, loading torchvision checkpoints.

torchvision's names: ``stem.0.0/1`` and ``stem.1.0``; ``blocks.<i>.layers.<j>.layers.{MBconv, window_attention,
grid_attention}``, where ``MBconv`` holds ``proj`` and ``layers.{pre_norm, conv_a, conv_b, squeeze_excitation,
conv_c}`` and each attention layer ``attn_layer.0`` (LayerNorm), ``attn_layer.1`` (``to_qkv``, ``merge``,
``relative_position_bias_table``, buffer ``relative_position_index``) and ``mlp_layer.0/1/3``; ``classifier.2/3/5``.

Each block attends within ``partition_size`` windows, then across a ``partition_size`` grid; every block's map must
be divisible by ``partition_size`` (checked for ``input_size`` at construction, as torchvision does, and for the
actual input when called). Example::

    >>> model = zoo.create("maxvit_t", num_classes=10)
    >>> model(mx.zeros((1, 224, 224, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from porter.layers import AvgPool2d, BatchNorm2d, Conv2d
from porter.layers import GELU, SiLU, Tanh, LayerNorm  # native CPU kernels (MLX's own are 15-35x slower)

from ._blocks import SqueezeExcitation, StochasticDepth, conv_norm_activation
from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from ._transformer import BufferMixin, attention, relative_position_index
from .registry import register_model

# torchvision's MaxViT batch norm (eps 1e-3, momentum 0.99 in torch's convention)
_norm = partial(BatchNorm2d, eps=1e-3, momentum=0.99)


def _same(w: np.ndarray) -> np.ndarray:
    return w


def _conv_output_size(size: tuple) -> tuple:
    """Output size of a 3x3, stride-2, padding-1 conv."""
    return tuple((s - 1) // 2 + 1 for s in size)


class MBConv(nn.Module):
    """Pre-norm inverted residual: BN, 1x1 conv (BN, GELU), 3x3 depthwise (BN, GELU, ``stride``), SE (SiLU), 1x1
    conv; the identity is projected (3x3 average pool if strided, 1x1 conv) when the shape changes.

    Shape: ``(N, H, W, in_channels)`` -> ``(N, ceil(H / stride), ceil(W / stride), out_channels)``.
    """

    def __init__(self, in_channels: int, out_channels: int, expansion_ratio: float, squeeze_ratio: float,
                 stride: int, p_stochastic_dropout: float = 0.0):
        super().__init__()
        if stride != 1 or in_channels != out_channels:
            self.proj = [Conv2d(in_channels, out_channels, 1, bias=True)]
            if stride == 2:
                self.proj = [AvgPool2d(3, stride=stride, padding=1)] + self.proj
        mid = int(out_channels * expansion_ratio)
        self.stochastic_depth = StochasticDepth(p_stochastic_dropout, "row")
        self.layers = {
            "pre_norm": _norm(in_channels),
            "conv_a": conv_norm_activation(in_channels, mid, 1, padding=0, norm_layer=_norm,
                                           activation_layer=GELU),
            "conv_b": conv_norm_activation(mid, mid, 3, stride=stride, padding=1, groups=mid, norm_layer=_norm,
                                           activation_layer=GELU),
            "squeeze_excitation": SqueezeExcitation(mid, int(out_channels * squeeze_ratio), activation=SiLU),
            "conv_c": Conv2d(mid, out_channels, 1, bias=True),
        }

    def __call__(self, x: mx.array) -> mx.array:
        res = apply_sequence(self.proj, x) if "proj" in self else x
        out = x
        for name in ("pre_norm", "conv_a", "conv_b", "squeeze_excitation", "conv_c"):
            out = apply_sequence([self.layers[name]], out)
        return res + self.stochastic_depth(out)


class RelativePositionalMultiHeadAttention(BufferMixin, nn.Module):
    """Attention over the ``P = size**2`` positions of each partition with a learned relative position table.
    As torchvision, the logits are scaled by ``feat_dim ** -0.5`` (not the head width).

    Shape: ``(N, G, P, feat_dim)`` -> same.
    """

    _buffers = ("relative_position_index",)

    def __init__(self, feat_dim: int, head_dim: int, max_seq_len: int):
        super().__init__()
        if head_dim <= 0 or feat_dim % head_dim:
            raise ValueError(f"[RelativePositionalMultiHeadAttention] 'feat_dim' ({feat_dim}) must be divisible by "
                             f"'head_dim' ({head_dim}).")
        self.n_heads, self.head_dim = feat_dim // head_dim, head_dim
        self.size = int(round(max_seq_len ** 0.5))
        self.max_seq_len = max_seq_len
        self.scale_factor = feat_dim ** -0.5
        self.to_qkv = nn.Linear(feat_dim, 3 * feat_dim)
        self.merge = nn.Linear(feat_dim, feat_dim)
        self.relative_position_bias_table = mx.clip(
            0.02 * mx.random.normal(((2 * self.size - 1) ** 2, self.n_heads)), -0.04, 0.04)
        self.relative_position_index = mx.array(relative_position_index(self.size, self.size), mx.int32)
        self._freeze_buffers()

    def torch_parameter_specs(self) -> list:
        names = ["relative_position_bias_table", "relative_position_index"]
        return [(n, tuple(self[n].shape), _same) for n in names]

    def __call__(self, x: mx.array) -> mx.array:
        b, g, p, d = x.shape
        heads = self.n_heads
        # torch.chunk(qkv, 3, -1): q, k, v are consecutive thirds of the features
        qkv = self.to_qkv(x).reshape(b * g, p, 3, heads, self.head_dim).transpose(2, 0, 3, 1, 4)
        bias = self.relative_position_bias_table[self.relative_position_index.reshape(-1)]
        bias = bias.reshape(p, p, heads).transpose(2, 0, 1)[None]
        out = attention(qkv[0], qkv[1], qkv[2], scale=self.scale_factor, bias=bias.astype(x.dtype))
        return self.merge(out.transpose(0, 2, 1, 3).reshape(b, g, p, d))


def _partition(x: mx.array, ph: int, pw: int) -> mx.array:
    """``(N, H, W, C)`` -> ``(N, H/ph * W/pw, ph*pw, C)``: non-overlapping ``ph x pw`` tiles, row-major."""
    n, h, w, c = x.shape
    x = x.reshape(n, h // ph, ph, w // pw, pw, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, (h // ph) * (w // pw), ph * pw, c)


def _departition(x: mx.array, ph: int, pw: int, gh: int, gw: int) -> mx.array:
    """Inverse of :func:`_partition`: ``(N, gh*gw, ph*pw, C)`` -> ``(N, gh*ph, gw*pw, C)``."""
    n, _, _, c = x.shape
    return x.reshape(n, gh, gw, ph, pw, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, gh * ph, gw * pw, c)


class PartitionAttentionLayer(nn.Module):
    """Block ("window": ``partition_size`` tiles) or grid ("grid": a ``partition_size`` grid of strided positions)
    attention, then an MLP, both pre-norm residual with stochastic depth.

    Shape: ``(N, H, W, C)`` -> same; ``H`` and ``W`` divisible by ``partition_size``.
    """

    def __init__(self, in_channels: int, head_dim: int, partition_size: int, partition_type: str, mlp_ratio: int,
                 attention_dropout: float, mlp_dropout: float, p_stochastic_dropout: float):
        super().__init__()
        if partition_type not in ("grid", "window"):
            raise ValueError(f"[PartitionAttentionLayer] 'partition_type' must be 'grid' or 'window' but got "
                             f"{partition_type!r}.")
        self.partition_size, self.partition_type = partition_size, partition_type
        self.attn_layer = [LayerNorm(in_channels),
                           RelativePositionalMultiHeadAttention(in_channels, head_dim, partition_size ** 2),
                           nn.Dropout(attention_dropout)]
        self.mlp_layer = [LayerNorm(in_channels), nn.Linear(in_channels, in_channels * mlp_ratio), GELU(),
                          nn.Linear(in_channels * mlp_ratio, in_channels), nn.Dropout(mlp_dropout)]
        self.stochastic_dropout = StochasticDepth(p_stochastic_dropout, "row")

    def __call__(self, x: mx.array) -> mx.array:
        h, w = x.shape[1:3]
        ps = self.partition_size
        if h % ps or w % ps:
            raise ValueError(f"[MaxVit] a block's feature map {h}x{w} is not divisible by the partition size {ps}; "
                             f"choose an input whose block maps are (e.g. 224 for partition size 7).")
        if self.partition_type == "window":
            ph, pw = ps, ps
        else:  # ps x ps positions strided across the map; torchvision's swap of the partition axes
            ph, pw = h // ps, w // ps
        x = _partition(x, ph, pw)
        if self.partition_type == "grid":
            x = x.swapaxes(1, 2)
        x = x + self.stochastic_dropout(apply_sequence(self.attn_layer, x))
        x = x + self.stochastic_dropout(apply_sequence(self.mlp_layer, x))
        if self.partition_type == "grid":
            x = x.swapaxes(1, 2)
        return _departition(x, ph, pw, h // ph, w // pw)


class MaxVitLayer(nn.Module):
    """``layers.MBconv`` then ``layers.window_attention`` then ``layers.grid_attention``."""

    def __init__(self, in_channels: int, out_channels: int, squeeze_ratio: float, expansion_ratio: float,
                 stride: int, head_dim: int, mlp_ratio: int, mlp_dropout: float, attention_dropout: float,
                 p_stochastic_dropout: float, partition_size: int):
        super().__init__()
        attn = partial(PartitionAttentionLayer, out_channels, head_dim, partition_size, mlp_ratio=mlp_ratio,
                       attention_dropout=attention_dropout, mlp_dropout=mlp_dropout,
                       p_stochastic_dropout=p_stochastic_dropout)
        self.layers = {"MBconv": MBConv(in_channels, out_channels, expansion_ratio, squeeze_ratio, stride,
                                        p_stochastic_dropout),
                       "window_attention": attn("window"), "grid_attention": attn("grid")}

    def __call__(self, x: mx.array) -> mx.array:
        for name in ("MBconv", "window_attention", "grid_attention"):
            x = self.layers[name](x)
        return x


class MaxVitBlock(nn.Module):
    """``layers.<j>``: MaxVit layers, the first with stride 2."""

    def __init__(self, in_channels: int, out_channels: int, p_stochastic: Sequence[float], **layer_kwargs):
        super().__init__()
        self.layers = [MaxVitLayer(in_channels if j == 0 else out_channels, out_channels, stride=2 if j == 0 else 1,
                                   p_stochastic_dropout=p, **layer_kwargs) for j, p in enumerate(p_stochastic)]

    def __call__(self, x: mx.array) -> mx.array:
        return apply_sequence(self.layers, x)


class _GlobalAvgPool(nn.Module):
    """``nn.AdaptiveAvgPool2d(1)`` + ``nn.Flatten()`` of torch's classifier: ``(N, H, W, C)`` -> ``(N, C)``."""

    def __call__(self, x: mx.array) -> mx.array:
        return mx.mean(x, axis=(1, 2))


class MaxVit(TorchCheckpointMixin, nn.Module):
    """torchvision's ``MaxVit``.

    Args:
        input_size (tuple of 2 ints): the input size checked at construction (every block's map divisible by
            ``partition_size``), as torchvision.
        stem_channels (int): stem width.
        partition_size (int): window and grid size.
        block_channels (sequence of ints): width per block.
        block_layers (sequence of ints): layers per block.
        head_dim (int): channels per attention head.
        stochastic_depth_prob (float): the last layer's; spread linearly from 0 over all layers.
        squeeze_ratio (float, optional): SE width over the output width. Default: ``0.25``.
        expansion_ratio (float, optional): MBConv width over the output width. Default: ``4``.
        mlp_ratio (int, optional): MLP width over channels. Default: ``4``.
        mlp_dropout (float, optional): dropout after the MLP. Default: ``0.0``.
        attention_dropout (float, optional): dropout after the attention. Default: ``0.0``.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``.
    """

    def __init__(self, input_size: Sequence[int], stem_channels: int, partition_size: int,
                 block_channels: Sequence[int], block_layers: Sequence[int], head_dim: int,
                 stochastic_depth_prob: float, squeeze_ratio: float = 0.25, expansion_ratio: float = 4,
                 mlp_ratio: int = 4, mlp_dropout: float = 0.0, attention_dropout: float = 0.0,
                 num_classes: int = 1000):
        super().__init__()
        if len(block_channels) != len(block_layers) or not block_channels:
            raise ValueError(f"[MaxVit] 'block_channels' and 'block_layers' must be non-empty and of equal length "
                             f"but got {list(block_channels)} and {list(block_layers)}.")
        size = _conv_output_size(tuple(input_size))
        sizes = []
        for _ in block_channels:
            size = _conv_output_size(size)
            sizes.append(size)
        for i, s in enumerate(sizes):
            if s[0] % partition_size or s[1] % partition_size:
                raise ValueError(f"[MaxVit] 'input_size' {tuple(input_size)}: input size {s} of block {i} is not "
                                 f"divisible by partition size {partition_size} (block input sizes {sizes}).")
        self.stem = [conv_norm_activation(3, stem_channels, 3, stride=2, norm_layer=_norm, activation_layer=GELU,
                                          bias=False),
                     conv_norm_activation(stem_channels, stem_channels, 3, norm_layer=None, activation_layer=None,
                                          bias=True)]
        p_stochastic = np.linspace(0, stochastic_depth_prob, sum(block_layers)).tolist()
        self.blocks, start = [], 0
        for in_ch, out_ch, n in zip([stem_channels] + list(block_channels[:-1]), block_channels, block_layers):
            self.blocks.append(MaxVitBlock(in_ch, out_ch, p_stochastic[start:start + n], squeeze_ratio=squeeze_ratio,
                                           expansion_ratio=expansion_ratio, head_dim=head_dim, mlp_ratio=mlp_ratio,
                                           mlp_dropout=mlp_dropout, attention_dropout=attention_dropout,
                                           partition_size=partition_size))
            start += n
        width = block_channels[-1]
        self.classifier = [_GlobalAvgPool(), nn.Identity(), LayerNorm(width), nn.Linear(width, width), Tanh(),
                           nn.Linear(width, num_classes, bias=False)]

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim != 4 or x.shape[-1] != 3:
            raise ValueError(f"[MaxVit] expected input (N, H, W, 3) but got shape {x.shape}.")
        x = apply_sequence(self.stem, x)
        x = apply_sequence(self.blocks, x)
        return apply_sequence(self.classifier, x)


@register_model("maxvit_t", family="maxvit", summary="MaxViT-T: MBConv + window/grid attention, 2-2-5-2 layers, "
                "30.9M parameters", torch_model="torchvision.models:maxvit_t")
def maxvit_t(num_classes: int = 1000, **kwargs) -> MaxVit:
    """torchvision's ``maxvit_t``. ``kwargs``: ``input_size`` (default ``(224, 224)``), ``stochastic_depth_prob``,
    ``mlp_dropout``, ``attention_dropout``, and ``stem_channels``, ``block_channels``, ``block_layers``,
    ``head_dim``, ``partition_size`` to build reduced models."""
    config = dict(input_size=(224, 224), stem_channels=64, block_channels=[64, 128, 256, 512],
                  block_layers=[2, 2, 5, 2], head_dim=32, stochastic_depth_prob=0.2, partition_size=7)
    return MaxVit(num_classes=num_classes, **{**config, **kwargs})
