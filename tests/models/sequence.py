"""Sequence and point-set models with their reference implementations' module structure and ``state_dict`` names:

* Whisper's encoder (Hugging Face ``WhisperEncoder``): Conv1d + GELU stem (second conv strided), sinusoidal
  ``embed_positions`` (an ``nn.Embedding`` whose weight is sliced to the sequence length), pre-LN attention layers
  (``self_attn.k_proj`` without bias, q scaled before the product), final LayerNorm;
* CRNN (meijieru/crnn.pytorch): VGG-style CNN with (2, 1)-strided pools to height 1, ``squeeze`` + ``permute`` to
  (T, B, C), two ``BidirectionalLSTM`` (``nn.LSTM(bidirectional=True)`` + ``Linear``), ``log_softmax``;
* TCN (locuslab/TCN ``TemporalConvNet``): weight-normed dilated causal Conv1d padded on both sides and chomped
  (``x[:, :, :-chomp]``), residual with a 1x1 downsample conv;
* a WaveNet stack (r9y9/wavenet_vocoder ``ResidualConv1dGLU``): causal dilated conv, ``split`` into halves,
  ``tanh(a) * sigmoid(b)``, 1x1 residual and skip convs, ``sqrt(0.5)`` scaling;
* PointNet (fxia22/pointnet.pytorch ``PointNetCls``): input T-Net (``STN3d``: Conv1d k=1 + BatchNorm1d, max over
  points, FC layers, + identity from numpy), ``bmm`` with the points, shared MLP, global max, ``log_softmax``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import weight_norm


# ---------------------------------------------------------------------------------------------------- Whisper
def sinusoids(length: int, channels: int, max_timescale: float = 10000) -> torch.Tensor:
    """Whisper's sinusoidal position table (sin half, then cos half)."""
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length).view(-1, 1) * inv_timescales.view(1, -1)
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)


class WhisperAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, tensor, seq_len: int, bsz: int):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, hidden_states):
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self._shape(self.q_proj(hidden_states) * self.scaling, tgt_len, bsz)
        key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
        value_states = self._shape(self.v_proj(hidden_states), -1, bsz)
        attn_weights = nn.functional.softmax(torch.matmul(query_states, key_states.transpose(2, 3)), dim=-1)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2)
        return self.out_proj(attn_output.reshape(bsz, tgt_len, -1))


