"""torch.no_grad / set_grad_enabled / autocast regions inlined by the capture, and buffers read through clone or
a view: torch runs the same data in every test."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from tests.converter_check import check_converted
from porter.converters.capture_regions import FP32, LOWER, PROMOTE


class Rotary(nn.Module):
    """Llama-style rotary embedding: inv_freq buffer (``base ** t``), cos/sin cache computed under no_grad and
    autocast disabled, applied to q/k computed under bf16 autocast, then RMSNorm outside."""

    def __init__(self, dim=8, dtype=torch.bfloat16):
        super().__init__()
        self.dtype = dtype
        self.q = nn.Linear(dim, dim)
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    @torch.no_grad()
    def rope(self, x, positions):
        freqs = positions[:, :, None].float() * self.inv_freq[None, None, :]
        with torch.autocast("cpu", enabled=False):
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def forward(self, x):
        positions = torch.arange(x.shape[1])[None].expand(x.shape[0], -1)
        with torch.autocast("cpu", dtype=self.dtype):
            q = self.q(x)
            cos, sin = self.rope(q, positions)
            half = q.shape[-1] // 2
            rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
            q = q * cos + rotated * sin
        q = q.float()
        return self.weight * q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6), cos


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rotary_embedding_under_no_grad_and_autocast(dtype):
    torch.manual_seed(0)
    model = Rotary(dtype=dtype).eval()
    ported = porter.convert(model, torch.randn(2, 5, 8), io_layout="torch")
    casts = [n for n in ported.graph["nodes"] if n["op"] == "aten._to_copy.default"]
    assert casts and all(n["attrs"]["dtype"] == str(dtype).split(".")[1] for n in casts)
    for x in (torch.randn(2, 5, 8), torch.randn(3, 7, 8)):
        with torch.no_grad():
            want = model(x)
        got = ported(mx.array(x.numpy()))
        for g, w in zip(got, want):
            assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1]  # cos stays in autocast's dtype
            w = w.float().numpy()
            err = np.abs(np.array(g.astype(mx.float32)) - w).max()
            # one rounding of q to the half type may land on the other side: one ulp of it, relative
            assert err <= 2 ** -7 * np.abs(w).max(), err


class Regions(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.conv = nn.Conv1d(4, 4, 3)

    def forward(self, x):
        with torch.no_grad():
            frozen = self.a(x)                  # no gradient to x or to a.* through here
        with torch.set_grad_enabled(False):
            with torch.enable_grad():
                also_frozen = x * 3             # the outer region still cuts it
        live = self.b(x) + frozen + also_frozen
        with torch.autocast("cpu", dtype=torch.bfloat16):
            c = self.conv(live.transpose(1, 2))                       # LOWER: bf16
            p = F.max_pool3d(c[:, None], (1, 1, 2))                   # FP32 (on a bf16 input)
            s = torch.cat([c, live.transpose(1, 2)], dim=-1)          # PROMOTE: float32 wins
            with torch.autocast("cpu", enabled=False):
                plain = live @ live.transpose(1, 2)                   # stays float32
        with torch.autocast("cuda", dtype=torch.float16):
            other_device = live @ live.transpose(1, 2)                # autocast for CUDA: CPU math untouched
        return live, c, p, s, plain, other_device


def test_regions_values_and_dtypes_match_torch_at_two_sizes():
    torch.manual_seed(0)
    model = Regions().eval()
    ported = porter.convert(model, torch.randn(2, 6, 4), io_layout="torch")
    for x in (torch.randn(2, 6, 4), torch.randn(3, 9, 4)):
        with torch.no_grad():
            want = model(x)
        got = ported(mx.array(x.numpy()))
        for i, (g, w) in enumerate(zip(got, want)):
            assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1], (i, g.dtype, w.dtype)
            w = w.float().numpy()
            err = np.abs(np.array(g.astype(mx.float32)) - w).max()
            bar = 2 ** -7 if want[i].dtype == torch.bfloat16 or i in (2, 3) else 1e-6
            assert err <= bar * np.abs(w).max(), (i, err)


def test_no_grad_region_cuts_the_gradient_like_torch():
    torch.manual_seed(0)
    model = Regions().eval()
    x = torch.randn(2, 6, 4, requires_grad=True)
    ported = porter.convert(model, x.detach(), io_layout="torch")
    model(x)[0].sum().backward()

    def loss(params, xm):
        ported.update(params)
        return ported(xm)[0].sum()

    grads, gx = mx.grad(loss, argnums=(0, 1))(ported.trainable_parameters(), mx.array(x.detach().numpy()))
    np.testing.assert_allclose(np.array(gx), x.grad.numpy(), rtol=1e-5, atol=1e-6)
    by_name = ported.torch_parameter_grads(grads)
    for name, p in model.named_parameters():
        if name.startswith("b."):
            np.testing.assert_allclose(by_name[name], p.grad.numpy(), rtol=1e-5, atol=1e-6)
        elif name.startswith("a."):
            assert p.grad is None and not np.any(by_name[name]), name  # used only under no_grad


_X4, _X5 = torch.randn(2, 4, 6, 6), torch.randn(2, 4, 4, 4, 4)
_AUTOCAST_CASES = {
    "conv2d": lambda x: F.conv2d(_X4.to(x), torch.randn(4, 4, 3, 3).to(x)),
    "conv_transpose1d": lambda x: F.conv_transpose1d(_X4[..., 0].to(x), torch.randn(4, 4, 3).to(x)),
    "linear": lambda x: F.linear(_X4.to(x), torch.randn(3, 6).to(x)),
    "matmul": lambda x: _X4.to(x) @ _X4.to(x),
    "bmm": lambda x: torch.bmm(_X4[0].to(x), _X4[1].to(x)),
    "baddbmm": lambda x: torch.baddbmm(_X4[0].to(x), _X4[0].to(x), _X4[1].to(x)),
    "addmm": lambda x: torch.addmm(_X4[0, 0].to(x), _X4[0, 0].to(x), _X4[1, 0].to(x)),
    "prelu": lambda x: F.prelu(_X4.to(x), torch.randn(4).to(x)),
    "scaled_dot_product_attention": lambda x: F.scaled_dot_product_attention(*(3 * [_X4.to(x)])),
    "einsum": lambda x: torch.einsum("nchw,nchv->nhwv", _X4.to(x), _X4.to(x)),
    "avg_pool3d": lambda x: F.avg_pool3d(_X5.to(x), 2),
    "max_pool3d": lambda x: F.max_pool3d(_X5.to(x), 2),
    "adaptive_avg_pool3d": lambda x: F.adaptive_avg_pool3d(_X5.to(x), 2),
    "reflection_pad2d": lambda x: F.pad(_X4.to(x), (1, 1, 1, 1), mode="reflect"),
    "replication_pad3d": lambda x: F.pad(_X5.to(x), (1,) * 6, mode="replicate"),
    "max_unpool2d": lambda x: F.max_unpool2d(*F.max_pool2d(_X4.to(x), 2, return_indices=True), 2),
    "prod": lambda x: torch.prod(_X4.to(x), 1),
    "cat": lambda x: torch.cat([_X4.to(x), _X4.to(torch.bfloat16)]),  # mixed: the widest
    "stack": lambda x: torch.stack([_X4.to(x), _X4.to(x)]),
    # not in any list: computed in the input's dtype
    "softmax": lambda x: F.softmax(_X4.to(x), 1),
    "layer_norm": lambda x: F.layer_norm(_X4.to(x), (6,)),
    "avg_pool2d": lambda x: F.avg_pool2d(_X4.to(x), 2),
    "upsample_bilinear2d": lambda x: F.interpolate(_X4.to(x), scale_factor=2, mode="bilinear"),
    "reflection_pad3d": lambda x: F.pad(_X5.to(x), (1,) * 6, mode="reflect"),
    "gelu": lambda x: F.gelu(_X4.to(x)),
}


@pytest.mark.parametrize("name", sorted(_AUTOCAST_CASES))
def test_autocast_tables_agree_with_torch(name):
    """Porter's LOWER / FP32 / PROMOTE tables against what torch's CPU autocast does to each op."""
    run = _AUTOCAST_CASES[name]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        from_float32 = run(torch.float32)
        from_bf16 = run(torch.bfloat16)
    from_float32 = from_float32[0] if isinstance(from_float32, tuple) else from_float32
    from_bf16 = from_bf16[0] if isinstance(from_bf16, tuple) else from_bf16
    if name in LOWER:
        assert from_float32.dtype == torch.bfloat16
    elif name in FP32:
        assert from_bf16.dtype == torch.float32
    elif name in PROMOTE:
        assert (from_float32.dtype, from_bf16.dtype) == (torch.float32, torch.bfloat16)
    else:
        assert (from_float32.dtype, from_bf16.dtype) == (torch.float32, torch.bfloat16)


def test_an_op_with_an_unknown_autocast_rule_fails_by_name(monkeypatch):
    """max_pool3d runs in float32 under CPU autocast; with its rule taken out of Porter's table, the capture sees a
    float32 result from bfloat16 inputs and must refuse by name instead of computing in bfloat16."""
    from porter.converters import capture_regions

    class Upcast(nn.Module):
        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return torch.nn.functional.max_pool3d(x.bfloat16(), 2)

    monkeypatch.setattr(capture_regions, "FP32", capture_regions.FP32 - {"max_pool3d"})
    with pytest.raises(NotImplementedError, match=r"max_pool3d.*does not know this op's autocast rule"):
        porter.convert(Upcast(), torch.randn(1, 2, 4, 4, 4))


class RelativeIndex(nn.Module):
    """SwinUNETR's relative position bias: an index buffer read through .clone() and a view."""

    def __init__(self, window=3, heads=2):
        super().__init__()
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
        self.register_buffer("idx", rel[..., 0] * (2 * window - 1) + rel[..., 1])
        self.register_buffer("scale", torch.tensor([0.5, 2.0]))
        self.window = window

    def forward(self, x):
        n = self.window ** 2
        bias = self.table[self.idx.clone()[:n, :n].reshape(-1)].reshape(n, n, -1).permute(2, 0, 1)
        s = self.scale.detach().view(1, -1, 1, 1)
        return torch.softmax(x + bias.unsqueeze(0), dim=-1) * s + self.idx.contiguous().float().view(1, 1, n, n)


