"""A port whose tuple argument (a KV cache) goes by keyword lists every input inside it (session 14).

Before: ``input_keywords`` (and config.json's ``inputs[i].keyword``, the export card's ``keyword`` flag) left out
the inputs of a nested argument passed by keyword (``split_inputs`` gave it as ``past=((k, v),)``, whose tuple
``keywords()`` did not look into), so a tool building the call from them passed the cache positionally or not at
all. A wrong nesting of the loaded port's argument is a ``TypeError`` naming the element.
"""

import json

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter


class CachedStep(nn.Module):
    """``forward(x, mask=None, past=None)``: ``past`` a tuple of ``(key, value)`` per layer, ``(N, T, D)`` each,
    after a left-out ``mask``, so the port takes it by keyword."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, mask=None, past=None):
        y = self.proj(x)
        if mask is not None:
            y = y * mask
        for key, value in past:
            y = y + (key * value).sum(1, keepdim=True)
        return y


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    torch.manual_seed(0)
    model = CachedStep().eval()
    x = torch.randn(2, 1, 4)
    past = tuple((torch.randn(2, 3, 4), torch.randn(2, 3, 4)) for _ in range(2))
    directory = tmp_path_factory.mktemp("nested") / "step-mlx"
    porter.save(porter.convert(model, (x,), example_kwargs={"past": past}), directory)
    return model, porter.load(directory), directory


def test_loaded_port_lists_the_nested_keyword_inputs(cached):
    _, loaded, directory = cached
    assert loaded.call_signature == "(x, mask=None, past)"
    assert loaded.input_arguments == ["x", "past[0][0]", "past[0][1]", "past[1][0]", "past[1][1]"]
    assert loaded.input_keywords == {1: "past[0][0]", 2: "past[0][1]", 3: "past[1][0]", 4: "past[1][1]"}
    rows = json.loads((directory / "config.json").read_text())["inputs"]
    assert [row.get("keyword") for row in rows] == [None, "past[0][0]", "past[0][1]", "past[1][0]", "past[1][1]"]


def test_loaded_port_runs_its_split_call_as_torch(cached):
    model, loaded, _ = cached
    rng = np.random.default_rng(1)
    values = [rng.standard_normal(s).astype(np.float32) for s in [(2, 1, 4)] + [(2, 5, 4)] * 4]
    args, kwargs = loaded.split_inputs([mx.array(v) for v in values])
    assert len(args) == 1 and set(kwargs) == {"past"}
    t = [torch.from_numpy(v) for v in values]
    with torch.no_grad():
        expected = model(t[0], past=((t[1], t[2]), (t[3], t[4])))
    np.testing.assert_allclose(np.array(loaded(*args, **kwargs)), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_wrong_nesting_is_a_named_error(cached):
    _, loaded, _ = cached
    k = mx.zeros((2, 3, 4))
    x = mx.zeros((2, 1, 4))
    with pytest.raises(TypeError, match=r"'past' was converted as a tuple of 2 .*but got a tuple of 1"):
        loaded(x, past=((k, k),))
    with pytest.raises(TypeError, match=r"'past'\[1\]\[0\] was converted with a tensor, but got a tuple"):
        loaded(x, past=((k, k), ((k, k), k)))
    with pytest.raises(TypeError, match=r"'past'\[0\] was converted as a tuple of 2 .*but got an array"):
        loaded(x, past=(k, (k, k)))
