"""A diffusers-style ``UNet2DModel`` with diffusers' module structure and ``state_dict`` names (``time_embedding.
linear_1``, ``down_blocks.<i>.resnets.<j>.norm1``, ``.attentions.<j>.to_q``, ``.downsamplers.0.conv``,
``mid_block``, ``up_blocks.<i>.upsamplers.0.conv``, ``conv_norm_out``), so a real checkpoint's keys match at full size.

Stresses: the timestep as a second (float) input, broadcast to the batch; the sinusoidal ``Timesteps`` projection
(``arange`` + ``exp`` + ``sin``/``cos`` + flip); GroupNorm + SiLU ResNet blocks with the time embedding added per
channel; the attention block (GroupNorm over channels, ``(B, C, H*W)`` -> tokens, ``scaled_dot_product_attention``,
residual, rescale); ``Upsample2D`` (nearest x2 + conv) and ``Downsample2D`` (stride-2 conv); skip concatenation.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def get_timestep_embedding(timesteps, embedding_dim: int, flip_sin_to_cos: bool = False,
                           downscale_freq_shift: float = 1, scale: float = 1, max_period: int = 10000):
    half_dim = embedding_dim // 2
    exponent = -math.log(max_period) * torch.arange(start=0, end=half_dim, dtype=torch.float32,
                                                    device=timesteps.device)
    exponent = exponent / (half_dim - downscale_freq_shift)
    emb = torch.exp(exponent)
    emb = timesteps[:, None].float() * emb[None, :]
    emb = scale * emb
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half_dim:], emb[:, :half_dim]], dim=-1)
    if embedding_dim % 2 == 1:
        emb = F.pad(emb, (0, 1, 0, 0))
    return emb


class Timesteps(nn.Module):
    def __init__(self, num_channels: int, flip_sin_to_cos: bool, downscale_freq_shift: float, scale: int = 1):
        super().__init__()
        self.num_channels, self.flip_sin_to_cos = num_channels, flip_sin_to_cos
        self.downscale_freq_shift, self.scale = downscale_freq_shift, scale

    def forward(self, timesteps):
        return get_timestep_embedding(timesteps, self.num_channels, flip_sin_to_cos=self.flip_sin_to_cos,
                                      downscale_freq_shift=self.downscale_freq_shift, scale=self.scale)


class TimestepEmbedding(nn.Module):
    def __init__(self, in_channels: int, time_embed_dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, time_embed_dim)
        self.act = nn.SiLU()
        self.linear_2 = nn.Linear(time_embed_dim, time_embed_dim)

    def forward(self, sample):
        return self.linear_2(self.act(self.linear_1(sample)))


class ResnetBlock2D(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, temb_channels: int, groups: int, eps: float = 1e-5,
                 output_scale_factor: float = 1.0):
        super().__init__()
        self.output_scale_factor = output_scale_factor
        self.norm1 = nn.GroupNorm(groups, in_channels, eps=eps, affine=True)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=1, padding=1)
        self.time_emb_proj = nn.Linear(temb_channels, out_channels) if temb_channels is not None else None
        self.norm2 = nn.GroupNorm(groups, out_channels, eps=eps, affine=True)
        self.dropout = nn.Dropout(0.0)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1)
        self.nonlinearity = nn.SiLU()
        self.conv_shortcut = nn.Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else None

    def forward(self, input_tensor, temb):
        hidden_states = self.conv1(self.nonlinearity(self.norm1(input_tensor)))
        if self.time_emb_proj is not None:  # the VAE's blocks take no time embedding (temb_channels=None)
            temb = self.time_emb_proj(self.nonlinearity(temb))[:, :, None, None]
            hidden_states = hidden_states + temb
        hidden_states = self.conv2(self.dropout(self.nonlinearity(self.norm2(hidden_states))))
        if self.conv_shortcut is not None:
            input_tensor = self.conv_shortcut(input_tensor)
        return (input_tensor + hidden_states) / self.output_scale_factor


class Attention(nn.Module):
    """diffusers' ``Attention`` as UNet2DModel builds it (``_from_deprecated_attn_block``): group norm, q/k/v,
    ``to_out = [Linear, Dropout]``, residual connection, ``rescale_output_factor``; AttnProcessor2_0's forward."""

    def __init__(self, query_dim: int, heads: int, dim_head: int, norm_num_groups: int, eps: float = 1e-5,
                 rescale_output_factor: float = 1.0):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads, self.rescale_output_factor = heads, rescale_output_factor
        self.group_norm = nn.GroupNorm(num_channels=query_dim, num_groups=norm_num_groups, eps=eps, affine=True)
        self.to_q = nn.Linear(query_dim, inner_dim, bias=True)
        self.to_k = nn.Linear(query_dim, inner_dim, bias=True)
        self.to_v = nn.Linear(query_dim, inner_dim, bias=True)
        self.to_out = nn.ModuleList([nn.Linear(inner_dim, query_dim, bias=True), nn.Dropout(0.0)])

    def forward(self, hidden_states):
        residual = hidden_states
        batch_size, channel, height, width = hidden_states.shape
        hidden_states = hidden_states.view(batch_size, channel, height * width).transpose(1, 2)
        hidden_states = self.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        query, key, value = self.to_q(hidden_states), self.to_k(hidden_states), self.to_v(hidden_states)
        inner_dim = key.shape[-1]
        head_dim = inner_dim // self.heads
        query = query.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, self.heads, head_dim).transpose(1, 2)
        hidden_states = F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                                       is_causal=False)
        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, self.heads * head_dim)
        hidden_states = self.to_out[1](self.to_out[0](hidden_states))
        hidden_states = hidden_states.transpose(-1, -2).reshape(batch_size, channel, height, width)
        return (hidden_states + residual) / self.rescale_output_factor


