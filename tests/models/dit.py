"""Twin of facebookresearch/DiT's ``DiT`` (``models.py``: ``DiT-S/2``'s structure and ``state_dict`` names:
``x_embedder.proj``, ``t_embedder.mlp.<0,2>``, ``y_embedder.embedding_table``, ``pos_embed``, ``blocks.<i>.attn.qkv``/
``proj``, ``blocks.<i>.mlp.fc1``/``fc2``, ``blocks.<i>.adaLN_modulation.1``, ``final_layer.linear``/
``adaLN_modulation.1``), two blocks and a narrow width.

Stresses: the sinusoidal timestep embedding computed in the forward from a float timestep per example
(``exp(-log(max_period) * arange / half)``, ``cos``/``sin``); the label embedding with its extra "null" class row;
adaLN-Zero (``adaLN_modulation(c).chunk(6, dim=1)``, ``x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)`` after
a LayerNorm without affine parameters, the gated residuals); the fixed position table (a parameter with
``requires_grad=False``); tanh-approximated GELU; unpatchify by ``einsum('nhwpqc->nchpwq')``; classifier-free
guidance (``forward_with_cfg``: the batch's first half twice, split, mixed and concatenated back).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from tests.models.droppath import Attention
from tests.models.timm_more import Mlp


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden_size, frequency_embedding_size=256):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(frequency_embedding_size, hidden_size, bias=True), nn.SiLU(),
                                 nn.Linear(hidden_size, hidden_size, bias=True))
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
        args = t[:, None].float() * freqs.to(device=t.device)[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
        return embedding

    def forward(self, t):
        return self.mlp(self.timestep_embedding(t, self.frequency_embedding_size))


class LabelEmbedder(nn.Module):
    """Class labels to vectors; in training a random share of them becomes the "null" class (``num_classes``)."""

    def __init__(self, num_classes, hidden_size, dropout_prob):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + int(dropout_prob > 0), hidden_size)
        self.num_classes = num_classes
        self.dropout_prob = dropout_prob

    def token_drop(self, labels, force_drop_ids=None):
        if force_drop_ids is None:
            drop_ids = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
        else:
            drop_ids = force_drop_ids == 1
        return torch.where(drop_ids, self.num_classes, labels)

    def forward(self, labels, train, force_drop_ids=None):
        if (train and self.dropout_prob > 0) or force_drop_ids is not None:
            labels = self.token_drop(labels, force_drop_ids)
        return self.embedding_table(labels)


class PatchEmbed(nn.Module):
    """timm's ``PatchEmbed(img_size, patch_size, in_chans, embed_dim, bias=True)``: a fixed image size."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        self.img_size = (img_size, img_size)
        self.patch_size = (patch_size, patch_size)
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=True)
        self.norm = nn.Identity()

    def forward(self, x):
        torch._assert(tuple(x.shape[2:]) == self.img_size, "Input image size doesn't match model.")
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class TanhMlp(Mlp):
    """timm's ``Mlp`` with DiT's ``act_layer``: ``GELU(approximate="tanh")``."""

    def __init__(self, dim, hidden):
        super().__init__(dim, hidden)
        self.act = nn.GELU(approximate="tanh")


class DiTBlock(nn.Module):
    def __init__(self, hidden_size, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads=num_heads, qkv_bias=True)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.mlp = TanhMlp(hidden_size, int(hidden_size * mlp_ratio))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 6 * hidden_size, bias=True))

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x


class FinalLayer(nn.Module):
    def __init__(self, hidden_size, patch_size, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels, bias=True)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size, bias=True))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class DiT(nn.Module):
    def __init__(self, input_size=8, patch_size=2, in_channels=4, hidden_size=32, depth=2, num_heads=2,
                 mlp_ratio=4.0, class_dropout_prob=0.1, num_classes=10, learn_sigma=True):
        super().__init__()
        self.learn_sigma = learn_sigma
        self.in_channels = in_channels
        self.out_channels = in_channels * 2 if learn_sigma else in_channels
        self.patch_size = patch_size
        self.num_heads = num_heads
        self.x_embedder = PatchEmbed(input_size, patch_size, in_channels, hidden_size)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.x_embedder.num_patches, hidden_size), requires_grad=False)
        self.blocks = nn.ModuleList([DiTBlock(hidden_size, num_heads, mlp_ratio=mlp_ratio) for _ in range(depth)])
        self.final_layer = FinalLayer(hidden_size, patch_size, self.out_channels)

    def unpatchify(self, x):
        c = self.out_channels
        p = self.x_embedder.patch_size[0]
        h = w = int(x.shape[1] ** 0.5)
        assert h * w == x.shape[1]
        x = x.reshape(shape=(x.shape[0], h, w, p, p, c))
        x = torch.einsum('nhwpqc->nchpwq', x)
        return x.reshape(shape=(x.shape[0], c, h * p, h * p))

    def forward(self, x, t, y):
        x = self.x_embedder(x) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y, self.training)
        for block in self.blocks:
            x = block(x, c)
        return self.unpatchify(self.final_layer(x, c))

    def forward_with_cfg(self, x, t, y, cfg_scale):
        half = x[: len(x) // 2]
        combined = torch.cat([half, half], dim=0)
        model_out = self.forward(combined, t, y)
        eps, rest = model_out[:, :3], model_out[:, 3:]
        cond_eps, uncond_eps = torch.split(eps, len(eps) // 2, dim=0)
        half_eps = uncond_eps + cfg_scale * (cond_eps - uncond_eps)
        eps = torch.cat([half_eps, half_eps], dim=0)
        return torch.cat([eps, rest], dim=1)


class GuidedDiT(nn.Module):
    """``DiT.forward_with_cfg`` as a module's forward (the sampler's call), the guidance scale fixed."""

    def __init__(self, cfg_scale=4.0, **kwargs):
        super().__init__()
        self.dit = DiT(**kwargs)
        self.cfg_scale = cfg_scale

    def forward(self, x, t, y):
        return self.dit.forward_with_cfg(x, t, y, self.cfg_scale)


def dit_small() -> nn.Module:
    """``DiT-S/2``'s form (patch 2, learned sigma, label dropout 0.1) on an 8x8 latent of 4 channels."""
    return DiT()


def dit_guided_small() -> nn.Module:
    return GuidedDiT()


def latents(b, size=8):
    """seed -> (latents (B, 4, size, size), float timesteps in [0, 1000), labels in [0, 10] with the null class)."""
    def make(seed):
        gen = torch.Generator().manual_seed(seed)
        return (torch.randn(b, 4, size, size, generator=gen), torch.rand(b, generator=gen) * 1000,
                torch.randint(0, 11, (b,), generator=gen))
    return make
