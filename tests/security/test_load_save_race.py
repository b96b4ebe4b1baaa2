"""A load racing a save into the same folder, and a save killed half-way (session 15).

``porter.save`` stages every file, removes ``graph.json``, replaces the weights, then renames the new ``graph.json``
in. Before: ``porter.load`` read ``graph.json``, then opened the weights by name; a save that ran in between gave
the loader the old graph with the new weights, and when their shapes agreed (a fine-tuned or updated model) the
mixture loaded and ran. Now ``load`` checks, once every weight is read, that ``graph.json`` is still the file it
read: a save meanwhile removed or replaced it, so the load is refused with a message instead.
"""

import os
import signal
import subprocess
import sys
import time

import mlx.core as mx
import numpy as np
import pytest

import porter
from porter.converters import ArtifactError
from tests.paths import repo_env


def _port(scale):
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(x) * scale

    torch.manual_seed(int(scale))
    return porter.convert(Net().eval(), torch.randn(2, 8))


def test_save_between_graph_and_weights_is_refused(tmp_path, monkeypatch):
    from porter.converters import shards

    old, new = _port(1.0), _port(3.0)  # the same parameter names and shapes, another graph and other weights
    directory = tmp_path / "m-mlx"
    porter.save(old, directory)
    real = shards.read_weights

    def save_meanwhile(folder, params):
        monkeypatch.setattr(shards, "read_weights", real)
        porter.save(new, directory)  # the whole save runs after graph.json was read, before the weights are
        return real(folder, params)

    monkeypatch.setattr(shards, "read_weights", save_meanwhile)
    with pytest.raises(ArtifactError, match="graph.json.*replaced while the model was being loaded"):
        porter.load(directory)
    x = mx.random.normal((2, 8), key=mx.random.key(0))
    np.testing.assert_array_equal(np.array(porter.load(directory)(x)), np.array(new(x)))  # then the new one


def test_save_starting_between_graph_and_weights_is_refused(tmp_path, monkeypatch):
    """A save that has removed graph.json and replaced the weights but not yet renamed its graph.json in."""
    from porter.converters import shards

    old, new = _port(1.0), _port(3.0)
    directory = tmp_path / "m-mlx"
    porter.save(old, directory)
    real = shards.read_weights

    def half_save(folder, params):
        monkeypatch.setattr(shards, "read_weights", real)
        real_commit = shards.commit_weights

        def commit_then_stop(where, staged):
            real_commit(where, staged)
            raise KeyboardInterrupt  # killed before graph.json is renamed in

        monkeypatch.setattr(shards, "commit_weights", commit_then_stop)
        with pytest.raises(KeyboardInterrupt):
            porter.save(new, directory)
        return real(folder, params)

    monkeypatch.setattr(shards, "read_weights", half_save)
    with pytest.raises(ArtifactError, match="replaced while the model was being loaded"):
        porter.load(directory)


_SAVER = """
import sys, torch
from torch import nn
import porter
torch.manual_seed(0)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(1024, 1024), nn.Linear(1024, 1024)

    def forward(self, x):
        return self.fc2(self.fc1(x))

models = [porter.convert(Net().eval(), torch.randn(1, 1024)) for _ in range(2)]
for i, m in enumerate(models):
    m.fc1.weight = m.fc1.weight * 0 + i  # model i: its first weight all i
print("ready", flush=True)
i = 0
while True:
    porter.save(models[i % 2], sys.argv[1])
    i += 1
"""


@pytest.mark.slow  # three children, each importing torch and converting (~60 s)
def test_killed_saves_leave_an_old_or_new_model_or_a_refusal(tmp_path):
    """A child saves two models in turn (8 MB of weights each) and is killed with SIGKILL at a random moment,
    three times: each time the folder loads as one of the two whole models, or is refused with a message."""
    directory = tmp_path / "m-mlx"
    rng = np.random.default_rng(0)
    outcomes = {"model": 0, "refused": 0}
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", _SAVER, str(directory)], stdout=subprocess.PIPE,
                                 env=repo_env(), text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(0.2 + float(rng.uniform(0, 1.5)))
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        try:
            loaded = porter.load(directory)
        except (ArtifactError, FileNotFoundError) as e:
            assert "graph.json" in str(e), str(e)
            outcomes["refused"] += 1
            continue
        first = np.array(loaded.fc1.weight)
        assert first.min() == first.max() and first.min() in (0.0, 1.0), "a mixture of two saves"
        outcomes["model"] += 1
    assert sum(outcomes.values()) == 3


