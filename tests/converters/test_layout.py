"""Layout-pass tricks, each against torch at two input sizes and in both io layouts."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from porter.compare import assert_close
from tests.converter_check import check_converted, run_ported

torch.manual_seed(0)


def randomise_bn(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model.eval()


class FlattenAfterConv(nn.Module):
    """The classic bug: flattening a channels-last feature map gives the wrong element order."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.conv(x)), 1))


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class ChannelConcat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 2, 1)
        self.b = nn.Conv2d(3, 5, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=1, padding=1)

    def forward(self, x):
        return torch.cat([self.a(x), self.b(x), self.pool(x)], dim=1)


class ChannelShuffle(nn.Module):
    def __init__(self, groups=2):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 1)
        self.groups = groups

    def forward(self, x):
        x = self.conv(x)
        n, c, h, w = x.size()
        x = x.view(n, self.groups, c // self.groups, h, w)
        x = torch.transpose(x, 1, 2).contiguous()
        return x.view(n, -1, h, w)


class HeadMerge(nn.Module):
    """Attention's head merge: ``(attn @ v).transpose(1, 2).reshape(B, N, C)`` into the output projection."""

    def __init__(self, dim=12, heads=3):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class ConvNeXtBlock(nn.Module):
    """Depthwise conv, permute to channels-last, LayerNorm + MLP + layer scale, permute back, residual."""

    def __init__(self, dim=8):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.rand(dim, 1, 1) + 0.5)

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y)))).permute(0, 3, 1, 2)
        return x + self.layer_scale * y


class ClassToken(nn.Module):
    """ViT-style patch embedding: conv, flatten(2).transpose(1, 2), class token cat, position add."""

    def __init__(self, dim=8):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, 4, stride=4)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        t = self.proj(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1), t], dim=1)
        return self.norm(t)[:, 0], t.mean(1)


class SqueezeExcite(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc1 = nn.Conv2d(8, 2, 1)
        self.fc2 = nn.Conv2d(2, 8, 1)

    def forward(self, x):
        x = self.conv(x)
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s


class ChannelOps(nn.Module):
    """dim-argument ops on a channels-last tensor: softmax/sum/mean over channels and space, keepdim."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bias = nn.Parameter(torch.randn(6, 1, 1))

    def forward(self, x):
        y = self.conv(x) + self.bias
        a = torch.softmax(y, dim=1)
        b = y.mean((2, 3), keepdim=True)
        c = y.sum(dim=1)
        return a - b, c, y.amax(dim=-1)


def inputs(*shapes):
    return [torch.randn(*s) for s in shapes]


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_flatten_after_conv(io_layout):
    model = FlattenAfterConv().eval()
    ported = check_converted(model, *inputs((2, 3, 8, 8), (5, 3, 8, 8)), io_layout=io_layout)
    # the flatten needs torch's element order: one transpose before it (plus the input's under "torch")
    assert ported.num_transposes == (1 if io_layout == "mlx" else 2)


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_residual_add(io_layout):
    ported = check_converted(randomise_bn(Residual()), *inputs((2, 4, 9, 9), (1, 4, 12, 7)), io_layout=io_layout)
    assert ported.num_transposes == (2 if io_layout == "torch" else 0)
    if io_layout == "mlx":
        assert ported.input_layouts == ["NCHW->NHWC"] and ported.output_layouts == ["NCHW->NHWC"]
    else:
        assert ported.input_layouts == ["as-is"] and ported.output_layouts == ["as-is"]


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_concat_on_channel_dim(io_layout):
    ported = check_converted(ChannelConcat().eval(), *inputs((2, 3, 7, 7), (3, 3, 10, 6)), io_layout=io_layout)
    assert ported.num_transposes == (0 if io_layout == "mlx" else 2)


def test_channel_shuffle():
    ported = check_converted(ChannelShuffle(3).eval(), *inputs((2, 4, 5, 5), (1, 4, 8, 3)), io_layout="mlx")
    # the shuffle swaps two sub-axes of C: one native shuffle of the last axis (no transpose), still channels-last
    assert ported.num_transposes == 0
    assert [n["kernel"] for n in ported._program.graph["nodes"]].count("swap_last_axes") == 1
    assert ported.output_layouts == ["NCHW->NHWC"]


def test_head_merge_lands_in_torch_layout():
    ported = check_converted(HeadMerge().eval(), *inputs((2, 7, 12), (1, 10, 12)), io_layout="mlx")
    # q, k and v to the matmuls' batch order (3), and (B, heads, N, hd) -> (B, N, heads, hd) for the merge (1): the
    # merged (B, N, C) is then the projection's layout as is (innermost axis kept innermost), not (B, C, N)
    assert ported.num_transposes == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_channel_shuffle_view_pattern_is_exact(dtype):
    """torchvision's view-transpose-view shuffle (ShuffleNetV2, groups 2) after a channel concat, on a second input
    size and dtypes whose bits the native shuffle copies: exactly torch's values."""

    class CatShuffle(nn.Module):
        def forward(self, a, b):
            x = torch.cat((a, b * 2), dim=1)
            n, c, h, w = x.size()
            return x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, -1, h, w)

    model = CatShuffle().eval()
    make = (lambda *s: torch.randn(*s).to(dtype)) if dtype.is_floating_point else \
        (lambda *s: torch.randint(-50, 50, s, dtype=dtype))
    ported = porter.convert(model, (make(2, 58, 9, 9), make(2, 58, 9, 9)), io_layout="torch")
    for shape in ((2, 58, 9, 9), (3, 58, 4, 7)):
        a, b = make(*shape), make(*shape)
        np.testing.assert_array_equal(run_ported(ported, (a, b))[0], model(a, b).numpy())


