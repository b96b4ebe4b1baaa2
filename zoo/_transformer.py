"""Transformer pieces shared by the zoo's attention families (ViT, Swin, MaxViT), channels-last, torch's names.

* :func:`mlp`: ``torchvision.ops.MLP`` as a list ``[Linear, act, Dropout, ..., Linear, Dropout]`` (children
  ``0, 1, 2, 3, 4`` as in torchvision's ``nn.Sequential``).
* :func:`attention`: softmax attention over the last two axes, with an optional additive bias and dropout on the
  attention weights.
* :class:`MultiheadAttention`: ``torch.nn.MultiheadAttention`` self-attention (``batch_first``), with torch's
  packed ``in_proj_weight``/``in_proj_bias`` and ``out_proj``.
* :func:`relative_position_index`: the ``(h*w, h*w)`` table index of Swin's and MaxViT's relative position bias.
* :class:`BufferMixin`: keeps a module's torch buffers (position indices, coordinate tables) frozen.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np

import porter.layers.functional as F
from porter.layers import GELU  # native CPU kernels (MLX's own are 15-35x slower)

__all__ = ["mlp", "attention", "MultiheadAttention", "relative_position_index", "BufferMixin"]


def mlp(in_channels: int, hidden_channels: Sequence[int], activation_layer: Callable = GELU,
        dropout: float = 0.0, bias: bool = True) -> list:
    """``torchvision.ops.MLP`` (no norm layer) as a list: ``Linear, activation, Dropout`` per hidden layer, then
    ``Linear, Dropout`` (run it with ``apply_sequence``). Shape: ``(..., in_channels)`` -> ``(..., hidden[-1])``."""
    layers, width = [], in_channels
    for hidden in hidden_channels[:-1]:
        layers += [nn.Linear(width, hidden, bias=bias), activation_layer(), nn.Dropout(dropout)]
        width = hidden
    return layers + [nn.Linear(width, hidden_channels[-1], bias=bias), nn.Dropout(dropout)]


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float, bias: mx.array | None = None,
              dropout_p: float = 0.0, training: bool = False) -> mx.array:
    """``softmax(q @ k^T * scale + bias) @ v`` over ``(..., L, D)`` arrays. In training, ``dropout_p`` drops
    attention weights (survivors scaled by ``1 / (1 - p)``) as torch's attention does. Explicit matmuls around
    Porter's native softmax: on the CPU, MLX's fused ``scaled_dot_product_attention`` measured slower."""
    scores = F.matmul(q * scale, k.swapaxes(-1, -2))
    if bias is not None:
        scores = scores + bias
    weights = F.softmax(scores, axis=-1)
    if not training or dropout_p == 0.0:
        return F.matmul(weights, v)
    if dropout_p >= 1.0:
        return F.matmul(mx.zeros_like(weights), v)
    keep = mx.random.bernoulli(1.0 - dropout_p, weights.shape)
    return F.matmul(weights * keep * (1.0 / (1.0 - dropout_p)), v)


class MultiheadAttention(nn.Module):
    """``torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, batch_first=True)`` used as self-attention.

    Parameters keep torch's names: ``in_proj_weight`` ``(3E, E)`` and ``in_proj_bias`` ``(3E,)`` (query, key and
    value packed), ``out_proj.weight``/``out_proj.bias``.

    Args:
        embed_dim (int): ``E``.
        num_heads (int): heads; must divide ``E``.
        dropout (float, optional): dropout on the attention weights in training. Default: ``0.0``.
    Shape: ``(N, L, E)`` -> ``(N, L, E)``.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        if num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"[MultiheadAttention] 'embed_dim' ({embed_dim}) must be divisible by 'num_heads' "
                             f"({num_heads}).")
        self.num_heads = num_heads
        bound = math.sqrt(6.0 / (4 * embed_dim))  # torch's xavier_uniform_ of the packed (3E, E) weight
        self.in_proj_weight = mx.random.uniform(-bound, bound, (3 * embed_dim, embed_dim))
        self.in_proj_bias = mx.zeros((3 * embed_dim,))
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"[MultiheadAttention] 'dropout' must be in [0, 1] but got {dropout!r}.")
        self.dropout = dropout

    def torch_parameter_specs(self) -> list:
        return [(name, tuple(self[name].shape), _same) for name in ("in_proj_weight", "in_proj_bias")]

    def __call__(self, x: mx.array) -> mx.array:
        n, length, e = x.shape
        head = e // self.num_heads
        qkv = mx.addmm(self.in_proj_bias, x, self.in_proj_weight.T)
        # one contiguous copy: MLX's attention runs several times slower on strided views of the packed array
        qkv = F.contiguous(qkv.reshape(n, length, 3, self.num_heads, head).transpose(2, 0, 3, 1, 4))
        out = attention(qkv[0], qkv[1], qkv[2], scale=head ** -0.5, dropout_p=self.dropout,
                        training=self.training)
        return self.out_proj(out.transpose(0, 2, 1, 3).reshape(n, length, e))


def _same(w: np.ndarray) -> np.ndarray:
    return w


def relative_position_index(height: int, width: int) -> np.ndarray:
    """Index into a ``((2h-1)*(2w-1), heads)`` relative position table for every pair of positions of an
    ``h x w`` window, row-major: ``(h*w, h*w)`` int array (Swin flattens it, MaxViT keeps it 2-d)."""
    coords = np.stack(np.meshgrid(np.arange(height), np.arange(width), indexing="ij")).reshape(2, -1)
    rel = coords[:, :, None] - coords[:, None, :]
    return (rel[0] + height - 1) * (2 * width - 1) + (rel[1] + width - 1)


class BufferMixin:
    """Keeps the arrays named in ``_buffers`` (torch buffers: loaded from checkpoints, never trained) frozen, also
    after ``unfreeze()``. Call ``self._freeze_buffers()`` at the end of ``__init__``."""

    _buffers: tuple = ()

    def _freeze_buffers(self):
        self.freeze(keys=list(self._buffers), recurse=False)

    def unfreeze(self, *args, **kwargs):
        super().unfreeze(*args, **kwargs)
        self._freeze_buffers()
        return self
