"""Fixtures of the adversarial corpus: a small converted model to tamper with (helpers in attack_helpers.py).

Everything is built at test time (no binary fixtures): the artifact from ``tinynets.TinyNet`` (tests/cli), the
checkpoints with torch.
"""

import json
import shutil

import pytest


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory):
    """A converted TinyNet (``porter.save``) and its torch model; tests copy it before tampering."""
    import torch

    import porter
    from tests.cli import tinynets

    model = tinynets.seeded()
    directory = tmp_path_factory.mktemp("artifact") / "tiny-mlx"
    porter.save(porter.convert(model, torch.randn(1, 3, 16, 16)), directory,
                metadata={"source": {"model": "tests.cli.tinynets:tiny_net", "model_kwargs": {},
                                     "input_shapes": [[1, 3, 16, 16]]}})
    return directory, model


@pytest.fixture
def tampered(tiny_artifact, tmp_path):
    """``tampered(edit)``: a copy of the tiny artifact whose parsed graph.json went through ``edit(graph)``."""

    def make(edit=None, name="t-mlx"):
        directory = tmp_path / name
        shutil.copytree(tiny_artifact[0], directory)
        if edit is not None:
            path = directory / "graph.json"
            graph = json.loads(path.read_text())
            edit(graph)  # edits in place (its return value is ignored)
            path.write_text(json.dumps(graph))
        return directory

    return make


