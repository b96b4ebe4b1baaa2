"""``.mlxfn`` files and their cards from a stranger (session 15): no Porter path reads them.

``porter export`` / ``porter.export_function`` read back only the file they have just written under a fresh
``mkstemp`` name (``--shapeless``'s probe: a fresh temporary file too), and never read a card (``PATH.json``/
``PATH.md``). Every command given an ``.mlxfn`` (a real one, a truncated one) refuses it with one message, and an
export into a path where a stranger planted a link replaces the link, never writing through it or reading its
target.
"""

import os

import mlx.core as mx
import pytest
import torch
from click.testing import CliRunner

import porter
from porter.cli.main import main
from tests.security.attack_helpers import assert_input_error


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlxfn")
    torch.manual_seed(0)
    ported = porter.convert(torch.nn.Sequential(torch.nn.Linear(4, 3)).eval(), torch.randn(2, 4))
    path = str(folder / "m.mlxfn")
    porter.export_function(ported, path, [(2, 4)])
    truncated = folder / "cut.mlxfn"
    truncated.write_bytes(open(path, "rb").read()[:40])
    return folder, ported, path, str(truncated)


COMMANDS = {
    "inspect": lambda f: ["inspect", f],
    "convert": lambda f: ["convert", f, "-o", "out-mlx"],
    "validate": lambda f: ["validate", f, "--against", f],
    "bench": lambda f: ["bench", f, "--allow-pure-mlx"],
    "export": lambda f: ["export", f, "-o", "y.mlxfn"],
    "update": lambda f: ["update", f, f],
}


@pytest.mark.parametrize("which", ["whole", "truncated"])
@pytest.mark.parametrize("command", COMMANDS, ids=list(COMMANDS))
def test_every_command_refuses_an_mlxfn(exported, tmp_path, command, which):
    _, _, path, truncated = exported
    before = sorted(os.listdir(tmp_path))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, COMMANDS[command](path if which == "whole" else truncated))
    finally:
        os.chdir(cwd)
    assert_input_error(result, [os.path.basename(path if which == "whole" else truncated)],
                       listing_before=before, directory=tmp_path)


def test_export_replaces_planted_links_without_reading_or_writing_their_targets(exported, tmp_path):
    _, ported, _, _ = exported
    secret = tmp_path / "secret.txt"
    secret.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("m.mlxfn", "m.mlxfn.json", "m.mlxfn.md"):
        os.symlink(secret, out / name)
    report = porter.export_function(ported, str(out / "m.mlxfn"), [(2, 4)])
    assert secret.read_text() == "keep me"
    for name in ("m.mlxfn", "m.mlxfn.json", "m.mlxfn.md"):
        assert not os.path.islink(out / name), name
    x = mx.random.normal((2, 4), key=mx.random.key(1))
    (y,) = mx.import_function(report.path)(x)
    assert mx.allclose(y, ported(x), rtol=1e-5, atol=1e-6).item()