class Downsample2D(nn.Module):
    def __init__(self, channels: int, padding: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, stride=2, padding=padding)

    def forward(self, hidden_states):
        return self.conv(hidden_states)


class Upsample2D(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1)

    def forward(self, hidden_states):
        return self.conv(F.interpolate(hidden_states, scale_factor=2.0, mode="nearest"))


class DownBlock2D(nn.Module):
    def __init__(self, in_channels, out_channels, temb_channels, num_layers, groups, add_downsample,
                 attn_head_dim=None):
        super().__init__()
        self.resnets = nn.ModuleList(ResnetBlock2D(in_channels if i == 0 else out_channels, out_channels,
                                                   temb_channels, groups) for i in range(num_layers))
        if attn_head_dim is not None:
            self.attentions = nn.ModuleList(Attention(out_channels, out_channels // attn_head_dim, attn_head_dim,
                                                      groups) for _ in range(num_layers))
        self.downsamplers = nn.ModuleList([Downsample2D(out_channels)]) if add_downsample else None

    def forward(self, hidden_states, temb):
        output_states = ()
        for i, resnet in enumerate(self.resnets):
            hidden_states = resnet(hidden_states, temb)
            if hasattr(self, "attentions"):
                hidden_states = self.attentions[i](hidden_states)
            output_states += (hidden_states,)
        if self.downsamplers is not None:
            for downsampler in self.downsamplers:
                hidden_states = downsampler(hidden_states)
            output_states += (hidden_states,)
        return hidden_states, output_states


class UpBlock2D(nn.Module):
    def __init__(self, in_channels, prev_output_channel, out_channels, temb_channels, num_layers, groups,
                 add_upsample, attn_head_dim=None):
        super().__init__()
        resnets = []
        for i in range(num_layers):
            res_skip_channels = in_channels if i == num_layers - 1 else out_channels
            resnet_in_channels = prev_output_channel if i == 0 else out_channels
            resnets.append(ResnetBlock2D(resnet_in_channels + res_skip_channels, out_channels, temb_channels, groups))
        self.resnets = nn.ModuleList(resnets)
        if attn_head_dim is not None:
            self.attentions = nn.ModuleList(Attention(out_channels, out_channels // attn_head_dim, attn_head_dim,
                                                      groups) for _ in range(num_layers))
        self.upsamplers = nn.ModuleList([Upsample2D(out_channels)]) if add_upsample else None

    def forward(self, hidden_states, res_hidden_states_tuple, temb):
        for i, resnet in enumerate(self.resnets):
            res_hidden_states = res_hidden_states_tuple[-1]
            res_hidden_states_tuple = res_hidden_states_tuple[:-1]
            hidden_states = resnet(torch.cat([hidden_states, res_hidden_states], dim=1), temb)
            if hasattr(self, "attentions"):
                hidden_states = self.attentions[i](hidden_states)
        if self.upsamplers is not None:
            for upsampler in self.upsamplers:
                hidden_states = upsampler(hidden_states)
        return hidden_states