def test_weights_replaced_between_header_and_data_are_refused(tmp_path, monkeypatch):
    """Only model.safetensors replaced (a copy, a sync tool) after its header was checked: the data is never read
    from the other file under the checked header (graph.json is unchanged, so its check cannot see this)."""
    import shutil

    from porter.converters import shards

    old, new = _port(1.0), _port(3.0)
    directory, other = tmp_path / "m-mlx", tmp_path / "other-mlx"
    porter.save(old, directory)
    porter.save(new, other)
    real = shards.check_weight_bytes

    def replace_meanwhile(total, folder):
        shutil.copy(other / "model.safetensors", directory / "model.safetensors.new")
        os.replace(directory / "model.safetensors.new", directory / "model.safetensors")
        return real(total, folder)

    monkeypatch.setattr(shards, "check_weight_bytes", replace_meanwhile)
    with pytest.raises(ArtifactError, match="model.safetensors.*replaced while the model was being loaded"):
        porter.load(directory)


def test_two_saves_at_once_leave_one_whole_model(tmp_path, monkeypatch):
    """Save A commits its weights and pauses; save B runs whole meanwhile; A then renames its graph.json in. Before:
    A's graph.json with B's weights, a mixture that loaded and ran. Now each save's commit holds the folder's lock,
    so the folder ends as one save's model."""
    import threading

    from porter.converters import shards

    a, b = _port(1.0), _port(3.0)
    directory = tmp_path / "m-mlx"
    real = shards.commit_weights
    a_committed, b_started = threading.Event(), threading.Event()

    def slow_for_a(folder, staged):
        out = real(folder, staged)
        if threading.current_thread().name == "save-a":
            a_committed.set()
            b_started.wait(5)
            time.sleep(0.5)  # B, unless it waits for the lock, commits now
        return out

    monkeypatch.setattr(shards, "commit_weights", slow_for_a)
    errors = []

    def run(model, name):
        try:
            porter.save(model, directory)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread_a = threading.Thread(target=run, args=(a, "a"), name="save-a")
    thread_a.start()
    assert a_committed.wait(30)
    thread_b = threading.Thread(target=run, args=(b, "b"), name="save-b")
    b_started.set()
    thread_b.start()
    thread_a.join(60)
    thread_b.join(60)
    assert not errors, errors
    loaded = porter.load(directory)
    x = mx.random.normal((2, 8), key=mx.random.key(0))
    got = np.array(loaded(x))
    assert np.array_equal(got, np.array(a(x))) or np.array_equal(got, np.array(b(x))), "a mixture of two saves"


def test_save_removes_what_a_killed_save_left(tmp_path):
    """The temporaries a killed save leaves (gigabytes of ``.model.safetensors.tmp-*`` an upload of the folder
    would publish) are removed by the next save into the folder; other hidden files are the user's and stay."""
    directory = tmp_path / "m-mlx"
    directory.mkdir()
    left = [".model.safetensors.tmp-abc123", ".graph.json.tmp-x1", ".config.json.tmp-y2", ".README.md.tmp-z3",
            ".model-00001-of-00002.safetensors.tmp-q9", ".model.safetensors.index.json.tmp-w8"]
    kept = [".gitattributes", ".notes.txt.tmp-mine", "model.safetensors.tmp-no-dot"]
    for name in left + kept:
        (directory / name).write_bytes(b"stale")
    porter.save(_port(1.0), directory)
    names = set(os.listdir(directory))
    assert not names & set(left), names & set(left)
    assert set(kept) <= names
