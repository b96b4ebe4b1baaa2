"""One small model per op family, converted and compared with torch (float32, rel 1e-4) at two input sizes."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.converter_check import check_converted

torch.manual_seed(0)


class Seq(nn.Module):
    """Wraps a function of the input so a parametrize table can hold ops."""

    def __init__(self, fn, *modules):
        super().__init__()
        self.mods = nn.ModuleList(modules)
        self.fn = fn

    def forward(self, x):
        return self.fn(self, x)


def m(*modules):
    model = Seq(lambda self, x: _chain(self.mods, x), *modules)
    return model.eval()


def _chain(mods, x):
    for mod in mods:
        x = mod(x)
    return x


def f(fn, *modules):
    return Seq(fn, *modules).eval()


CONV = {
    "conv1d": (m(nn.Conv1d(4, 6, 3, stride=2, padding=1)), [(2, 4, 17), (1, 4, 10)]),
    "conv1d_same_even_kernel": (m(nn.Conv1d(4, 6, 4, padding="same", dilation=2)), [(2, 4, 11), (1, 4, 8)]),
    "conv2d_groups_dilation": (m(nn.Conv2d(4, 8, 3, padding=2, dilation=2, groups=2)), [(2, 4, 9, 9), (1, 4, 6, 11)]),
    "conv2d_depthwise": (m(nn.Conv2d(6, 6, 5, stride=2, padding=2, groups=6, bias=False)), [(2, 6, 9, 9), (1, 6, 7, 12)]),
    "conv2d_rect": (m(nn.Conv2d(3, 4, (3, 1), stride=(2, 1), padding=(1, 0))), [(2, 3, 8, 5), (1, 3, 5, 9)]),
    "conv3d": (m(nn.Conv3d(2, 4, 3, stride=(1, 2, 2), padding=1)), [(2, 2, 4, 7, 7), (1, 2, 3, 6, 5)]),
    "conv_transpose1d": (m(nn.ConvTranspose1d(4, 3, 3, stride=2, padding=1, output_padding=1)), [(2, 4, 7), (1, 4, 5)]),
    "conv_transpose2d": (m(nn.ConvTranspose2d(4, 6, 2, stride=2)), [(2, 4, 5, 5), (1, 4, 3, 6)]),
    "conv_transpose2d_groups": (m(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2, dilation=1)),
                                [(2, 4, 5, 5), (1, 4, 4, 3)]),
    "conv_transpose3d": (m(nn.ConvTranspose3d(2, 3, 2, stride=2)), [(2, 2, 3, 4, 4), (1, 2, 2, 3, 5)]),
}

POOL = {
    "max_pool2d_ceil": (m(nn.MaxPool2d(3, stride=2, ceil_mode=True)), [(2, 3, 10, 10), (1, 3, 7, 12)]),
    "max_pool2d_pad": (m(nn.MaxPool2d(3, stride=2, padding=1)), [(2, 3, 9, 9), (1, 3, 8, 5)]),
    "max_pool1d": (m(nn.MaxPool1d(2)), [(2, 3, 9), (1, 3, 12)]),
    "max_pool3d": (m(nn.MaxPool3d((1, 2, 2))), [(2, 3, 2, 6, 6), (1, 3, 3, 4, 8)]),
    "avg_pool2d": (m(nn.AvgPool2d(2)), [(2, 3, 8, 8), (1, 3, 6, 10)]),
    "adaptive_avg_pool2d_6x6": (m(nn.AdaptiveAvgPool2d((6, 6))), [(2, 3, 13, 13), (1, 3, 9, 16)]),
    "adaptive_avg_pool3d": (m(nn.AdaptiveAvgPool3d(1)), [(2, 3, 2, 5, 5), (1, 3, 3, 4, 6)]),
    "adaptive_avg_pool1d": (m(nn.AdaptiveAvgPool1d(3)), [(2, 3, 10), (1, 3, 7)]),
    "adaptive_max_pool2d": (m(nn.AdaptiveMaxPool2d((2, 3))), [(2, 3, 7, 7), (1, 3, 5, 9)]),
}


class EncoderDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2)
        self.dec = nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.conv(x))
        p, idx = self.pool(y)
        return self.dec(self.unpool(p, idx, output_size=y.shape[-2:]))


NORM = {
    "batch_norm1d": (m(nn.Linear(5, 6), nn.BatchNorm1d(6)), [(4, 5), (2, 5)]),
    "group_norm": (m(nn.Conv2d(3, 8, 1), nn.GroupNorm(4, 8)), [(2, 3, 5, 5), (1, 3, 4, 6)]),
    "instance_norm": (m(nn.Conv2d(3, 4, 1), nn.InstanceNorm2d(4, affine=True)), [(2, 3, 5, 5), (1, 3, 4, 6)]),
    "layer_norm_chw": (m(nn.Conv2d(3, 4, 1), nn.LayerNorm([4, 5, 5])), [(2, 3, 5, 5), (3, 3, 5, 5)]),
}

ACT = [nn.ReLU(), nn.ReLU6(), nn.Hardswish(), nn.Hardsigmoid(), nn.SiLU(), nn.GELU(), nn.GELU("tanh"),
       nn.Sigmoid(), nn.Tanh(), nn.ELU(0.7), nn.LeakyReLU(0.2), nn.Softplus(2.0, 5.0), nn.Mish(),
       nn.Hardtanh(-0.5, 0.7), nn.Dropout(0.3), nn.Identity()]


def _arith(self, x):
    y = self.mods[0](x)
    return (y * 2 - 1) / (y.abs() + 1) + 3.0 - torch.rsub(y, 1.5) + y ** 2 + torch.maximum(y, -y) * 0.5


def _interp(mode, **kw):
    return lambda self, x: F.interpolate(self.mods[0](x), mode=mode, **kw)


RESAMPLE = {
    "bilinear_scale2": (f(_interp("bilinear", scale_factor=2), nn.Conv2d(3, 4, 1)), [(2, 3, 5, 5), (1, 3, 4, 7)]),
    "bilinear_size_align": (f(_interp("bilinear", size=(9, 7), align_corners=True), nn.Conv2d(3, 4, 1)),
                            [(2, 3, 5, 5), (1, 3, 4, 6)]),
    "bilinear_odd_scale": (f(_interp("bilinear", scale_factor=1.7), nn.Conv2d(3, 4, 1)), [(2, 3, 5, 5), (1, 3, 6, 4)]),
    "nearest_scale2": (f(_interp("nearest", scale_factor=2), nn.Conv2d(3, 4, 1)), [(2, 3, 5, 5), (1, 3, 4, 7)]),
    "nearest_size": (f(_interp("nearest", size=(7, 11)), nn.Conv2d(3, 4, 1)), [(2, 3, 5, 5), (1, 3, 4, 6)]),
    "linear1d": (f(_interp("linear", scale_factor=3), nn.Conv1d(3, 4, 1)), [(2, 3, 5), (1, 3, 4)]),
    "trilinear": (f(_interp("trilinear", size=(3, 5, 4)), nn.Conv3d(3, 2, 1)), [(2, 3, 2, 3, 3), (1, 3, 3, 2, 4)]),
    "bicubic_scale2": (f(_interp("bicubic", scale_factor=2), nn.Conv2d(3, 4, 1)), [(2, 3, 5, 5), (1, 3, 4, 7)]),
    "bicubic_size_align": (f(_interp("bicubic", size=(9, 7), align_corners=True), nn.Conv2d(3, 4, 1)),
                           [(2, 3, 5, 5), (1, 3, 4, 6)]),
    "bicubic_down_odd": (f(_interp("bicubic", scale_factor=(0.6, 1.7)), nn.Conv2d(3, 4, 1)),
                         [(2, 3, 9, 5), (1, 3, 7, 6)]),
    "nearest_exact_scale": (f(_interp("nearest-exact", scale_factor=1.5), nn.Conv2d(3, 4, 1)),
                            [(2, 3, 5, 5), (1, 3, 4, 7)]),
    "nearest_exact_1d": (f(_interp("nearest-exact", size=9), nn.Conv1d(3, 4, 1)), [(2, 3, 5), (1, 3, 4)]),
    "nearest_exact_3d": (f(_interp("nearest-exact", size=(3, 5, 4)), nn.Conv3d(3, 2, 1)),
                         [(2, 3, 2, 3, 3), (1, 3, 3, 2, 4)]),
    "pad_constant": (f(lambda self, x: F.pad(self.mods[0](x), (1, 2, 0, 3), value=0.5), nn.Conv2d(3, 4, 1)),
                     [(2, 3, 5, 5), (1, 3, 4, 6)]),
}


def _split_ops(self, x):
    y = self.mods[0](x)
    a, b = y.chunk(2, dim=1)
    c, d, e = torch.split(y, [1, 2, 1], dim=1)
    g = y[:, 1:3, ::2, 1:]
    h = y.select(1, 2)
    parts = torch.unbind(y, dim=-1)
    return a * b, torch.cat([e, d, c], 1), g, h.unsqueeze(1), torch.stack(parts[:2], dim=2).squeeze(-1)


SHAPE = {
    # unbind(dim=-1) makes as many outputs as the width: the capture fixes the width (the port checks it)
    "split_chunk_slice": (f(_split_ops, nn.Conv2d(3, 4, 1)), [(2, 3, 5, 5), (1, 3, 6, 5)]),
    "view_reshape": (f(lambda self, x: self.mods[0](x).reshape(x.shape[0], 2, -1).transpose(1, 2).sum(-1),
                       nn.Conv2d(3, 4, 1)), [(2, 3, 5, 5), (1, 3, 6, 4)]),
    "permute_flatten": (f(lambda self, x: self.mods[0](x).permute(0, 3, 1, 2).flatten(1, 2), nn.Conv2d(3, 4, 1)),
                        [(2, 3, 5, 5), (1, 3, 6, 4)]),
}


class Attention(nn.Module):
    def __init__(self, batch_first):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        y, _ = self.mha(x, x, x, need_weights=False)
        z = F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], is_causal=True)
        return self.proj(y) + z[:, 0], torch.bmm(x, x.transpose(1, 2)), x @ self.proj.weight


CASES = {**CONV, **POOL, **NORM, **RESAMPLE, **SHAPE,
         "max_unpool2d": (EncoderDecoder().eval(), [(2, 3, 8, 8), (1, 3, 6, 10)]),
         "arith": (f(_arith, nn.Conv2d(3, 4, 1)), [(2, 3, 5, 5), (1, 3, 4, 6)]),
         "mha_batch_first": (Attention(True).eval(), [(2, 5, 8), (3, 7, 8)]),
         "mha_seq_first": (Attention(False).eval(), [(2, 5, 8), (3, 7, 8)])}


TORCH_IO = ["conv1d", "conv3d", "conv_transpose2d", "max_unpool2d", "bilinear_scale2", "split_chunk_slice",
            "mha_batch_first", "group_norm"]


@pytest.mark.parametrize("name,io_layout", [(n, "mlx") for n in sorted(CASES)] + [(n, "torch") for n in TORCH_IO])
def test_op_family(name, io_layout):
    model, shapes = CASES[name]
    check_converted(model, *[torch.randn(*s) for s in shapes], io_layout=io_layout)


@pytest.mark.parametrize("act", ACT, ids=lambda a: repr(a))
def test_activation(act):
    model = m(nn.Conv2d(3, 4, 3), act)
    check_converted(model, torch.randn(2, 3, 6, 6) * 4, torch.randn(1, 3, 5, 7) * 4, io_layout="mlx")
