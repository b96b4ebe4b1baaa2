"""Casts, creation and indexing-style ops through the converter, against torch at two sizes."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.converter_check import check_converted

torch.manual_seed(0)


class Misc(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.emb = nn.Embedding(10, 4)
        self.register_buffer("pick", torch.tensor([0, 2]))

    def forward(self, x, idx):
        x = self.conv(x)
        a = x.to(torch.float16).to(torch.float32) + torch.zeros_like(x) + torch.ones(x.shape[0], 1, 1, 1)
        b = torch.arange(x.shape[-1]).float() * x
        c = x.masked_fill(x > 0, 0.5)
        d = torch.flip(x, [1, 3]) + torch.roll(x, 1, 2) + torch.cumsum(x, dim=1)
        values, indices = x.max(dim=1)
        e = F.pixel_shuffle(x, 2)
        f = self.emb(idx)
        g = torch.einsum("bchw,bchw->bc", x, x) + torch.logsumexp(x, dim=(2, 3))
        h = torch.tril(x) - torch.triu(x, 1)
        i = x.index_select(1, self.pick) + torch.full((1, 1, 1, 1), 2.0)
        j = x.norm(dim=1) + x.prod(dim=1)
        k = torch.gather(x, 1, (x[:, :2] > 0).long())
        scalar = x.sum().index_select(0, self.pick[:1]) + x.amax().index_select(-1, self.pick[:1])  # 0-d in and out
        return (a, b, c, d, values, indices, e, f, g, h, i, j, k, F.pixel_unshuffle(e, 2), x.new_zeros(2, 3),
                scalar)


@pytest.mark.parametrize("io_layout", ["mlx", "torch"])
def test_misc_ops(io_layout):
    model = Misc().eval()
    sets = [(torch.randn(2, 3, 4, 6), torch.randint(0, 10, (2, 5))),
            (torch.randn(1, 3, 6, 4), torch.randint(0, 10, (1, 3)))]
    check_converted(model, *sets, io_layout=io_layout)


def test_index_select_of_a_0d_tensor_checks_its_index_as_torch():
    """torch reads a 0-d tensor's value through a one-element index that must be 0 (-1 too is out of range there)."""
    import numpy as np
    import porter

    class Pick(nn.Module):
        def forward(self, x, i):
            return x.sum().index_select(0, i)

    x, i = torch.randn(2, 3), torch.tensor([0])
    ported = porter.convert(Pick().eval(), (x, i))
    np.testing.assert_allclose(np.array(ported(x.numpy(), i.numpy())), Pick()(x, i).numpy(), rtol=1e-6)
    assert ported(x.numpy(), i.numpy()).shape == ()
    for bad in ([1], [-1]):
        with pytest.raises(IndexError):
            Pick()(x, torch.tensor(bad))
        with pytest.raises(ValueError, match="index_select: index .* out of range"):
            ported(x.numpy(), np.array(bad))


def test_index_select_of_a_0d_tensor_reads_its_index_once(monkeypatch):
    """The range check and torch's 0-only rule share one host read of the index (``.item()``): no separate
    evaluation of its min and max first (``checked_indices``' ``mx.eval``, a second sync per call)."""
    import types

    import mlx.core as mx
    from porter.converters.ops import misc

    evals = []
    proxy = types.SimpleNamespace(**{k: getattr(mx, k) for k in dir(mx) if not k.startswith("__")})
    proxy.eval = lambda *arrays: evals.append(arrays) or mx.eval(*arrays)
    monkeypatch.setattr(misc, "mx", proxy)
    x = mx.array([[1.5, 2.0]]).sum()
    assert misc.k_index_select_0d(x, mx.array([0])).item() == 3.5
    for bad, words in (([1], "dimension of size 1"), ([-1], "only 0 is valid"), ([-2], "dimension of size 1")):
        with pytest.raises(IndexError, match=f"index {bad[0]} is out of range.*{words}"):
            misc.k_index_select_0d(x, mx.array(bad))
    assert evals == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_model(dtype):
    import mlx.core as mx
    import numpy as np
    import porter

    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 5)).eval().to(dtype)
    x = torch.randn(2, 3, 6, 6).to(dtype)
    ported = porter.convert(model, x, io_layout="torch")
    expected_dtype = {torch.float16: mx.float16, torch.bfloat16: mx.bfloat16}[dtype]
    assert all(v.dtype == expected_dtype for v in ported.params.values())
    xm = mx.array(x.float().numpy()).astype(expected_dtype)
    y = ported(xm)
    assert y.dtype == expected_dtype
    ref = model(x).float().detach().numpy()
    err = np.abs(np.array(y.astype(mx.float32)) - ref).max()
    assert err <= 3e-2 * np.abs(ref).max(), err


