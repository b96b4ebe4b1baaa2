"""Every command that opens a converted folder, on a graph.json that is valid JSON but adversarial in format 6's
fields (session 17): a drop rate outside [0, 1] (read only by ``train()``, so it loaded before), ``dtype_follows``
under a version-5 header, a name listed twice in ``float32_constants``. Each ends in exit 2 with one message naming
graph.json and the field, no traceback, and nothing written beside the folder."""

import os

import pytest
import torch
from click.testing import CliRunner

from porter.cli.main import main

from tests.cli import tinynets
from tests.security.attack_helpers import assert_input_error


def _drop_rate(graph):
    at = next(i for i, n in enumerate(graph["nodes"]) if n["outputs"] == ["max_pool2d"]) + 1
    graph["nodes"].insert(at, {"kernel": "train_dropout", "inputs": [{"ref": "max_pool2d"}], "attrs": {"p": 2.0},
                               "outputs": ["evil"], "layout": [0, 2, 3, 1]})
    for node in graph["nodes"][at + 1:]:
        node["inputs"] = [{"ref": "evil"} if x == {"ref": "max_pool2d"} else x for x in node["inputs"]]


EDITS = {
    "drop rate": (_drop_rate, "attrs.p"),
    "v6 field under a v5 header": (lambda g: g.update(format_version=5, dtype_follows=[]), "dtype_follows"),
    # fc.bias is a float32 parameter: only the repeat is wrong
    "constant listed twice": (lambda g: g.update(float32_constants=["fc.bias", "fc.bias"]), "float32_constants[1]"),
}
COMMANDS = {
    "inspect": lambda d, w: ["inspect", d],
    "validate": lambda d, w: ["validate", d, "--against", w, "--model", "tests.cli.tinynets:tiny_net"],
    "bench": lambda d, w: ["bench", d, "--repeat", "1", "--warmup", "0"],
    "export": lambda d, w: ["export", d, "-o", "y.mlxfn"],
    "update": lambda d, w: ["update", d, w, "-o", "updated-mlx"],
}


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "w.pt"
    torch.save(tinynets.seeded().state_dict(), path)
    return str(path)


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_adversarial_v6_fields(tampered, weights, tmp_path, command, edit):
    change, field = EDITS[edit]
    directory = tampered(change)
    before = sorted(os.listdir(tmp_path))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, COMMANDS[command](str(directory), weights))
    finally:
        os.chdir(cwd)
    assert_input_error(result, ["graph.json", field], listing_before=before, directory=tmp_path)
