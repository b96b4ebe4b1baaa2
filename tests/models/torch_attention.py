"""Twins built on torch's own attention modules (``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``/
``nn.TransformerDecoderLayer``), with their reference implementations' ``state_dict`` names:

* DETR's transformer (``facebookresearch/detr`` ``models/transformer.py``, ``position_encoding.py``, ``detr.py``):
  a stride-2 conv backbone, ``input_proj``, ``PositionEmbeddingSine`` (``cumsum`` over a no-padding mask,
  interleaved sin/cos stacked and flattened), post-norm encoder layers around ``nn.MultiheadAttention`` with the
  position added to query and key only, a decoder over learned queries (``query_embed``) with the intermediate
  outputs normed and stacked, class and box heads (``MLP``, sigmoid);
* torchaudio's ``Conformer`` (``torchaudio/models/conformer.py``): lengths -> key padding mask, half-step feed
  forwards, ``nn.MultiheadAttention`` time-first with ``key_padding_mask``, the convolution module (pointwise conv,
  ``GLU(dim=1)``, depthwise ``Conv1d``, ``BatchNorm1d``, SiLU);
* ``nn.TransformerEncoder`` / ``nn.TransformerDecoder`` stacks as users write them (``batch_first`` both ways,
  ``norm_first``, GELU, a padding mask): in eval under ``no_grad`` torch runs its fused fast path
  (``torch._transformer_encoder_layer_fwd``, nested tensors that zero the padded positions).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------------------------------------------- DETR
class PositionEmbeddingSine(nn.Module):
    def __init__(self, num_pos_feats: int = 8, temperature: int = 10000, normalize: bool = True):
        super().__init__()
        self.num_pos_feats = num_pos_feats
        self.temperature = temperature
        self.normalize = normalize
        self.scale = 2 * math.pi

    def forward(self, x, mask):
        not_mask = ~mask
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        if self.normalize:
            eps = 1e-6
            y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
            x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class DetrEncoderLayer(nn.Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=0.0)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(0.0)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(0.0)
        self.dropout2 = nn.Dropout(0.0)
        self.activation = F.relu

    def forward(self, src, src_key_padding_mask=None, pos=None):
        q = k = src + pos
        src2 = self.self_attn(q, k, value=src, key_padding_mask=src_key_padding_mask)[0]
        src = self.norm1(src + self.dropout1(src2))
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        return self.norm2(src + self.dropout2(src2))


class DetrDecoderLayer(nn.Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=0.0)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=0.0)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(0.0)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(0.0)
        self.dropout2 = nn.Dropout(0.0)
        self.dropout3 = nn.Dropout(0.0)
        self.activation = F.relu

    def forward(self, tgt, memory, memory_key_padding_mask=None, pos=None, query_pos=None):
        q = k = tgt + query_pos
        tgt2 = self.self_attn(q, k, value=tgt)[0]
        tgt = self.norm1(tgt + self.dropout1(tgt2))
        tgt2 = self.multihead_attn(query=tgt + query_pos, key=memory + pos, value=memory,
                                   key_padding_mask=memory_key_padding_mask)[0]
        tgt = self.norm2(tgt + self.dropout2(tgt2))
        tgt2 = self.linear2(self.dropout(self.activation(self.linear1(tgt))))
        return self.norm3(tgt + self.dropout3(tgt2))


class DetrTransformerEncoder(nn.Module):
    def __init__(self, layer, num_layers):
        super().__init__()
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.norm = None

    def forward(self, src, src_key_padding_mask=None, pos=None):
        for layer in self.layers:
            src = layer(src, src_key_padding_mask=src_key_padding_mask, pos=pos)
        return src


class DetrTransformerDecoder(nn.Module):
    def __init__(self, layer, num_layers, norm):
        super().__init__()
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])
        self.norm = norm

    def forward(self, tgt, memory, memory_key_padding_mask=None, pos=None, query_pos=None):
        intermediate = []
        for layer in self.layers:
            tgt = layer(tgt, memory, memory_key_padding_mask=memory_key_padding_mask, pos=pos, query_pos=query_pos)
            intermediate.append(self.norm(tgt))
        return torch.stack(intermediate)


class DetrTransformer(nn.Module):
    def __init__(self, d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=32):
        super().__init__()
        self.encoder = DetrTransformerEncoder(DetrEncoderLayer(d_model, nhead, dim_feedforward), num_encoder_layers)
        self.decoder = DetrTransformerDecoder(DetrDecoderLayer(d_model, nhead, dim_feedforward), num_decoder_layers,
                                              nn.LayerNorm(d_model))
        self.d_model = d_model
        self.nhead = nhead

    def forward(self, src, mask, query_embed, pos_embed):
        bs, c, h, w = src.shape
        src = src.flatten(2).permute(2, 0, 1)
        pos_embed = pos_embed.flatten(2).permute(2, 0, 1)
        query_embed = query_embed.unsqueeze(1).repeat(1, bs, 1)
        mask = mask.flatten(1)
        tgt = torch.zeros_like(query_embed)
        memory = self.encoder(src, src_key_padding_mask=mask, pos=pos_embed)
        hs = self.decoder(tgt, memory, memory_key_padding_mask=mask, pos=pos_embed, query_pos=query_embed)
        return hs.transpose(1, 2), memory.permute(1, 2, 0).view(bs, c, h, w)


class MLP(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.num_layers = num_layers
        h = [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
        return x


class DETR(nn.Module):
    """DETR over a small stand-in backbone (``backbone.0``: two stride-2 convs); returns (logits, boxes)."""

    def __init__(self, num_classes: int = 5, num_queries: int = 6, hidden_dim: int = 16):
        super().__init__()
        self.backbone = nn.Sequential(nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 24, 3, 2, 1),
                                                    nn.ReLU()), PositionEmbeddingSine(hidden_dim // 2))
        self.transformer = DetrTransformer(d_model=hidden_dim)
        self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
        self.bbox_embed = MLP(hidden_dim, hidden_dim, 4, 3)
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.input_proj = nn.Conv2d(24, hidden_dim, kernel_size=1)

    def forward(self, samples):
        src = self.backbone[0](samples)
        mask = torch.zeros(src.shape[0], src.shape[2], src.shape[3], dtype=torch.bool, device=src.device)
        pos = self.backbone[1](src, mask)
        hs = self.transformer(self.input_proj(src), mask, self.query_embed.weight, pos)[0]
        return self.class_embed(hs)[-1], self.bbox_embed(hs).sigmoid()[-1]


def detr_small() -> nn.Module:
    return DETR()


# ---------------------------------------------------------------------------------------------------- Conformer
def _lengths_to_padding_mask(lengths: torch.Tensor) -> torch.Tensor:
    batch_size = lengths.shape[0]
    max_length = int(torch.max(lengths).item())
    return torch.arange(max_length, device=lengths.device, dtype=lengths.dtype).expand(
        batch_size, max_length) >= lengths.unsqueeze(1)


class _ConvolutionModule(nn.Module):
    def __init__(self, input_dim, num_channels, depthwise_kernel_size):
        super().__init__()
        self.layer_norm = nn.LayerNorm(input_dim)
        self.sequential = nn.Sequential(
            nn.Conv1d(input_dim, 2 * num_channels, 1, stride=1, padding=0),
            nn.GLU(dim=1),
            nn.Conv1d(num_channels, num_channels, depthwise_kernel_size, stride=1,
                      padding=(depthwise_kernel_size - 1) // 2, groups=num_channels),
            nn.BatchNorm1d(num_channels),
            nn.SiLU(),
            nn.Conv1d(num_channels, input_dim, kernel_size=1, stride=1, padding=0),
            nn.Dropout(0.0),
        )

    def forward(self, input):
        x = self.layer_norm(input).transpose(1, 2)
        return self.sequential(x).transpose(1, 2)


class _FeedForwardModule(nn.Module):
    def __init__(self, input_dim, hidden_dim):
        super().__init__()
        self.sequential = nn.Sequential(nn.LayerNorm(input_dim), nn.Linear(input_dim, hidden_dim), nn.SiLU(),
                                        nn.Dropout(0.0), nn.Linear(hidden_dim, input_dim), nn.Dropout(0.0))

    def forward(self, input):
        return self.sequential(input)


class ConformerLayer(nn.Module):
    def __init__(self, input_dim, ffn_dim, num_attention_heads, depthwise_conv_kernel_size):
        super().__init__()
        self.ffn1 = _FeedForwardModule(input_dim, ffn_dim)
        self.self_attn_layer_norm = nn.LayerNorm(input_dim)
        self.self_attn = nn.MultiheadAttention(input_dim, num_attention_heads, dropout=0.0)
        self.self_attn_dropout = nn.Dropout(0.0)
        self.conv_module = _ConvolutionModule(input_dim, input_dim, depthwise_conv_kernel_size)
        self.ffn2 = _FeedForwardModule(input_dim, ffn_dim)
        self.final_layer_norm = nn.LayerNorm(input_dim)
        self.convolution_first = False

    def forward(self, input, key_padding_mask):
        x = 0.5 * self.ffn1(input) + input
        residual = x
        x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(query=x, key=x, value=x, key_padding_mask=key_padding_mask, need_weights=False)
        x = self.self_attn_dropout(x) + residual
        residual = x
        x = x.transpose(0, 1)
        x = self.conv_module(x).transpose(0, 1) + residual
        x = 0.5 * self.ffn2(x) + x
        return self.final_layer_norm(x)


class Conformer(nn.Module):
    """torchaudio's Conformer: ``(input (B, T, D), lengths (B,))`` -> ``(output, lengths)``."""

    def __init__(self, input_dim=16, num_heads=2, ffn_dim=32, num_layers=2, depthwise_conv_kernel_size=7):
        super().__init__()
        self.conformer_layers = nn.ModuleList(
            [ConformerLayer(input_dim, ffn_dim, num_heads, depthwise_conv_kernel_size) for _ in range(num_layers)])

    def forward(self, input, lengths):
        encoder_padding_mask = _lengths_to_padding_mask(lengths)
        x = input.transpose(0, 1)
        for layer in self.conformer_layers:
            x = layer(x, encoder_padding_mask)
        return x.transpose(0, 1), lengths


