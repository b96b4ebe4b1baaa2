"""Integer inputs on the command line: a token model's state_dict (a GPT-2 twin) converts with its input guessed
from the embedding table or given as ``--input-shape 2,9:int64``; validate, bench and export run it on token ids.

Torch is the oracle: the converted folder is compared with the torch model run in the test.
"""

import json

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from porter.cli.main import main
from tests.models.gpt2 import gpt2_small

MODEL = ["--model", "tests.models.gpt2:GPT2LMHeadModel"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    model = gpt2_small(seed=5)
    path = tmp_path_factory.mktemp("gpt2") / "gpt2.pt"
    torch.save(model.state_dict(), path)
    return str(path), model


def _logits_match(directory, model, shape):
    ids = torch.randint(0, 97, shape)
    with torch.no_grad():
        want = model(ids).numpy()
    got = np.array(porter.load(directory)(mx.array(ids.numpy())))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4)


def test_token_input_guessed_from_the_embedding(runner, checkpoint, tmp_path):
    path, model = checkpoint
    out = tmp_path / "guessed"
    result = runner.invoke(main, ["convert", path, *MODEL, "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "example input (1,32) int64" in result.output
    assert "guessed from 'transformer.wte.weight'" in result.output
    assert "mx.zeros((1, 32), dtype=mx.int64)" in result.output  # the load hint feeds token ids
    assert "PASS" in result.output
    _logits_match(out, model, (3, 17))


def test_token_input_given(runner, checkpoint, tmp_path):
    path, model = checkpoint
    out = tmp_path / "given"
    result = runner.invoke(main, ["convert", path, *MODEL, "--input-shape", "2,9:int64", "--json", "-o", str(out)],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["input_shapes"] == [[2, 9]] and report["input_dtypes"] == ["int64"]
    _logits_match(out, model, (2, 9))

    result = runner.invoke(main, ["validate", str(out), "--against", path, *MODEL], catch_exceptions=False)
    assert result.exit_code == 0 and "PASS" in result.output, result.output  # the recorded shape keeps its dtype
    result = runner.invoke(main, ["bench", str(out), "--against", path, *MODEL, "--warmup", "0", "--repeat", "1"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["export", str(out), "-o", str(tmp_path / "gpt2.mlxfn")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    ids = np.random.default_rng(0).integers(0, 97, (2, 9))
    (logits,) = mx.import_function(str(tmp_path / "gpt2.mlxfn"))(mx.array(ids))
    with torch.no_grad():
        np.testing.assert_allclose(np.array(logits), model(torch.from_numpy(ids)).numpy(), rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("bad, message", [("2,9:int3", "names the dtype 'int3'"),
                                          ("2,9:", None), ("2,x:int64", "not a list of positive integers")])
def test_bad_input_dtype_refused_by_option(runner, checkpoint, tmp_path, bad, message):
    path, _ = checkpoint
    out = tmp_path / "bad"
    result = runner.invoke(main, ["convert", path, *MODEL, "--input-shape", bad, "-o", str(out), "--no-validate"],
                           catch_exceptions=False)
    if message is None:  # an empty dtype is float32: the model's own error names the embedding
        assert result.exit_code == 2 and "indices" in result.output and "1,32:int64" in result.output
    else:
        assert result.exit_code == 2 and message in result.output and "--input-shape" in result.output
    assert not out.exists()
