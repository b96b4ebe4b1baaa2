"""Seeded mutation fuzzing of ``graph.json``: every leaf of a real artifact's graph (a converted model with
convolutions, batch norm, pooling, attention, ``chunk``, interpolation, a transposed conv, concatenation and two
outputs, captured with dynamic sizes so it carries size guards) replaced by hostile values, one to three at a time.

Each mutated artifact must either load and run, or fail with Porter's errors: :class:`ArtifactError` at load (the
file, place and field named), or at run a ``ValueError``/``TypeError`` naming the op or the input it came from.
Never a ``KeyError``/``IndexError``/``AttributeError``/``RecursionError`` from inside Porter, never a hang; the same for ``trace`` (each module's output, what ``validate`` compares). (A
tampered artifact can still compute other numbers: publishing wrong weights needs no tampering; the claim here is
that loading and running a hostile file fails cleanly.)
"""

import json
import random
import shutil
import signal

import mlx.core as mx
import pytest

import porter
from porter.converters import ArtifactError
from tests.security.attack_helpers import mutate_json

CASES = 48
HOSTILE = [2 ** 62, 2 ** 31, -1, 0, 1, 10 ** 6, -(2 ** 40), 1.5, "x", "", "__class__", None, True, [], {}, [1, 2],
           [0, 3, 2, 1], [-1, 0], {"ref": "x"}, {"ref": "nope"}, [[]], "conv", "float64", "int8", 3, 7, [2 ** 40, 1]]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
            self.pool = nn.MaxPool2d(2, ceil_mode=True)
            self.ln = nn.LayerNorm(8)
            self.qkv = nn.Linear(8, 24)
            self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
            self.fc = nn.Linear(4, 5)

        def forward(self, x):
            y = F.relu(self.bn(self.conv(x)))
            y = self.pool(y + F.gelu(self.dw(y)))
            b, c, h, w = y.shape
            q, k, v = self.qkv(self.ln(y.flatten(2).transpose(1, 2))).chunk(3, -1)
            t = F.softmax(q @ k.transpose(1, 2) / 8 ** 0.5, -1) @ v
            y = y + t.transpose(1, 2).reshape(b, c, h, w)
            y = self.up(F.interpolate(y, scale_factor=2, mode="bilinear"))
            y = torch.cat([y, y * 2], 1)[:, :4]
            return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1)), y.sigmoid()

    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("fuzz") / "net-mlx"
    porter.save(porter.convert(Net().eval(), torch.randn(2, 3, 20, 20)), directory)
    return directory


def _mutate(graph, rng):
    return mutate_json(graph, rng, HOSTILE, [1, 1, 2, 3])


class _Hang(Exception):
    pass


def _raise_hang(*_):
    raise _Hang()


def test_the_unmutated_artifact_runs(artifact):
    model = porter.load(artifact)
    logits, maps = model(mx.random.normal((2, 20, 20, 3)))
    assert logits.shape == (2, 5) and maps.shape == (2, 20, 20, 4)


@pytest.mark.parametrize("seed", range(CASES))
def test_mutated_graph_fails_cleanly(artifact, tmp_path, seed):
    rng = random.Random(seed)
    directory = tmp_path / "m-mlx"
    shutil.copytree(artifact, directory)
    graph = json.loads((directory / "graph.json").read_text())
    mutations = _mutate(graph, rng)
    (directory / "graph.json").write_text(json.dumps(graph))
    inputs = [mx.random.normal((2, 20, 20, 3), key=mx.random.key(0)),
              mx.random.normal((1, 13, 17, 3), key=mx.random.key(1))]
    previous = signal.signal(signal.SIGALRM, _raise_hang)
    signal.alarm(60)
    try:
        model = porter.load(directory)
        for x in inputs:
            mx.eval(model(x))
        mx.eval(list(model.trace(inputs[0])[1].values()))  # per-module outputs (validate): the module_outputs path
    except ArtifactError as e:
        assert "graph.json" in str(e) or "safetensors" in str(e) or "config.json" in str(e), (mutations, str(e))
    except (ValueError, TypeError) as e:  # at run: names the op or the input
        message = str(e)
        assert any(s in message for s in ("while running", "input '", "module_outputs")), (mutations, message)
    except _Hang:
        pytest.fail(f"load or run hung after {mutations}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_module_output_layout_of_the_wrong_rank_is_named(artifact, tmp_path):
    """The schema cannot know a value's rank, so ``trace`` checks the recorded layout against the output."""
    directory = tmp_path / "m-mlx"
    shutil.copytree(artifact, directory)
    graph = json.loads((directory / "graph.json").read_text())
    entry = next(e for e in graph["module_outputs"] if len(e["perm"]) == 4)
    entry["perm"] = [1, 0]
    (directory / "graph.json").write_text(json.dumps(graph))
    model = porter.load(directory)
    mx.eval(model(mx.random.normal((1, 20, 20, 3))))  # the forward never reads it
    with pytest.raises(ValueError, match=f"module_outputs: the layout \\[1, 0\\] recorded for module "
                                         f"'{entry['module']}' does not fit its 4-d output"):
        model.trace(mx.random.normal((1, 20, 20, 3)))
