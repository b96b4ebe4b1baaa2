"""The decode path of diffusers' ``AutoencoderKL`` (Stable Diffusion's VAE: ``post_quant_conv`` then
``decoder``, ``diffusers/models/autoencoders/vae.py::Decoder``) with diffusers' module structure and ``state_dict``
names (``decoder.conv_in``, ``decoder.mid_block.attentions.0.to_q``, ``decoder.mid_block.resnets.1.norm2``,
``decoder.up_blocks.<i>.resnets.<j>.conv_shortcut``, ``decoder.up_blocks.<i>.upsamplers.0.conv``,
``decoder.conv_norm_out``), so the decoder entries of an AutoencoderKL checkpoint match at full size.

Stresses: GroupNorm + SiLU ResNet blocks without a time embedding (eps 1e-6, 1x1 shortcuts where the width
changes); the mid block's single-head attention over every pixel (head dim = channels, GroupNorm over channels,
tokens from ``(B, C, H*W)``); nearest upsampling by 2 then a 3x3 conv, from an odd latent size. The blocks are
:mod:`tests.models.diffusion`'s (UNet2DModel's), built as the VAE builds them.
"""

from __future__ import annotations

from typing import Sequence

from torch import nn

from .diffusion import ResnetBlock2D, UNetMidBlock2D, Upsample2D


class UpDecoderBlock2D(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, num_layers: int, groups: int, add_upsample: bool):
        super().__init__()
        self.resnets = nn.ModuleList(ResnetBlock2D(in_channels if i == 0 else out_channels, out_channels, None,
                                                   groups, eps=1e-6) for i in range(num_layers))
        self.upsamplers = nn.ModuleList([Upsample2D(out_channels)]) if add_upsample else None

    def forward(self, hidden_states, temb=None):
        for resnet in self.resnets:
            hidden_states = resnet(hidden_states, temb)
        if self.upsamplers is not None:
            for upsampler in self.upsamplers:
                hidden_states = upsampler(hidden_states)
        return hidden_states


class Decoder(nn.Module):
    def __init__(self, in_channels: int = 4, out_channels: int = 3, block_out_channels: Sequence[int] = (64,),
                 layers_per_block: int = 2, norm_num_groups: int = 32):
        super().__init__()
        self.layers_per_block = layers_per_block
        self.conv_in = nn.Conv2d(in_channels, block_out_channels[-1], kernel_size=3, stride=1, padding=1)
        self.mid_block = UNetMidBlock2D(block_out_channels[-1], None, norm_num_groups, block_out_channels[-1],
                                        eps=1e-6)
        self.up_blocks = nn.ModuleList([])
        reversed_channels = list(reversed(block_out_channels))
        output_channel = reversed_channels[0]
        for i in range(len(block_out_channels)):
            prev_output_channel, output_channel = output_channel, reversed_channels[i]
            self.up_blocks.append(UpDecoderBlock2D(prev_output_channel, output_channel, layers_per_block + 1,
                                                   norm_num_groups, i != len(block_out_channels) - 1))
        self.conv_norm_out = nn.GroupNorm(num_channels=block_out_channels[0], num_groups=norm_num_groups, eps=1e-6)
        self.conv_act = nn.SiLU()
        self.conv_out = nn.Conv2d(block_out_channels[0], out_channels, 3, padding=1)

    def forward(self, sample, latent_embeds=None):
        sample = self.conv_in(sample)
        upscale_dtype = next(iter(self.up_blocks.parameters())).dtype
        sample = self.mid_block(sample, latent_embeds)
        sample = sample.to(upscale_dtype)
        for up_block in self.up_blocks:
            sample = up_block(sample, latent_embeds)
        return self.conv_out(self.conv_act(self.conv_norm_out(sample)))


class AutoencoderKLDecode(nn.Module):
    """``AutoencoderKL.decode(z).sample``: latents ``(B, latent_channels, h, w)`` -> images ``(B, 3, 2^k h, 2^k w)``
    (``k`` = number of up blocks - 1). Holds AutoencoderKL's decode-side modules under its names."""

    def __init__(self, latent_channels: int = 4, block_out_channels: Sequence[int] = (128, 256, 512, 512),
                 layers_per_block: int = 2, norm_num_groups: int = 32):
        super().__init__()
        self.decoder = Decoder(latent_channels, 3, block_out_channels, layers_per_block, norm_num_groups)
        self.post_quant_conv = nn.Conv2d(latent_channels, latent_channels, 1)

    def forward(self, z):
        return self.decoder(self.post_quant_conv(z))


def sd_vae_decoder_small() -> AutoencoderKLDecode:
    """Stable Diffusion's layout (4 latent channels, GroupNorm(32), 3 up blocks of 3 ResNets) at widths 32/64/64."""
    return AutoencoderKLDecode(4, (32, 64, 64), 2, 32)
