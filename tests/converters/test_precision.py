"""Half precision (issue 13): ``porter.convert(..., dtype=)`` / ``ported.astype``, float16 and bfloat16 weights and
compute, float32 norm statistics / softmax / reductions, and half models saved and loaded.

The oracle is the float32 torch model. The bound on a half port's error is derived from torch itself: the same
model run by torch in that dtype (``model.to(dtype)``) on the same inputs loses some accuracy, and the port may lose
at most ``FACTOR`` times as much.
"""

import copy
import functools
import json
import math
import os
import struct
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import porter
from tests.models import REGISTRY, make_inputs
from porter.converters.precision import check_dtype

DTYPES = {"float16": (torch.float16, mx.float16), "bfloat16": (torch.bfloat16, mx.bfloat16)}
FACTOR = 3.0  # measured: the ports lose 0.7-1.5x what torch loses in the same dtype
ARCHITECTURES = ["resnet_basic", "mobilenet_v3", "vit", "bert", "gpt2"]


def _rounded(xs, dtype):
    """Float inputs rounded to ``dtype`` and back: the float32 oracle and both half runs see the same values."""
    return tuple(x.to(DTYPES[dtype][0]).float() if x.is_floating_point() else x for x in xs)


def _port_inputs(ported, xs):
    from porter.compare import port_inputs

    arrays, _ = port_inputs(ported, xs)
    return arrays


def _to_torch_layout(ported, out, index=0):
    from porter.compare import to_torch_layout

    return to_torch_layout(np.array(out.astype(mx.float32)), ported.output_layouts[index])


def _first(value):
    return value[0] if isinstance(value, (tuple, list)) else value


def _torch_half_error(model, xs, dtype):
    """max|torch in dtype - torch in float32| on the first output."""
    with torch.no_grad():
        ref = _first(model(*xs)).numpy()
        half = copy.deepcopy(model).to(DTYPES[dtype][0])
        got = _first(half(*[x.to(DTYPES[dtype][0]) if x.is_floating_point() else x for x in xs])).float().numpy()
    return ref, float(np.abs(got - ref).max())


# ---------------------------------------------------------------------------------------------------- real models
@functools.lru_cache(maxsize=None)
def _converted(name):
    """(torch model, float32 port): captured once per architecture, cast per dtype by the tests."""
    spec = REGISTRY[name]
    model = spec.builder(0)
    return model, porter.convert(model, make_inputs(spec.inputs))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_real_architecture_error_bounded_by_torch_own(name, dtype):
    model, float_port = _converted(name)
    xs = _rounded(make_inputs(REGISTRY[name].inputs), dtype)
    ported = float_port.astype(dtype)
    assert ported.dtype == dtype and float_port.dtype == "float32"
    floats = [a for a in ported.named_arrays().values() if mx.issubdtype(a.dtype, mx.floating)]
    assert floats and all(a.dtype == DTYPES[dtype][1] for a in floats)

    out, record = ported.trace(*_port_inputs(ported, xs))
    out = _first(out)
    assert out.dtype == DTYPES[dtype][1]
    # compute really is in half: every floating module output (convs, linears, norms, blocks) is in the dtype,
    # BERT's attention probabilities too: its additive mask is made float by ``.to(dtype=self.dtype)``, captured
    # as float32 but followed by the half port as torch's half model follows it (capture_dtypes.py)
    leaked = [k for k, v in record.items() for a in (v if isinstance(v, (list, tuple)) else [v])
              if isinstance(a, mx.array) and mx.issubdtype(a.dtype, mx.floating) and a.dtype != DTYPES[dtype][1]]
    assert leaked == []

    ref, torch_err = _torch_half_error(model, xs, dtype)
    err = float(np.abs(_to_torch_layout(ported, out) - ref).max())
    assert torch_err > 0
    assert err <= FACTOR * torch_err, (err, torch_err)


