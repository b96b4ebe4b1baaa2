"""Weights whose dtype or sizes the graph records consistently but no layer can take (session 13).

A crafted artifact can keep ``graph.json`` and the safetensors header in agreement with each other and still lie
about what the model computes: a quantized layer's float ``scales`` stored as int32 loaded and ran, giving outputs
~1e11 off without an error; a packed uint32 weight stored as float32 failed only when called; an empty tensor
declaring a dim past MLX's int32 sizes raised a bare ``OverflowError`` from ``mx.array``. Each must be refused at
load with one :class:`ArtifactError` naming the file, and an untampered artifact still load and match torch.
"""

import json
import shutil
import struct

import mlx.core as mx
import numpy as np
import pytest

import porter
from porter.converters import ArtifactError
from tests.security.attack_helpers import quantized_artifact


def _header(path):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def _write(path, header, payload):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + payload)


def _retype(directory, name, stored, recorded):
    """Store tensor ``name`` as safetensors dtype ``stored`` (same bytes) and record it as ``recorded`` in
    graph.json: the two files agree, as a crafted artifact would make them."""
    header, payload = _header(directory / "model.safetensors")
    header[name]["dtype"] = stored
    _write(directory / "model.safetensors", header, payload)
    graph = json.loads((directory / "graph.json").read_text())
    graph["params"][name]["dtype"] = recorded
    (directory / "graph.json").write_text(json.dumps(graph))


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """A 4-bit port (a quantized 1x1 conv and two quantized Linear layers) and its float torch model."""
    directory, _, model = quantized_artifact(tmp_path_factory)
    return directory, model


@pytest.fixture
def copy(quantized, tiny_artifact, tmp_path):
    def make(which):
        directory = tmp_path / which
        shutil.copytree(quantized[0] if which == "quantized" else tiny_artifact[0], directory)
        return directory
    return make


RETYPED = {
    "quantized scales as int32": ("quantized", "3.scales", "I32", "int32", "floating"),
    "quantized biases as uint32": ("quantized", "5.biases", "U32", "uint32", "floating"),
    "packed weight as float32": ("quantized", "3.weight", "F32", "float32", "uint32"),
    "packed weight as int32": ("quantized", "0.weight", "I32", "int32", "uint32"),
    "batch norm statistics as int32": ("tiny", "bn1.running_var", "I32", "int32", "floating"),
    "conv weight as int32": ("tiny", "conv1.weight", "I32", "int32", "floating"),
}


@pytest.mark.parametrize("case", sorted(RETYPED))
def test_array_of_another_kind_than_its_layer_refused(case, copy):
    which, name, stored, recorded, needed = RETYPED[case]
    directory = copy(which)
    _retype(directory, name, stored, recorded)
    with pytest.raises(ArtifactError) as info:
        porter.load(directory)
    message = str(info.value)
    assert "graph.json" in message and name in message and recorded in message and needed in message, message


def test_quantized_mode_whose_scales_are_another_dtype_refused(copy):
    """mxfp4 scales are uint8: an affine layer relabelled mxfp4 failed only when called."""
    directory = copy("quantized")
    graph = json.loads((directory / "graph.json").read_text())
    graph["modules"]["3"]["config"]["mode"] = "mxfp4"
    (directory / "graph.json").write_text(json.dumps(graph))
    with pytest.raises(ArtifactError, match="uint8"):
        porter.load(directory)


@pytest.mark.parametrize("size", [(1 << 31), 1 << 40])
def test_empty_tensor_with_a_dim_past_int32_refused(copy, size):
    """Zero elements pass every byte count, so only the dim's range can refuse it."""
    directory = copy("tiny")
    header, payload = _header(directory / "model.safetensors")
    header["evil"] = {"dtype": "F32", "shape": [0, size], "data_offsets": [0, 0]}
    _write(directory / "model.safetensors", header, payload)
    graph = json.loads((directory / "graph.json").read_text())
    graph["params"]["evil"] = {"transform": "identity", "attrs": {}, "trainable": False, "torch_shape": [0, size],
                               "dtype": "float32"}
    (directory / "graph.json").write_text(json.dumps(graph))
    with pytest.raises(ArtifactError) as info:  # was OverflowError from mx.array
        porter.load(directory)
    assert "graph.json" in str(info.value) and "torch_shape" in str(info.value), str(info.value)
    graph["params"]["evil"]["torch_shape"] = [0, 1]  # the header alone lies: refused by its reader, naming it
    (directory / "graph.json").write_text(json.dumps(graph))
    with pytest.raises(ArtifactError) as info:
        porter.load(directory)
    assert "model.safetensors" in str(info.value) and "shape" in str(info.value), str(info.value)


def test_half_precision_and_quantized_ports_still_load_and_match(quantized, tiny_artifact, tmp_path):
    """Another floating dtype than the constructor's (a float16 port) is no other kind: it loads."""
    import torch

    directory, model = tiny_artifact
    half = porter.load(directory).astype("float16")
    porter.save(half, tmp_path / "half")
    x = torch.randn(2, 3, 16, 12)
    with torch.no_grad():
        expected = model(x).numpy()
    got = np.array(porter.load(tmp_path / "half")(mx.array(x.permute(0, 2, 3, 1).numpy()).astype(mx.float16)))
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=2e-2, atol=2e-2)

    qdir, qmodel = quantized
    xq = torch.randn(3, 32, 4, 4)
    with torch.no_grad():
        qexpected = qmodel(xq).numpy()
    qgot = np.array(porter.load(qdir)(mx.array(xq.permute(0, 2, 3, 1).numpy())))
    assert np.abs(qgot - qexpected).max() < 0.2 * np.abs(qexpected).max()  # 4-bit: close, not exact