class SymbolicSizes(nn.Module):
    """Sizes computed in Python from the input's shape stay symbolic (math.ceil, max, //)."""

    def forward(self, x):
        h = x.shape[2]
        return F.interpolate(x, size=(math.ceil(h / 2), max(x.shape[3] // 2, 1)), mode="nearest")


def test_symbolic_size_arithmetic():
    ported = check_converted(SymbolicSizes().eval(), torch.randn(2, 3, 8, 9), torch.randn(1, 3, 7, 5),
                             io_layout="torch")
    ops = {n["op"] for n in ported.graph["nodes"]}
    assert {"math.ceil", "torch.sym_max"} <= ops


class AdvancedIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.register_buffer("rows", torch.tensor([[0, 2], [1, 1]]))
        self.register_buffer("cols", torch.tensor([3, 0]))

    def forward(self, x):
        y = self.conv(x)
        return y[:, self.cols], y[:, :, self.rows, self.cols], y[self.rows[0, :1]]


def test_advanced_indexing():
    check_converted(AdvancedIndex().eval(), torch.randn(2, 3, 4, 5), torch.randn(3, 3, 5, 4), io_layout="mlx")


class PaddedEmbeddings(nn.Module):
    """The padding row through the module (mapped to Porter's Embedding layer) and through ``F.embedding`` with a
    negative ``padding_idx`` (torch normalises -2 to 8) and ``aten.embedding`` with none (-1)."""

    def __init__(self):
        super().__init__()
        self.words = nn.Embedding(10, 4, padding_idx=1)
        self.table = nn.Parameter(torch.randn(10, 4))

    def forward(self, idx):
        return self.words(idx) * F.embedding(idx, self.table, padding_idx=-2) + self.words(idx.flip(-1))


@pytest.mark.parametrize("io_layout", ["mlx", "torch"])
def test_embedding_padding_row_gets_no_gradient(io_layout, tmp_path):
    """torch's embedding backward skips the places that look up ``padding_idx``: that row's gradient is 0 (or only
    what other uses give it); the forward still returns the row's values. The port had dropped the argument and
    gave the padding row the summed cotangents (RoBERTa's word and position embeddings). Also after save/load."""
    import porter
    from porter.validation.grads import grad_parity

    model = PaddedEmbeddings().eval()
    with torch.no_grad():
        model.words.weight[1] = torch.randn(4)  # a non-zero padding row: the forward must still read it
    idx = torch.tensor([[1, 8, 3, 1, 8], [0, 1, 9, 8, 2]])
    ported = porter.convert(model, (idx,), io_layout=io_layout)
    assert ported.graph["modules"]["words"]["config"]["padding_idx"] == 1
    porter.save(ported, tmp_path / "p")
    for port in (ported, porter.load(tmp_path / "p")):
        result = grad_parity(model, port, (torch.tensor([[1, 1, 8, 4], [8, 1, 1, 0]]),), rtol=1e-5, atol=1e-6,
                             seed=0)
        assert result["ok"], result
    model.zero_grad()
    model(idx).sum().backward()
    assert model.table.grad[8].abs().max() == 0 and model.words.weight.grad[1].abs().max() == 0


class MaskedScores(nn.Module):
    """A padded key mask as DeBERTa and BERT-style models write it: ``finfo(scores.dtype).min``, then softmax; the
    second query row of the second sample is fully masked (torch: uniform)."""

    def forward(self, scores, mask):
        filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return torch.softmax(filled, -1), scores.masked_fill(mask, torch.tensor(-3.0, dtype=torch.float64))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_masked_fill_past_the_half_range_saturates_like_finfo_of_the_dtype(dtype):
    """A port converted in float32 carries finfo(float32).min; its half copy fills with the half dtype's finite
    minimum (torch's half model's finfo(dtype).min), so a fully masked row stays uniform instead of NaN. A 0-d
    float64 fill value keeps ``self``'s dtype, as torch's masked_fill does; infinities stay infinite."""
    import mlx.core as mx
    import numpy as np
    import porter

    def inputs(seed):
        gen = torch.Generator().manual_seed(seed)
        mask = torch.rand(2, 3, 5, generator=gen) > 0.3
        mask[1, 1] = False
        return torch.randn(2, 3, 5, generator=gen), mask

    model = MaskedScores().eval()
    check_converted(model, inputs(0), inputs(1), io_layout="torch")
    half = porter.convert(model, inputs(0), io_layout="torch").astype(dtype)
    scores, mask = inputs(2)
    torch_dtype = getattr(torch, dtype)
    with torch.no_grad():
        probs, floor = model(scores.to(torch_dtype), mask)
    got_probs, got_floor = half(mx.array(scores.numpy()).astype(getattr(mx, dtype)), mx.array(mask.numpy()))
    assert got_probs.dtype == getattr(mx, dtype) and got_floor.dtype == getattr(mx, dtype)
    np.testing.assert_allclose(np.array(got_probs.astype(mx.float32)), probs.float().numpy(), atol=1e-2)
    assert np.allclose(np.array(got_probs.astype(mx.float32))[1, 1], 0.2, atol=1e-3)  # uniform, not NaN
    np.testing.assert_array_equal(np.array(got_floor.astype(mx.float32)), floor.float().numpy())

    inf = porter.convert(_InfFill().eval(), inputs(0), io_layout="torch").astype(dtype)
    out = np.array(inf(mx.array(scores.numpy()).astype(getattr(mx, dtype)), mx.array(mask.numpy()))
                   .astype(mx.float32))
    assert np.isneginf(out[~mask.numpy()]).all()


class _InfFill(nn.Module):
    def forward(self, scores, mask):
        return scores.masked_fill(~mask, float("-inf"))


class AdditiveMasks(torch.nn.Module):
    """GPT-NeoX's masks: ``where(causal, scores, torch.tensor(finfo(dtype).min))`` (a lifted constant) plus the
    additive padding mask ``(1 - mask) * finfo(dtype).min`` (a literal) over a float 0/1 mask input (cast to the
    half dtype on entry): both float32's extreme in a float32 capture. (A mask made float by ``.to(x.dtype)`` is
    captured as ``.to(float32)`` and stays float32 in a half port: not this.)"""

    def forward(self, scores, mask):
        causal = torch.ones(scores.shape[-1], scores.shape[-1], dtype=torch.bool).tril()
        mask_value = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype)
        padding = (1.0 - mask[:, None, :]) * torch.finfo(scores.dtype).min
        return torch.softmax(torch.where(causal, scores, mask_value) + padding, dim=-1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_float32_extremes_saturate_in_a_half_port_like_finfo_of_the_dtype(dtype):
    """In the half copy, the literal and the constant become the half dtype's finite minimum (what torch's half model
    computes), not -inf: a query row whose only causal key is padded stays finite, as in torch's half model."""
    import mlx.core as mx
    import numpy as np
    import porter

    scores = torch.randn(2, 4, 4) * 0.01  # small: s + finfo.min rounds to finfo.min in half, as in torch
    mask = torch.tensor([[1.0, 1, 1, 1], [0, 1, 1, 1]])
    model = AdditiveMasks().eval()
    half = porter.convert(model, (scores, mask), io_layout="torch").astype(dtype)
    torch_dtype, mx_dtype = getattr(torch, dtype), getattr(mx, dtype)
    with torch.no_grad():
        expected = model(scores.to(torch_dtype), mask.to(torch_dtype)).float().numpy()
    got = half(mx.array(scores.numpy()).astype(mx_dtype), mx.array(mask.numpy()).astype(mx_dtype))
    got = np.array(got.astype(mx.float32))
    assert np.isfinite(got).all() and np.isfinite(expected).all()
    np.testing.assert_allclose(got, expected, atol=2e-2)


class _EmptyLogSums(nn.Module):
    def forward(self, x):
        return torch.logsumexp(x, 1), torch.log_softmax(x, 1), torch.logsumexp(x, (1, 2), keepdim=True)


@pytest.mark.parametrize("shape", [(2, 0, 4), (0, 3, 4)])
def test_log_sums_over_empty_inputs(shape):
    """An empty input (a zero-size dim reached from a crafted graph or a real one): torch's logsumexp over no terms
    is -inf and log_softmax returns the empty input; MLX's logsumexp refused both ("Received empty array")."""
    check_converted(_EmptyLogSums().eval(), torch.randn(shape))