class UNetMidBlock2D(nn.Module):
    def __init__(self, in_channels, temb_channels, groups, attn_head_dim, output_scale_factor=1.0, eps=1e-5):
        super().__init__()
        self.attentions = nn.ModuleList([Attention(in_channels, in_channels // attn_head_dim, attn_head_dim, groups,
                                                   eps=eps, rescale_output_factor=output_scale_factor)])
        self.resnets = nn.ModuleList(ResnetBlock2D(in_channels, in_channels, temb_channels, groups, eps=eps,
                                                   output_scale_factor=output_scale_factor) for _ in range(2))

    def forward(self, hidden_states, temb):
        hidden_states = self.resnets[0](hidden_states, temb)
        for attn, resnet in zip(self.attentions, self.resnets[1:]):
            hidden_states = resnet(attn(hidden_states), temb)
        return hidden_states


class UNet2DModel(nn.Module):
    """``forward(sample, timestep)``: sample ``(B, C, H, W)``, timestep a float tensor ``(B,)`` or ``()``;
    down blocks ``("DownBlock2D", "AttnDownBlock2D")``, up blocks ``("AttnUpBlock2D", "UpBlock2D")``."""

    def __init__(self, in_channels: int = 3, out_channels: int = 3, block_out_channels: Sequence[int] = (8, 16),
                 attention: Sequence[bool] = (False, True), layers_per_block: int = 1, norm_num_groups: int = 4,
                 attention_head_dim: int = 4, flip_sin_to_cos: bool = True, freq_shift: int = 0):
        super().__init__()
        time_embed_dim = block_out_channels[0] * 4
        self.conv_in = nn.Conv2d(in_channels, block_out_channels[0], kernel_size=3, padding=(1, 1))
        self.time_proj = Timesteps(block_out_channels[0], flip_sin_to_cos, freq_shift)
        self.time_embedding = TimestepEmbedding(block_out_channels[0], time_embed_dim)
        self.down_blocks = nn.ModuleList()
        output_channel = block_out_channels[0]
        for i, attn in enumerate(attention):
            input_channel, output_channel = output_channel, block_out_channels[i]
            self.down_blocks.append(DownBlock2D(input_channel, output_channel, time_embed_dim, layers_per_block,
                                                norm_num_groups, i != len(block_out_channels) - 1,
                                                attention_head_dim if attn else None))
        self.mid_block = UNetMidBlock2D(block_out_channels[-1], time_embed_dim, norm_num_groups, attention_head_dim)
        self.up_blocks = nn.ModuleList()
        reversed_channels = list(reversed(block_out_channels))
        output_channel = reversed_channels[0]
        for i, attn in enumerate(reversed(attention)):
            prev_output_channel, output_channel = output_channel, reversed_channels[i]
            input_channel = reversed_channels[min(i + 1, len(block_out_channels) - 1)]
            self.up_blocks.append(UpBlock2D(input_channel, prev_output_channel, output_channel, time_embed_dim,
                                            layers_per_block + 1, norm_num_groups, i != len(block_out_channels) - 1,
                                            attention_head_dim if attn else None))
        self.conv_norm_out = nn.GroupNorm(num_channels=block_out_channels[0], num_groups=norm_num_groups, eps=1e-5)
        self.conv_act = nn.SiLU()
        self.conv_out = nn.Conv2d(block_out_channels[0], out_channels, kernel_size=3, padding=1)

    def forward(self, sample, timestep):
        timesteps = timestep
        if timesteps.ndim == 0:
            timesteps = timesteps[None]
        timesteps = timesteps * torch.ones(sample.shape[0], dtype=timesteps.dtype, device=timesteps.device)
        t_emb = self.time_proj(timesteps).to(dtype=sample.dtype)
        emb = self.time_embedding(t_emb)
        sample = self.conv_in(sample)
        down_block_res_samples = (sample,)
        for downsample_block in self.down_blocks:
            sample, res_samples = downsample_block(hidden_states=sample, temb=emb)
            down_block_res_samples += res_samples
        sample = self.mid_block(sample, emb)
        for upsample_block in self.up_blocks:
            res_samples = down_block_res_samples[-len(upsample_block.resnets):]
            down_block_res_samples = down_block_res_samples[: -len(upsample_block.resnets)]
            sample = upsample_block(sample, res_samples, emb)
        return self.conv_out(self.conv_act(self.conv_norm_out(sample)))


def unet2d_small() -> UNet2DModel:
    """Two resolutions (8, 16 channels), attention at the lower one and in the middle, groups of 4, heads of 4."""
    return UNet2DModel()
