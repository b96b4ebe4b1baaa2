"""The README's main job, exactly as a newcomer types it, in a real subprocess."""

import pytest
import os
import subprocess
import sys

import numpy as np
import torch

from porter.cli.layouts import ported_to_torch, torch_to_ported
from porter.compare import RTOL, assert_close

pytestmark = pytest.mark.slow  # subprocesses or long sweeps: `pytest -m "not slow"` skips them

HERE = os.path.dirname(os.path.abspath(__file__))
PORTER = os.path.join(os.path.dirname(sys.executable), "porter")


def test_convert_example_resnet18(tmp_path):
    proc = subprocess.run([PORTER, "convert", "--example", "resnet18"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["resnet18-mlx", "resnet18.pt"]
    assert sorted(os.listdir(tmp_path / "resnet18-mlx")) == ["README.md", "config.json", "graph.json",
                                                             "model.safetensors"]
    assert "porter.load('resnet18-mlx')" in proc.stdout
    assert "porter validate resnet18-mlx --against resnet18.pt" in proc.stdout
    assert proc.stderr == ""  # not a terminal: no progress bar, no noise

    # The checkpoint is a real state_dict of the example architecture; run it with torch as the oracle.
    from porter.examples import resnet18

    model = resnet18().eval()
    model.load_state_dict(torch.load(tmp_path / "resnet18.pt", weights_only=True))
    x = torch.randn(1, 3, 64, 80, generator=torch.Generator().manual_seed(3))  # not the example's size
    np.save(tmp_path / "x.npy", torch_to_ported(x.numpy(), "NCHW->NHWC"))
    run = subprocess.run([sys.executable, os.path.join(HERE, "torch_free.py"), "resnet18-mlx", "x.npy", "y"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    ours = ported_to_torch(np.load(tmp_path / "y0.npy"), "as-is")
    with torch.no_grad():
        expected = model(x).numpy()
    assert ours.shape == expected.shape
    assert_close(ours, expected, rtol=RTOL, atol=0.0)  # the project's float32 bar, relative to max |torch|

    again = subprocess.run([PORTER, "convert", "--example", "resnet18"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 2 and "--force" in again.stderr and "Traceback" not in again.stderr
