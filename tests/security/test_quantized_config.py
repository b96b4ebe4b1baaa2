"""A quantized layer's recorded ``bits``/``group_size``/``mode`` that disagree with its packed weights, or that MLX
does not support, are refused at load naming graph.json, the layer's path and the fields (session 15).

Before: a value the schema allows (``bits`` 1 to 8, ``group_size`` up to 4096) but MLX's ``quantize`` refuses
(``bits`` 7, ``group_size`` 16, ``mxfp8`` with 4 bits, ``nvfp4`` with group 32) surfaced as MLX's own message,
``[quantize] The requested number of bits 7 is not supported``, naming no layer and no field.
"""

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest

import porter
from porter.converters import ArtifactError
from tests.security.attack_helpers import quantized_artifact


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """A 4-bit port (a quantized 1x1 conv at '0', quantized Linear layers at '3' and '5') and its torch model."""
    directory, ported, _ = quantized_artifact(tmp_path_factory)
    return directory, ported


def _tampered(quantized, tmp_path, path, **fields):
    directory = tmp_path / "t-mlx"
    shutil.copytree(quantized[0], directory)
    graph = json.loads((directory / "graph.json").read_text())
    graph["modules"][path]["config"].update(fields)
    (directory / "graph.json").write_text(json.dumps(graph))
    return directory


REFUSED = {  # MLX's quantize refuses these; the schema cannot know which combinations it takes
    "7 bits": ("3", {"bits": 7}, ["bits=7"]),
    "group of 16 (affine)": ("3", {"group_size": 16}, ["group_size=16"]),
    "mxfp8 with 4 bits": ("3", {"mode": "mxfp8"}, ["mode='mxfp8'", "bits=4"]),
    "nvfp4 with group 32": ("5", {"mode": "nvfp4"}, ["mode='nvfp4'", "group_size=32"]),
    "conv with 3 bits": ("0", {"bits": 3}, ["bits=3"]),
    "conv in mxfp4": ("0", {"mode": "mxfp4"}, ["mode='mxfp4'"]),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_unsupported_quantization_names_layer_and_field(quantized, tmp_path, case):
    path, fields, words = REFUSED[case]
    directory = _tampered(quantized, tmp_path, path, **fields)
    with pytest.raises(ArtifactError) as info:
        porter.load(directory)
    message = str(info.value)
    assert "graph.json" in message and f"layer at {path!r}" in message, message
    for word in words:
        assert word in message, (word, message)


DISAGREEING = {  # supported values whose packed weight, scales or biases have other shapes
    "8 bits over a 4-bit weight": ("3", {"bits": 8}, "'3.weight' has shape (64, 64)"),
    "2 bits over a 4-bit weight": ("5", {"bits": 2}, "'5.weight' has shape (10, 8)"),
    "group of 64 over groups of 32": ("3", {"group_size": 64}, "'3.scales' has shape (64, 16)"),
    "in_features off": ("3", {"in_features": 1024}, "'3.weight' has shape (64, 64)"),
    "mxfp4 over affine scales": ("3", {"mode": "mxfp4"}, "'3.scales' has dtype"),
}


@pytest.mark.parametrize("case", DISAGREEING, ids=list(DISAGREEING))
def test_config_disagreeing_with_the_packed_weight_is_refused(quantized, tmp_path, case):
    path, fields, words = DISAGREEING[case]
    directory = _tampered(quantized, tmp_path, path, **fields)
    with pytest.raises(ArtifactError, match="graph.json") as info:
        porter.load(directory)
    assert words in str(info.value) and f"at {path!r}" in str(info.value), str(info.value)


def test_untampered_quantized_port_loads_and_matches(quantized):
    directory, ported = quantized
    x = mx.random.normal((2, 4, 4, 32), key=mx.random.key(3))
    np.testing.assert_array_equal(np.array(porter.load(directory)(x)), np.array(ported(x)))
