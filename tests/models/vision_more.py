"""Twins of two more vision architectures Porter was not written against (``tests/models/unseen.py``).

- PixelCNN (van den Oord et al. 2016), as in the widely copied ``jzbontar/pixelcnn-pytorch``: ``MaskedConv2d`` is an
  ``nn.Conv2d`` with a ``mask`` buffer (type 'A' hides the centre pixel, 'B' keeps it) that masks its weight in
  place (``self.weight.data *= self.mask``) before ``super().forward``; ``nn.Sequential`` of masked convs,
  BatchNorm2d and ReLU, a 1x1 conv to 256 logits per pixel. State-dict names ``net.0.weight``, ``net.0.mask``.
- MobileViT (Mehta and Rastegari 2022), timm's ``MobileVitBlock`` (``timm/models/byobnet.py`` /
  ``timm/layers``): ``conv_kxk`` / ``conv_1x1`` local representation, unfold into ``patch_size`` patches with
  reshapes and transposes (bilinear resize first when the map is not a multiple of the patch), a ``transformer``
  of pre-norm blocks (``norm1``, ``attn.qkv``, ``attn.proj``, ``norm2``, ``mlp.fc1``, ``mlp.fc2``), ``norm``, fold
  back, ``conv_proj`` and ``conv_fusion`` over the concatenated shortcut. Names ``stages.1.conv_kxk.conv.weight``,
  ``stages.1.transformer.0.attn.qkv.weight``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


# ------------------------------------------------------------------------------------------------- PixelCNN
class MaskedConv2d(nn.Conv2d):
    def __init__(self, mask_type, *args, **kwargs):
        super().__init__(*args, **kwargs)
        assert mask_type in {"A", "B"}
        self.register_buffer("mask", self.weight.data.clone())
        _, _, kh, kw = self.weight.size()
        self.mask.fill_(1)
        self.mask[:, :, kh // 2, kw // 2 + (mask_type == "B"):] = 0
        self.mask[:, :, kh // 2 + 1:] = 0

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


class PixelCNN(nn.Module):
    def __init__(self, fm=8, layers=3, levels=16):
        super().__init__()
        blocks = [MaskedConv2d("A", 1, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True)]
        for _ in range(layers):
            blocks += [MaskedConv2d("B", fm, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True)]
        blocks.append(nn.Conv2d(fm, levels, 1))
        self.net = nn.Sequential(*blocks)

    def forward(self, x):
        return self.net(x)


def pixelcnn_small():
    return PixelCNN()


def mask_pixelcnn(model):
    """A checkpoint holds masked weights and the masks as built (the randomisation touched both)."""
    for m in model.modules():
        if isinstance(m, MaskedConv2d):
            kind = "B" if m.in_channels == m.out_channels else "A"
            fresh = MaskedConv2d(kind, m.in_channels, m.out_channels, m.kernel_size, 1, m.padding, bias=False)
            m.mask.copy_(fresh.mask)
            m.weight.mul_(m.mask)


# ------------------------------------------------------------------------------------------------- MobileViT
class ConvNormAct(nn.Module):
    def __init__(self, c_in, c_out, k=3, stride=1, groups=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.SiLU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TransformerBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class MobileVitBlock(nn.Module):
    def __init__(self, c_in, c_out, transformer_dim, depth=2, num_heads=2, patch_size=2):
        super().__init__()
        self.conv_kxk = ConvNormAct(c_in, c_in, 3)
        self.conv_1x1 = nn.Conv2d(c_in, transformer_dim, 1, bias=False)
        self.transformer = nn.Sequential(*[TransformerBlock(transformer_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(transformer_dim)
        self.conv_proj = ConvNormAct(transformer_dim, c_out, 1)
        self.conv_fusion = ConvNormAct(c_in + c_out, c_out, 3)
        self.patch_size = (patch_size, patch_size)
        self.patch_area = patch_size * patch_size

    def forward(self, x):
        shortcut = x
        x = self.conv_1x1(self.conv_kxk(x))
        patch_h, patch_w = self.patch_size
        B, C, H, W = x.shape
        new_h, new_w = math.ceil(H / patch_h) * patch_h, math.ceil(W / patch_w) * patch_w
        num_patch_h, num_patch_w = new_h // patch_h, new_w // patch_w
        num_patches = num_patch_h * num_patch_w
        interpolate = False
        if new_h != H or new_w != W:
            x = F.interpolate(x, size=(new_h, new_w), mode="bilinear", align_corners=False)
            interpolate = True
        # unfold (feature map -> patches)
        x = x.reshape(B * C * num_patch_h, patch_h, num_patch_w, patch_w).transpose(1, 2)
        x = x.reshape(B, C, num_patches, self.patch_area).transpose(1, 3).reshape(B * self.patch_area, num_patches, -1)
        x = self.norm(self.transformer(x))
        # fold (patches -> feature map)
        x = x.contiguous().view(B, self.patch_area, num_patches, -1)
        x = x.transpose(1, 3).reshape(B * C * num_patch_h, num_patch_w, patch_h, patch_w)
        x = x.transpose(1, 2).reshape(B, C, num_patch_h * patch_h, num_patch_w * patch_w)
        if interpolate:
            x = F.interpolate(x, size=(H, W), mode="bilinear", align_corners=False)
        x = self.conv_proj(x)
        return self.conv_fusion(torch.cat((shortcut, x), dim=1))


class MobileViT(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = ConvNormAct(3, 8, 3, 2)
        self.stages = nn.Sequential(
            nn.Sequential(ConvNormAct(8, 16, 1), ConvNormAct(16, 16, 3, 2, groups=16), ConvNormAct(16, 12, 1, act=False)),
            MobileVitBlock(12, 12, 16),
        )
        self.final_conv = ConvNormAct(12, 24, 1)
        self.head = nn.Linear(24, num_classes)

    def forward(self, x):
        x = self.final_conv(self.stages(self.stem(x)))
        return self.head(x.mean((2, 3)))


def mobilevit_small():
    return MobileViT()


# ------------------------------------------------------------------------------------------------- ConvLSTM
class ConvLSTMCell(nn.Module):
    """``ndrplz/ConvLSTM_pytorch``'s cell: one conv over ``cat([x, h])`` gives the four gates."""

    def __init__(self, input_dim, hidden_dim, kernel_size, bias):
        super().__init__()
        self.input_dim, self.hidden_dim = input_dim, hidden_dim
        self.padding = kernel_size[0] // 2, kernel_size[1] // 2
        self.conv = nn.Conv2d(input_dim + hidden_dim, 4 * hidden_dim, kernel_size, padding=self.padding, bias=bias)

    def forward(self, input_tensor, cur_state):
        h_cur, c_cur = cur_state
        combined_conv = self.conv(torch.cat([input_tensor, h_cur], dim=1))
        cc_i, cc_f, cc_o, cc_g = torch.split(combined_conv, self.hidden_dim, dim=1)
        i, f, o, g = torch.sigmoid(cc_i), torch.sigmoid(cc_f), torch.sigmoid(cc_o), torch.tanh(cc_g)
        c_next = f * c_cur + i * g
        return o * torch.tanh(c_next), c_next

    def init_hidden(self, batch_size, image_size):
        height, width = image_size
        return (torch.zeros(batch_size, self.hidden_dim, height, width, device=self.conv.weight.device),
                torch.zeros(batch_size, self.hidden_dim, height, width, device=self.conv.weight.device))


