"""Training-mode differences a port cannot compute are refused by name, never run silently in their eval form.

Conversion captures the eval forward; a module whose torch training forward differs in a way the port does not
reproduce (random noise added ``if self.training``, a branch on ``self.training`` that writes a buffer, a
``F.dropout`` written in place, ...) makes ``ported.train()`` raise :class:`porter.TrainModeError` naming it, while
eval stays exact. (Stochastic depth and functional dropout that follows the flag train:
``test_train_mode_droppath.py``; a deterministic branch on ``self.training`` trains through a training-mode capture:
``test_train_mode_graph.py``.) Torch, in each test,
shows that the module's training forward differs (or does not, for the cases that must train)."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from porter.converters.schema import ArtifactError


class GaussianNoise(nn.Module):
    """Noise added in training only (``if self.training``): a random op the port has no training form of."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if self.p == 0.0 or not self.training:
            return x
        return x + torch.randn_like(x) * self.p


class FunctionalDropout(nn.Module):
    """``F.dropout`` written in place: the port cannot write into its input (the caller may read it again)."""

    def forward(self, x):
        return F.dropout(x * 1, 0.3, self.training, inplace=True)


class TrainBranch(nn.Module):
    """A forward whose Python branch on ``self.training`` torch.export resolves to the eval side (captured again in
    training mode)."""

    def forward(self, x):
        return x * 2 if self.training else x


class CountingBranch(nn.Module):
    """A branch on ``self.training`` that also counts its training calls in a buffer: state a capture cannot write."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        if not self.training:
            return x
        self.calls.add_(1)
        return x * 2


class Attention(nn.Module):
    def __init__(self, dropout: float, masked: bool):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, dropout=dropout, batch_first=True)
        self.masked = masked

    def forward(self, x):
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1) if self.masked else None
        return self.attn(x, x, x, need_weights=False, attn_mask=mask)[0]


class Recurrent(nn.Module):
    def __init__(self, dropout: float):
        super().__init__()
        self.lstm = nn.LSTM(8, 8, 2, dropout=dropout, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def _conv(*tail):
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), *tail)


IMAGE, SEQUENCE, FLAT = (2, 3, 6, 7), (2, 5, 8), (4, 6)
# (id, model factory, input shape, refused path, words the reason must hold)
REFUSED = [
    ("dropout2d_p1", lambda: _conv(nn.Dropout2d(1.0)), IMAGE, "1", "Dropout2d"),  # zeros: not the port's layer
    ("noise", lambda: _conv(GaussianNoise(0.2)), IMAGE, "1", "GaussianNoise"),
    ("functional_dropout", lambda: nn.Sequential(nn.Linear(6, 8), FunctionalDropout()), FLAT, "1",
     "FunctionalDropout"),
    ("branch_writing_state", lambda: nn.Sequential(nn.Linear(6, 8), CountingBranch()), FLAT, "1", "CountingBranch"),
    ("root_branch_writing_state", lambda: CountingBranch(), FLAT, "", "CountingBranch"),
    ("masked_attention_dropout", lambda: Attention(0.5, masked=True), SEQUENCE, "attn", "MultiheadAttention"),
    ("lstm_dropout", lambda: Recurrent(0.5), SEQUENCE, "lstm", "LSTM"),
]
# the same modules where training changes nothing, and deterministic branches: the port trains (and equals torch
# where deterministic)
ALLOWED = [
    ("dropout2d_p0", lambda: _conv(nn.Dropout2d(0.0)), IMAGE),
    ("noise_p0", lambda: _conv(GaussianNoise(0.0)), IMAGE),
    ("rrelu_fixed_slope", lambda: nn.Sequential(nn.Linear(6, 8), nn.RReLU(0.2, 0.2)), FLAT),
    ("masked_attention_no_dropout", lambda: Attention(0.0, masked=True), SEQUENCE),
    ("lstm_no_dropout", lambda: Recurrent(0.0), SEQUENCE),
    ("group_and_layer_norm", lambda: _conv(nn.GroupNorm(2, 6), nn.LayerNorm(7)), IMAGE),
    ("branch_on_training", lambda: nn.Sequential(nn.Linear(6, 8), TrainBranch()), FLAT),  # captured in training
    ("root_branch", lambda: TrainBranch(), FLAT),
]


def _x(shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _eval_matches(ported, model, x):
    with torch.no_grad():
        want = model.eval()(x).numpy()
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_training_difference_is_refused_by_name(case):
    _, factory, shape, path, words = case
    torch.manual_seed(0)
    model = factory().eval()
    x = _x(shape)
    with torch.no_grad():  # the oracle: torch's training forward is not its eval forward here
        model.train()
        torch.manual_seed(1)
        trained = model(x)
        model.eval()
        assert not torch.allclose(trained, model(x))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert path in ported.train_refusals and words in ported.train_refusals[path]
    with pytest.raises(porter.TrainModeError, match=words) as info:
        ported.train()
    assert path in info.value.refusals
    assert not ported.training  # nothing switched
    _eval_matches(ported, model, _x(shape, 1))


class RareDrop(nn.Module):
    """Rows zeroed at random in training with a tiny probability (DiT's label dropout at 10% on a small batch is
    the case found): on the probed example the training output equals the eval output."""

    def forward(self, x):
        if not self.training:
            return x
        return torch.where(torch.rand(x.shape[0], 1) < 1e-9, 0.0, x)


def test_a_random_draw_that_leaves_the_example_unchanged_is_refused():
    """The probe counts random draws: a training forward that draws where eval does not is refused, even though
    its output on the example (torch's, shown here for several seeds) is the eval output."""
    model = nn.Sequential(nn.Linear(6, 8), RareDrop()).eval()
    x = _x(FLAT)
    with torch.no_grad():
        want = model(x)
        model.train()
        for seed in range(5):
            torch.manual_seed(seed)
            assert torch.equal(model(x), want)
        model.eval()
    ported = porter.convert(model, (x,), io_layout="torch")
    assert "1" in ported.train_refusals and "RareDrop" in ported.train_refusals["1"]
    with pytest.raises(porter.TrainModeError, match="RareDrop"):
        ported.train()
    _eval_matches(ported, model, _x(FLAT, 1))


@pytest.mark.parametrize("case", ALLOWED, ids=[c[0] for c in ALLOWED])
def test_a_module_whose_training_changes_nothing_trains(case):
    _, factory, shape = case
    torch.manual_seed(0)
    model = factory().eval()
    x = _x(shape)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.train_refusals == {}
    ported.train()
    model.train()
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), want, rtol=1e-4, atol=1e-5)


