"""``.pt2`` archives crafted so that Porter's pre-check and torch's own reader see different entries: each used to
run its payload during ``porter convert`` (the marker file appeared). Now refused, exit 2, naming the file and
the entry, with no marker.

torch reads a ``.pt2`` with miniz (``PyTorchFileReader``): it finds entries case-insensitively, picks its own among
duplicates, and takes every record under ``models/`` as a model. A check written against Python's ``zipfile``
with exact names missed all three. The last test removes the pre-check and shows the guard around
``torch.export.load`` (``porter.checkpoints.pt2.no_unpickling``) refusing on its own.
"""

import os
import zipfile

import pytest
import torch
from click.testing import CliRunner

from porter.cli.main import main

from tests.cli import tinynets
from tests.security.attack_helpers import assert_input_error, pickled_payload

SAMPLE = "data/sample_inputs/model.pt"


@pytest.fixture(scope="module")
def clean_pt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "clean.pt2"
    torch.export.save(torch.export.export(tinynets.seeded(), (torch.randn(1, 3, 16, 16),)), path)
    return path


def _entries(src):
    with zipfile.ZipFile(src) as z:
        return [(info.filename, z.read(info.filename)) for info in z.infolist()]


def _write(dst, entries):
    import warnings

    with warnings.catch_warnings(), zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it is asked to write
        for name, data in entries:
            z.writestr(name, data)


def duplicate_entry(src, dst, marker):
    """The payload first, the clean sample inputs after it under the same name: zipfile reads the last."""
    out = []
    for name, data in _entries(src):
        if name.endswith(SAMPLE):
            out.append((name, pickled_payload(marker)))
        out.append((name, data))
    _write(dst, out)


def other_case(src, dst, marker):
    """The sample inputs under ``DATA/...``: torch finds them for ``data/...``; an exact-name check does not."""
    _write(dst, [(n.replace(SAMPLE, SAMPLE.upper().replace("MODEL.PT", "model.pt")), pickled_payload(marker))
                 if n.endswith(SAMPLE) else (n, d) for n, d in _entries(src)])


def nested_model(src, dst, marker):
    """A second model ``models/sub/m.json``: torch loads every record under models/, with its sample inputs."""
    entries = _entries(src)
    root = entries[0][0].split("/")[0]
    inner = {n[len(root) + 1:]: d for n, d in entries}
    extra = [(f"{root}/models/sub/m.json", inner["models/model.json"]),
             (f"{root}/data/sample_inputs/sub/m.pt", pickled_payload(marker))]
    for name in ("data/weights/model_weights_config.json", "data/constants/model_constants_config.json"):
        extra.append((f"{root}/{name.replace('model_', 'sub/m_')}", inner[name]))
    extra += [(f"{root}/data/weights/sub/{n.split('/')[-1]}", d) for n, d in inner.items()
              if n.startswith("data/weights/") and not n.endswith(".json")]
    _write(dst, entries + extra)


ATTACKS = {
    "duplicate entry": (duplicate_entry, ["two entries named", SAMPLE]),
    "entry name in another case": (other_case, ["data/sample_inputs/model.pt", "--trust-pickle"]),
    "nested model name": (nested_model, ["data/sample_inputs/sub/m.pt", "--trust-pickle"]),
}


@pytest.mark.parametrize("case", sorted(ATTACKS))
@pytest.mark.parametrize("command", ["convert", "inspect"])
def test_reader_differences_never_unpickle(case, command, clean_pt2, tmp_path):
    build, words = ATTACKS[case]
    marker = tmp_path / "marker"
    evil = tmp_path / "evil.pt2"
    build(clean_pt2, evil, marker)
    before = sorted(os.listdir(tmp_path))
    result = CliRunner().invoke(main, [command, str(evil)])
    assert_input_error(result, ["evil.pt2", *words], directory=tmp_path, listing_before=before)
    assert not marker.exists()


def test_guard_refuses_without_the_precheck(clean_pt2, tmp_path, monkeypatch):
    """Defence in depth: with the name-based check switched off, torch.export.load still unpickles nothing."""
    from porter.checkpoints import CheckpointError, load

    monkeypatch.setattr(load, "refuse_pickled_entries", lambda path: None)
    for build in (other_case, nested_model):
        marker = tmp_path / f"marker-{build.__name__}"
        evil = tmp_path / f"{build.__name__}.pt2"
        build(clean_pt2, evil, marker)
        with pytest.raises(CheckpointError, match="unpickle"):
            load.load_checkpoint(str(evil))
        assert not marker.exists()
    # the guard is lifted afterwards, and a clean program loads through it
    assert torch.load is not None and load.load_checkpoint(str(clean_pt2)).kind == "module"
    real = torch.load
    load.load_checkpoint(str(clean_pt2))
    assert torch.load is real


def test_clean_program_and_trusted_pickle_still_load(clean_pt2, tmp_path):
    from porter.checkpoints import load_checkpoint

    assert load_checkpoint(str(clean_pt2)).kind == "module"
    evil = tmp_path / "case.pt2"
    other_case(clean_pt2, evil, tmp_path / "marker")
    with pytest.raises(Exception):  # --trust-pickle: the user's choice; the payload's os.system returns a status,
        load_checkpoint(str(evil), trust_pickle=True)  # which torch then refuses as sample inputs
    assert (tmp_path / "marker").exists()  # trust_pickle really unpickles (so the default's refusal is the guard)