def test_explicit_float32_casts_are_kept_and_casts_to_a_tensors_dtype_followed():
    """LLaMA's RMSNorm upcasts with ``.to(torch.float32)`` (kept: its statistics are float32, in torch's half model
    too) and casts back with ``.to(input_dtype)``, a dtype read from a tensor: float32 at capture, followed by the
    port (``capture_dtypes.py``), so its residual stream and output are bfloat16 as in torch's bfloat16 model."""
    spec = REGISTRY["llama"]
    model = spec.builder(0)
    xs = _rounded(make_inputs(spec.inputs), "bfloat16")
    ported = porter.convert(model, xs, dtype="bfloat16")
    casts = [n for n in ported.graph["nodes"] if n["kernel"] == "cast" and n["attrs"]["dtype"] == "float32"]
    following = set(ported.graph["dtype_follows"])
    assert casts and {n["outputs"][0] for n in casts if n["outputs"][0] not in following}  # the upcasts
    out, record = ported.trace(*_port_inputs(ported, xs))
    with torch.no_grad():
        want = copy.deepcopy(model).to(torch.bfloat16)(*[x.to(torch.bfloat16) for x in xs])
    assert want.dtype == torch.bfloat16 and out.dtype == mx.bfloat16 and record["norm"].dtype == mx.bfloat16
    projections = [k for k in record if k.endswith(("q_proj", "k_proj", "v_proj", "o_proj", "down_proj"))]
    assert len(projections) == 10 and all(record[k].dtype == mx.bfloat16 for k in projections)
    ref, torch_err = _torch_half_error(model, xs, "bfloat16")
    assert np.abs(np.array(out.astype(mx.float32)) - ref).max() <= FACTOR * torch_err


class DtypeFlow(nn.Module):
    """Dtypes a model takes from its tensors next to dtypes it writes: a padding mask made float with
    ``.to(h.dtype)`` and scaled by ``finfo(h.dtype).min``, positions ``type_as`` a buffer, a fill created with
    ``dtype=h.dtype``, and a softmax upcast with ``.float()`` then cast back with ``type_as``."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("freq", torch.linspace(0.5, 3.0, 8))

    def forward(self, h, keep):
        h = self.proj(h)
        mask = (1.0 - keep[:, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
        pos = torch.arange(h.shape[1]).type_as(self.freq)[:, None] * self.freq
        fill = torch.full((h.shape[1], h.shape[1]), torch.finfo(h.dtype).min, dtype=h.dtype).triu(1)
        scores = h @ h.transpose(1, 2) + mask + fill
        weights = torch.softmax(scores.float(), dim=-1).type_as(h)
        return weights @ (h + pos.sin()), scores.float().amax(-1)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_dtypes_taken_from_tensors_follow_the_half_dtype_as_in_torch(dtype):
    """Torch's half model computes the mask, positions and fill in the half dtype (its finfo extremes, its
    rounding) and keeps the explicit ``.float()`` upcasts in float32; the port does the same: the fully masked
    first row (every key padded) and the rest within torch's own half error. Before, every such cast stayed float32
    as captured, and the padded rows were 0.5 of the output's range off."""
    torch.manual_seed(0)
    model = DtypeFlow().eval()
    keep = torch.ones(3, 6, dtype=torch.long)
    keep[1, :2], keep[2, :] = 0, 0  # row 2: every key padded
    h = torch.randn(3, 6, 8).to(DTYPES[dtype][0]).float()
    ported = porter.convert(model, (torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.long)), io_layout="torch")
    following = ported.graph["dtype_follows"]
    kernels = {n["outputs"][0]: n["kernel"] for n in ported.graph["nodes"]}
    assert {kernels[name] for name in following} == {"cast", "full"}
    half = ported.astype(dtype)
    with torch.no_grad():
        want = copy.deepcopy(model).to(DTYPES[dtype][0])(h.to(DTYPES[dtype][0]), keep)
        full = model(h, keep)
    got = half(mx.array(h.numpy()).astype(DTYPES[dtype][1]), mx.array(keep.numpy()))
    assert got[0].dtype == DTYPES[dtype][1] and got[1].dtype == mx.float32  # the .float() upcast kept
    assert want[1].dtype == torch.float32
    np.testing.assert_array_equal(np.array(got[1]), want[1].numpy())  # the half dtype's finfo, as torch's
    err = np.abs(np.array(got[0].astype(mx.float32)) - want[0].float().numpy()).max()
    own = (full[0] - want[0].float()).abs().max().item()
    assert err <= own, (err, own)