class WhisperEncoderLayer(nn.Module):
    def __init__(self, embed_dim: int, heads: int, ffn_dim: int):
        super().__init__()
        self.self_attn = WhisperAttention(embed_dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.activation_fn = nn.GELU()
        self.fc1 = nn.Linear(embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.self_attn(self.self_attn_layer_norm(hidden_states))
        residual = hidden_states
        hidden_states = self.fc2(self.activation_fn(self.fc1(self.final_layer_norm(hidden_states))))
        return residual + hidden_states


class WhisperEncoder(nn.Module):
    """``forward(input_features)``: log-mel features ``(B, num_mel_bins, T)`` -> ``(B, ceil(T / 2), d_model)``."""

    def __init__(self, num_mel_bins: int = 8, d_model: int = 16, heads: int = 2, ffn_dim: int = 32, layers: int = 2,
                 max_source_positions: int = 32):
        super().__init__()
        self.conv1 = nn.Conv1d(num_mel_bins, d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(max_source_positions, d_model)
        self.embed_positions.requires_grad_(False)
        with torch.no_grad():
            self.embed_positions.weight.copy_(sinusoids(max_source_positions, d_model))
        self.layers = nn.ModuleList(WhisperEncoderLayer(d_model, heads, ffn_dim) for _ in range(layers))
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, input_features):
        inputs_embeds = nn.functional.gelu(self.conv1(input_features))
        inputs_embeds = nn.functional.gelu(self.conv2(inputs_embeds)).permute(0, 2, 1)
        hidden_states = inputs_embeds + self.embed_positions.weight[: inputs_embeds.shape[1]]
        for encoder_layer in self.layers:
            hidden_states = encoder_layer(hidden_states)
        return self.layer_norm(hidden_states)


def whisper_encoder_small() -> WhisperEncoder:
    """8 mel bins, d_model 16, two heads, two layers, 32 positions (inputs up to 64 frames)."""
    return WhisperEncoder()


# ---------------------------------------------------------------------------------------------------- CRNN
class BidirectionalLSTM(nn.Module):
    def __init__(self, nIn: int, nHidden: int, nOut: int):
        super().__init__()
        self.rnn = nn.LSTM(nIn, nHidden, bidirectional=True)
        self.embedding = nn.Linear(nHidden * 2, nOut)

    def forward(self, input):
        recurrent, _ = self.rnn(input)
        T, b, h = recurrent.size()
        output = self.embedding(recurrent.view(T * b, h))
        return output.view(T, b, -1)


class CRNN(nn.Module):
    """Input ``(B, nc, 32, W)``; output ``(T, B, nclass)`` log-probabilities, ``T = W / 4 + 1``."""

    def __init__(self, imgH: int = 32, nc: int = 1, nclass: int = 7, nh: int = 8, widths=(4, 8, 8, 8, 16, 16, 16)):
        super().__init__()
        if imgH % 16:
            raise ValueError("imgH has to be a multiple of 16")
        ks, ps, ss = [3, 3, 3, 3, 3, 3, 2], [1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]
        cnn = nn.Sequential()

        def conv_relu(i, batch_normalization=False):
            n_in = nc if i == 0 else widths[i - 1]
            cnn.add_module(f"conv{i}", nn.Conv2d(n_in, widths[i], ks[i], ss[i], ps[i]))
            if batch_normalization:
                cnn.add_module(f"batchnorm{i}", nn.BatchNorm2d(widths[i]))
            cnn.add_module(f"relu{i}", nn.ReLU(True))

        conv_relu(0)
        cnn.add_module("pooling0", nn.MaxPool2d(2, 2))
        conv_relu(1)
        cnn.add_module("pooling1", nn.MaxPool2d(2, 2))
        conv_relu(2, True)
        conv_relu(3)
        cnn.add_module("pooling2", nn.MaxPool2d((2, 2), (2, 1), (0, 1)))
        conv_relu(4, True)
        conv_relu(5)
        cnn.add_module("pooling3", nn.MaxPool2d((2, 2), (2, 1), (0, 1)))
        conv_relu(6, True)
        self.cnn = cnn
        self.rnn = nn.Sequential(BidirectionalLSTM(widths[-1], nh, nh), BidirectionalLSTM(nh, nh, nclass))

    def forward(self, input):
        conv = self.cnn(input)
        b, c, h, w = conv.size()
        if h != 1:
            raise ValueError("the height of conv must be 1")
        conv = conv.squeeze(2).permute(2, 0, 1)
        return F.log_softmax(self.rnn(conv), dim=2)


def crnn_small() -> CRNN:
    return CRNN()


# ---------------------------------------------------------------------------------------------------- TCN
class Chomp1d(nn.Module):
    def __init__(self, chomp_size: int):
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, stride, dilation, padding, dropout=0.2):
        super().__init__()
        self.conv1 = weight_norm(nn.Conv1d(n_inputs, n_outputs, kernel_size, stride=stride, padding=padding,
                                           dilation=dilation))
        self.chomp1 = Chomp1d(padding)
        self.relu1 = nn.ReLU()
        self.dropout1 = nn.Dropout(dropout)
        self.conv2 = weight_norm(nn.Conv1d(n_outputs, n_outputs, kernel_size, stride=stride, padding=padding,
                                           dilation=dilation))
        self.chomp2 = Chomp1d(padding)
        self.relu2 = nn.ReLU()
        self.dropout2 = nn.Dropout(dropout)
        self.net = nn.Sequential(self.conv1, self.chomp1, self.relu1, self.dropout1,
                                 self.conv2, self.chomp2, self.relu2, self.dropout2)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)


class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs: int = 3, num_channels=(8, 8, 6), kernel_size: int = 3, dropout: float = 0.2):
        super().__init__()
        layers = []
        for i, out_channels in enumerate(num_channels):
            dilation_size = 2 ** i
            in_channels = num_inputs if i == 0 else num_channels[i - 1]
            layers += [TemporalBlock(in_channels, out_channels, kernel_size, stride=1, dilation=dilation_size,
                                     padding=(kernel_size - 1) * dilation_size, dropout=dropout)]
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


def tcn_small() -> TemporalConvNet:
    return TemporalConvNet()


# ---------------------------------------------------------------------------------------------------- WaveNet
class Conv1dCausal(nn.Conv1d):
    """A dilated Conv1d padded by ``(k - 1) * dilation`` on both sides; the caller keeps the first T outputs."""

    def __init__(self, in_channels, out_channels, kernel_size, dilation=1, bias=True):
        super().__init__(in_channels, out_channels, kernel_size, padding=(kernel_size - 1) * dilation,
                         dilation=dilation, bias=bias)


