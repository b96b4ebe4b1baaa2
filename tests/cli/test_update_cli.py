"""``porter update DIR CHECKPOINT``: a newer torch checkpoint into a converted folder, written atomically (the old
folder whole on any failure); bad files and arguments exit 2 naming them, with nothing written. Torch is the
oracle: the updated folder is loaded and compared with the torch model at the new weights."""

import json
import os

import numpy as np
import pytest
import torch

import porter
from porter.cli.main import main
from tests.cli.tinynets import seeded
from tests.converter_check import assert_matches


def _snapshot(folder):
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder)) if (folder / name).is_file()}


@pytest.fixture
def setup(tmp_path):
    """TinyNet converted at weights A into tmp/tiny-mlx (with an extra file), its weights B saved as new.pt."""
    model = seeded(0)
    x = (torch.randn(2, 3, 16, 16),)
    directory = tmp_path / "tiny-mlx"
    porter.save(porter.convert(model, x), directory, metadata={"source": {"input_shapes": [[2, 3, 16, 16]]},
                                                               "validation": {"ok": True}})
    (directory / "tokenizer.json").write_text("{}")
    newer = seeded(1)
    torch.save(newer.state_dict(), tmp_path / "new.pt")
    return directory, newer, tmp_path


def test_update_in_place(setup, runner):
    directory, newer, tmp_path = setup
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "new.pt"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] and doc["missing_keys"] == [] and doc["unexpected_keys"] == []
    loaded = porter.load(directory)
    for size in (16, 20):
        assert_matches(loaded, newer, (torch.randn(2, 3, size, size),))
    assert (directory / "tokenizer.json").read_text() == "{}"  # carried over
    meta = loaded.graph["metadata"]
    assert "validation" not in meta and meta["weights_update"]["checkpoint"] == "new.pt"
    assert meta["source"]["input_shapes"] == [[2, 3, 16, 16]]
    assert sorted(os.listdir(tmp_path)) == ["new.pt", "tiny-mlx"]  # no temporary folder left


def test_sharded_output_with_base_model(setup, runner):
    directory, newer, tmp_path = setup
    out = tmp_path / "sharded"
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "new.pt"), "-o", str(out),
                                  "--max-shard-size", "1000", "--base-model", "me/tiny"])
    assert result.exit_code == 0, result.output
    assert (out / "model.safetensors.index.json").exists() and not (out / "model.safetensors").exists()
    assert 'base_model: "me/tiny"' in (out / "README.md").read_text()
    assert_matches(porter.load(out), newer, (torch.randn(1, 3, 16, 16),))
    # in place back to one file: the old shards and index go, nothing stale is carried over
    result = runner.invoke(main, ["update", str(out), str(tmp_path / "new.pt")])
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "graph.json", "model.safetensors"]
    assert_matches(porter.load(out), newer, (torch.randn(1, 3, 16, 16),))


def test_update_to_new_folder_and_force(setup, runner):
    directory, newer, tmp_path = setup
    before = _snapshot(directory)
    out = tmp_path / "tiny-b"
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "new.pt"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Updated" in result.output
    assert _snapshot(directory) == before  # the source folder is untouched
    assert_matches(porter.load(out), newer, (torch.randn(1, 3, 16, 16),))
    assert not (out / "tokenizer.json").exists()  # -o writes only the model
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "new.pt"), "-o", str(out)])
    assert result.exit_code == 2 and "already exists" in result.output
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "new.pt"), "-o", str(out), "--force"])
    assert result.exit_code == 0, result.output


def test_no_strict_reports_the_rest(setup, runner):
    directory, newer, tmp_path = setup
    state = newer.state_dict()
    del state["fc.bias"]
    state["extra"] = torch.zeros(2)
    torch.save(state, tmp_path / "partial.pt")
    before = _snapshot(directory)
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "partial.pt")])
    assert result.exit_code == 2
    assert "missing: fc.bias" in result.output and "unexpected: extra" in result.output
    assert _snapshot(directory) == before
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "partial.pt"), "--no-strict", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["missing_keys"] == ["fc.bias"] and doc["unexpected_keys"] == ["extra"]
    np.testing.assert_array_equal(np.array(porter.load(directory).fc.weight), newer.fc.weight.detach().numpy())


def test_shape_mismatch_leaves_the_folder_whole(setup, runner):
    directory, _, tmp_path = setup
    torch.save(seeded(2, num_classes=7).state_dict(), tmp_path / "other.pt")
    before = _snapshot(directory)
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "other.pt")])
    assert result.exit_code == 2
    assert "size mismatch for 'fc.weight'" in result.output and "(7, 8)" in result.output
    assert _snapshot(directory) == before
    assert sorted(os.listdir(tmp_path)) == ["new.pt", "other.pt", "tiny-mlx"]


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"not a checkpoint at all", "not a checkpoint format"),
    (b"PK\x03\x04 truncated zip", "bad.pt"),
])
def test_bad_checkpoint_files(setup, runner, content, message):
    directory, _, tmp_path = setup
    bad = tmp_path / "bad.pt"
    bad.write_bytes(content)
    before = _snapshot(directory)
    result = runner.invoke(main, ["update", str(directory), str(bad)])
    assert result.exit_code == 2, result.output
    assert "bad.pt" in result.output and message in result.output
    assert _snapshot(directory) == before


def test_pickled_objects_refused(setup, runner):
    directory, newer, tmp_path = setup
    torch.save(newer, tmp_path / "whole.pt")  # a whole pickled module: unpickling would run code
    before = _snapshot(directory)
    result = runner.invoke(main, ["update", str(directory), str(tmp_path / "whole.pt")])
    assert result.exit_code == 2 and "--trust-pickle" in result.output
    assert _snapshot(directory) == before


@pytest.mark.parametrize("args, message", [
    (["{missing}", "{ckpt}"], "does not exist"),
    (["{dir}", "{tmp}/nope.pt"], "nope.pt"),
    (["{dir}", "{ckpt}", "--force"], "--force is only used with -o"),
    (["{dir}", "{ckpt}", "-o", "{dir}", "--force"], "holds the input"),
    (["{tmp}", "{ckpt}", "-o", "{tmp}/x"], "not a converted Porter model"),
    (["{dir}", "{ckpt}", "--max-shard-size", "lots"], "--max-shard-size 'lots' is not valid"),
    (["{dir}", "{ckpt}", "--base-model", "../x"], "--base-model '../x' is not valid"),
])
def test_bad_arguments(setup, runner, args, message):
    directory, _, tmp_path = setup
    before = _snapshot(directory)
    fill = {"missing": str(tmp_path / "absent"), "ckpt": str(tmp_path / "new.pt"), "dir": str(directory),
            "tmp": str(tmp_path)}
    result = runner.invoke(main, ["update"] + [a.format(**fill) for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert _snapshot(directory) == before
    assert sorted(os.listdir(tmp_path)) == ["new.pt", "tiny-mlx"]


def test_quantized_folder_refused(setup, runner):
    from porter.layers import quantize_model

    directory, _, tmp_path = setup
    ported = porter.convert(seeded(0, width=32), (torch.randn(1, 3, 16, 16),))
    quantize_model(ported, group_size=32, bits=8)
    porter.save(ported, tmp_path / "q")
    torch.save(seeded(1, width=32).state_dict(), tmp_path / "w32.pt")
    before = _snapshot(tmp_path / "q")
    result = runner.invoke(main, ["update", str(tmp_path / "q"), str(tmp_path / "w32.pt")])
    assert result.exit_code == 2 and "quantized layers" in result.output
    assert _snapshot(tmp_path / "q") == before