class SinusoidalTime(nn.Module):
    """diffusers' timestep embedding: frequencies computed in the forward from ``torch.arange(..., dtype=float32)``
    (a constant the capture folds), applied to the timestep upcast with ``.float()``, cast to the sample's dtype."""

    def forward(self, t, sample):
        freqs = torch.exp(-math.log(10000.0) * torch.arange(0, 16, dtype=torch.float32) / 16)
        arg = t[:, None].float() * freqs[None, :]
        return torch.cat([arg.sin(), arg.cos()], dim=-1).to(sample.dtype) + sample


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_constants_computed_in_float32_stay_float32_in_a_half_port(dtype):
    """Torch's half model computes the frequencies in float32 whatever its dtype; the port keeps that folded
    constant float32 (``float32_constants``) where every other array takes the half dtype. Rounded to half, the
    frequencies put the sines of timesteps near 900 off by up to 0.5."""
    model = SinusoidalTime().eval()
    ported = porter.convert(model, (torch.tensor([3.0, 5.0]), torch.randn(2, 32)), io_layout="torch")
    assert len(ported.graph["float32_constants"]) == 1
    half = ported.astype(dtype)
    assert half.named_arrays()[ported.graph["float32_constants"][0]].dtype == mx.float32
    t, sample = torch.tensor([901.37, 17.5, 433.0]), torch.randn(3, 32).to(DTYPES[dtype][0])
    with torch.no_grad():
        want = copy.deepcopy(model).to(DTYPES[dtype][0])(t, sample)
    got = half(mx.array(t.numpy()), mx.array(sample.float().numpy()).astype(DTYPES[dtype][1]))
    assert got.dtype == DTYPES[dtype][1]
    np.testing.assert_array_equal(np.array(got.astype(mx.float32)), want.float().numpy())


def test_a_probe_that_cannot_pair_the_calls_leaves_the_dtypes_as_captured():
    """A branch on the dtype makes the float64 probe another program: nothing is marked (the dtypes stay as
    captured), and the capture says why."""
    from porter.converters.capture import capture

    class Branchy(nn.Module):
        def forward(self, x):
            if x.dtype == torch.float32:
                return (x.sin() * 2).to(x.dtype)
            return x.cos().exp().tanh().abs().to(x.dtype)

    graph = capture(Branchy(), (torch.randn(2, 3),))
    assert graph.dtype_follows == set() and "other calls" in graph.dtype_note
    graph = capture(DtypeFlow().eval(), (torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.long)))
    assert graph.dtype_note is None and graph.dtype_follows


# ---------------------------------------------------------------------------------------------------- float32 stats
class Norms(nn.Module):
    """Every norm on activations with a large mean: in half arithmetic their statistics cancel to garbage."""

    def __init__(self, c=16):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)
        self.gn = nn.GroupNorm(4, c)
        self.inorm = nn.InstanceNorm2d(c, affine=True)
        self.ln = nn.LayerNorm(c)

    def forward(self, x):
        a = self.bn(x)
        b = self.gn(x)
        c = self.inorm(x)
        d = self.ln(x.permute(0, 2, 3, 1))
        return a, b, c, d


def _randomized_norms(dtype=None):
    """Norms with random affine parameters and statistics; with ``dtype``, every float rounded to it (so float32
    torch on these weights differs from the half port by the computation alone)."""
    model = Norms()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(0.5, 1.5)
        model.bn.running_mean.uniform_(2990, 3010)
        model.bn.running_var.uniform_(0.5, 2.0)
        if dtype is not None:
            for t in list(model.parameters()) + list(model.buffers()):
                if t.is_floating_point():
                    t.copy_(t.to(DTYPES[dtype][0]).float())
    return model.eval()


