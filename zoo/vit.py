"""Vision Transformer (ViT-B/16, B/32, L/16, L/32, H/14) in MLX, channels-last, loading torchvision checkpoints.

Names are torchvision's: ``conv_proj`` (patch embedding), ``class_token``, ``encoder.pos_embedding``,
``encoder.layers.encoder_layer_<i>.{ln_1, self_attention, ln_2, mlp.0, mlp.3}``, ``encoder.ln``, ``heads.head``
(``heads.pre_logits`` with ``representation_size``). The position embedding is sized for ``image_size``, and the
model takes exactly that size, as torchvision's. Example::

    >>> model = zoo.create("vit_b_16", image_size=64, num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from porter.layers import Conv2d
from porter.layers import GELU, LayerNorm  # native CPU kernels (MLX's own are 15-35x slower)

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from ._transformer import MultiheadAttention, mlp
from .registry import register_model


def _same(w: np.ndarray) -> np.ndarray:
    return w


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln_1(x))``, then ``+ mlp(ln_2(.))`` (LayerNorm eps 1e-6).

    Shape: ``(N, L, hidden_dim)`` -> same.
    """

    def __init__(self, num_heads: int, hidden_dim: int, mlp_dim: int, dropout: float, attention_dropout: float):
        super().__init__()
        self.ln_1 = LayerNorm(hidden_dim, eps=1e-6)
        self.self_attention = MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = LayerNorm(hidden_dim, eps=1e-6)
        self.mlp = mlp(hidden_dim, [mlp_dim, hidden_dim], GELU, dropout)

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.dropout(self.self_attention(self.ln_1(x)))
        return x + apply_sequence(self.mlp, self.ln_2(x))


class Encoder(nn.Module):
    """Position embedding, dropout, ``layers.encoder_layer_<i>``, final LayerNorm ``ln``.

    Shape: ``(N, seq_length, hidden_dim)`` -> same.
    """

    def __init__(self, seq_length: int, num_layers: int, num_heads: int, hidden_dim: int, mlp_dim: int,
                 dropout: float, attention_dropout: float):
        super().__init__()
        self.pos_embedding = 0.02 * mx.random.normal((1, seq_length, hidden_dim))
        self.dropout = nn.Dropout(dropout)
        # torchvision's nn.Sequential(OrderedDict) names its children encoder_layer_<i>
        self.layers = {f"encoder_layer_{i}": EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout)
                       for i in range(num_layers)}
        self.ln = LayerNorm(hidden_dim, eps=1e-6)

    def torch_parameter_specs(self) -> list:
        return [("pos_embedding", tuple(self.pos_embedding.shape), _same)]

    def __call__(self, x: mx.array) -> mx.array:
        x = self.dropout(x + self.pos_embedding)
        for i in range(len(self.layers)):
            x = self.layers[f"encoder_layer_{i}"](x)
        return self.ln(x)