def test_a_submodule_put_in_training_mode_is_refused_at_the_call():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.drop = nn.Conv2d(4, 4, 1), GaussianNoise(0.3)

        def forward(self, x):
            return x + self.drop(self.conv(x))

    model = nn.Sequential(nn.Conv2d(3, 4, 3), Block()).eval()
    x = _x(IMAGE)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert set(ported.train_refusals) == {"1.drop"}
    ported["1"].train()  # MLX's train() on a child: the refused module's nearest holder trains
    with pytest.raises(porter.TrainModeError, match="GaussianNoise"):
        ported(mx.array(x.numpy()))
    ported["1"].eval()
    ported["0"].train()  # a module elsewhere training: torch's noise module stays in eval, so may the port
    _eval_matches(ported, model, x)


def test_conversion_leaves_the_torch_model_and_random_stream_as_they_were():
    torch.manual_seed(0)
    model = _conv(nn.BatchNorm2d(6), nn.InstanceNorm2d(6, track_running_stats=True), GaussianNoise(0.5)).eval()
    x = _x(IMAGE)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    ported = porter.convert(model, (x,))
    assert set(ported.train_refusals) == {"3"}  # the instance norm trains (its statistics restored above)
    assert torch.equal(rng, torch.get_rng_state())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert not any(m.training for m in model.modules())


def test_converting_a_training_model_with_a_refused_module_fails_by_name():
    model = _conv(nn.BatchNorm2d(6), GaussianNoise(0.3)).train()
    with pytest.raises(porter.TrainModeError, match="training mode.*GaussianNoise.*model.eval"):
        porter.convert(model, (_x(IMAGE),))
    assert all(m.training for m in model.modules())  # its modes restored
    ported = porter.convert(model.eval(), (_x(IMAGE),))  # the eval port converts
    assert not ported.training


def test_mixed_modes_are_kept_module_by_module():
    """Fine-tuning with frozen batch norms (``model.train(); bn.eval()``): the port's batch norm stays in eval,
    using and keeping its running statistics, as torch's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))
    model.train()
    model[1].eval()
    x = _x(IMAGE)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.training and not ported["1"].training and ported["4"].training
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), want, rtol=1e-4, atol=1e-5)
    arrays = ported.named_arrays()
    for name, value in model.state_dict().items():
        if "running" in name:
            np.testing.assert_allclose(np.array(arrays[name]), value.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    half = ported.astype("float16")
    assert half.training and not half["1"].training


def test_refusals_survive_save_and_load(tmp_path):
    model = _conv(GaussianNoise(0.3)).eval()
    porter.save(porter.convert(model, (_x(IMAGE),)), tmp_path / "m")
    loaded = porter.load(tmp_path / "m")
    assert set(loaded.train_refusals) == {"1"}
    with pytest.raises(porter.TrainModeError, match="GaussianNoise"):
        loaded.train()
    path = tmp_path / "m" / "graph.json"
    graph = json.loads(path.read_text())
    graph["train_refusals"] = {"1": 5}
    path.write_text(json.dumps(graph))
    with pytest.raises(ArtifactError, match="train_refusals"):
        porter.load(tmp_path / "m")


def test_a_scripted_model_is_checked_too():
    """A TorchScript module: its ``if self.training`` branch is refused by its own class name (a script's code is
    not captured again in training mode); the scripted Dropout2d maps and trains."""
    model = torch.jit.script(nn.Sequential(nn.Conv2d(3, 4, 1), TrainBranch(), nn.Dropout2d(0.3)).eval())
    x = _x(IMAGE)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert set(ported.train_refusals) == {"1"} and "TrainBranch" in ported.train_refusals["1"]
    with pytest.raises(porter.TrainModeError, match="TrainBranch"):
        ported.train()
    _eval_matches(ported, model, x)
