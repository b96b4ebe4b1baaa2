"""Twin of timm's ``Sequencer2d`` (``sequencer2d_s`` structure and ``state_dict`` names: ``stem.proj``,
``stages.<i>.downsample.down``, ``stages.<i>.blocks.<j>.norm1``/``rnn_tokens.rnn_v``/``rnn_h``/``fc``/``norm2``/
``mlp_channels.fc1``/``fc2``, ``norm``, ``head.fc``), few blocks and narrow widths.

Stresses: channels-last (NHWC) torch code throughout (the stem's ``permute(0, 2, 3, 1)``, the downsampling conv
between two permutes); bidirectional ``nn.LSTM``\\ s with ``batch_first`` run along the columns (``permute(0, 2, 1,
3).reshape(-1, H, C)``, the batch times the width as the LSTM's batch) and along the rows (``reshape(-1, W, C)``),
their outputs concatenated (``union="cat"``) or added (``"add"``, two LSTM layers), then a Linear; a token-mean head
over the NHWC map.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from tests.models.timm_more import Mlp


class RNNIdentity(nn.Module):
    def forward(self, x):
        return x, None


class LSTM2d(nn.Module):
    """timm's ``RNN2dBase`` with ``LSTM2d``'s recurrences: a vertical and a horizontal LSTM over an NHWC map."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, bidirectional=True, union="cat",
                 with_fc=True):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = 2 * hidden_size if bidirectional else hidden_size
        self.union = union
        self.fc = None
        if with_fc:
            self.fc = nn.Linear(2 * self.output_size if union == "cat" else self.output_size, input_size)
        lstm = partial(nn.LSTM, input_size, hidden_size, num_layers, batch_first=True, bias=bias,
                       bidirectional=bidirectional)
        self.rnn_v = lstm()
        self.rnn_h = lstm()

    def forward(self, x):
        B, H, W, C = x.shape
        v = x.permute(0, 2, 1, 3)
        v = v.reshape(-1, H, C)
        v, _ = self.rnn_v(v)
        v = v.reshape(B, W, H, -1)
        v = v.permute(0, 2, 1, 3)
        h = x.reshape(-1, W, C)
        h, _ = self.rnn_h(h)
        h = h.reshape(B, H, W, -1)
        x = torch.cat([v, h], dim=-1) if self.union == "cat" else v + h
        if self.fc is not None:
            x = self.fc(x)
        return x


class Sequencer2dBlock(nn.Module):
    def __init__(self, dim, hidden_size, mlp_ratio=3.0, num_layers=1, union="cat"):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.rnn_tokens = LSTM2d(dim, hidden_size, num_layers=num_layers, union=union)
        self.drop_path = nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp_channels = Mlp(dim, int(mlp_ratio * dim))

    def forward(self, x):
        x = x + self.drop_path(self.rnn_tokens(self.norm1(x)))
        x = x + self.drop_path(self.mlp_channels(self.norm2(x)))
        return x


class Downsample2d(nn.Module):
    def __init__(self, input_dim, output_dim, patch_size):
        super().__init__()
        self.down = nn.Conv2d(input_dim, output_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = x.permute(0, 3, 1, 2)
        x = self.down(x)
        return x.permute(0, 2, 3, 1)


class Sequencer2dStage(nn.Module):
    def __init__(self, dim, dim_out, depth, patch_size, hidden_size, mlp_ratio, downsample, **block_args):
        super().__init__()
        self.downsample = Downsample2d(dim, dim_out, patch_size) if downsample else nn.Identity()
        self.blocks = nn.Sequential(*[Sequencer2dBlock(dim_out, hidden_size, mlp_ratio, **block_args)
                                      for _ in range(depth)])

    def forward(self, x):
        return self.blocks(self.downsample(x))


class PatchEmbed(nn.Module):
    """timm's ``PatchEmbed(img_size=None, flatten=False, output_fmt="NHWC")``: a strided conv, then NHWC."""

    def __init__(self, patch_size, in_chans, embed_dim):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.Identity()

    def forward(self, x):
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


class ClassifierHead(nn.Module):
    """timm's ``ClassifierHead(input_fmt="NHWC", pool_type="avg")``: the mean over H and W, dropout, ``fc``."""

    def __init__(self, in_features, num_classes, drop_rate=0.):
        super().__init__()
        self.drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(in_features, num_classes)
        self.flatten = nn.Identity()

    def forward(self, x):
        return self.flatten(self.fc(self.drop(x.mean((1, 2)))))


class Sequencer2d(nn.Module):
    def __init__(self, num_classes=10, in_chans=3, layers=(1, 1, 1), patch_sizes=(4, 2, 1), embed_dims=(16, 24, 24),
                 hidden_sizes=(8, 12, 12), mlp_ratios=(3.0, 3.0, 3.0), **block_args):
        super().__init__()
        self.num_features = embed_dims[-1]
        self.stem = PatchEmbed(patch_sizes[0], in_chans, embed_dims[0])
        stages, prev_dim = [], embed_dims[0]
        for i, dim in enumerate(embed_dims):
            stages.append(Sequencer2dStage(prev_dim, dim, layers[i], patch_sizes[i], hidden_sizes[i], mlp_ratios[i],
                                           downsample=i > 0, **block_args))
            prev_dim = dim
        self.stages = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(embed_dims[-1], eps=1e-6)
        self.head = ClassifierHead(self.num_features, num_classes)

    def forward(self, x):
        return self.head(self.norm(self.stages(self.stem(x))))


def sequencer2d_small() -> nn.Module:
    """``sequencer2d_s``'s form (row and column outputs concatenated), three narrow stages of one block."""
    return Sequencer2d()


def sequencer2d_add_small() -> nn.Module:
    """The ``union="add"`` option with two stacked LSTM layers per direction."""
    return Sequencer2d(layers=(1, 1, 1), union="add", num_layers=2)