def conformer_small() -> nn.Module:
    return Conformer()


# ---------------------------------------------------------------------------------------------------- nn.Transformer*
class TorchEncoder(nn.Module):
    """``nn.TransformerEncoder`` of ``norm_first`` GELU layers over token features, with a padding mask."""

    def __init__(self, d_model=16, nhead=2, num_layers=2, batch_first=True, norm_first=True, nested=False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, nhead, 32, dropout=0.0, activation="gelu",
                                           batch_first=batch_first, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, num_layers, norm=nn.LayerNorm(d_model),
                                             enable_nested_tensor=nested)
        self.batch_first = batch_first

    def forward(self, x, padding_mask):
        return self.encoder(x, src_key_padding_mask=padding_mask)


class TorchSeq2Seq(nn.Module):
    """``nn.Transformer`` (post-norm, ReLU, ``batch_first=False``) with a causal target mask."""

    def __init__(self, d_model=16, nhead=2):
        super().__init__()
        self.transformer = nn.Transformer(d_model, nhead, num_encoder_layers=1, num_decoder_layers=1,
                                          dim_feedforward=32, dropout=0.0)

    def forward(self, src, tgt):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[0])
        return self.transformer(src, tgt, tgt_mask=mask, tgt_is_causal=True)


def torch_encoder_small() -> nn.Module:
    return TorchEncoder()


def torch_encoder_post_norm_small() -> nn.Module:
    return TorchEncoder(batch_first=False, norm_first=False)


def torch_encoder_nested_small() -> nn.Module:
    """Post-norm, ``batch_first``, nested tensors enabled: torch's eval fast path zeroes padded positions."""
    return TorchEncoder(batch_first=True, norm_first=False, nested=True)


def torch_seq2seq_small() -> nn.Module:
    return TorchSeq2Seq()