def test_convnext_permute_layernorm_needs_no_transpose():
    ported = check_converted(ConvNeXtBlock().eval(), *inputs((2, 8, 9, 9), (1, 8, 14, 11)), io_layout="mlx")
    assert ported.num_transposes == 0


def test_class_token():
    ported = check_converted(ClassToken().eval(), *inputs((2, 3, 16, 16), (3, 3, 8, 12)), io_layout="mlx")
    assert ported.num_transposes == 0  # patch flatten stays channels-last: (N, h*w, D) is the array as is


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_squeeze_excite_broadcast(io_layout):
    check_converted(SqueezeExcite().eval(), *inputs((2, 3, 6, 6), (1, 3, 9, 5)), io_layout=io_layout)


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_dim_ops_on_channels_last(io_layout):
    check_converted(ChannelOps().eval(), *inputs((2, 3, 5, 5), (1, 3, 4, 7)), io_layout=io_layout)


def test_io_layout_mlx_takes_channels_last_input():
    import mlx.core as mx
    import numpy as np
    import porter

    model = Residual().eval()
    x = torch.randn(2, 4, 6, 6)
    ported = porter.convert(model, x)  # default io_layout="mlx"
    assert ported.io_layout == "mlx"
    y = ported(mx.array(x.permute(0, 2, 3, 1).numpy()))
    expected = model(x).detach().permute(0, 2, 3, 1).numpy()
    assert y.shape == (2, 6, 6, 4)
    assert_close(np.array(y), expected)
    torch_io = porter.convert(model, x, io_layout="torch")
    y2 = torch_io(mx.array(x.numpy()))
    assert_close(np.array(y2), model(x).detach().numpy())


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_unbatched_conv_input(io_layout):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)).eval()
    ported = check_converted(model, *inputs((3, 8, 8), (3, 6, 10)), io_layout=io_layout)
    if io_layout == "mlx":
        assert ported.graph["inputs"][0]["perm"] == [1, 2, 0] and ported.num_transposes == 0


def test_swap_last_axes_kernel_checks_its_input():
    """The kernel an artifact names: a value with fewer than 2 dims (a hostile or mistaken graph) is refused by name;
    on real input it is the materialized swap of the last two axes."""
    import mlx.core as mx

    from porter.converters.ops.shape import k_swap_last_axes

    with pytest.raises(ValueError, match=r"swap_last_axes: the input needs at least 2 dims"):
        k_swap_last_axes(mx.zeros((5,)))
    x = mx.arange(2 * 3 * 4 * 6).reshape(2, 3, 4, 6)
    np.testing.assert_array_equal(np.array(k_swap_last_axes(x)), np.array(x).swapaxes(-1, -2))


class PaddedPatchEmbed(nn.Module):
    """timm's dynamic image padding before a patch embedding, after a per-channel normalisation: the input reaches
    its first conv through a pad and elementwise ops only."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.proj = nn.Conv2d(3, 8, 4, stride=4)
        self.register_buffer("mean", torch.tensor([0.4, 0.5, 0.6]).view(1, 3, 1, 1))

    def forward(self, x):
        h, w = x.shape[-2:]
        x = ((x - self.mean) / 0.25).clamp(-3, 3)
        x = F.pad(x, (1, (4 - (w + 1) % 4) % 4, 0, (4 - h % 4) % 4), mode=self.mode)
        return self.proj(x).flatten(2).transpose(1, 2)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_input_padded_before_its_first_conv_is_taken_channels_last(mode):
    """The input was kept in torch's layout when its first reader was a pad (a transpose before the conv):
    layout-following ops between an input and a conv now count as the conv reading it."""
    ported = check_converted(PaddedPatchEmbed(mode).eval(), *inputs((2, 3, 18, 21), (1, 3, 13, 16)), io_layout="mlx")
    assert ported.graph["inputs"][0]["perm"] == [0, 2, 3, 1] and ported.num_transposes == 0
    torch_io = check_converted(PaddedPatchEmbed(mode).eval(), *inputs((2, 3, 18, 21)), io_layout="torch")
    assert torch_io.graph["inputs"][0]["perm"] == [0, 1, 2, 3]
