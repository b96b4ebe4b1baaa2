"""A mapped layer holds exactly the arrays its recorded config makes (session 14).

Before: an array in graph.json's ``params`` (and the weights) under a mapped layer was attached to it silently. A
``bias`` on a conv recorded ``bias: false`` was then added by MLX's conv (``"bias" in self``): the port computed
something other than its card says, with no error. Each case edits a real artifact (TinyNet) in both files, so
the weights file and graph.json agree and only the layer check can catch it.
"""

import json

import mlx.core as mx
import numpy as np
import pytest

import porter
from porter.converters import ArtifactError

from .test_artifact_attacks import _header, _write_safetensors


def _add_array(directory, name, shape, trainable=True):
    """``name`` (float32 ones of ``shape``) recorded in graph.json's params and stored in the weights."""
    graph_path = directory / "graph.json"
    graph = json.loads(graph_path.read_text())
    graph["params"][name] = {"transform": "identity", "attrs": {}, "torch_shape": list(shape), "trainable": trainable,
                             "dtype": "float32"}
    graph_path.write_text(json.dumps(graph))
    path = directory / "model.safetensors"
    header, payload = _header(path)
    meta = header.pop("__metadata__", None)
    data = np.ones(shape, np.float32).tobytes()
    header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [len(payload), len(payload) + len(data)]}
    if meta is not None:
        header["__metadata__"] = meta
    _write_safetensors(path, header, payload + data)


CASES = {
    # (array, shape, what the message names)
    "bias on a conv recorded without one": ("conv2.bias", (8,), ["conv2", "conv2.bias", "does not make"]),
    "an array no layer makes, on a linear": ("fc.evil", (5,), ["'fc'", "fc.evil", "no node of the program reads"]),
    "an extra buffer on a batch norm": ("bn1.shadow_mean", (8,), ["'bn1'", "bn1.shadow_mean"]),
    "a child the conv does not build": ("conv1.hidden.weight", (8,), ["'conv1'", "hidden", "conv1.hidden.weight"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_array_a_layer_does_not_make_is_refused(case, tampered):
    name, shape, names = CASES[case]
    directory = tampered()
    _add_array(directory, name, shape)
    with pytest.raises(ArtifactError) as info:
        porter.load(directory)
    message = str(info.value)
    assert "graph.json" in message, message
    for part in names:
        assert part in message, (part, message)


@pytest.mark.parametrize("kind, config, extra", [
    ("Linear", {"in_features": 4, "out_features": 3, "bias": False}, {"bias": (3,)}),
    ("LayerNorm", {"normalized_shape": [4], "eps": 1e-5, "elementwise_affine": True, "bias": False}, {"bias": (4,)}),
    ("BatchNorm", {"num_features": 4, "eps": 1e-5, "momentum": 0.1, "affine": False, "track_running_stats": True},
     {"weight": (4,), "bias": (4,)}),
])
def test_attached_array_would_change_the_layer(kind, config, extra):
    """The attack is real: the arrays refused above, attached to a layer built from such a record, change what
    it computes (MLX's layers use a ``bias``/``weight`` whenever one is present), so the refusal is what keeps a
    port computing what its card says."""
    from porter.converters.layer_types import build

    layer = build(kind, config)
    layer.eval()
    x = mx.array(np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32))
    before = np.array(layer(x))
    for name, shape in extra.items():
        layer[name] = mx.full(shape, 2.0)
    assert not np.allclose(np.array(layer(x)), before)


def test_layer_missing_an_array_is_refused(tampered):
    def edit(graph):
        graph["modules"]["conv2"]["config"]["bias"] = True  # the config asks for a bias the weights lack
    directory = tampered(edit)
    with pytest.raises(ArtifactError) as info:
        porter.load(directory)
    message = str(info.value)
    assert "graph.json" in message and "'conv2'" in message and "bias" in message, message


def test_untampered_artifact_loads(tiny_artifact):
    import torch

    directory, model = tiny_artifact
    ported = porter.load(directory)
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    expected = model(torch.from_numpy(x)).detach().numpy()
    got = np.array(ported(mx.array(x.transpose(0, 2, 3, 1))))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