class VisionTransformer(TorchCheckpointMixin, nn.Module):
    """torchvision's ``VisionTransformer`` (no conv stem).

    Args:
        image_size (int): input height and width; sizes the position embedding.
        patch_size (int): patch height and width; must divide ``image_size``.
        num_layers (int): encoder blocks.
        num_heads (int): attention heads.
        hidden_dim (int): token width.
        mlp_dim (int): MLP hidden width.
        dropout (float, optional): dropout after attention, in the MLP and on the embedded tokens. Default: ``0.0``.
        attention_dropout (float, optional): dropout on the attention weights. Default: ``0.0``.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        representation_size (int, optional): adds ``heads.pre_logits`` (Linear + tanh) of this width.
            Default: ``None``.
    Shape: ``(N, image_size, image_size, 3)`` -> ``(N, num_classes)``.
    """

    def __init__(self, image_size: int, patch_size: int, num_layers: int, num_heads: int, hidden_dim: int,
                 mlp_dim: int, dropout: float = 0.0, attention_dropout: float = 0.0, num_classes: int = 1000,
                 representation_size: Optional[int] = None):
        super().__init__()
        for arg, value in (("image_size", image_size), ("patch_size", patch_size), ("num_layers", num_layers),
                           ("hidden_dim", hidden_dim), ("mlp_dim", mlp_dim)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"[VisionTransformer] '{arg}' must be a positive int but got {value!r}.")
        if image_size % patch_size:
            raise ValueError(f"[VisionTransformer] 'image_size' ({image_size}) must be divisible by 'patch_size' "
                             f"({patch_size}).")
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        self.conv_proj = Conv2d(3, hidden_dim, patch_size, stride=patch_size)
        self.class_token = mx.zeros((1, 1, hidden_dim))
        seq_length = (image_size // patch_size) ** 2 + 1
        self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout)
        if representation_size is None:
            self.heads = {"head": nn.Linear(hidden_dim, num_classes)}
        else:
            self.heads = {"pre_logits": nn.Linear(hidden_dim, representation_size),
                          "head": nn.Linear(representation_size, num_classes)}

    def torch_parameter_specs(self) -> list:
        return [("class_token", tuple(self.class_token.shape), _same)]

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim != 4 or x.shape[1:] != (self.image_size, self.image_size, 3):
            raise ValueError(f"[VisionTransformer] expected input (N, {self.image_size}, {self.image_size}, 3) "
                             f"(the model's image_size) but got shape {x.shape}.")
        x = self.conv_proj(x)  # (N, h, w, D): row-major patches, torch's order
        n = x.shape[0]
        x = x.reshape(n, -1, self.hidden_dim)
        x = mx.concatenate([mx.broadcast_to(self.class_token, (n, 1, self.hidden_dim)), x], axis=1)
        x = self.encoder(x)[:, 0]
        if "pre_logits" in self.heads:
            x = mx.tanh(self.heads["pre_logits"](x))
        return self.heads["head"](x)


_CONFIGS = {  # patch_size, num_layers, num_heads, hidden_dim, mlp_dim (torchvision's builders)
    "vit_b_16": (16, 12, 12, 768, 3072), "vit_b_32": (32, 12, 12, 768, 3072), "vit_l_16": (16, 24, 16, 1024, 4096),
    "vit_l_32": (32, 24, 16, 1024, 4096), "vit_h_14": (14, 32, 16, 1280, 5120),
}
_KEYS = ("patch_size", "num_layers", "num_heads", "hidden_dim", "mlp_dim")


def _builder(name: str, summary: str):
    defaults = dict(zip(_KEYS, _CONFIGS[name]))

    @register_model(name, family="vit", summary=summary, torch_model=f"torchvision.models:{name}")
    def build(num_classes: int = 1000, image_size: int = 224, **kwargs) -> VisionTransformer:
        return VisionTransformer(image_size=image_size, num_classes=num_classes, **{**defaults, **kwargs})

    build.__name__ = name
    build.__doc__ = (f"torchvision's ``{name}`` ({summary}). ``kwargs``: ``image_size`` (default 224), ``dropout``, "
                     f"``attention_dropout``, ``representation_size``, and the architecture's own "
                     f"{', '.join(_KEYS)} to build reduced models.")
    return build


vit_b_16 = _builder("vit_b_16", "ViT-B/16: 12 layers, 12 heads, width 768, 86.6M parameters")
vit_b_32 = _builder("vit_b_32", "ViT-B/32: 12 layers, 12 heads, width 768, 88.2M parameters")
vit_l_16 = _builder("vit_l_16", "ViT-L/16: 24 layers, 16 heads, width 1024, 304.3M parameters")
vit_l_32 = _builder("vit_l_32", "ViT-L/32: 24 layers, 16 heads, width 1024, 306.5M parameters")
vit_h_14 = _builder("vit_h_14", "ViT-H/14: 32 layers, 16 heads, width 1280, 632.0M parameters at 224")
