"""torchaudio's Conv-TasNet (``torchaudio/models/conv_tasnet.py``) with torchaudio's module structure and
``state_dict`` names (``encoder``, ``mask_generator.input_norm``, ``.conv_layers.<i>.conv_layers.<j>``,
``.res_out``, ``.skip_out``, ``output_prelu``, ``output_conv``, ``decoder``), so a torchaudio checkpoint's keys
match at full size.

Stresses: a strided Conv1d encoder over a waveform zero-padded in the forward to a whole number of strides (a
branch on ``num_frames % stride``, then a crop of the decoded signal); global layer norm as ``GroupNorm(1, C)``;
PReLU; depthwise dilated Conv1d blocks with residual and skip outputs (the last block has no residual conv); a
sigmoid mask multiplied into the encoded mixture per source; ``ConvTranspose1d`` with padding as the overlap-add
decoder.
"""

from __future__ import annotations

import torch
from torch import nn


class ConvBlock(nn.Module):
    def __init__(self, io_channels: int, hidden_channels: int, kernel_size: int, padding: int, dilation: int = 1,
                 no_residual: bool = False):
        super().__init__()
        self.conv_layers = nn.Sequential(
            nn.Conv1d(io_channels, hidden_channels, kernel_size=1),
            nn.PReLU(),
            nn.GroupNorm(num_groups=1, num_channels=hidden_channels, eps=1e-08),
            nn.Conv1d(hidden_channels, hidden_channels, kernel_size=kernel_size, padding=padding, dilation=dilation,
                      groups=hidden_channels),
            nn.PReLU(),
            nn.GroupNorm(num_groups=1, num_channels=hidden_channels, eps=1e-08),
        )
        self.res_out = None if no_residual else nn.Conv1d(hidden_channels, io_channels, kernel_size=1)
        self.skip_out = nn.Conv1d(hidden_channels, io_channels, kernel_size=1)

    def forward(self, input):
        feature = self.conv_layers(input)
        residual = None if self.res_out is None else self.res_out(feature)
        return residual, self.skip_out(feature)


class MaskGenerator(nn.Module):
    def __init__(self, input_dim, num_sources, kernel_size, num_feats, num_hidden, num_layers, num_stacks):
        super().__init__()
        self.input_dim, self.num_sources = input_dim, num_sources
        self.input_norm = nn.GroupNorm(num_groups=1, num_channels=input_dim, eps=1e-8)
        self.input_conv = nn.Conv1d(input_dim, num_feats, kernel_size=1)
        self.conv_layers = nn.ModuleList([])
        for s in range(num_stacks):
            for layer in range(num_layers):
                multi = 2 ** layer
                self.conv_layers.append(ConvBlock(num_feats, num_hidden, kernel_size, dilation=multi, padding=multi,
                                                  no_residual=(layer == num_layers - 1 and s == num_stacks - 1)))
        self.output_prelu = nn.PReLU()
        self.output_conv = nn.Conv1d(num_feats, input_dim * num_sources, kernel_size=1)
        self.mask_activate = nn.Sigmoid()

    def forward(self, input):
        batch_size = input.shape[0]
        feats = self.input_conv(self.input_norm(input))
        output = 0.0
        for layer in self.conv_layers:
            residual, skip = layer(feats)
            if residual is not None:
                feats = feats + residual
            output = output + skip
        output = self.mask_activate(self.output_conv(self.output_prelu(output)))
        return output.view(batch_size, self.num_sources, self.input_dim, -1)


class ConvTasNet(nn.Module):
    """``forward(input)``: mixture ``(B, 1, T)`` -> sources ``(B, num_sources, T)``."""

    def __init__(self, num_sources: int = 2, enc_kernel_size: int = 16, enc_num_feats: int = 512,
                 msk_kernel_size: int = 3, msk_num_feats: int = 128, msk_num_hidden_feats: int = 512,
                 msk_num_layers: int = 8, msk_num_stacks: int = 3):
        super().__init__()
        self.num_sources, self.enc_num_feats = num_sources, enc_num_feats
        self.enc_kernel_size, self.enc_stride = enc_kernel_size, enc_kernel_size // 2
        self.encoder = nn.Conv1d(1, enc_num_feats, kernel_size=enc_kernel_size, stride=self.enc_stride,
                                 padding=self.enc_stride, bias=False)
        self.mask_generator = MaskGenerator(enc_num_feats, num_sources, msk_kernel_size, msk_num_feats,
                                            msk_num_hidden_feats, msk_num_layers, msk_num_stacks)
        self.decoder = nn.ConvTranspose1d(enc_num_feats, 1, kernel_size=enc_kernel_size, stride=self.enc_stride,
                                          padding=self.enc_stride, bias=False)

    def _align_num_frames_with_strides(self, input):
        batch_size, num_channels, num_frames = input.shape
        is_odd = self.enc_kernel_size % 2
        num_strides = (num_frames - is_odd) // self.enc_stride
        num_remainings = num_frames - (is_odd + num_strides * self.enc_stride)
        if num_remainings == 0:
            return input, 0
        num_paddings = self.enc_stride - num_remainings
        pad = torch.zeros(batch_size, num_channels, num_paddings, dtype=input.dtype, device=input.device)
        return torch.cat([input, pad], 2), num_paddings

    def forward(self, input):
        if input.ndim != 3 or input.shape[1] != 1:
            raise ValueError(f"Expected 3D tensor (batch, channel==1, frames). Found: {input.shape}")
        padded, num_pads = self._align_num_frames_with_strides(input)
        batch_size, num_padded_frames = padded.shape[0], padded.shape[2]
        feats = self.encoder(padded)
        masked = self.mask_generator(feats) * feats.unsqueeze(1)
        masked = masked.view(batch_size * self.num_sources, self.enc_num_feats, -1)
        decoded = self.decoder(masked)
        output = decoded.view(batch_size, self.num_sources, num_padded_frames)
        if num_pads > 0:
            output = output[..., :-num_pads]
        return output


def conv_tasnet_small() -> ConvTasNet:
    return ConvTasNet(num_sources=2, enc_kernel_size=8, enc_num_feats=16, msk_kernel_size=3, msk_num_feats=8,
                      msk_num_hidden_feats=16, msk_num_layers=3, msk_num_stacks=2)
