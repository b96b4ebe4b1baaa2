"""The Hub-ready folder: ``porter.save`` writes config.json, a README.md model card and sharded weights with an
index past ``max_shard_size``; ``porter.load`` reads a folder or a Hub repo id (offline, from a cache folder the
test builds). Torch, run in the test, is the oracle for every loaded model."""

import json
import os
import re
import subprocess
import sys
import textwrap

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from tests.converter_check import assert_matches, run_ported
from tests.hub_helpers import hub_net, populate_cache, read_header, set_metadata
from porter.converters import ArtifactError
from porter.converters.hub_config import read_config, read_quantization
from porter.converters.shards import parse_size, plan_shards

REPO = "someone/hubnet"
SIZES = [(2, 3, 9, 7), (1, 3, 12, 12)]  # odd sizes; a second size through the dynamic dims


@pytest.fixture(scope="module")
def model():
    return hub_net()


@pytest.fixture(scope="module")
def ported(model):
    return porter.convert(model, torch.randn(*SIZES[0]))


def _assert_matches_torch(loaded, model):
    for shape in SIZES:
        assert_matches(loaded, model, (torch.randn(*shape),))


def _weights_bytes(directory):
    """name -> (file, bytes of its data) from the safetensors headers, read independently of Porter."""
    out = {}
    for file in sorted(os.listdir(directory)):
        if file.endswith(".safetensors"):
            header, _ = read_header(os.path.join(directory, file))
            for name, entry in header.items():
                if name != "__metadata__":
                    begin, end = entry["data_offsets"]
                    assert name not in out, f"{name} stored twice"
                    out[name] = (file, end - begin)
    return out