def _naive_half_layer_norm(x, dtype):
    """LayerNorm computed in the half dtype itself (what MLX does with 16-bit inputs)."""
    x = mx.array(x).astype(dtype)
    mean = mx.mean(x, axis=-1, keepdims=True)
    var = mx.mean(mx.square(x - mean), axis=-1, keepdims=True)
    return np.array(((x - mean) * mx.rsqrt(var + 1e-5)).astype(mx.float32))


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_norm_statistics_in_float32(dtype, train):
    model = _randomized_norms(dtype).train(train)
    # mean 3000, std 1, at an odd size: float16 holds 3000 to +-1 only, so the statistics must not be in half
    x = _rounded((3000 + torch.randn(3, 16, 5, 7),), dtype)
    ported = porter.convert(model, x, dtype=dtype)
    assert ported.training == train
    with torch.no_grad():
        expected = model(*x)  # float32 on the same (rounded) weights and inputs
    got = ported(*_port_inputs(ported, x))
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[dtype]
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g.dtype == DTYPES[dtype][1]
        g = _to_torch_layout(ported, g, i)
        e = e.numpy()
        scale = np.abs(e).max()
        # one rounding of the output (plus the affine's) away from float32: norm statistics were float32
        assert np.abs(g - e).max() <= 4 * eps * scale, (i, np.abs(g - e).max(), scale)
    # the case is a real test: the same normalisation in half arithmetic is nowhere near
    naive = _naive_half_layer_norm(x[0].permute(0, 2, 3, 1).numpy(), DTYPES[dtype][1])
    reference = F.layer_norm(x[0].permute(0, 2, 3, 1), (16,)).numpy()
    assert not np.abs(naive - reference).max() <= 0.5
    if train:  # running statistics updated from float32 batch statistics, stored in the model's dtype
        ported_bn = ported.bn
        assert ported_bn.running_mean.dtype == DTYPES[dtype][1]
        np.testing.assert_allclose(np.array(ported_bn.running_mean.astype(mx.float32)),
                                   model.bn.running_mean.numpy(), rtol=4 * eps)


class Reductions(nn.Module):
    def forward(self, x):
        return (F.softmax(x, -1), F.log_softmax(x, -1), x.mean(-1), x.sum(-1), x.var(-1), x.std(-1),
                torch.logsumexp(x, -1), x.cumsum(-1)[..., -1], torch.linalg.vector_norm(x, dim=-1))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_softmax_and_reductions_over_long_rows_in_float32(dtype):
    # rows of 100,003 values in [0, 1): a float16 running sum passes 65504 (inf), a bfloat16 one stops growing
    x = _rounded((torch.rand(2, 100003),), dtype)
    model = Reductions()
    ported = porter.convert(model, x, dtype=dtype)
    with torch.no_grad():
        expected = model(*x)
        torch_half = model(x[0].to(DTYPES[dtype][0]))
    got = ported(*_port_inputs(ported, x))
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[dtype]
    for i, (e, g, h) in enumerate(zip(expected, got, torch_half)):
        assert g.dtype == DTYPES[dtype][1], i
        g = np.array(g.astype(mx.float32))
        e, h = e.numpy(), h.float().numpy()
        err, torch_err = np.abs(g - e).max(), np.abs(h - e).max()
        assert np.isfinite(g).all(), i
        # within one rounding of the result, and no worse than torch's own half kernels
        assert err <= max(2 * eps * np.abs(e).max(), FACTOR * torch_err), (i, err, torch_err)
    # what half arithmetic gives instead: a softmax that sums to 30 or 250, a cumsum that stops at 2048 or 256
    half = mx.array(x[0].numpy()).astype(DTYPES[dtype][1])
    naive_softmax = np.array(mx.softmax(half, axis=-1).astype(mx.float32))
    naive_cumsum = np.array(mx.cumsum(half, axis=-1)[..., -1].astype(mx.float32))
    assert not np.abs(naive_softmax - expected[0].numpy()).max() <= np.abs(expected[0].numpy()).max()
    assert not np.abs(naive_cumsum - expected[7].numpy()).max() <= 0.01 * np.abs(expected[7].numpy()).max()


