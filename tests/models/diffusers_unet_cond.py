"""A diffusers ``UNet2DConditionModel`` (Stable Diffusion's denoiser) with diffusers' module structure and
``state_dict`` names (``down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k``, ``...ff.net.0.proj``,
``.proj_in``, ``mid_block.attentions.0``, ``up_blocks.1.attentions.2``), small sizes.

Stresses: cross attention on ``encoder_hidden_states`` (keys/values of another length than the queries);
``Transformer2DModel`` (GroupNorm, 1x1 ``proj_in``, NCHW -> tokens by ``permute``/``reshape`` and back);
``BasicTransformerBlock`` (LayerNorm, self-attention, cross attention, GEGLU feed-forward: ``chunk`` + exact GELU);
the timestep broadcast by ``expand`` (a 0-d timestep too); ``forward_upsample_size``: a latent whose sides the
overall up factor does not divide upsamples to the skip's size (``F.interpolate(size=...)``) instead of x2.
The ResNet blocks, time embedding and resamplers are ``tests/models/diffusion.py``'s (the same diffusers classes).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.diffusion import Downsample2D, ResnetBlock2D, TimestepEmbedding, Timesteps


class Attention(nn.Module):
    """diffusers' ``Attention`` with ``AttnProcessor2_0`` (no group norm, no residual): keys and values from
    ``encoder_hidden_states`` when given (``cross_attention_dim``), else from the queries' input."""

    def __init__(self, query_dim: int, cross_attention_dim: Optional[int] = None, heads: int = 8,
                 dim_head: int = 64, bias: bool = False, out_bias: bool = True):
        super().__init__()
        inner_dim = dim_head * heads
        cross = cross_attention_dim if cross_attention_dim is not None else query_dim
        self.heads = heads
        self.to_q = nn.Linear(query_dim, inner_dim, bias=bias)
        self.to_k = nn.Linear(cross, inner_dim, bias=bias)
        self.to_v = nn.Linear(cross, inner_dim, bias=bias)
        self.to_out = nn.ModuleList([nn.Linear(inner_dim, query_dim, bias=out_bias), nn.Dropout(0.0)])

    def forward(self, hidden_states, encoder_hidden_states=None):
        batch_size = hidden_states.shape[0]
        query = self.to_q(hidden_states)
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        key = self.to_k(encoder_hidden_states)
        value = self.to_v(encoder_hidden_states)
        head_dim = key.shape[-1] // self.heads
        query = query.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        hidden_states = F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                                       is_causal=False)
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, self.heads * head_dim)
        hidden_states = hidden_states.to(query.dtype)
        return self.to_out[1](self.to_out[0](hidden_states))


class GEGLU(nn.Module):
    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, hidden_states):
        hidden_states, gate = self.proj(hidden_states).chunk(2, dim=-1)
        return hidden_states * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int = 4):
        super().__init__()
        inner_dim = dim * mult
        self.net = nn.ModuleList([GEGLU(dim, inner_dim), nn.Dropout(0.0), nn.Linear(inner_dim, dim)])

    def forward(self, hidden_states):
        for module in self.net:
            hidden_states = module(hidden_states)
        return hidden_states


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim: int, num_attention_heads: int, attention_head_dim: int, cross_attention_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=True, eps=1e-5)
        self.attn1 = Attention(dim, None, num_attention_heads, attention_head_dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=True, eps=1e-5)
        self.attn2 = Attention(dim, cross_attention_dim, num_attention_heads, attention_head_dim)
        self.norm3 = nn.LayerNorm(dim, elementwise_affine=True, eps=1e-5)
        self.ff = FeedForward(dim)

    def forward(self, hidden_states, encoder_hidden_states):
        hidden_states = self.attn1(self.norm1(hidden_states)) + hidden_states
        hidden_states = self.attn2(self.norm2(hidden_states), encoder_hidden_states=encoder_hidden_states) + \
            hidden_states
        return self.ff(self.norm3(hidden_states)) + hidden_states


