"""Torch twin of torchvision's Vision Transformer (torchvision.models.vision_transformer) and the ViT cases.

Module structure, ``state_dict`` names and builder signatures are torchvision's; the builders also take the
architecture arguments (``patch_size``, ``num_layers``, ...) so the tests can build reduced models.
"""

from collections import OrderedDict
from functools import partial

import torch
from torch import nn

from . import Case
from ._randomize import randomized


class MLP(nn.Sequential):
    """torchvision.ops.MLP without norm: Linear, act, Dropout per hidden layer, then Linear, Dropout."""

    def __init__(self, in_channels, hidden_channels, activation_layer=nn.ReLU, dropout=0.0, bias=True):
        layers, width = [], in_channels
        for hidden in hidden_channels[:-1]:
            layers += [nn.Linear(width, hidden, bias=bias), activation_layer(), nn.Dropout(dropout)]
            width = hidden
        layers += [nn.Linear(width, hidden_channels[-1], bias=bias), nn.Dropout(dropout)]
        super().__init__(*layers)


class MLPBlock(MLP):
    def __init__(self, in_dim, mlp_dim, dropout):
        super().__init__(in_dim, [mlp_dim, in_dim], activation_layer=nn.GELU, dropout=dropout)


class EncoderBlock(nn.Module):
    def __init__(self, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.num_heads = num_heads
        self.ln_1 = norm_layer(hidden_dim)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout,
                                                    batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = norm_layer(hidden_dim)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, input):
        x = self.ln_1(input)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x)
        x = x + input
        y = self.ln_2(x)
        y = self.mlp(y)
        return x + y


class Encoder(nn.Module):
    def __init__(self, seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        layers = OrderedDict()
        for i in range(num_layers):
            layers[f"encoder_layer_{i}"] = EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                                                        norm_layer)
        self.layers = nn.Sequential(layers)
        self.ln = norm_layer(hidden_dim)

    def forward(self, input):
        input = input + self.pos_embedding
        return self.ln(self.layers(self.dropout(input)))


class VisionTransformer(nn.Module):
    def __init__(self, image_size, patch_size, num_layers, num_heads, hidden_dim, mlp_dim, dropout=0.0,
                 attention_dropout=0.0, num_classes=1000, representation_size=None,
                 norm_layer=partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        torch._assert(image_size % patch_size == 0, "Input shape indivisible by patch size!")
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        seq_length += 1
        self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim, dropout, attention_dropout,
                               norm_layer)
        heads = OrderedDict()
        if representation_size is None:
            heads["head"] = nn.Linear(hidden_dim, num_classes)
        else:
            heads["pre_logits"] = nn.Linear(hidden_dim, representation_size)
            heads["act"] = nn.Tanh()
            heads["head"] = nn.Linear(representation_size, num_classes)
        self.heads = nn.Sequential(heads)

    def forward(self, x):
        n, c, h, w = x.shape
        p = self.patch_size
        torch._assert(h == self.image_size, "Wrong image height!")
        torch._assert(w == self.image_size, "Wrong image width!")
        x = self.conv_proj(x).reshape(n, self.hidden_dim, (h // p) * (w // p)).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.encoder(x)
        return self.heads(x[:, 0])


def _vision_transformer(patch_size, num_layers, num_heads, hidden_dim, mlp_dim, weights=None, progress=True,
                        **kwargs):
    image_size = kwargs.pop("image_size", 224)
    return VisionTransformer(image_size=image_size, patch_size=patch_size, num_layers=num_layers,
                             num_heads=num_heads, hidden_dim=hidden_dim, mlp_dim=mlp_dim, **kwargs)


def _builder(patch_size, num_layers, num_heads, hidden_dim, mlp_dim):
    defaults = dict(patch_size=patch_size, num_layers=num_layers, num_heads=num_heads, hidden_dim=hidden_dim,
                    mlp_dim=mlp_dim)

    def build(*, weights=None, progress=True, **kwargs):
        return _vision_transformer(weights=weights, progress=progress, **{**defaults, **kwargs})

    return build


vit_b_16 = _builder(16, 12, 12, 768, 3072)
vit_b_32 = _builder(32, 12, 12, 768, 3072)
vit_l_16 = _builder(16, 24, 16, 1024, 4096)
vit_l_32 = _builder(32, 24, 16, 1024, 4096)
vit_h_14 = _builder(14, 32, 16, 1280, 5120)

_SMALL = {"num_classes": 7, "image_size": 40, "num_layers": 2, "num_heads": 2, "hidden_dim": 16, "mlp_dim": 24}
# ViT takes exactly its image_size, so the two inputs differ in batch; the members differ in image size (40, 45:
# odd, 30, 42) and patch size, and vit_b_32 has a representation head (pre_logits + tanh).
_INPUTS = ((2, 3, 40, 40), (3, 3, 40, 40))
# torchvision documents vit_h_14 at image_size 518 (633,470,440 parameters, its SWAG weights); the default builder
# (image_size 224) has (16*16+1) instead of (37*37+1) position embeddings of width 1280.
_VIT_H_14_AT_224 = 633470440 - ((37 * 37 + 1) - (16 * 16 + 1)) * 1280
CASES = {
    "vit_b_16": Case(randomized(vit_b_16), {**_SMALL, "patch_size": 8}, inputs=_INPUTS, train=True,
                     train_input=(4, 3, 40, 40),
                     train_kwargs={"dropout": 0.0, "attention_dropout": 0.0}, num_params=86567656),
    "vit_b_32": Case(randomized(vit_b_32), {**_SMALL, "patch_size": 20, "representation_size": 12}, inputs=_INPUTS,
                     num_params=88224232),
    "vit_l_16": Case(randomized(vit_l_16), {**_SMALL, "image_size": 45, "patch_size": 5},
                     inputs=((2, 3, 45, 45), (1, 3, 45, 45)), num_params=304326632),
    "vit_l_32": Case(randomized(vit_l_32), {**_SMALL, "image_size": 30, "patch_size": 10},
                     inputs=((2, 3, 30, 30), (3, 3, 30, 30)), num_params=306535400),
    "vit_h_14": Case(randomized(vit_h_14), {**_SMALL, "image_size": 42, "patch_size": 7},
                     inputs=((2, 3, 42, 42), (1, 3, 42, 42)),
                     num_params=_VIT_H_14_AT_224),
}
