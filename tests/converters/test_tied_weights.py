"""Tied weights (one torch tensor under two ``state_dict`` names: an LM head sharing the embedding, two layers
sharing a weight): the port holds the tensor once, under the name torch's ``named_parameters()`` gives it, records
the other name in ``tied_weights``, and trains it as one array, as torch does.

Torch is the oracle: every comparison runs the torch model on the same data in the test.
"""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as mnn
import mlx.optimizers as optim
import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten
from torch import nn

import porter
from porter.converters import ArtifactError


class _TinyLM(nn.Module):
    """GPT-2's naming: ``lm_head.weight`` is ``wte.weight``."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(11, 8)
        self.ln = nn.LayerNorm(8)
        self.lm_head = nn.Linear(8, 11, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        return self.lm_head(torch.tanh(self.ln(self.wte(ids))))


class _SharedLinear(nn.Module):
    """Two layers, one weight, their own biases."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


CASES = {"lm": (_TinyLM, lambda n: torch.randint(0, 11, (2, n)), {"lm_head.weight": "wte.weight"}),
         "linear": (_SharedLinear, lambda n: torch.randn(3, n, 6), {"b.weight": "a.weight"})}


def _build(case):
    torch.manual_seed(0)
    cls, make_input, tied = CASES[case]
    model = cls().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5), m.bias.normal_()
    return model, make_input, tied


@pytest.mark.parametrize("case", sorted(CASES))
def test_tied_weight_held_once_under_torchs_name(case):
    model, make_input, tied = _build(case)
    port = porter.convert(model, (make_input(5),))
    assert port.tied_weights == tied
    assert {k for k, _ in tree_flatten(port.trainable_parameters())} == {n for n, _ in model.named_parameters()}
    for n in (5, 9):  # a second size
        x = make_input(n)
        np.testing.assert_allclose(np.array(port(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_training_updates_the_tied_weight_as_torch_does(case, tmp_path):
    model, make_input, _ = _build(case)
    port = porter.convert(model, (make_input(5),))
    porter.save(port, tmp_path / "m")
    port = porter.load(tmp_path / "m")  # the artifact keeps the tie too
    x = make_input(5)
    opt_t = torch.optim.SGD(model.parameters(), lr=0.5)
    opt_m = optim.SGD(learning_rate=0.5)
    for _ in range(2):
        opt_t.zero_grad()
        model(x).square().mean().backward()
        opt_t.step()
        _, grads = mnn.value_and_grad(port, lambda m: m(mx.array(x.numpy())).square().mean())(port)
        opt_m.update(port, grads)
    params = dict(tree_flatten(port.parameters()))
    for name, p in model.named_parameters():
        np.testing.assert_allclose(np.array(params[name]), p.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    restored = type(model)()  # the port's weights load back into a fresh torch model, tie included
    restored.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in port.torch_parameters().items()})
    assert restored.state_dict().keys() == model.state_dict().keys()
    y = make_input(7)
    np.testing.assert_allclose(np.array(port(mx.array(y.numpy()))), model(y).detach().numpy(), rtol=1e-4, atol=1e-5)


def _tampered(tmp_path, edit):
    model, make_input, _ = _build("lm")
    porter.save(porter.convert(model, (make_input(5),)), tmp_path / "m")
    path = tmp_path / "m" / "graph.json"
    graph = json.loads(path.read_text())
    edit(graph["tied_weights"])
    path.write_text(json.dumps(graph))
    return tmp_path / "m"


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update({"lm_head.weight": "nowhere.weight"}), "'params' does not record"),
    (lambda t: t.update({"wte.weight": "wte.weight"}), "also the name of a parameter"),
    (lambda t: t.update({"x": 3}), "tied_weights"),
])
def test_hostile_tied_weights_refused(tmp_path, edit, message):
    with pytest.raises(ArtifactError, match=message):
        porter.load(_tampered(tmp_path, edit))


@pytest.mark.parametrize("frontend", ["script", "trace"])
def test_torchscript_frontend_records_the_tie(frontend):
    model, make_input, tied = _build("lm")
    x = make_input(5)
    scripted = torch.jit.script(model) if frontend == "script" else torch.jit.trace(model, (x,))
    port = porter.convert(scripted, (x,))
    assert port.tied_weights == tied
    assert {k for k, _ in tree_flatten(port.trainable_parameters())} == {n for n, _ in model.named_parameters()}
    np.testing.assert_allclose(np.array(port(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
