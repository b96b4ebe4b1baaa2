"""A node's ``axis``/``axes`` attribute beyond the rank of the value it reads (session 18).

The schema bounds an axis by MLX's largest rank only. Before: every such port loaded; softmax, cumsum and concat
were refused only when called, in MLX's or the kernel's words, and a sum over axis 5 of a 3-d value ran as a sum
over axis 2 (``blocked_sum`` wrapped ``axes % ndim``): a wrong answer, no error. Now ``porter.load`` refuses each at
the example's sizes naming graph.json, the node and the field; a port without example sizes refuses it at the call
naming the node and the field. The largest valid axes (``stack``/``unsqueeze`` index their output: one more) load
and match torch.
"""

import json
import re
import shutil

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter import ArtifactError


class Axes(nn.Module):
    def forward(self, x):
        a = torch.softmax(x, dim=-1)
        b = torch.cumsum(x, dim=1)
        c = torch.cat([a, b], dim=2)
        d = torch.stack([a, b], dim=-1).sum(dim=(1, 3))
        return c.sum(dim=1) + x.unsqueeze(-1).amax(dim=(1, 3)).repeat(1, 2) + d.repeat(1, 2)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("axes") / "axes-mlx"
    porter.save(porter.convert(Axes().eval(), torch.randn(2, 3, 4)), directory)
    return directory


def _node(graph, kernel):
    return next(i for i, n in enumerate(graph["nodes"]) if n["kernel"] == kernel)


def _tampered(artifact, tmp_path, kernel, field, value, *, hint=True):
    directory = tmp_path / "t-mlx"
    shutil.copytree(artifact, directory)
    graph = json.loads((directory / "graph.json").read_text())
    index = _node(graph, kernel)
    graph["nodes"][index]["attrs"][field] = value
    if not hint:
        for spec in graph["inputs"]:
            del spec["meta"]["hint"]
    (directory / "graph.json").write_text(json.dumps(graph))
    return directory, index


# (kernel, attribute, value, field named): each out of range for the value the node reads (3-d, or 4-d: the
# first sum is over the stack)
CASES = {
    "softmax past the rank": ("softmax", "axis", 3, "attrs.axis"),
    "softmax far past": ("softmax", "axis", 7, "attrs.axis"),
    "cumsum below -rank": ("cumsum", "axis", -4, "attrs.axis"),
    "concat past the rank": ("concat", "axis", 3, "attrs.axis"),
    "sum over axis 5 (wrapped to 2 before)": ("reduce", "axes", [1, 5], "attrs.axes[1]"),
    "stack past its output's rank": ("stack", "axis", 4, "attrs.axis"),
    "unsqueeze below its output's -rank": ("unsqueeze", "axis", -5, "attrs.axis"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_axis_past_the_rank_refused_at_load(artifact, tmp_path, case):
    kernel, attr, value, field = CASES[case]
    directory, index = _tampered(artifact, tmp_path, kernel, attr, value)
    with pytest.raises(ArtifactError, match=r"is out of range for a [34]-d value") as info:
        porter.load(directory)
    assert info.value.file.endswith("graph.json") and info.value.field == field
    assert info.value.where.startswith(f"node {index} (kernel {kernel!r}")


@pytest.mark.parametrize("case", ["sum over axis 5 (wrapped to 2 before)", "softmax past the rank"])
def test_axis_past_the_rank_refused_at_the_call_without_example_sizes(artifact, tmp_path, case):
    kernel, attr, value, field = CASES[case]
    directory, index = _tampered(artifact, tmp_path, kernel, attr, value, hint=False)
    model = porter.load(directory)  # no example sizes: the ranks are known at the call
    with pytest.raises(ValueError, match=re.escape(f"node {index} (kernel {kernel!r}), field {field!r}")):
        model(mx.ones((2, 3, 4)))


# every axis the port records, written from the other end of its range: the port computes the same function
NEGATIVE = {"softmax": ("axis", -1), "cumsum": ("axis", -2), "concat": ("axis", -1), "stack": ("axis", -1),
            "reduce": ("axes", [-3, -1]), "unsqueeze": ("axis", -1)}


@pytest.mark.parametrize("kernel", sorted(NEGATIVE))
def test_the_same_axes_counted_from_the_end_load_and_match_torch(artifact, tmp_path, kernel):
    """Negative axes are accepted as torch takes them (the untouched port records the positive ones; the refused
    cases above sit one past each end of the range)."""
    directory, _ = _tampered(artifact, tmp_path, kernel, *NEGATIVE[kernel])
    x = torch.randn(2, 3, 4)
    out = porter.load(directory)(mx.array(x.numpy()))
    np.testing.assert_allclose(np.array(out), Axes()(x).numpy(), rtol=1e-5, atol=1e-5)


def test_the_untouched_port_matches_torch(artifact):
    x = torch.randn(2, 3, 4)
    out = porter.load(artifact)(mx.array(x.numpy()))
    np.testing.assert_allclose(np.array(out), Axes()(x).numpy(), rtol=1e-5, atol=1e-5)
