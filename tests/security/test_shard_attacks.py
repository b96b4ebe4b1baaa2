"""Crafted shard indexes, shards and config.json: ``porter.load`` refuses each with one ArtifactError naming the
file, before any array is built, from a local folder and from a Hub repo id (the cache snapshot gets the same
checks). Each case edits a real sharded artifact of the small test model."""

import json
import os
import shutil

import pytest
import torch

import porter
from tests.hub_helpers import hub_net, populate_cache, read_header, write_header
from porter.converters import ArtifactError
from porter.converters import shards

INDEX = "model.safetensors.index.json"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    model = hub_net()
    directory = tmp_path_factory.mktemp("sharded") / "art"
    # two shards of several tensors each
    porter.save(porter.convert(model, torch.randn(2, 3, 9, 7)), directory, max_shard_size=1000)
    assert len(_shards(directory)) == 2
    return directory


@pytest.fixture
def copy(sharded, tmp_path):
    directory = tmp_path / "art"
    shutil.copytree(sharded, directory)
    return directory


def _shards(directory):
    return sorted(n for n in os.listdir(directory) if n.startswith("model-"))


def _edit_index(directory, edit):
    path = directory / INDEX
    index = json.loads(path.read_text())
    edit(index)
    path.write_text(json.dumps(index))


def _first_tensor(index, shard_number=1):
    suffix = f"model-{shard_number:05d}-"
    return next(n for n, f in index["weight_map"].items() if f.startswith(suffix))


def _set_all(value):
    def edit(index):
        name = _first_tensor(index)
        index["weight_map"][name] = value
    return edit


# name -> (edit of the parsed index, file named in the error, words of the error)
INDEX_CASES = {
    "parent directory": (_set_all("../model-00001-of-00004.safetensors"), INDEX, "no '/', '..'"),
    "absolute path": (_set_all("/etc/passwd.safetensors"), INDEX, "no '/', '..'"),
    "sub folder": (_set_all("sub/model.safetensors"), INDEX, "no '/', '..'"),
    "backslash": (_set_all("..\\model.safetensors"), INDEX, "no '/', '..'"),
    "dot dot": (_set_all(".."), INDEX, "not the name of a .safetensors file"),
    "not safetensors": (_set_all("graph.json"), INDEX, "not the name of a .safetensors file"),
    "not a string": (_set_all(["model-00001-of-00004.safetensors"]), INDEX, "not the name"),
    "shard missing": (_set_all("model-00009-of-00009.safetensors"), INDEX, "not in the folder"),
    "weight_map not an object": (lambda i: i.update(weight_map=[]), INDEX, "weight_map"),
    "empty weight_map": (lambda i: i.update(weight_map={}), INDEX, "lists no tensor"),
    "unknown key": (lambda i: i.update(extra_files=["x"]), INDEX, "unknown key"),
    "metadata not an object": (lambda i: i.update(metadata=[]), INDEX, "metadata"),
    "total_size wrong": (lambda i: i["metadata"].update(total_size=i["metadata"]["total_size"] + 4), INDEX,
                         "total_size"),
    "total_size a string": (lambda i: i["metadata"].update(total_size="1"), INDEX, "total_size"),
    "total_size a bool": (lambda i: i["metadata"].update(total_size=True), INDEX, "total_size"),
    "a parameter in no shard": (lambda i: i["weight_map"].pop(_first_tensor(i)), "model-00001-", "not listed"),
    "a tensor in no shard": (lambda i: i["weight_map"].update(extra=next(iter(i["weight_map"].values()))), INDEX,
                             "does not hold it"),
}


@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_hostile_index(copy, case):
    edit, file, words = INDEX_CASES[case]
    _edit_index(copy, edit)
    with pytest.raises(ArtifactError) as info:
        porter.load(copy)
    assert file in str(info.value) and words in str(info.value), str(info.value)


def test_tensor_listed_in_the_wrong_shard(copy):
    """The index says shard 2 holds a tensor that shard 1 holds: listed in two places, held in one."""
    names = _shards(copy)
    _edit_index(copy, lambda i: i["weight_map"].update({_first_tensor(i): names[1]}))
    with pytest.raises(ArtifactError, match=names[0] + ".*not listed for this shard"):
        porter.load(copy)


def test_tensor_held_by_two_shards(copy):
    """A second shard carries a copy of a tensor of the first: the copy is listed nowhere for that shard."""
    names = _shards(copy)
    first, _ = read_header(copy / names[0])
    name = next(n for n in first if n != "__metadata__")
    a_header, a_body = read_header(copy / names[0])
    b_header, b_body = read_header(copy / names[1])
    begin, end = a_header[name]["data_offsets"]
    b_header[name] = {**a_header[name], "data_offsets": [len(b_body), len(b_body) + end - begin]}
    write_header(copy / names[1], b_header, b_body + a_body[begin:end])
    with pytest.raises(ArtifactError, match=names[1] + ".*not listed for this shard"):
        porter.load(copy)