# ---------------------------------------------------------------------------------------------------- astype
class WithEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.fc = nn.Linear(8, 3)
        self.ln = nn.LayerNorm(8)

    def forward(self, ids, x):
        return self.fc(self.ln(self.emb(ids) + x))


def test_astype_round_trip_and_original_untouched():
    _, ported = _converted("resnet_basic")
    xs = _rounded(make_inputs(REGISTRY["resnet_basic"].inputs), "bfloat16")
    before = {k: np.array(v) for k, v in ported.named_arrays().items()}
    half = ported.astype("bfloat16")
    assert half is not ported and half.dtype == "bfloat16" and ported.dtype == "float32"
    assert "compute_dtype" not in ported.graph and half.graph["compute_dtype"] == "bfloat16"
    for k, v in ported.named_arrays().items():  # the float32 model is unchanged
        np.testing.assert_array_equal(np.array(v), before[k])
    back = half.astype(mx.float32)
    assert back.dtype == "float32" and "compute_dtype" not in back.graph
    for k, v in back.named_arrays().items():
        h = half.named_arrays()[k]
        assert v.dtype == (mx.float32 if mx.issubdtype(h.dtype, mx.floating) else h.dtype)
        assert back.graph["params"][k]["dtype"] == ("float32" if v.dtype == mx.float32 else "int64")
        np.testing.assert_array_equal(np.array(v), np.array(h.astype(v.dtype)))  # bfloat16 -> float32 is exact
    args = _port_inputs(ported, xs)
    assert back(*args).dtype == mx.float32
    # float32 compute on bfloat16-rounded weights: between the two
    ref = np.array(ported(*args))
    assert np.abs(np.array(back(*args)) - ref).max() <= np.abs(np.array(half(*args).astype(mx.float32)) - ref).max()


def test_train_mode_survives_astype():
    ported = porter.convert(_randomized_norms(), torch.randn(2, 16, 4, 4))
    ported.train()
    assert ported.astype("float16").training


@pytest.mark.parametrize("bad", ["half", "int8", "float64", torch.float16, None, mx.int32])
def test_bad_dtype_names_the_argument(bad):
    model = WithEmbedding().eval()
    with pytest.raises(ValueError, match="'dtype' must be one of float32, float16, bfloat16"):
        check_dtype(bad)
    if bad is not None:  # None is convert's default (keep the model's dtypes)
        with pytest.raises(ValueError, match="'dtype'"):
            porter.convert(model, (torch.tensor([[1, 2]]), torch.randn(1, 2, 8)), dtype=bad)
    ported = porter.convert(model, (torch.tensor([[1, 2]]), torch.randn(1, 2, 8)))
    with pytest.raises(ValueError, match="'dtype'"):
        ported.astype(bad)


def test_float_inputs_cast_integer_inputs_untouched():
    torch.manual_seed(0)
    model = WithEmbedding().eval()
    ids, x = torch.tensor([[1, 10, 3]]), torch.randn(1, 3, 8).to(torch.float16).float()
    ported = porter.convert(model, (ids, x), dtype="float16")
    m_ids = mx.array(ids.numpy())
    outs = [ported(m_ids, mx.array(x.numpy()).astype(t)) for t in (mx.float32, mx.float16, mx.bfloat16)]
    assert all(o.dtype == mx.float16 for o in outs)
    np.testing.assert_array_equal(np.array(outs[0]), np.array(outs[1]))  # float32 input: cast to float16 first
    assert m_ids.dtype == mx.int64
    with torch.no_grad():
        ref = model(ids, x).numpy()
    _, torch_err = _torch_half_error(model, (ids, x), "float16")
    assert np.abs(np.array(outs[0].astype(mx.float32)) - ref).max() <= max(FACTOR * torch_err, 2e-3)
    with pytest.raises(ValueError, match="index 11 is out of range"):  # integer input: the embedding's check
        mx.eval(ported(mx.array([[1, 11, 3]]), mx.array(x.numpy())))


