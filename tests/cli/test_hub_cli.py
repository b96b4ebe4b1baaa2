"""``porter convert`` writes a Hub-ready folder: --max-shard-size, --base-model, --repo-id; the folder loads back
(``porter.load`` and ``porter validate``) and matches torch, run in the test."""

import json
import os

import numpy as np
import pytest
import torch

import porter
from tests.cli.cli_checkpoints import X_SHAPE, listing, write_checkpoint
from porter.cli.layouts import ported_to_torch, torch_to_ported
from porter.cli.main import main


@pytest.mark.slow  # converts, validates and validates again (about 10 s)
def test_convert_writes_a_sharded_hub_folder(runner, tmp_path):
    path, model = write_checkpoint("state_dict", tmp_path)
    out = tmp_path / "tiny-mlx"
    result = runner.invoke(main, ["convert", path, "--model", "tests.cli.tinynets:tiny_net", "-o", str(out), "--json",
                                  "--input-shape", ",".join(map(str, X_SHAPE)), "--max-shard-size", "1KiB",
                                  "--base-model", "someone/tiny", "--repo-id", "me/tiny-mlx"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    shards = [f for f in doc["files"] if f.startswith("model-")]
    assert len(shards) >= 2 and "model.safetensors.index.json" in doc["files"]
    assert {"README.md", "config.json", "graph.json"} <= set(doc["files"])
    card = (out / "README.md").read_text()
    assert 'base_model: "someone/tiny"' in card and 'porter.load("me/tiny-mlx")' in card
    assert "Result: **PASS**" in card and "`tests.cli.tinynets:tiny_net`" in card  # what convert validated and recorded
    config = json.loads((out / "config.json").read_text())
    assert config["inputs"][0]["torch_shape"][1:] == list(X_SHAPE[1:])

    x = torch.randn(X_SHAPE)
    y = porter.load(out)(torch_to_ported(x.numpy(), doc["input_layouts"][0]))
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(ported_to_torch(np.array(y), doc["output_layouts"][0]), expected, rtol=1e-4,
                               atol=1e-5)
    check = runner.invoke(main, ["validate", str(out), "--against", path, "--model", "tests.cli.tinynets:tiny_net",
                                 "--json", "-"])
    assert check.exit_code == 0, check.output
    assert json.loads(check.stdout)["ok"]


@pytest.mark.parametrize("args, option", [(["--max-shard-size", "lots"], "--max-shard-size"),
                                          (["--max-shard-size", "0"], "--max-shard-size"),
                                          (["--base-model", "not a repo"], "--base-model"),
                                          (["--repo-id", "../up"], "--repo-id")])
def test_bad_hub_options_exit_2_before_converting(runner, tmp_path, args, option):
    path, _ = write_checkpoint("traced", tmp_path)
    before = listing(tmp_path)
    result = runner.invoke(main, ["convert", path, "--no-validate", *args])
    assert result.exit_code == 2 and option in result.stderr, result.output
    assert listing(tmp_path) == before
