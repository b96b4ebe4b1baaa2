"""What ``porter.save`` writes, and how: strict JSON (non-finite constants spelled ``{"$float": ...}``, which used
to make the save itself fail), never through a symbolic link planted in the folder, and never a folder mixing an
interrupted save's files with the old ones (graph.json goes first and comes back last). And what ``porter.load``
refuses in the JSON it reads: NaN/Infinity literals and repeated keys (two readers could take different values).
"""

import json
import os
import shutil

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from porter.converters import ArtifactError
from tests.cli import tinynets


class NonFinite(torch.nn.Module):
    """-inf in a mask and a clamp bound, +inf in a constant, a NaN constant where it does not reach the output."""

    def forward(self, x):
        masked = torch.softmax(x.masked_fill(x > 0.5, float("-inf")), -1)
        clamped = torch.clamp(x, min=float("-inf"), max=0.3)
        capped = torch.full_like(x, float("inf")).clamp(max=2.0)
        nan_where_unused = torch.where(x > 100, torch.full_like(x, float("nan")), x)
        return masked + clamped + capped + nan_where_unused


def test_non_finite_constants_save_and_load(tmp_path):
    model, x = NonFinite(), torch.randn(3, 6)
    x[0, 0] = 200.0  # the NaN branch taken once: NaN where torch has it
    ported = porter.convert(model, x)
    porter.save(ported, tmp_path / "m")
    text = (tmp_path / "m" / "graph.json").read_text()
    assert '"$float": "-inf"' in text and "Infinity" not in text and "NaN" not in text
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} written"))  # strict JSON
    got = np.array(porter.load(tmp_path / "m")(mx.array(x.numpy())))
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    assert np.isnan(got[0, 0])


@pytest.fixture
def artifact(tmp_path):
    directory = tmp_path / "art"
    ported = porter.convert(tinynets.seeded(), torch.randn(1, 3, 16, 16))
    porter.save(ported, directory)
    return directory, ported


def _edit_text(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("literal, words", [("NaN", "NaN is not JSON"), ("Infinity", "Infinity is not JSON"),
                                            ("-Infinity", "Infinity is not JSON"), ("1e999", "does not fit a float")])
def test_non_standard_literals_refused(artifact, literal, words):
    directory, _ = artifact
    _edit_text(directory / "graph.json", '"num_transposes": 0', f'"num_transposes": {literal}')
    with pytest.raises(ArtifactError, match=f"graph.json.*{words}"):
        porter.load(directory)


def test_repeated_keys_refused(artifact):
    directory, _ = artifact
    graph = directory / "graph.json"
    original = graph.read_text()
    from porter.converters.schema import FORMAT_VERSION

    key = f'"format_version": {FORMAT_VERSION}'
    _edit_text(graph, key, f"{key}, {key}")
    with pytest.raises(ArtifactError, match="graph.json.*'format_version' twice"):
        porter.load(directory)
    graph.write_text(original)
    _edit_text(directory / "config.json", '"model_type": "porter"', '"model_type": "porter", "model_type": "x"')
    with pytest.raises(ArtifactError, match="config.json.*'model_type' twice"):
        porter.load(directory)


def test_repeated_tensor_in_safetensors_header_refused(artifact):
    from tests.hub_helpers import read_header

    directory, _ = artifact
    path = directory / "model.safetensors"
    header, body = read_header(path)
    raw = json.dumps(header)
    entry = json.dumps({"fc.bias": header["fc.bias"]})[1:-1]
    raw = raw[:-1] + ", " + entry + "}"  # fc.bias twice, the same bytes: which one would another reader take?
    raw = raw.encode() + b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + body)
    with pytest.raises(ArtifactError, match="model.safetensors.*'fc.bias' twice"):
        porter.load(directory)


def test_save_replaces_planted_links_instead_of_writing_through(artifact, tmp_path):
    directory, ported = artifact
    victims = {}
    for name in ("graph.json", "config.json", "README.md", "model.safetensors"):
        victim = tmp_path / f"victim-{name}"
        victim.write_text("precious")
        os.remove(directory / name)
        os.symlink(victim, directory / name)
        victims[name] = victim
    porter.save(ported, directory)
    for name, victim in victims.items():
        assert victim.read_text() == "precious", name
        assert not os.path.islink(directory / name) and os.path.isfile(directory / name)
    porter.load(directory)
    # sharded: the index too
    victim = tmp_path / "victim-index"
    victim.write_text("precious")
    os.symlink(victim, directory / "model.safetensors.index.json")
    os.remove(directory / "model.safetensors")
    porter.save(ported, directory, max_shard_size=1000)
    assert victim.read_text() == "precious" and not os.path.islink(directory / "model.safetensors.index.json")
    porter.load(directory)


def _listing(directory):
    return sorted(os.listdir(directory))


def test_interrupted_save_never_leaves_a_mixed_folder(artifact, monkeypatch):
    from porter.converters import files, shards

    directory, ported = artifact
    (directory / ".git").mkdir()  # the user's own files in the folder (a Hub clone) are left alone
    before = _listing(directory)
    old_weights = (directory / "model.safetensors").read_bytes()
    ported.fc.weight = ported.fc.weight + 1  # the new save differs from the old one

    # 1. interrupted while staging (the weights written, graph.json not yet): the old artifact is untouched and
    # loads; no temporary file is left
    real_text = files.write_temporary_text

    def interrupted(path, text):
        if path.endswith("graph.json"):
            raise KeyboardInterrupt
        return real_text(path, text)

    monkeypatch.setattr(files, "write_temporary_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        porter.save(ported, directory)
    monkeypatch.undo()
    assert _listing(directory) == before
    assert (directory / "model.safetensors").read_bytes() == old_weights
    porter.load(directory)

    # 2. interrupted in the middle of the commit: no graph.json, so nothing loads as a model
    real_commit = shards.commit_weights

    def half_commit(folder, staged):
        real_commit(folder, staged)
        raise KeyboardInterrupt

    monkeypatch.setattr(shards, "commit_weights", half_commit)
    with pytest.raises(KeyboardInterrupt):
        porter.save(ported, directory)
    monkeypatch.undo()
    assert not (directory / "graph.json").exists()
    assert not [n for n in os.listdir(directory) if ".tmp-" in n]
    with pytest.raises(FileNotFoundError, match="graph.json"):
        porter.load(directory)

    # 3. a complete save afterwards gives the new model
    porter.save(ported, directory)
    assert _listing(directory) == before
    loaded = porter.load(directory)
    np.testing.assert_array_equal(np.array(loaded.fc.weight), np.array(ported.fc.weight))
    shutil.rmtree(directory / ".git")