class ResidualConv1dGLU(nn.Module):
    def __init__(self, residual_channels, gate_channels, kernel_size, skip_out_channels, dilation):
        super().__init__()
        self.conv = Conv1dCausal(residual_channels, gate_channels, kernel_size, dilation=dilation)
        gate_out_channels = gate_channels // 2
        self.conv1x1_out = nn.Conv1d(gate_out_channels, residual_channels, 1)
        self.conv1x1_skip = nn.Conv1d(gate_out_channels, skip_out_channels, 1)

    def forward(self, x):
        residual = x
        x = self.conv(x)[:, :, :residual.size(-1)]
        a, b = x.split(x.size(1) // 2, dim=1)
        x = torch.tanh(a) * torch.sigmoid(b)
        s = self.conv1x1_skip(x)
        x = self.conv1x1_out(x)
        return (x + residual) * math.sqrt(0.5), s


class WaveNet(nn.Module):
    """``first_conv`` (1x1) -> dilated GLU layers (dilation 1, 2, 4, ... per stack) summing skips ->
    ReLU, 1x1, ReLU, 1x1 (``last_conv_layers``)."""

    def __init__(self, in_channels=1, out_channels=6, layers=4, stacks=2, residual_channels=8, gate_channels=16,
                 skip_out_channels=8, kernel_size=2):
        super().__init__()
        layers_per_stack = layers // stacks
        self.first_conv = nn.Conv1d(in_channels, residual_channels, 1)
        self.conv_layers = nn.ModuleList(
            ResidualConv1dGLU(residual_channels, gate_channels, kernel_size, skip_out_channels,
                              2 ** (layer % layers_per_stack)) for layer in range(layers))
        self.last_conv_layers = nn.ModuleList([
            nn.ReLU(inplace=True), nn.Conv1d(skip_out_channels, skip_out_channels, 1),
            nn.ReLU(inplace=True), nn.Conv1d(skip_out_channels, out_channels, 1)])

    def forward(self, x):
        x = self.first_conv(x)
        skips = 0
        for f in self.conv_layers:
            x, h = f(x)
            skips = skips + h
        skips = skips * math.sqrt(1.0 / len(self.conv_layers))
        x = skips
        for f in self.last_conv_layers:
            x = f(x)
        return x


def wavenet_small() -> WaveNet:
    return WaveNet()


# ---------------------------------------------------------------------------------------------------- PointNet
class STN3d(nn.Module):
    def __init__(self, widths=(16, 32, 64), fc=(32, 16)):
        super().__init__()
        w1, w2, w3 = widths
        self.conv1 = nn.Conv1d(3, w1, 1)
        self.conv2 = nn.Conv1d(w1, w2, 1)
        self.conv3 = nn.Conv1d(w2, w3, 1)
        self.fc1 = nn.Linear(w3, fc[0])
        self.fc2 = nn.Linear(fc[0], fc[1])
        self.fc3 = nn.Linear(fc[1], 9)
        self.relu = nn.ReLU()
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm1d(w1), nn.BatchNorm1d(w2), nn.BatchNorm1d(w3)
        self.bn4, self.bn5 = nn.BatchNorm1d(fc[0]), nn.BatchNorm1d(fc[1])
        self.global_dim = w3

    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, self.global_dim)
        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.fc2(x)))
        x = self.fc3(x)
        iden = torch.from_numpy(np.array([1, 0, 0, 0, 1, 0, 0, 0, 1]).astype(np.float32)).view(1, 9)
        x = x + iden.repeat(batchsize, 1)
        return x.view(-1, 3, 3)


class PointNetfeat(nn.Module):
    def __init__(self, widths=(16, 32, 64)):
        super().__init__()
        w1, w2, w3 = widths
        self.stn = STN3d(widths)
        self.conv1 = nn.Conv1d(3, w1, 1)
        self.conv2 = nn.Conv1d(w1, w2, 1)
        self.conv3 = nn.Conv1d(w2, w3, 1)
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm1d(w1), nn.BatchNorm1d(w2), nn.BatchNorm1d(w3)
        self.global_dim = w3

    def forward(self, x):
        trans = self.stn(x)
        x = torch.bmm(x.transpose(2, 1), trans).transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = torch.max(x, 2, keepdim=True)[0]
        return x.view(-1, self.global_dim), trans, None


class PointNetCls(nn.Module):
    """Points ``(B, 3, N)`` -> ``(log_probs (B, k), trans (B, 3, 3))`` (trans_feat is None: no feature T-Net)."""

    def __init__(self, k: int = 4, widths=(16, 32, 64), fc=(32, 16)):
        super().__init__()
        self.feat = PointNetfeat(widths)
        self.fc1 = nn.Linear(widths[-1], fc[0])
        self.fc2 = nn.Linear(fc[0], fc[1])
        self.fc3 = nn.Linear(fc[1], k)
        self.dropout = nn.Dropout(p=0.3)
        self.bn1, self.bn2 = nn.BatchNorm1d(fc[0]), nn.BatchNorm1d(fc[1])
        self.relu = nn.ReLU()

    def forward(self, x):
        x, trans, _ = self.feat(x)
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.dropout(self.fc2(x))))
        return F.log_softmax(self.fc3(x), dim=1), trans


def pointnet_small() -> PointNetCls:
    return PointNetCls()