class ConvLSTM(nn.Module):
    """``ndrplz/ConvLSTM_pytorch``'s ``ConvLSTM`` (batch_first, every layer's outputs, last states): a Python loop
    over time, so a capture unrolls it for the example's length."""

    def __init__(self, input_dim=2, hidden_dim=(4, 3), kernel_size=(3, 3), num_layers=2, batch_first=True):
        super().__init__()
        self.num_layers, self.batch_first = num_layers, batch_first
        self.cell_list = nn.ModuleList(
            ConvLSTMCell(input_dim if i == 0 else hidden_dim[i - 1], hidden_dim[i], kernel_size, True)
            for i in range(num_layers))

    def forward(self, input_tensor):
        if not self.batch_first:
            input_tensor = input_tensor.permute(1, 0, 2, 3, 4)
        b, _, _, h, w = input_tensor.size()
        hidden_state = [cell.init_hidden(b, (h, w)) for cell in self.cell_list]
        seq_len = input_tensor.size(1)
        cur_layer_input = input_tensor
        layer_output_list, last_state_list = [], []
        for layer_idx in range(self.num_layers):
            h, c = hidden_state[layer_idx]
            output_inner = []
            for t in range(seq_len):
                h, c = self.cell_list[layer_idx](cur_layer_input[:, t, :, :, :], [h, c])
                output_inner.append(h)
            layer_output = torch.stack(output_inner, dim=1)
            cur_layer_input = layer_output
            layer_output_list.append(layer_output)
            last_state_list.append([h, c])
        return layer_output_list, last_state_list


def convlstm_small():
    return ConvLSTM()
