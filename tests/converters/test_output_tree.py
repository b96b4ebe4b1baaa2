"""A port returns what the torch model returns: dicts (torchvision segmentation's ``{"out", "aux"}``), lists, nested
tuples, named tuples and ``None`` in place, each array equal to torch's; the nesting survives save/load; a crafted
``output_tree`` is refused.

Torch is the oracle: every comparison runs the torch model on the same data in the test.
"""

from __future__ import annotations

import collections
import json

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.converters import ArtifactError

Pair = collections.namedtuple("Pair", "low high")


class _Net(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        y = self.conv(x)
        z = self.fc(y.mean((2, 3)))
        if self.kind == "dict":
            return collections.OrderedDict(out=y, aux=torch.relu(y))
        if self.kind == "nested":
            return {"logits": z, "hidden": [y, None, (z * 2, y.sum())]}
        if self.kind == "namedtuple":
            return Pair(low=z, high=y)
        if self.kind == "tuple_of_tuples":
            return z, (y, z + 1)
        return z, y  # flat tuple: no tree recorded


def _same(port_out, torch_out, port):
    """Same nesting, and every array equal to torch's (port images come back channels-last in the mlx layout)."""
    if isinstance(torch_out, torch.Tensor):
        got = np.array(port_out)
        want = torch_out.detach().numpy()
        if got.shape != want.shape and got.ndim == 4:
            got = np.moveaxis(got, -1, 1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    elif torch_out is None:
        assert port_out is None
    elif isinstance(torch_out, dict):
        assert isinstance(port_out, dict) and list(port_out) == list(torch_out)
        for k in torch_out:
            _same(port_out[k], torch_out[k], port)
    else:
        assert type(port_out) in (tuple, list) or hasattr(port_out, "_fields")
        assert isinstance(port_out, list) == isinstance(torch_out, list) and len(port_out) == len(torch_out)
        if hasattr(torch_out, "_fields"):
            assert port_out._fields == torch_out._fields
        for p, t in zip(port_out, torch_out):
            _same(p, t, port)


@pytest.mark.parametrize("kind", ["dict", "nested", "namedtuple", "tuple_of_tuples", "flat"])
def test_outputs_nest_as_torchs(kind, tmp_path):
    torch.manual_seed(0)
    model = _Net(kind).eval()
    port = porter.convert(model, (torch.randn(2, 3, 9, 11),))
    assert ("output_tree" in port.graph) == (kind != "flat")
    porter.save(port, tmp_path / "m")
    for candidate in (port, porter.load(tmp_path / "m")):
        for shape in [(2, 3, 9, 11), (1, 3, 16, 13)]:
            x = torch.randn(*shape)
            with torch.no_grad():
                want = model(x)
            _same(candidate(mx.array(np.moveaxis(x.numpy(), 1, -1))), want, candidate)
    report = porter.validate(model, port, example_inputs=(torch.randn(2, 3, 9, 11),))
    assert report.ok, str(report)


def _tampered(tmp_path, tree):
    torch.manual_seed(0)
    model = _Net("nested").eval()
    porter.save(porter.convert(model, (torch.randn(2, 3, 9, 11),)), tmp_path / "m")
    path = tmp_path / "m" / "graph.json"
    graph = json.loads(path.read_text())
    graph["output_tree"] = tree
    path.write_text(json.dumps(graph))
    return tmp_path / "m"


@pytest.mark.parametrize("tree, message", [
    ({"tuple": [{"leaf": 0}, {"leaf": 0}, {"leaf": 1}, {"leaf": 2}]}, "outputs once, in order"),
    ({"tuple": [{"leaf": 0}, {"leaf": 1}, {"leaf": 2}]}, "outputs once, in order"),
    ({"call": "os.system"}, "unknown node kind"),
    ({"namedtuple": ["__class__", "b", "c", "d", "e"], "items": [{"leaf": i} for i in range(5)]}, "identifier field"),
    ({"dict": [["a", {"leaf": 0}], ["a", {"leaf": 1}], ["b", {"leaf": 2}], ["c", {"leaf": 3}], ["d", {"leaf": 4}]]}, "repeats a key"),
    ({"dict": [[True, {"leaf": 0}]]}, "a 'dict' entry"),
    ({"none": "yes"}, "'none' must be true"),
])
def test_crafted_output_tree_refused(tmp_path, tree, message):
    with pytest.raises(ArtifactError, match=message):
        porter.load(_tampered(tmp_path, tree))


def test_deep_output_tree_refused(tmp_path):
    tree = {"leaf": 0}
    for _ in range(40):
        tree = {"list": [tree]}
    with pytest.raises(ArtifactError, match="deeper than"):
        porter.load(_tampered(tmp_path, tree))