class Transformer2DModel(nn.Module):
    """Continuous input, ``use_linear_projection=False``: 1x1 convs in and out around the token blocks."""

    def __init__(self, num_attention_heads: int, attention_head_dim: int, in_channels: int, num_layers: int,
                 cross_attention_dim: int, norm_num_groups: int):
        super().__init__()
        inner_dim = num_attention_heads * attention_head_dim
        self.norm = nn.GroupNorm(num_groups=norm_num_groups, num_channels=in_channels, eps=1e-6, affine=True)
        self.proj_in = nn.Conv2d(in_channels, inner_dim, kernel_size=1, stride=1, padding=0)
        self.transformer_blocks = nn.ModuleList(
            BasicTransformerBlock(inner_dim, num_attention_heads, attention_head_dim, cross_attention_dim)
            for _ in range(num_layers))
        self.proj_out = nn.Conv2d(inner_dim, in_channels, kernel_size=1, stride=1, padding=0)

    def forward(self, hidden_states, encoder_hidden_states=None, return_dict: bool = True):
        batch, _, height, width = hidden_states.shape
        residual = hidden_states
        hidden_states = self.proj_in(self.norm(hidden_states))
        inner_dim = hidden_states.shape[1]
        hidden_states = hidden_states.permute(0, 2, 3, 1).reshape(batch, height * width, inner_dim)
        for block in self.transformer_blocks:
            hidden_states = block(hidden_states, encoder_hidden_states)
        hidden_states = hidden_states.reshape(batch, height, width, inner_dim).permute(0, 3, 1, 2).contiguous()
        output = self.proj_out(hidden_states) + residual
        return (output,)


