"""A half port's version-6 records under attack (session 17): ``dtype_follows`` (node outputs whose float32 dtype a
half port follows) and ``float32_constants`` (constants it keeps float32), against the weights file. A name listed
twice was accepted (Porter writes each from a set); a constant the file keeps float32 but whose array is stored in
another dtype, or recorded so, is refused naming the file and the name."""

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter import ArtifactError


class HalfRecords(nn.Module):
    """A folded float32 constant (``float32_constants``) applied to an upcast result cast back to the input's dtype
    (``dtype_follows``)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        scale = torch.exp(torch.arange(4, dtype=torch.float32) / 4)
        return (self.fc(x).float() * scale).to(x.dtype) + x


@pytest.fixture(scope="module")
def half_artifact(tmp_path_factory):
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("half") / "half-mlx"
    porter.save(porter.convert(HalfRecords().eval(), torch.randn(2, 4), dtype="float16"), directory)
    graph = json.loads((directory / "graph.json").read_text())
    assert graph["dtype_follows"] and graph["float32_constants"] == ["_folded_exp"]
    return directory


def _copy(half_artifact, tmp_path, edit_graph=None, edit_arrays=None):
    directory = tmp_path / "t-mlx"
    shutil.copytree(half_artifact, directory)
    if edit_graph is not None:
        graph = json.loads((directory / "graph.json").read_text())
        edit_graph(graph)
        (directory / "graph.json").write_text(json.dumps(graph))
    if edit_arrays is not None:
        arrays, metadata = mx.load(str(directory / "model.safetensors"), return_metadata=True)
        edit_arrays(arrays)
        mx.save_safetensors(str(directory / "model.safetensors"), arrays, metadata)
    return directory


@pytest.mark.parametrize("key", ["dtype_follows", "float32_constants"])
def test_a_name_listed_twice_is_refused(half_artifact, tmp_path, key):
    directory = _copy(half_artifact, tmp_path, lambda g: g[key].append(g[key][0]))
    with pytest.raises(ArtifactError, match="listed twice") as info:
        porter.load(directory)
    assert info.value.field == f"{key}[{len(json.loads((half_artifact / 'graph.json').read_text())[key])}]"


def test_a_float32_constant_stored_in_half_is_refused(half_artifact, tmp_path):
    """The array in the weights file disagrees with the float32 the graph records for it."""
    directory = _copy(half_artifact, tmp_path, edit_arrays=lambda a: a.update(
        _folded_exp=a["_folded_exp"].astype(mx.float16)))
    with pytest.raises(ArtifactError, match="stored as F16 but graph.json records float32") as info:
        porter.load(directory)
    assert info.value.file.endswith("model.safetensors") and "_folded_exp" in info.value.where


def test_a_float32_constant_recorded_in_half_is_refused(half_artifact, tmp_path):
    """Recorded and stored float16 (consistent with each other), still listed as kept in float32."""

    def edit(graph):
        graph["params"]["_folded_exp"]["dtype"] = "float16"

    directory = _copy(half_artifact, tmp_path, edit, lambda a: a.update(_folded_exp=a["_folded_exp"].astype(
        mx.float16)))
    with pytest.raises(ArtifactError, match="'_folded_exp' is not a float32 parameter") as info:
        porter.load(directory)
    assert info.value.field == "float32_constants[0]"


def test_the_untouched_half_artifact_loads(half_artifact):
    out = porter.load(half_artifact)(mx.ones((2, 4), dtype=mx.float16))
    assert out.dtype == mx.float16 and out.shape == (2, 4)


@pytest.mark.parametrize("stored", [mx.float32, mx.float16])
@pytest.mark.parametrize("recorded", ["float32", "bfloat16"])
def test_a_floating_parameter_outside_the_port_dtype_and_unlisted_is_refused(half_artifact, tmp_path, recorded,
                                                                             stored):
    """``fc.weight`` recorded (and stored) in another floating dtype than the port's float16 and not listed in
    ``float32_constants``. Before (session 18): it loaded and the Linear ran in float32 (autocast's rule casts only
    the input), a mixed-precision model torch's ``model.half()`` never computes. Refused, naming the parameter."""
    target = {"float32": mx.float32, "bfloat16": mx.bfloat16}[recorded]

    def edit(graph):
        graph["params"]["fc.weight"]["dtype"] = recorded

    directory = _copy(half_artifact, tmp_path, edit, lambda a: a.update(**{"fc.weight": a["fc.weight"].astype(
        stored).astype(target)}))
    with pytest.raises(ArtifactError, match=f"a float16 port .* records this parameter as {recorded}") as info:
        porter.load(directory)
    assert info.value.file.endswith("graph.json") and info.value.where == "params['fc.weight']"
    assert info.value.field == "dtype"


def test_the_half_port_computes_torchs_half_model(half_artifact):
    """The untouched file, against torch's own float16 model (the seeded weights of the fixture's conversion)."""
    torch.manual_seed(0)
    model = HalfRecords().eval()
    x = torch.randn(2, 4)
    out = porter.load(half_artifact)(mx.array(x.numpy()).astype(mx.float16))
    expected = model.half()(x.half()).float().detach().numpy()
    np.testing.assert_allclose(np.array(out.astype(mx.float32)), expected, rtol=2e-3, atol=2e-3)
