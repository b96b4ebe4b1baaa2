"""Symbolic links inside an artifact folder (``converters/artifact_files.py``): followed only to regular files
inside the folder, or from a Hugging Face cache snapshot into its repo's ``blobs/`` (or the cache's shared blob
store); everything else is refused by ``porter.load`` with one ArtifactError naming the link and its target,
before a byte of the target is read.
"""

import os
import shutil

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from porter.converters import ArtifactError
from tests.hub_helpers import populate_cache

FILES = ["graph.json", "model.safetensors", "config.json"]


def _relink(directory, name, target):
    os.remove(directory / name)
    os.symlink(target, directory / name)


def _same_outputs(directory, model):
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        expected = model(x).numpy()
    got = np.array(porter.load(directory)(mx.array(x.permute(0, 2, 3, 1).numpy())))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", FILES)
def test_link_outside_the_folder_refused(name, tiny_artifact, tampered, tmp_path):
    directory = tampered()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(directory / name, outside / name)  # a perfectly valid file: where it lives is the problem
    _relink(directory, name, outside / name)
    with pytest.raises(ArtifactError, match="symbolic link to .*elsewhere.*outside the model's folder") as info:
        porter.load(directory)
    assert str(directory / name) in str(info.value)
    _relink(directory, name, os.path.join("..", "elsewhere", name))  # relative, same thing
    with pytest.raises(ArtifactError, match="outside the model's folder"):
        porter.load(directory)


@pytest.mark.parametrize("target", ["/etc/passwd", "/dev/zero", "/dev/stdin", "/", "/proc/self/environ"])
def test_link_to_system_files_refused(target, tampered):
    directory = tampered()
    _relink(directory, "graph.json", target)
    with pytest.raises(ArtifactError, match="graph.json.*symbolic link"):
        porter.load(directory)


def test_link_inside_the_folder_followed_but_only_to_regular_files(tiny_artifact, tampered):
    directory = tampered()
    (directory / "store").mkdir()
    os.rename(directory / "model.safetensors", directory / "store" / "w.safetensors.data")
    os.symlink(os.path.join("store", "w.safetensors.data"), directory / "model.safetensors")
    _same_outputs(directory, tiny_artifact[1])  # a link inside the folder is the user's own layout
    os.remove(directory / "model.safetensors")
    os.symlink("store", directory / "model.safetensors")
    with pytest.raises(ArtifactError, match="is a directory"):
        porter.load(directory)
    os.remove(directory / "model.safetensors")
    os.mkfifo(directory / "store" / "fifo")
    os.symlink(os.path.join("store", "fifo"), directory / "model.safetensors")
    with pytest.raises(ArtifactError, match="not a regular file"):  # and no hang
        porter.load(directory)


def test_hub_cache_layouts_load(tiny_artifact, tmp_path):
    directory, model = tiny_artifact
    commit = populate_cache(tmp_path / "hub", "me/tiny", directory)
    repo = tmp_path / "hub" / "models--me--tiny"
    snapshot = repo / "snapshots" / commit
    assert os.path.islink(snapshot / "graph.json")
    _same_outputs(snapshot, model)
    # huggingface_hub's shared blob store: the repo's blob is itself a link to <cache>/blobs/<2 hex>/<hash>
    for blob in os.listdir(repo / "blobs"):
        store = tmp_path / "hub" / "blobs" / blob[:2]
        store.mkdir(parents=True, exist_ok=True)
        os.rename(repo / "blobs" / blob, store / blob)
        os.symlink(os.path.join("..", "..", "blobs", blob[:2], blob), repo / "blobs" / blob)
    _same_outputs(snapshot, model)
    # a folder that is itself a link to the snapshot (the user named it) gets the same rule
    os.symlink(snapshot, tmp_path / "mine")
    _same_outputs(tmp_path / "mine", model)


def test_hub_snapshot_links_elsewhere_refused(tiny_artifact, tmp_path):
    directory, _ = tiny_artifact
    commit = populate_cache(tmp_path / "hub", "me/tiny", directory)
    populate_cache(tmp_path / "hub", "other/repo", directory)
    repo = tmp_path / "hub" / "models--me--tiny"
    snapshot = repo / "snapshots" / commit
    other_blob = next(iter(os.listdir(tmp_path / "hub" / "models--other--repo" / "blobs")))
    cases = {
        "another repo's blob": os.path.join("..", "..", "..", "models--other--repo", "blobs", other_blob),
        "the cache's refs": os.path.join("..", "..", "refs", "main"),
        "outside the cache": "/etc/passwd",
    }
    for case, target in cases.items():
        saved = os.readlink(snapshot / "config.json")
        _relink(snapshot, "config.json", target)
        with pytest.raises(ArtifactError, match="config.json.*outside the model's folder"):
            porter.load(snapshot)
        _relink(snapshot, "config.json", saved)
    # a blob that is itself a link out of the cache: the final target decides
    blob = repo / "blobs" / os.path.basename(os.readlink(snapshot / "graph.json"))
    os.remove(blob)
    os.symlink("/etc/passwd", blob)
    with pytest.raises(ArtifactError, match="graph.json.*'/etc/passwd'"):
        porter.load(snapshot)


def test_blobs_folder_outside_a_hub_cache_is_not_special(tampered, tmp_path):
    directory = tampered()
    (tmp_path / "blobs").mkdir()
    shutil.copy(directory / "graph.json", tmp_path / "blobs" / ("a" * 64))
    _relink(directory, "graph.json", tmp_path / "blobs" / ("a" * 64))
    with pytest.raises(ArtifactError, match="outside the model's folder"):
        porter.load(directory)


def test_cli_reports_the_link(tampered, tmp_path):
    from click.testing import CliRunner

    from porter.cli.main import main
    from tests.security.attack_helpers import assert_input_error

    directory = tampered()
    _relink(directory, "model.safetensors", "/etc/hostname")
    result = CliRunner().invoke(main, ["bench", str(directory), "--batch", "1", "--repeat", "1", "--warmup", "0"])
    assert_input_error(result, ["model.safetensors", "symbolic link", "/etc/hostname"])


# ---------------------------------------------------------------------------------------------------- hard links
@pytest.mark.parametrize("name", FILES)
def test_hard_link_to_a_file_outside_the_folder_refused(name, tiny_artifact, tampered, tmp_path):
    directory = tampered()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.replace(directory / name, outside / name)  # the user's own file, elsewhere; the folder's name links to it
    os.link(outside / name, directory / name)
    with pytest.raises(ArtifactError, match="2 hard links, 1 of them outside the model's folder") as info:
        porter.load(directory)
    assert str(directory / name) in str(info.value)


def test_hard_links_within_the_folder_followed(tiny_artifact, tampered):
    directory = tampered()
    os.replace(directory / "model.safetensors", directory / "copy.bin")  # a deduplicated folder: two names, one file
    os.link(directory / "copy.bin", directory / "model.safetensors")
    _same_outputs(directory, tiny_artifact[1])