# ------------------------------------------------------------------------------------------------ shards
def test_sharded_roundtrip_matches_torch(model, ported, tmp_path):
    porter.save(ported, tmp_path / "one")
    porter.save(ported, tmp_path / "many", max_shard_size=400)
    stored = _weights_bytes(tmp_path / "many")
    files = sorted({f for f, _ in stored.values()})
    assert len(files) >= 3
    assert files == [f"model-{i:05d}-of-{len(files):05d}.safetensors" for i in range(1, len(files) + 1)]
    assert "model.safetensors" not in os.listdir(tmp_path / "many")
    for file in files:  # at most the limit, unless the shard is one tensor larger than it
        held = [size for f, size in stored.values() if f == file]
        assert sum(held) <= 400 or len(held) == 1
    index = json.loads((tmp_path / "many" / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {name: f for name, (f, _) in stored.items()}
    assert set(index["weight_map"]) == set(model.state_dict())
    assert index["metadata"]["total_size"] == sum(size for _, size in stored.values())

    loaded = porter.load(tmp_path / "many")
    _assert_matches_torch(loaded, model)
    single = porter.load(tmp_path / "one")
    x = (torch.randn(*SIZES[1]),)
    np.testing.assert_array_equal(run_ported(loaded, x)[0], run_ported(single, x)[0])


def test_saving_again_removes_stale_weight_files(ported, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    porter.save(ported, tmp_path / "out", max_shard_size=400)
    porter.save(ported, tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["README.md", "config.json", "graph.json", "model.safetensors",
                                                   "notes.txt"]
    porter.save(ported, tmp_path / "out", max_shard_size="1KB")
    names = os.listdir(tmp_path / "out")
    assert "model.safetensors" not in names and "model.safetensors.index.json" in names
    # re-shard a loaded model into the folder it came from (its arrays were read from the files being replaced)
    porter.save(porter.load(tmp_path / "out"), tmp_path / "out", max_shard_size=400)
    _assert_matches_torch(porter.load(tmp_path / "out"), hub_net())


def test_plan_shards_follows_mlx_lm_rule():
    assert plan_shards({"a": 3, "b": 3, "c": 10, "d": 1, "e": 5}, 6) == [["a", "b"], ["c"], ["d", "e"]]
    assert plan_shards({"a": 7}, 6) == [["a"]]
    assert plan_shards({}, 6) == [[]]


@pytest.mark.parametrize("text, expected", [("5GB", 5 * 10**9), ("500MiB", 500 << 20), (1000, 1000),
                                            ("1.5KB", 1500), ("2 gib", 2 << 30), ("64", 64)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-5, ValueError), ("5 parsecs", ValueError),
                                        ("", ValueError), (True, TypeError), (1.5e9, TypeError), ("0MB", ValueError)])
def test_bad_max_shard_size_is_refused_before_writing(ported, tmp_path, bad, error):
    with pytest.raises(error, match="max_shard_size"):
        porter.save(ported, tmp_path / "out", max_shard_size=bad)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ config.json
@pytest.mark.parametrize("io_layout", ["mlx", "torch"])
def test_config_describes_the_model(model, tmp_path, io_layout):
    ported = porter.convert(model, torch.randn(*SIZES[0]), io_layout=io_layout)
    porter.save(ported, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "porter" and config["architectures"] == ["HubNet"]
    assert config["source_class"].endswith("HubNet") and config["porter_version"] == porter.__version__
    assert config["io_layout"] == io_layout and config["dtype"] == "float32"
    assert config["num_parameters"] == sum(t.numel() for t in model.state_dict().values())
    (spec,) = config["inputs"]
    assert spec["dtype"] == "float32" and spec["torch_shape"][1:] == [3, 9, 7]
    assert spec["torch_dynamic_dims"] == sorted(d["axis"] for d in ported.dynamic_dims)
    assert spec["layout"] == ported.input_layouts[0]
    perm = (0, 2, 3, 1) if io_layout == "mlx" else (0, 1, 2, 3)
    assert spec["shape"] == [spec["torch_shape"][p] for p in perm]
    assert spec["dynamic_axes"] == sorted(perm.index(d) for d in spec["torch_dynamic_dims"])
    assert config["outputs"] == [{"layout": layout} for layout in ported.output_layouts]
    assert "quantization" not in config
    # the recorded shape, in the recorded layout, is what the loaded model takes
    loaded = porter.load(tmp_path)
    x = torch.randn(*spec["torch_shape"])
    y = loaded(mx.array(x.permute(*perm).numpy()))
    with torch.no_grad():
        np.testing.assert_allclose(np.array(y), model(x).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("max_shard_size", [None, 700])
def test_float64_model_dtype_and_shards(tmp_path, max_shard_size):
    """float64 weights go through safetensors.numpy (MLX cannot write F64), one file or shards."""
    model = hub_net().double()
    porter.save(porter.convert(model, torch.randn(*SIZES[0], dtype=torch.float64)), tmp_path,
                max_shard_size=max_shard_size)
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "float64"
    assert ("model.safetensors.index.json" in os.listdir(tmp_path)) == (max_shard_size is not None)
    assert {e["dtype"] for f in os.listdir(tmp_path) if f.endswith(".safetensors")
            for n, e in read_header(tmp_path / f)[0].items()
            if n != "__metadata__" and not n.endswith("num_batches_tracked")} == {"F64"}
    assert_matches(porter.load(tmp_path), model, (torch.randn(*SIZES[1], dtype=torch.float64),))


QUANT = {"group_size": 64, "bits": 4, "mode": "affine", "conv": {"group_size": 32, "bits": 8}, "fc": False,
         "dw": {"group_size": 32, "bits": 4, "mode": "mxfp4"}}


def test_quantization_block_written_and_read_back(model, ported, tmp_path):
    porter.save(ported, tmp_path, quantization=QUANT)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["quantization"] == QUANT and config["quantization_config"] == QUANT
    graph = json.loads((tmp_path / "graph.json").read_text())
    assert read_quantization(read_config(str(tmp_path), graph)) == QUANT
    assert "4-bit, group size 64, affine, 3 per-layer override(s)" in (tmp_path / "README.md").read_text()
    _assert_matches_torch(porter.load(tmp_path), model)
    porter.save(ported, tmp_path / "float")
    graph = json.loads((tmp_path / "float" / "graph.json").read_text())
    assert read_quantization(read_config(str(tmp_path / "float"), graph)) is None


@pytest.mark.parametrize("block, field", [
    ({"group_size": 64}, "bits"),
    ({"group_size": 48, "bits": 4}, "group_size"),
    ({"group_size": 64, "bits": 7}, "bits"),
    ({"group_size": 64, "bits": True}, "bits"),
    ({"group_size": 64, "bits": 4, "mode": "fp3"}, "mode"),
    ({"group_size": 64, "bits": 4, "mode": "mxfp4"}, "group_size"),
    ({"group_size": 64, "bits": 4, "fc": {"group_size": 64, "bits": 9}}, "fc.bits"),
    ({"group_size": 64, "bits": 4, "fc": {"group_size": 64, "bits": 4, "scale": 2}}, "fc.scale"),
    ({"group_size": 64, "bits": 4, "fc": "yes"}, "fc"),
    ([64, 4], ""),
])
def test_bad_quantization_block_is_refused(ported, tmp_path, block, field):
    with pytest.raises(ValueError, match="'quantization'") as info:
        porter.save(ported, tmp_path / "out", quantization=block)
    assert f"field {field!r}" in str(info.value) if field else "field" not in str(info.value)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ model card
def _front_matter(path):
    from huggingface_hub.repocard import metadata_load  # the Hub's own parser

    return metadata_load(path)


def test_model_card_front_matter_and_provenance(model, ported, tmp_path):
    report = porter.validate(model, ported, [(torch.randn(*SIZES[0]),)])
    assert report.ok
    metadata = {"porter_version": porter.__version__, "validation": report.summary(),
                "source": {"file": "hubnet.pt", "format": "torch-save", "model": "hub_helpers:hub_net"}}
    porter.save(ported, tmp_path / "a", metadata=metadata, base_model="pytorch/vision", repo_id="me/hubnet-mlx")
    card = (tmp_path / "a" / "README.md").read_text()
    assert _front_matter(tmp_path / "a" / "README.md") == {"library_name": "mlx", "tags": ["mlx", "porter"],
                                                           "base_model": "pytorch/vision"}
    assert "`" + ported.source_class + "`" in card and f"Porter version | `{porter.__version__}`" in card
    assert "`hubnet.pt` (`torch-save`)" in card and "`hub_helpers:hub_net`" in card
    assert "Result: **PASS**" in card and f"{report.summary()['max_rel_error']:.3g}" in card
    assert 'porter.load("me/hubnet-mlx")' in card

    porter.save(ported, tmp_path / "b")  # no base model, no validation: neither is made up
    card = (tmp_path / "b" / "README.md").read_text()
    assert _front_matter(tmp_path / "b" / "README.md") == {"library_name": "mlx", "tags": ["mlx", "porter"]}
    assert "Validation" not in card and 'porter.load("b")' in card


@pytest.mark.parametrize("bad", ["vision", "a/b/c", "../x", "a/b\n- evil", 3])
def test_bad_base_model_is_refused(ported, tmp_path, bad):
    with pytest.raises(ValueError, match="'base_model'"):
        porter.save(ported, tmp_path / "out", base_model=bad)
    assert not (tmp_path / "out").exists()


def test_model_card_usage_snippet_runs(model, ported, tmp_path, monkeypatch):
    porter.save(ported, tmp_path / "hubnet-mlx")
    card = (tmp_path / "hubnet-mlx" / "README.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", card, re.S)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    shape = json.loads((tmp_path / "hubnet-mlx" / "config.json").read_text())["inputs"][0]["torch_shape"]
    with torch.no_grad():
        assert namespace["y"].shape == tuple(model(torch.randn(*shape)).shape)


# ------------------------------------------------------------------------------------------------ layout tag
def test_weights_carry_the_mlx_layout_tag(ported, tmp_path):
    from safetensors import safe_open

    porter.save(ported, tmp_path, max_shard_size=400)
    for file in sorted(os.listdir(tmp_path)):
        if file.endswith(".safetensors"):
            with safe_open(str(tmp_path / file), "numpy") as f:
                assert f.metadata()["porter_layout"] == "mlx" and f.metadata()["format"] == "mlx"


@pytest.mark.parametrize("tag, field", [({"format": "mlx", "porter_layout": "torch"}, "porter_layout"),
                                        ({"format": "pt"}, "format"),
                                        ({"format": "pt", "porter_layout": "torch"}, "porter_layout"),
                                        ({"format": 1}, "__metadata__")])
@pytest.mark.parametrize("sharded", [False, True])
def test_torch_layout_tag_is_refused(ported, tmp_path, tag, field, sharded):
    porter.save(ported, tmp_path, max_shard_size=400 if sharded else None)
    file = "model.safetensors"
    if sharded:  # a shard after the first: every file is checked
        file = next(n for n in sorted(os.listdir(tmp_path)) if n.startswith("model-00002-of-"))
    set_metadata(tmp_path / file, tag)
    with pytest.raises(ArtifactError) as info:
        porter.load(tmp_path)
    assert file in str(info.value) and field in str(info.value)


def test_untagged_and_old_artifacts_load(model, ported, tmp_path):
    porter.save(ported, tmp_path / "old")
    os.remove(tmp_path / "old" / "config.json")
    os.remove(tmp_path / "old" / "README.md")
    set_metadata(tmp_path / "old" / "model.safetensors", {"format": "mlx", "porter": "1"})  # what 0.1 wrote
    _assert_matches_torch(porter.load(tmp_path / "old"), model)
    set_metadata(tmp_path / "old" / "model.safetensors", None)  # no tag at all: shapes are still checked
    _assert_matches_torch(porter.load(tmp_path / "old"), model)


# ------------------------------------------------------------------------------------------------ the Hub
@pytest.fixture
def hub_cache(ported, tmp_path, monkeypatch):
    """A Hugging Face cache holding ``someone/hubnet`` (sharded), offline; returns (cache dir, commit)."""
    from huggingface_hub import constants

    porter.save(ported, tmp_path / "art", max_shard_size=400, repo_id=REPO)
    cache = tmp_path / "hf" / "hub"
    commit = populate_cache(str(cache), REPO, str(tmp_path / "art"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # any request raises: no network in tests
    return cache, commit


def test_load_a_repo_id_from_the_cache(model, hub_cache):
    cache, commit = hub_cache
    for kwargs in ({}, {"local_files_only": True}, {"revision": commit}, {"revision": "main"}):
        _assert_matches_torch(porter.load(REPO, **kwargs), model)
    _assert_matches_torch(porter.load("hf://" + REPO), model)


def test_hub_arguments_reach_snapshot_download(hub_cache, monkeypatch):
    import huggingface_hub

    calls = []
    real = huggingface_hub.snapshot_download

    def spy(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return real(repo_id, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", spy)
    porter.load(REPO, revision=hub_cache[1], local_files_only=True)
    ((repo_id, kwargs),) = calls
    assert repo_id == REPO and kwargs["revision"] == hub_cache[1] and kwargs["local_files_only"] is True
    assert kwargs["allow_patterns"] == ["*.json", "*.safetensors", "README.md"]  # nothing else is fetched


def test_unknown_repo_or_revision_is_a_clear_error(hub_cache):
    with pytest.raises(FileNotFoundError, match="'someone/other'.*Hugging Face Hub"):
        porter.load("someone/other")
    with pytest.raises(FileNotFoundError, match="someone/hubnet"):
        porter.load(REPO, revision="f" * 40)


@pytest.fixture
def no_hub_calls(monkeypatch):
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise AssertionError(f"the Hub was asked for {args}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)


@pytest.mark.parametrize("source", ["./someone/hubnet", "/someone/hubnet", "someone/hubnet/", "a/b/c", "~x/y",
                                    "someone/../hubnet", "someone//hubnet", "some one/hubnet", "someone",
                                    "-x/y", "x/y."])
def test_path_like_strings_never_reach_the_hub(source, no_hub_calls, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        porter.load(source)


def test_a_path_object_is_always_local(no_hub_calls, tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        porter.load(Path(REPO))


def test_an_existing_folder_wins_and_hf_prefix_forces_the_hub(model, hub_cache, tmp_path, monkeypatch):
    local = porter.convert(model, torch.randn(*SIZES[0]), io_layout="torch")  # tells the two apart
    monkeypatch.chdir(tmp_path)
    porter.save(local, REPO)  # ./someone/hubnet
    assert porter.load(REPO).io_layout == "torch"
    assert porter.load("hf://" + REPO).io_layout == "mlx"
    with pytest.raises(ValueError, match="'revision'"):
        porter.load(REPO, revision="main")  # a local folder has no revision: not dropped silently
    with pytest.raises(ValueError, match="hf://"):
        porter.load("hf://not a repo")


def test_without_huggingface_hub_a_repo_id_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(FileNotFoundError, match=re.escape("porter-mlx[hub]")):
        porter.load("someone/absent-repo")


BLOCK = """
import socket, sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
        return None
sys.meta_path.insert(0, _NoTorch())
def _no_network(*args, **kwargs):
    raise OSError("network is blocked in this test")
socket.socket.connect = _no_network
socket.create_connection = _no_network
"""


@pytest.mark.slow
def test_repo_id_loads_offline_without_torch_in_a_fresh_process(model, ported, tmp_path):
    porter.save(ported, tmp_path / "art", max_shard_size=400)
    populate_cache(str(tmp_path / "hf" / "hub"), REPO, str(tmp_path / "art"))
    x = torch.randn(*SIZES[1])
    np.save(tmp_path / "x.npy", x.permute(0, 2, 3, 1).numpy())
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCK)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np, mlx.core as mx
        import porter
        y = porter.load({REPO!r})(mx.array(np.load({str(tmp_path / "x.npy")!r})))
        np.save({str(tmp_path / "y.npy")!r}, np.array(y))
        assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch got imported"
        print("OK")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(PYTHONPATH=str(tmp_path / "block"), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("OK")
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-5)


def test_model_card_usage_snippet_runs_on_token_ids(tmp_path, monkeypatch):
    """An int64 token-id input gets an integer example (a float sample raised in the embedding lookup)."""
    from tests.models.gpt2 import gpt2_small

    model = gpt2_small(seed=1).eval()
    ids = torch.randint(0, 97, (1, 9))
    porter.save(porter.convert(model, ids), tmp_path / "gpt2-mlx")
    card = (tmp_path / "gpt2-mlx" / "README.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", card, re.S)
    assert "dtype=mx.int64" in snippet, snippet
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(snippet, "README.md", "exec"), namespace)
    shape = json.loads((tmp_path / "gpt2-mlx" / "config.json").read_text())["inputs"][0]["torch_shape"]
    with torch.no_grad():
        want = model(torch.zeros(*shape, dtype=torch.int64)).numpy()
    np.testing.assert_allclose(np.array(namespace["y"]), want, rtol=1e-4, atol=1e-4)