def test_tensor_listed_twice_in_the_json(copy):
    """Duplicate keys: JSON parsers keep the last one silently; the index is refused instead."""
    path = copy / INDEX
    text = path.read_text()
    name = next(iter(json.loads(text)["weight_map"]))
    other = _shards(copy)[-1]
    path.write_text(text.replace('"weight_map": {', f'"weight_map": {{"{name}": "{other}", ', 1))
    with pytest.raises(ArtifactError, match=INDEX + ".*twice"):
        porter.load(copy)


@pytest.mark.parametrize("extra", ["model.safetensors", "model-00009-of-00009.safetensors", "evil.safetensors"])
def test_unlisted_weights_file(copy, extra):
    shutil.copyfile(copy / _shards(copy)[0], copy / extra)
    with pytest.raises(ArtifactError, match=f"{extra}.*does not list"):
        porter.load(copy)


def test_single_file_artifact_with_a_stray_shard(tmp_path):
    porter.save(porter.convert(hub_net(), torch.randn(2, 3, 9, 7)), tmp_path)
    shutil.copyfile(tmp_path / "model.safetensors", tmp_path / "model-00001-of-00002.safetensors")
    with pytest.raises(ArtifactError, match="model-00001-of-00002.safetensors.*does not list"):
        porter.load(tmp_path)


def test_shard_with_wrong_shape(copy):
    name = _shards(copy)[0]
    header, body = read_header(copy / name)
    tensor = next(n for n in header if n != "__metadata__" and len(header[n]["shape"]) == 4)
    header[tensor]["shape"] = list(reversed(header[tensor]["shape"]))  # torch's layout instead of MLX's
    write_header(copy / name, header, body)
    with pytest.raises(ArtifactError, match=f"{name}.*shape"):
        porter.load(copy)


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"weight_map": 1}', b"\xff\xfe", b"[" * 100000])
def test_index_not_an_index(copy, content):
    (copy / INDEX).write_bytes(content)
    with pytest.raises(ArtifactError, match=INDEX):
        porter.load(copy)


def test_index_too_large_or_not_a_file(copy, monkeypatch):
    monkeypatch.setattr(shards, "MAX_INDEX_BYTES", 100)
    with pytest.raises(ArtifactError, match=INDEX + ".*bytes"):
        porter.load(copy)
    monkeypatch.undo()
    os.remove(copy / INDEX)
    os.mkfifo(copy / INDEX)  # would hang a plain open()
    with pytest.raises(ArtifactError, match=INDEX + ".*not a regular file"):
        porter.load(copy)


# ------------------------------------------------------------------------------------------------ config.json
CONFIG_CASES = {
    "not json": (lambda c: "{oops", "not valid JSON"),
    "not an object": (lambda c: "[1]", "not a JSON object"),
    "bad quantization bits": (lambda c: json.dumps({**c, "quantization": {"group_size": 64, "bits": 7}}), "bits"),
    "quantization a list": (lambda c: json.dumps({**c, "quantization": [4]}), "quantization"),
    "quantization_config differs": (lambda c: json.dumps({**c, "quantization": {"group_size": 64, "bits": 4},
                                                          "quantization_config": {"group_size": 32, "bits": 4}}),
                                    "quantization_config"),
    "io_layout disagrees": (lambda c: json.dumps({**c, "io_layout": "torch"}), "io_layout"),
    "format version": (lambda c: json.dumps({**c, "porter_format_version": 1}), "porter_format_version"),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_hostile_config(copy, case):
    make, words = CONFIG_CASES[case]
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(make(config))
    with pytest.raises(ArtifactError) as info:
        porter.load(copy)
    assert "config.json" in str(info.value) and words in str(info.value), str(info.value)


# ------------------------------------------------------------------------------------------------ via the Hub
@pytest.mark.parametrize("case", ["parent directory", "total_size wrong", "unlisted"])
def test_hub_snapshot_gets_the_same_checks(copy, tmp_path, monkeypatch, case):
    from huggingface_hub import constants

    if case == "unlisted":
        shutil.copyfile(copy / _shards(copy)[0], copy / "model.safetensors")
    else:
        _edit_index(copy, INDEX_CASES[case][0])
    populate_cache(str(tmp_path / "hub"), "stranger/model", str(copy))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ArtifactError) as info:
        porter.load("stranger/model")
    assert "models--stranger--model" in str(info.value), str(info.value)  # names the cached file