class Upsample2D(nn.Module):
    """Nearest x2 (or to ``output_size``, the skip's size, when the UNet forwards it) + 3x3 conv."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, hidden_states, output_size=None):
        if output_size is None:
            hidden_states = F.interpolate(hidden_states, scale_factor=2.0, mode="nearest")
        else:
            hidden_states = F.interpolate(hidden_states, size=output_size, mode="nearest")
        return self.conv(hidden_states)


def _transformers(channels, heads, num_layers, cross_attention_dim, groups):
    return nn.ModuleList(Transformer2DModel(heads, channels // heads, channels, 1, cross_attention_dim, groups)
                         for _ in range(num_layers))


class CrossAttnDownBlock2D(nn.Module):
    has_cross_attention = True

    def __init__(self, in_channels, out_channels, temb_channels, num_layers, groups, heads, cross_attention_dim,
                 add_downsample):
        super().__init__()
        self.resnets = nn.ModuleList(ResnetBlock2D(in_channels if i == 0 else out_channels, out_channels,
                                                   temb_channels, groups) for i in range(num_layers))
        self.attentions = _transformers(out_channels, heads, num_layers, cross_attention_dim, groups)
        self.downsamplers = nn.ModuleList([Downsample2D(out_channels)]) if add_downsample else None

    def forward(self, hidden_states, temb, encoder_hidden_states):
        output_states = ()
        for resnet, attn in zip(self.resnets, self.attentions):
            hidden_states = resnet(hidden_states, temb)
            hidden_states = attn(hidden_states, encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]
            output_states = output_states + (hidden_states,)
        if self.downsamplers is not None:
            for downsampler in self.downsamplers:
                hidden_states = downsampler(hidden_states)
            output_states = output_states + (hidden_states,)
        return hidden_states, output_states


class DownBlock2D(nn.Module):
    has_cross_attention = False

    def __init__(self, in_channels, out_channels, temb_channels, num_layers, groups, add_downsample):
        super().__init__()
        self.resnets = nn.ModuleList(ResnetBlock2D(in_channels if i == 0 else out_channels, out_channels,
                                                   temb_channels, groups) for i in range(num_layers))
        self.downsamplers = nn.ModuleList([Downsample2D(out_channels)]) if add_downsample else None

    def forward(self, hidden_states, temb):
        output_states = ()
        for resnet in self.resnets:
            hidden_states = resnet(hidden_states, temb)
            output_states = output_states + (hidden_states,)
        if self.downsamplers is not None:
            for downsampler in self.downsamplers:
                hidden_states = downsampler(hidden_states)
            output_states = output_states + (hidden_states,)
        return hidden_states, output_states


def _up_resnets(in_channels, prev_output_channel, out_channels, temb_channels, num_layers, groups):
    resnets = []
    for i in range(num_layers):
        res_skip_channels = in_channels if i == num_layers - 1 else out_channels
        resnet_in_channels = prev_output_channel if i == 0 else out_channels
        resnets.append(ResnetBlock2D(resnet_in_channels + res_skip_channels, out_channels, temb_channels, groups))
    return nn.ModuleList(resnets)


class CrossAttnUpBlock2D(nn.Module):
    has_cross_attention = True

    def __init__(self, in_channels, prev_output_channel, out_channels, temb_channels, num_layers, groups, heads,
                 cross_attention_dim, add_upsample):
        super().__init__()
        self.resnets = _up_resnets(in_channels, prev_output_channel, out_channels, temb_channels, num_layers, groups)
        self.attentions = _transformers(out_channels, heads, num_layers, cross_attention_dim, groups)
        self.upsamplers = nn.ModuleList([Upsample2D(out_channels)]) if add_upsample else None

    def forward(self, hidden_states, res_hidden_states_tuple, temb, encoder_hidden_states, upsample_size=None):
        for resnet, attn in zip(self.resnets, self.attentions):
            res_hidden_states = res_hidden_states_tuple[-1]
            res_hidden_states_tuple = res_hidden_states_tuple[:-1]
            hidden_states = resnet(torch.cat([hidden_states, res_hidden_states], dim=1), temb)
            hidden_states = attn(hidden_states, encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]
        if self.upsamplers is not None:
            for upsampler in self.upsamplers:
                hidden_states = upsampler(hidden_states, upsample_size)
        return hidden_states


class UpBlock2D(nn.Module):
    has_cross_attention = False

    def __init__(self, in_channels, prev_output_channel, out_channels, temb_channels, num_layers, groups,
                 add_upsample):
        super().__init__()
        self.resnets = _up_resnets(in_channels, prev_output_channel, out_channels, temb_channels, num_layers, groups)
        self.upsamplers = nn.ModuleList([Upsample2D(out_channels)]) if add_upsample else None

    def forward(self, hidden_states, res_hidden_states_tuple, temb, upsample_size=None):
        for resnet in self.resnets:
            res_hidden_states = res_hidden_states_tuple[-1]
            res_hidden_states_tuple = res_hidden_states_tuple[:-1]
            hidden_states = resnet(torch.cat([hidden_states, res_hidden_states], dim=1), temb)
        if self.upsamplers is not None:
            for upsampler in self.upsamplers:
                hidden_states = upsampler(hidden_states, upsample_size)
        return hidden_states


class UNetMidBlock2DCrossAttn(nn.Module):
    def __init__(self, in_channels, temb_channels, groups, heads, cross_attention_dim):
        super().__init__()
        self.attentions = _transformers(in_channels, heads, 1, cross_attention_dim, groups)
        self.resnets = nn.ModuleList(ResnetBlock2D(in_channels, in_channels, temb_channels, groups) for _ in range(2))

    def forward(self, hidden_states, temb, encoder_hidden_states):
        hidden_states = self.resnets[0](hidden_states, temb)
        for attn, resnet in zip(self.attentions, self.resnets[1:]):
            hidden_states = attn(hidden_states, encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]
            hidden_states = resnet(hidden_states, temb)
        return hidden_states


class UNet2DConditionModel(nn.Module):
    """``forward(sample, timestep, encoder_hidden_states)``: sample ``(B, C, H, W)``, timestep ``(B,)`` or ``()``,
    encoder states ``(B, L, cross_attention_dim)``; down ``("CrossAttnDownBlock2D", "DownBlock2D")``, up
    ``("UpBlock2D", "CrossAttnUpBlock2D")``, as diffusers' tiny test config. Returns ``(sample,)``
    (``return_dict=False``)."""

    def __init__(self, in_channels: int = 4, out_channels: int = 4, block_out_channels: Sequence[int] = (16, 32),
                 layers_per_block: int = 1, norm_num_groups: int = 4, heads: int = 2, cross_attention_dim: int = 24,
                 flip_sin_to_cos: bool = True, freq_shift: int = 0):
        super().__init__()
        time_embed_dim = block_out_channels[0] * 4
        self.conv_in = nn.Conv2d(in_channels, block_out_channels[0], kernel_size=3, padding=1)
        self.time_proj = Timesteps(block_out_channels[0], flip_sin_to_cos, freq_shift)
        self.time_embedding = TimestepEmbedding(block_out_channels[0], time_embed_dim)
        last = len(block_out_channels) - 1
        self.down_blocks = nn.ModuleList([
            CrossAttnDownBlock2D(block_out_channels[0], block_out_channels[0], time_embed_dim, layers_per_block,
                                 norm_num_groups, heads, cross_attention_dim, add_downsample=True),
            DownBlock2D(block_out_channels[0], block_out_channels[1], time_embed_dim, layers_per_block,
                        norm_num_groups, add_downsample=last != 1)])
        self.mid_block = UNetMidBlock2DCrossAttn(block_out_channels[-1], time_embed_dim, norm_num_groups, heads,
                                                 cross_attention_dim)
        reversed_channels = list(reversed(block_out_channels))
        self.up_blocks = nn.ModuleList([
            UpBlock2D(reversed_channels[1], reversed_channels[0], reversed_channels[0], time_embed_dim,
                      layers_per_block + 1, norm_num_groups, add_upsample=True),
            CrossAttnUpBlock2D(reversed_channels[1], reversed_channels[0], reversed_channels[1], time_embed_dim,
                               layers_per_block + 1, norm_num_groups, heads, cross_attention_dim,
                               add_upsample=False)])
        self.num_upsamplers = 1
        self.conv_norm_out = nn.GroupNorm(num_channels=block_out_channels[0], num_groups=norm_num_groups, eps=1e-5)
        self.conv_act = nn.SiLU()
        self.conv_out = nn.Conv2d(block_out_channels[0], out_channels, kernel_size=3, padding=1)

    def forward(self, sample, timestep, encoder_hidden_states, return_dict: bool = False):
        default_overall_up_factor = 2 ** self.num_upsamplers
        forward_upsample_size = any(s % default_overall_up_factor != 0 for s in sample.shape[-2:])
        timesteps = timestep
        if len(timesteps.shape) == 0:
            timesteps = timesteps[None]
        timesteps = timesteps.expand(sample.shape[0])
        t_emb = self.time_proj(timesteps).to(dtype=sample.dtype)
        emb = self.time_embedding(t_emb)
        sample = self.conv_in(sample)
        down_block_res_samples = (sample,)
        for downsample_block in self.down_blocks:
            if downsample_block.has_cross_attention:
                sample, res_samples = downsample_block(hidden_states=sample, temb=emb,
                                                       encoder_hidden_states=encoder_hidden_states)
            else:
                sample, res_samples = downsample_block(hidden_states=sample, temb=emb)
            down_block_res_samples += res_samples
        sample = self.mid_block(sample, emb, encoder_hidden_states=encoder_hidden_states)
        for i, upsample_block in enumerate(self.up_blocks):
            is_final_block = i == len(self.up_blocks) - 1
            res_samples = down_block_res_samples[-len(upsample_block.resnets):]
            down_block_res_samples = down_block_res_samples[: -len(upsample_block.resnets)]
            upsample_size = None
            if not is_final_block and forward_upsample_size:
                upsample_size = down_block_res_samples[-1].shape[2:]
            if upsample_block.has_cross_attention:
                sample = upsample_block(hidden_states=sample, temb=emb, res_hidden_states_tuple=res_samples,
                                        encoder_hidden_states=encoder_hidden_states, upsample_size=upsample_size)
            else:
                sample = upsample_block(hidden_states=sample, temb=emb, res_hidden_states_tuple=res_samples,
                                        upsample_size=upsample_size)
        sample = self.conv_out(self.conv_act(self.conv_norm_out(sample)))
        return (sample,)


def unet2d_condition_small() -> UNet2DConditionModel:
    """16 -> 32 channels, one transformer block per attention (2 heads of 8), cross-attention width 24."""
    return UNet2DConditionModel()
