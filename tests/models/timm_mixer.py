"""timm's MLP-Mixer and gMLP (``timm/models/mlp_mixer.py``) with timm's module structure and ``state_dict`` names
(``stem.proj``, ``blocks.<i>.norm1``, ``.mlp_tokens.fc1``, ``.mlp_channels.gate.proj``, ``norm``, ``head``), so a
timm checkpoint's keys match at full size.

Stresses: token mixing as a Linear over the token axis of a transposed tensor (``(B, N, C) -> (B, C, N)``, Mixer's
``mlp_tokens``), gMLP's spatial gating unit (``chunk`` of the channels, LayerNorm of one half, a Linear over the
token axis of the transposed half, gate multiply), LayerNorm(eps=1e-6), mean pooling over tokens. The token-mixing
weights fix the patch grid: other batches only.
"""

from __future__ import annotations

from functools import partial

from torch import nn

from .timm_more import Mlp, TokenPatchEmbed

_norm = partial(nn.LayerNorm, eps=1e-6)


class MixerBlock(nn.Module):
    def __init__(self, dim: int, seq_len: int, mlp_ratio=(0.5, 4.0)):
        super().__init__()
        tokens_dim, channels_dim = [int(r * dim) for r in mlp_ratio]
        self.norm1 = _norm(dim)
        self.mlp_tokens = Mlp(seq_len, tokens_dim)
        self.drop_path = nn.Identity()
        self.norm2 = _norm(dim)
        self.mlp_channels = Mlp(dim, channels_dim)

    def forward(self, x):
        x = x + self.drop_path(self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2))
        return x + self.drop_path(self.mlp_channels(self.norm2(x)))


class SpatialGatingUnit(nn.Module):
    def __init__(self, dim: int, seq_len: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim // 2)
        self.proj = nn.Linear(seq_len, seq_len)

    def forward(self, x):
        u, v = x.chunk(2, dim=-1)
        v = self.norm(v)
        v = self.proj(v.transpose(-1, -2))
        return u * v.transpose(-1, -2)


class GatedMlp(nn.Module):
    """timm ``layers/mlp.py::GatedMlp`` with a gate layer (gMLP's channel MLP)."""

    def __init__(self, in_features: int, hidden: int, seq_len: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(0.0)
        self.gate = SpatialGatingUnit(hidden, seq_len)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden // 2, in_features)
        self.drop2 = nn.Dropout(0.0)

    def forward(self, x):
        x = self.gate(self.drop1(self.act(self.fc1(x))))
        return self.drop2(self.fc2(self.norm(x)))


class SpatialGatingBlock(nn.Module):
    def __init__(self, dim: int, seq_len: int, mlp_ratio: float = 4):
        super().__init__()
        self.norm = _norm(dim)
        self.mlp_channels = GatedMlp(dim, int(dim * mlp_ratio), seq_len)
        self.drop_path = nn.Identity()

    def forward(self, x):
        return x + self.drop_path(self.mlp_channels(self.norm(x)))


class MlpMixer(nn.Module):
    """``forward(x)``: images ``(B, 3, img, img)`` -> logits ``(B, num_classes)``."""

    def __init__(self, img: int = 16, patch: int = 4, dim: int = 16, depth: int = 2, num_classes: int = 10,
                 gated: bool = False):
        super().__init__()
        seq_len = (img // patch) ** 2
        self.stem = TokenPatchEmbed(patch, dim)
        block = SpatialGatingBlock if gated else MixerBlock
        self.blocks = nn.Sequential(*[block(dim, seq_len) for _ in range(depth)])
        self.norm = _norm(dim)
        self.head_drop = nn.Dropout(0.0)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.norm(self.blocks(self.stem(x)))
        return self.head(self.head_drop(x.mean(dim=1)))


def mixer_small() -> MlpMixer:
    return MlpMixer()


def gmlp_small() -> MlpMixer:
    return MlpMixer(gated=True)