class TimestepEmbedding(nn.Module):
    """diffusers' shape of the problem: ``t`` reaches the graph only through ``.float()`` (kept as given by a half
    port); ``x`` is added to a half value (cast on entry); ``s`` is used before its cast too (cast on entry)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("freqs", torch.exp(-torch.arange(4, dtype=torch.float32)), persistent=False)

    def forward(self, t, x, s):
        arg = t[:, None].float() * self.freqs[None, :]
        emb = torch.cat([arg.sin(), arg.cos()], dim=1)
        return emb.to(x.dtype), self.lin(emb.to(x.dtype)) + x, s * 3 + s.float()


def test_an_input_the_graph_casts_to_float32_keeps_its_dtype():
    """A half port takes ``t`` as it comes, as torch's half model does: ``t = 1000.7`` in float32 gives torch's
    float32 sinusoid, rounded once (within 1 float16 ulp of torch's half model); cast to float16 on entry it was
    1000.5 and the embedding off by up to 0.2. Inputs read otherwise are still cast."""
    model = TimestepEmbedding().eval()
    example = (torch.tensor([1.0, 2.0]), torch.randn(2, 8), torch.randn(2, 8))
    ported = porter.convert(model, example, dtype="float16")
    assert ported._program.inputs_as_given == frozenset({"t"})
    t, x, s = torch.tensor([1000.7, 601.3]), torch.randn(2, 8).half(), torch.randn(2, 8).half()
    with torch.no_grad():
        want = copy.deepcopy(model).half()(t, x, s)
    got = ported(mx.array(t.numpy()), mx.array(x.float().numpy()), mx.array(s.float().numpy()))
    # .to(x.dtype): float32 at capture, the half dtype in torch's half model and in the port (capture_dtypes.py)
    assert got[0].dtype == mx.float16
    emb, want_emb = np.array(got[0]).astype(np.float64), want[0].double().numpy()
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(want_emb), 2.0 ** -14))) - 10)
    assert (np.abs(emb - want_emb) <= ulp).all()
    np.testing.assert_allclose(np.array(got[1].astype(mx.float32)), want[1].float().numpy(), rtol=2e-2, atol=2e-2)
    np.testing.assert_array_equal(np.array(got[2]), want[2].numpy())  # s cast to float16 first, as given to torch


def test_gradients_of_a_half_model():
    torch.manual_seed(0)
    model = WithEmbedding().eval()
    ids, x = torch.tensor([[1, 10, 3, 4]]), torch.randn(1, 4, 8).to(torch.bfloat16).float()
    ported = porter.convert(model, (ids, x), dtype="bfloat16")

    def loss(params):
        ported.update(params)
        return ported(mx.array(ids.numpy()), mx.array(x.numpy())).astype(mx.float32).sum()

    grads = ported.torch_parameter_grads(mx.grad(loss)(ported.trainable_parameters()))
    model.zero_grad()
    model(ids, x).sum().backward()
    half = copy.deepcopy(model).to(torch.bfloat16)
    half.zero_grad()
    half(ids, x.to(torch.bfloat16)).float().sum().backward()
    for name, p in model.named_parameters():
        expected = p.grad.numpy()
        torch_err = np.abs(dict(half.named_parameters())[name].grad.float().numpy() - expected).max()
        err = np.abs(np.asarray(grads[name], dtype=np.float32) - expected).max()
        assert err <= max(FACTOR * torch_err, 2 ** -7 * np.abs(expected).max()), (name, err, torch_err)


# ---------------------------------------------------------------------------------------------------- artifact
def _header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_save_load_half_model(dtype, tmp_path):
    model = _randomized_norms()
    x = _rounded((torch.randn(2, 16, 5, 5),), dtype)
    ported = porter.convert(model, x, dtype=dtype)
    porter.save(ported, tmp_path / "m")
    graph = json.loads((tmp_path / "m" / "graph.json").read_text())
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    header = _header(tmp_path / "m" / "model.safetensors")
    assert graph["compute_dtype"] == dtype and config["dtype"] == dtype
    stored = {"float16": "F16", "bfloat16": "BF16", "int64": "I64"}
    for name, spec in graph["params"].items():
        assert spec["dtype"] in (dtype, "int64")
        assert header[name]["dtype"] == stored[spec["dtype"]]
    loaded = porter.load(tmp_path / "m")
    assert loaded.dtype == dtype
    args = _port_inputs(ported, x)
    for a, b in zip(ported(*args), loaded(*args)):
        assert b.dtype == DTYPES[dtype][1]
        np.testing.assert_array_equal(np.array(a.astype(mx.float32)), np.array(b.astype(mx.float32)))


@pytest.mark.slow  # a subprocess
def test_half_model_loads_and_runs_without_torch(tmp_path):
    x = _rounded((torch.randn(2, 16, 5, 5),), "float16")
    ported = porter.convert(_randomized_norms("float16"), x, dtype="float16")
    porter.save(ported, tmp_path / "m")
    np.save(tmp_path / "x.npy", x[0].numpy().transpose(0, 2, 3, 1))  # float32: the model casts it
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "cli", "torch_free.py")
    proc = subprocess.run([sys.executable, script, str(tmp_path / "m"), str(tmp_path / "x.npy"), str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for i, expected in enumerate(ported(*_port_inputs(ported, x))):
        got = np.load(tmp_path / f"o{i}.npy")
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, np.array(expected))


def test_config_dtype_must_match_the_weights(tmp_path):
    ported = porter.convert(_randomized_norms(), torch.randn(2, 16, 4, 4), dtype="float16")
    porter.save(ported, tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    config = json.loads(path.read_text())
    config["dtype"] = "float32"
    path.write_text(json.dumps(config))
    with pytest.raises(porter.ArtifactError, match="dtype"):
        porter.load(tmp_path / "m")


def test_compute_dtype_is_checked(tmp_path):
    ported = porter.convert(_randomized_norms(), torch.randn(2, 16, 4, 4), dtype="bfloat16")
    porter.save(ported, tmp_path / "m")
    path = tmp_path / "m" / "graph.json"
    graph = json.loads(path.read_text())
    graph["compute_dtype"] = "int8"
    path.write_text(json.dumps(graph))
    with pytest.raises(porter.ArtifactError, match="compute_dtype"):
        porter.load(tmp_path / "m")


@pytest.mark.parametrize("key, value, words", [
    ("dtype_follows", ["linear"], "not the output of a node with a float32 'dtype'"),
    ("dtype_follows", "to", "dtype_follows"),
    ("float32_constants", ["proj.weight"], "not a float32 parameter"),
])
def test_dtype_records_are_checked_on_load(tmp_path, key, value, words):
    """A saved half model keeps ``dtype_follows`` and ``float32_constants``; a name that is not a float32-typed
    node output / a float32 parameter is refused by name (``proj.weight`` is bfloat16 here)."""
    model = DtypeFlow().eval()
    ported = porter.convert(model, (torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.long)), dtype="bfloat16")
    porter.save(ported, tmp_path / "m")
    path = tmp_path / "m" / "graph.json"
    graph = json.loads(path.read_text())
    assert graph["format_version"] >= 6 and graph["dtype_follows"]  # a new conversion: the current version
    loaded = porter.load(tmp_path / "m")
    assert loaded.graph["dtype_follows"] == ported.graph["dtype_follows"]
    graph[key] = value
    path.write_text(json.dumps(graph))
    with pytest.raises(porter.ArtifactError, match=words):
        porter.load(tmp_path / "m")
