"""Small twins of speech models (Hugging Face / reference module structure and ``state_dict`` names):

* wav2vec2's feature encoder and positional conv: Conv1d stack (first layer with a per-channel GroupNorm), GELU,
  feature projection (LayerNorm, Linear), a grouped positional Conv1d under the parametrization form of
  weight norm (``dim=2``, as HF), ``Wav2Vec2SamePadLayer`` for an even kernel, encoder LayerNorm;
* a HiFi-GAN generator (vocoder): ``torch.nn.utils.weight_norm`` convs (``weight_g``/``weight_v``),
  ConvTranspose1d upsampling, LeakyReLU, ResBlock1 residual dilated Conv1d, tanh.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import weight_norm
from torch.nn.utils.parametrizations import weight_norm as parametrized_weight_norm


# ---------------------------------------------------------------------------------------------------- wav2vec2
class Wav2Vec2GroupNormConvLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, kernel: int, stride: int):
        super().__init__()
        self.conv = nn.Conv1d(in_dim, out_dim, kernel, stride=stride, bias=False)
        self.activation = nn.GELU()
        self.layer_norm = nn.GroupNorm(num_groups=out_dim, num_channels=out_dim, affine=True)

    def forward(self, x):
        return self.activation(self.layer_norm(self.conv(x)))


class Wav2Vec2NoLayerNormConvLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, kernel: int, stride: int):
        super().__init__()
        self.conv = nn.Conv1d(in_dim, out_dim, kernel, stride=stride, bias=False)
        self.activation = nn.GELU()

    def forward(self, x):
        return self.activation(self.conv(x))


class Wav2Vec2FeatureEncoder(nn.Module):
    def __init__(self, dims=(8, 8, 8), kernels=(10, 3, 2), strides=(5, 2, 2)):
        super().__init__()
        layers = [Wav2Vec2GroupNormConvLayer(1, dims[0], kernels[0], strides[0])]
        layers += [Wav2Vec2NoLayerNormConvLayer(dims[i - 1], dims[i], kernels[i], strides[i])
                   for i in range(1, len(dims))]
        self.conv_layers = nn.ModuleList(layers)

    def forward(self, input_values):
        hidden_states = input_values[:, None]
        for conv_layer in self.conv_layers:
            hidden_states = conv_layer(hidden_states)
        return hidden_states


class Wav2Vec2FeatureProjection(nn.Module):
    def __init__(self, conv_dim: int, hidden: int):
        super().__init__()
        self.layer_norm = nn.LayerNorm(conv_dim, eps=1e-5)
        self.projection = nn.Linear(conv_dim, hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states):
        norm_hidden_states = self.layer_norm(hidden_states)
        return self.dropout(self.projection(norm_hidden_states)), norm_hidden_states


class Wav2Vec2SamePadLayer(nn.Module):
    def __init__(self, num_conv_pos_embeddings: int):
        super().__init__()
        self.num_pad_remove = 1 if num_conv_pos_embeddings % 2 == 0 else 0

    def forward(self, hidden_states):
        return hidden_states[:, :, : -self.num_pad_remove] if self.num_pad_remove > 0 else hidden_states


class Wav2Vec2PositionalConvEmbedding(nn.Module):
    def __init__(self, hidden: int, kernel: int, groups: int):
        super().__init__()
        conv = nn.Conv1d(hidden, hidden, kernel_size=kernel, padding=kernel // 2, groups=groups)
        self.conv = parametrized_weight_norm(conv, name="weight", dim=2)
        self.padding = Wav2Vec2SamePadLayer(kernel)
        self.activation = nn.GELU()

    def forward(self, hidden_states):
        hidden_states = self.conv(hidden_states.transpose(1, 2))
        return self.activation(self.padding(hidden_states)).transpose(1, 2)


class Wav2Vec2Model(nn.Module):
    """Input raw audio ``(N, L)``; returns the encoder's input states ``(N, T, hidden)`` and the extracted
    features ``(N, T, conv_dim)``."""

    def __init__(self, conv_dim: int = 8, hidden: int = 16, pos_kernel: int = 4, pos_groups: int = 4):
        super().__init__()
        self.feature_extractor = Wav2Vec2FeatureEncoder((conv_dim,) * 3)
        self.feature_projection = Wav2Vec2FeatureProjection(conv_dim, hidden)
        self.pos_conv_embed = Wav2Vec2PositionalConvEmbedding(hidden, pos_kernel, pos_groups)
        self.layer_norm = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, input_values):
        extract_features = self.feature_extractor(input_values).transpose(1, 2)
        hidden_states, extract_features = self.feature_projection(extract_features)
        hidden_states = hidden_states + self.pos_conv_embed(hidden_states)
        return self.layer_norm(hidden_states), extract_features


def wav2vec2_small() -> nn.Module:
    return Wav2Vec2Model()


# ---------------------------------------------------------------------------------------------------- HiFi-GAN
LRELU_SLOPE = 0.1


def get_padding(kernel_size: int, dilation: int = 1) -> int:
    return int((kernel_size * dilation - dilation) / 2)


class ResBlock1(nn.Module):
    def __init__(self, channels: int, kernel_size: int = 3, dilation=(1, 3, 5)):
        super().__init__()
        self.convs1 = nn.ModuleList([weight_norm(nn.Conv1d(channels, channels, kernel_size, 1, dilation=d,
                                                           padding=get_padding(kernel_size, d))) for d in dilation])
        self.convs2 = nn.ModuleList([weight_norm(nn.Conv1d(channels, channels, kernel_size, 1, dilation=1,
                                                           padding=get_padding(kernel_size, 1))) for _ in dilation])

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c1(xt)
            xt = F.leaky_relu(xt, LRELU_SLOPE)
            xt = c2(xt)
            x = xt + x
        return x


class Generator(nn.Module):
    """Mel ``(N, mels, T)`` -> waveform ``(N, 1, T * prod(rates))``."""

    def __init__(self, mels: int = 8, channels: int = 16, rates=(2, 2), kernels=(4, 4), res_kernels=(3, 5)):
        super().__init__()
        self.num_kernels = len(res_kernels)
        self.num_upsamples = len(rates)
        self.conv_pre = weight_norm(nn.Conv1d(mels, channels, 7, 1, padding=3))
        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(rates, kernels)):
            self.ups.append(weight_norm(nn.ConvTranspose1d(channels // (2 ** i), channels // (2 ** (i + 1)), k, u,
                                                           padding=(k - u) // 2)))
        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = channels // (2 ** (i + 1))
            for k in res_kernels:
                self.resblocks.append(ResBlock1(ch, k))
        self.conv_post = weight_norm(nn.Conv1d(ch, 1, 7, 1, padding=3))

    def forward(self, x):
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = self.ups[i](F.leaky_relu(x, LRELU_SLOPE))
            xs = None
            for j in range(self.num_kernels):
                out = self.resblocks[i * self.num_kernels + j](x)
                xs = out if xs is None else xs + out
            x = xs / self.num_kernels
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


def hifigan_small() -> nn.Module:
    return Generator()
