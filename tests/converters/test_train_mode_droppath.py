"""Stochastic depth (torchvision's ``StochasticDepth``, timm's ``DropPath``) and functional dropout
(``F.dropout(x, p, self.training)``, ``F.scaled_dot_product_attention(..., dropout_p=p if self.training else 0)``)
train in the port as torch does; eval is exact and unchanged.

Torch is the oracle in each test: the masks' structure and rates are compared with torch's own draws, and the
port's output and gradients with torch's given the mask the port drew (read back from the port's output), exactly
where the scale is a power of two; ``p = 1`` is compared directly (no randomness left)."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from porter.converters.layer_dropout import StochasticDepth as PortStochasticDepth
from tests.models import droppath as M


def _x(shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _run(ported, x):
    return np.array(ported(mx.array(x.numpy())))


def _convert(model, x, **kwargs):
    return porter.convert(model.eval(), (x,), io_layout="torch", **kwargs)


class Branch(nn.Module):
    """A residual branch through a drop-path module: ``x + drop(conv(x))`` (NCHW)."""

    def __init__(self, drop, channels=4):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.drop = drop

    def forward(self, x):
        return x + self.drop(self.conv(x))


def _branch_masks(ported, model, x):
    """The per-example factors the port's training forward applied to ``Branch``'s conv output (torch's eval
    branch: ``out - x = conv(x) * factor``), one per example."""
    with torch.no_grad():
        branch = model.conv(x).numpy()
    out = _run(ported, x)
    delta = out - x.numpy()
    factors = []
    for i in range(x.shape[0]):
        nonzero = np.abs(branch[i]) > 1e-3
        ratio = delta[i][nonzero] / branch[i][nonzero]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-4, atol=1e-5)  # one factor for the whole example
        factors.append(float(ratio[0]))
    return np.array(factors), out


# ---------------------------------------------------------------------------------------------------- recognition
RECOGNISED = [
    ("torchvision_row", lambda: M.StochasticDepth(0.25, "row"), "row", True),
    ("torchvision_batch", lambda: M.StochasticDepth(0.25, "batch"), "batch", True),
    ("timm", lambda: M.DropPath(0.25), "row", True),
    ("timm_no_scale", lambda: M.DropPath(0.25, scale_by_keep=False), "row", False),
    ("timm_old_floor", lambda: M.OldDropPath(0.25), "row", True),
]


@pytest.mark.parametrize("case", RECOGNISED, ids=[c[0] for c in RECOGNISED])
def test_stochastic_depth_modules_get_a_layer_and_train(case):
    _, make, mode, scale = case
    torch.manual_seed(0)
    model = Branch(make())
    x = _x((6, 4, 5, 7))
    ported = _convert(model, x)
    assert ported.train_refusals == {}
    assert ported.graph["modules"]["drop"] == {"type": "StochasticDepth",
                                               "config": {"p": 0.25, "mode": mode, "scale": scale, "axis": 0}}
    assert isinstance(ported.drop, PortStochasticDepth)
    with torch.no_grad():
        want = model.eval()(x).numpy()
    np.testing.assert_allclose(_run(ported, x), want, rtol=1e-5, atol=1e-5)  # eval unchanged
    ported.train()
    mx.random.seed(0)
    kept = 1.0 / 0.75 if scale else 1.0
    dropped_examples, draws = 0, 0
    for _ in range(40):
        factors, _ = _branch_masks(ported, model, x)
        assert np.all(np.isclose(factors, 0.0, atol=1e-5) | np.isclose(factors, kept, rtol=1e-4))
        if mode == "batch":
            assert np.allclose(factors, factors[0], atol=1e-5)  # the whole batch together
            dropped_examples += int(np.isclose(factors[0], 0.0, atol=1e-5))
            draws += 1
        else:
            dropped_examples += int(np.sum(np.isclose(factors, 0.0, atol=1e-5)))
            draws += len(factors)
    assert abs(dropped_examples / draws - 0.25) < (0.2 if mode == "batch" else 0.1)


def test_modules_that_are_not_stochastic_depth_are_left_alone():
    """A keep-probability attribute (drops at 1 - p) and a branch on self.training: not recognised, still
    refused by name (torch shows their training forward differs)."""
    torch.manual_seed(0)
    model = nn.Sequential(Branch(M.KeepProbDropPath(0.8)))
    ported = _convert(model, _x((4, 4, 5, 5)))
    assert set(ported.train_refusals) == {"0.drop"} and "KeepProbDropPath" in ported.train_refusals["0.drop"]
    assert ported.graph["modules"].get("0.drop") is None
    with pytest.raises(porter.TrainModeError, match="KeepProbDropPath"):
        ported.train()


def test_row_mode_follows_torchs_batch_dim_in_any_layout():
    """A DropPath inside a channels-last region (after a conv, before a norm): the draw is per torch example
    whatever axis the array keeps it on; with the token dim first (``(L, N, E)``) the "examples" are torch's
    dim 0, the tokens, as torch's drop_path draws them."""

    class TokensFirst(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(6, 6)
            self.drop = M.DropPath(0.5)

        def forward(self, x):  # (L, N, E)
            return self.drop(self.proj(x))

    torch.manual_seed(0)
    model = TokensFirst()
    x = _x((9, 3, 6))
    ported = _convert(model, x)
    assert ported.graph["modules"]["drop"]["config"]["axis"] == 0
    ported.train()
    mx.random.seed(1)
    with torch.no_grad():
        branch = model.proj(x).numpy()
    for _ in range(5):
        out = _run(ported, x)
        for token in range(9):  # each token row all dropped or all doubled, over every example and feature
            assert np.all(out[token] == 0) or np.allclose(out[token], 2 * branch[token], rtol=1e-4, atol=1e-5)


def test_a_training_model_converts_to_a_training_port():
    """``porter.convert(model.train(), ...)`` of a model with stochastic depth (was: TrainModeError): the port comes
    back training, module by module as torch's (a frozen branch stays in eval)."""
    torch.manual_seed(0)
    model = nn.Sequential(Branch(M.DropPath(0.5)), Branch(M.StochasticDepth(0.5, "row"))).train()
    model[1].drop.eval()
    ported = porter.convert(model, (_x((4, 4, 5, 5)),), io_layout="torch")
    assert ported.training and ported["0"].drop.training and not ported["1"].drop.training
    assert model.training and model[0].drop.training and not model[1].drop.training  # torch's modes kept


# ---------------------------------------------------------------------------------------------------- exactness
def test_the_port_equals_torch_given_its_mask_with_gradients():
    """p = 0.5 (scale 2, exact): torch run with the port's mask gives the port's output and the same parameter
    gradients."""
    torch.manual_seed(0)
    model = Branch(M.StochasticDepth(0.5, "row"))
    x = _x((8, 4, 5, 6))
    ported = _convert(model, x)
    ported.train()
    model.train()
    loss_and_grad = mnn.value_and_grad(ported, lambda m, a: (m(a) ** 2).sum())
    mx.random.seed(3)
    loss, grads = loss_and_grad(ported, mx.array(x.numpy()))
    mx.random.seed(3)
    factors, out = _branch_masks(ported, model, x)  # the same draw: the same seed, the same random calls
    assert 0 < np.sum(factors == 0) < len(factors)
    mask = torch.tensor(factors, dtype=torch.float32).reshape(-1, 1, 1, 1)
    model.drop.forward = lambda t: t * mask  # torch's stochastic depth with the port's noise
    try:
        want = model(x)
        (want ** 2).sum().backward()
    finally:
        del model.drop.forward
    np.testing.assert_allclose(out, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(loss), float((want.detach() ** 2).sum()), rtol=1e-5)
    got = ported.torch_parameter_grads(grads)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(got[name], p.grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_rates_zero_and_one_are_torchs(p):
    """p = 1 drops every branch (torch: ``x * 0``, NaN for inf/NaN); p = 0 is the identity in training too."""
    torch.manual_seed(0)
    model = Branch(M.DropPath(p))
    x = _x((3, 4, 5, 5))
    x[0, 0, 0, 0] = float("nan")
    ported = _convert(model, x)
    assert ported.train_refusals == {}
    model.train()
    ported.train()
    with torch.no_grad():
        want = model(x).numpy()
    if p == 1.0:  # x + conv(x) * 0: exact, NaN where the conv read the NaN
        np.testing.assert_array_equal(_run(ported, x), want)
    else:
        np.testing.assert_allclose(_run(ported, x), want, rtol=1e-5, atol=1e-5)  # the conv's rounding
    if p == 1.0:
        assert ported.graph["modules"]["drop"]["config"]["p"] == 1.0


def test_half_precision_port_drops_whole_examples():
    torch.manual_seed(0)
    model = Branch(M.DropPath(0.5))
    x = _x((8, 4, 5, 5))
    ported = _convert(model, x, dtype="float16")
    ported.train()
    mx.random.seed(0)
    out = _run(ported, x)
    with torch.no_grad():
        branch = model.conv(x).numpy()
    delta = out.astype(np.float32) - x.numpy()
    for i in range(8):
        dropped = np.allclose(delta[i], 0.0, atol=2e-3)
        assert dropped or np.allclose(delta[i], 2 * branch[i], rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------------------------------------------- blocks
def test_convnext_block_trains_as_torch():
    """torchvision's CNBlock with stochastic depth 0.1: not refused; in training each example's block output is
    either its input (branch dropped) or input + branch / 0.9, as torch's; eval exact."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 1), M.CNBlock(8, 0.5, 0.4), M.CNBlock(8, 0.5, 0.0))
    x = _x((16, 3, 6, 6))
    ported = _convert(model, x)
    assert ported.train_refusals == {}
    assert isinstance(ported["1"].stochastic_depth, PortStochasticDepth)
    assert "2.stochastic_depth" not in ported.graph["modules"]  # p = 0: nothing to train, nothing mapped
    with torch.no_grad():
        want = model.eval()(x).numpy()
        stem = model[0](x)
        branch = (model[1].layer_scale * model[1].block(stem))
    np.testing.assert_allclose(_run(ported, x), want, rtol=1e-4, atol=1e-4)
    ported.train()
    model.train()
    mx.random.seed(0)
    dropped = 0
    for _ in range(10):
        out = _run(ported, x)
        for i in range(16):
            factor = None
            for f in (0.0, 1 / 0.6):
                with torch.no_grad():
                    candidate = model[2].eval()(stem[i:i + 1] + branch[i:i + 1] * f).numpy()
                if np.allclose(out[i:i + 1], candidate, rtol=1e-4, atol=1e-4):
                    factor = f
            assert factor is not None
            dropped += factor == 0.0
    assert 0.25 < dropped / 160 < 0.55


def test_transformer_block_with_droppath_and_sdpa_dropout():
    """A timm-style block: DropPath on both branches and attention dropout inside SDPA (``dropout_p=... if
    self.training else 0.``). Not refused; eval exact; at drop_path 1 the block is its input in training; the
    attention dropout drops probabilities (the output moves) only in training."""
    torch.manual_seed(0)
    model = M.Block(8, 2, attn_drop=0.5, drop_path=0.2)
    x = _x((4, 5, 8))
    ported = _convert(model, x)
    assert ported.train_refusals == {}
    kernels = [n["kernel"] for n in ported.graph["nodes"]]
    assert "sdpa_dropout" in kernels
    assert ported.graph["modules"]["drop_path1"]["type"] == "StochasticDepth"
    with torch.no_grad():
        want = model.eval()(x).numpy()
    np.testing.assert_allclose(_run(ported, x), want, rtol=1e-5, atol=1e-5)
    for drop in (model.drop_path1, model.drop_path2):
        drop.drop_prob = 1.0
    for name in ("drop_path1", "drop_path2"):
        ported[name] = PortStochasticDepth(1.0)  # the layer is the user's to edit, as torch's module
    ported.train()
    model.train()
    with torch.no_grad():
        np.testing.assert_array_equal(_run(ported, x), model(x).numpy())  # every branch dropped: exact
    for name in ("drop_path1", "drop_path2"):
        ported[name] = PortStochasticDepth(0.0)  # only the attention dropout left
    mx.random.seed(0)
    a, b = _run(ported, x), _run(ported, x)
    assert not np.allclose(a, b)  # attention dropout draws anew each call
    ported.eval()
    np.testing.assert_allclose(_run(ported, x), model.eval()(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_swin_twin_with_default_stochastic_depth_is_not_refused():
    """The zoo's torchvision Swin twin with stochastic depth 0.2 and attention dropout in
    ``shifted_window_attention``'s ``F.dropout(attn, p=attention_dropout, training=training)``."""
    from tests.zoo.twins import swin

    torch.manual_seed(0)
    model = swin.swin_t(num_classes=5, embed_dim=8, depths=[2, 2], num_heads=[1, 2], window_size=[3, 3],
                        attention_dropout=0.1)
    x = _x((2, 3, 24, 24))
    ported = _convert(model, x, dynamic="static")  # the capture of every dim is the slow part here
    assert ported.train_refusals == {}
    assert sum(m["type"] == "StochasticDepth" for m in ported.graph["modules"].values()) >= 3
    assert "train_dropout" in {n["kernel"] for n in ported.graph["nodes"]}
    with torch.no_grad():
        want = model.eval()(x).numpy()
    np.testing.assert_allclose(_run(ported, x), want, rtol=1e-4, atol=1e-4)
    ported.train()
    assert np.isfinite(_run(ported, x)).all()


# ---------------------------------------------------------------------------------------------------- functional
@pytest.mark.parametrize("clip_style", [False, True], ids=["bart", "clip"])
def test_hf_attention_functional_dropout(clip_style):
    """BART's ``p=self.dropout, training=self.training`` and CLIP's ``p=0.0 if not self.training``: the eval
    capture holds p = 0 or train = False, the port drops at the training rate; p = 1 zeroes the probabilities as
    torch (output = out_proj's bias)."""
    torch.manual_seed(0)
    model = M.BartAttention(8, 2, dropout=0.3, clip_style=clip_style)
    x = _x((3, 5, 8))
    ported = _convert(model, x)
    assert ported.train_refusals == {}
    nodes = [n for n in ported.graph["nodes"] if n["kernel"] == "train_dropout"]
    assert len(nodes) == 1 and nodes[0]["attrs"]["p"] == 0.3 and nodes[0]["module"] == ""
    with torch.no_grad():
        want = model.eval()(x).numpy()
    np.testing.assert_allclose(_run(ported, x), want, rtol=1e-5, atol=1e-5)
    ported.train()
    mx.random.seed(0)
    outs = [_run(ported, x) for _ in range(2)]
    assert not np.allclose(outs[0], want, atol=1e-4) and not np.allclose(outs[0], outs[1], atol=1e-4)
    ported.eval()
    np.testing.assert_allclose(_run(ported, x), want, rtol=1e-5, atol=1e-5)

    model.dropout = 1.0  # the rate read at conversion: convert again
    ported = _convert(model, x)
    ported.train()
    model.train()
    with torch.no_grad():
        np.testing.assert_allclose(_run(ported, x), model(x).numpy(), rtol=0, atol=1e-6)


def test_functional_dropout_statistics_and_a_layer_for_a_dropout_module():
    """``F.dropout(x, p, self.training)`` as a module's whole forward: a ``Dropout`` layer at its path; zero fraction
    ~p over many elements, survivors scaled by 1 / (1 - p), as torch's draw."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), M.FunctionalDropout(0.3))
    x = _x((64, 16))
    ported = _convert(model, x)
    assert ported.train_refusals == {}
    assert ported.graph["modules"]["1"] == {"type": "Dropout", "config": {"p": 0.3}}
    with torch.no_grad():
        ref = model.eval()(x).numpy()
        model.train()
        torch_out = model(x).numpy()
    ported.train()
    mx.random.seed(0)
    for out in (_run(ported, x), torch_out):
        assert abs(np.mean(out == 0) - 0.3) < 0.03
        kept = out != 0
        np.testing.assert_allclose(out[kept], ref[kept] / 0.7, rtol=1e-5, atol=1e-6)


class AttentionProbabilities(nn.Module):
    """SDPA with an identity value: the output is the attention probabilities, dropped as SDPA drops them."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):  # (N, H, L, E)
        eye = torch.eye(x.shape[-2], dtype=x.dtype).expand(x.shape[0], x.shape[1], x.shape[-2], x.shape[-2])
        return F.scaled_dot_product_attention(x, x, eye, dropout_p=self.p if self.training else 0.0)


def test_sdpa_dropout_drops_probabilities_as_torch():
    """Zero fraction ~p and survivors ``probs / (1 - p)``, for the port and for torch's own training draw."""
    model = AttentionProbabilities(0.4)
    x = _x((4, 2, 16, 8))
    ported = _convert(model, x)
    assert ported.train_refusals == {}
    assert [n["attrs"]["dropout"] for n in ported.graph["nodes"] if n["kernel"] == "sdpa_dropout"] == [0.4]
    with torch.no_grad():
        probs = model.eval()(x).numpy()
        model.train()
        torch.manual_seed(0)
        torch_out = model(x).numpy()
    np.testing.assert_allclose(_run(ported.eval(), x), probs, rtol=1e-5, atol=1e-6)
    ported.train()
    mx.random.seed(0)
    for out in (_run(ported, x), torch_out):
        assert abs(np.mean(out == 0) - 0.4) < 0.03
        kept = out != 0
        np.testing.assert_allclose(out[kept], probs[kept] / 0.6, rtol=1e-4, atol=1e-6)


def test_a_submodule_in_eval_keeps_its_dropout_off():
    """``ported.train(); ported.attn.eval()`` as torch's ``model.train(); model.attn.eval()``: the functional
    dropout inside follows its module (the nearest holder in the tree)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = M.BartAttention(8, 2, dropout=0.5)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.attn(x))

    torch.manual_seed(0)
    model = Net()
    x = _x((2, 5, 8))
    ported = _convert(model, x)
    ported.train()
    ported.attn.eval()
    with torch.no_grad():
        want = model.eval()(x).numpy()
    np.testing.assert_allclose(_run(ported, x), want, rtol=1e-5, atol=1e-5)
    ported.attn.train()
    assert not np.allclose(_run(ported, x), want, atol=1e-4)


STILL_REFUSED = [
    ("dropout_imported_by_name", "from torch.nn.functional import dropout"),
    ("inplace_dropout", "inplace"),
]


def _refused_module(kind):
    from torch.nn.functional import dropout

    class ByName(nn.Module):
        def forward(self, x):
            return dropout(x, 0.3, self.training)

    class InPlace(nn.Module):
        def forward(self, x):
            return F.dropout(x * 1, 0.3, self.training, inplace=True)

    return {"dropout_imported_by_name": ByName, "inplace_dropout": InPlace}[kind]()


@pytest.mark.parametrize("case", STILL_REFUSED, ids=[c[0] for c in STILL_REFUSED])
def test_what_cannot_be_rerouted_stays_refused(case):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), _refused_module(case[0]))
    ported = _convert(model, _x((4, 6)))
    assert set(ported.train_refusals) == {"1"}
    with pytest.raises(porter.TrainModeError):
        ported.train()


def test_torchscript_drop_path_stays_refused():
    model = torch.jit.script(Branch(M.DropPath(0.3)).eval())
    ported = porter.convert(model, (_x((2, 4, 5, 5)),), io_layout="torch")
    assert set(ported.train_refusals) == {"drop"}
    with pytest.raises(porter.TrainModeError, match="DropPath"):
        ported.train()


# ---------------------------------------------------------------------------------------------------- state
def test_torch_is_left_as_it_was_even_when_the_capture_fails():
    model = Branch(M.DropPath(0.3))
    rng = torch.get_rng_state()
    dropout, sdpa = F.dropout, F.scaled_dot_product_attention
    _convert(model, _x((2, 4, 5, 5)))
    assert torch.equal(rng, torch.get_rng_state())
    assert F.dropout is dropout and F.scaled_dot_product_attention is sdpa
    assert "forward" not in model.drop.__dict__ and not model.training

    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = M.DropPath(0.3)
            self.attn = M.BartAttention(8, 2, dropout=0.2)

        def forward(self, x):
            y = self.attn(self.drop(x))
            return y[y > 0]  # a value-sized output: the capture fails

    model = Broken()
    with pytest.raises(Exception):
        _convert(model, _x((2, 5, 8)))
    assert F.dropout is dropout and F.scaled_dot_product_attention is sdpa
    assert "forward" not in model.drop.__dict__
    with torch.no_grad():
        model.train()
        torch.manual_seed(0)
        assert (model.drop(torch.ones(64, 3)) == 0).any()  # torch's own module trains as before


def test_save_load_round_trip_trains(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(M.Block(8, 2, attn_drop=0.5, drop_path=0.5), M.BartAttention(8, 2, dropout=0.4))
    x = _x((4, 5, 8))
    porter.save(_convert(model, x), tmp_path / "m")
    graph = json.loads((tmp_path / "m" / "graph.json").read_text())
    assert graph["format_version"] >= 6 and "train_refusals" not in graph  # a new conversion: the current version
    loaded = porter.load(tmp_path / "m")
    assert isinstance(loaded["0"].drop_path1, PortStochasticDepth) and loaded["0"].drop_path1.p == 0.5
    with torch.no_grad():
        want = model.eval()(x).numpy()
    np.testing.assert_allclose(_run(loaded, x), want, rtol=1e-5, atol=1e-5)
    loaded.train()
    mx.random.seed(0)
    assert not np.allclose(_run(loaded, x), want, atol=1e-4)
    loaded.eval()
    np.testing.assert_allclose(_run(loaded, x), want, rtol=1e-5, atol=1e-5)
    graph["modules"]["0.drop_path1"]["config"]["mode"] = "column"  # a crafted file: refused by the schema
    (tmp_path / "m" / "graph.json").write_text(json.dumps(graph))
    with pytest.raises(porter.ArtifactError, match="mode"):
        porter.load(tmp_path / "m")