def test_buffer_through_clone_and_views():
    check_converted(RelativeIndex().eval(), torch.randn(2, 2, 9, 9), torch.randn(3, 2, 9, 9), rel=1e-6)


class ConvUnderAutocast(nn.Module):
    """A conv block under bf16 autocast (EfficientViT-style): conv weights are cast at run time, batch norm and
    ReLU run in bf16 as in torch, and the conv-transpose and linear are cast again."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.up = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.up(torch.relu(self.bn(self.conv(x))))
            z = self.fc(y.mean((2, 3)))
        return y.float(), z.float()


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
def test_conv_block_under_autocast(io_layout):
    torch.manual_seed(0)
    model = ConvUnderAutocast().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    # bf16 results: a few roundings of bf16 (eps 2**-8) apart where MLX and torch accumulate differently
    ported = check_converted(model, torch.randn(2, 3, 8, 8), torch.randn(1, 3, 5, 7), io_layout=io_layout,
                             rel=2 ** -5)
    # the bound above would also hold in float32: the casts themselves are checked here. torch casts the conv's
    # input, weight and bias, the conv-transpose's and linear's weight and bias (their inputs are bf16 already)
    casts = [n for n in ported.graph["nodes"] if n["op"] == "aten._to_copy.default"]
    assert len(casts) == 7 and all(n["attrs"]["dtype"] == "bfloat16" for n in casts)
