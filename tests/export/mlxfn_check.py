"""Shared by the export tests: move arrays between torch layout and a port's call layout, run .mlxfn files in a
subprocess that cannot import torch or porter (``run_mlxfn.py``), compare against torch run in the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import torch

from porter.cli.layouts import ported_to_torch, torch_to_ported
from porter.compare import RTOL
from porter.compare import assert_close as compare_close

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_mlxfn.py")


def port_inputs(ported, torch_inputs) -> list:
    """Torch tensors -> the port's call layout (e.g. NCHW -> NHWC), as MLX arrays."""
    layouts = ported.input_layouts
    arrays = [torch_to_ported(t.numpy(), layouts[i]) for i, t in enumerate(torch_inputs)]
    # mx.array reads float64 numpy as float32 unless told
    return [mx.array(a, dtype=mx.float64) if a.dtype == np.float64 else mx.array(a) for a in arrays]


def to_torch_layout(ported, outputs) -> list:
    """A port's (or its file's) outputs, in order, as numpy arrays in torch's layout."""
    layouts = ported.output_layouts
    return [ported_to_torch(np.array(o), layouts[i] if i < len(layouts) else None) for i, o in enumerate(outputs)]


def torch_outputs(model, torch_inputs) -> list:
    with torch.no_grad():
        out = model(*torch_inputs)
    return [t.numpy() for t in torch.utils._pytree.tree_leaves(out) if t is not None]  # a file has no None


def assert_close(actual, expected, rel=RTOL, what=""):
    """Shape and dtype, then porter.compare's bar: max|actual - expected| <= rel * max(max|expected|, 1) (the
    floor ``atol=rel``: outputs near zero), NaN and inf as there; exact ops pass ``rel=0`` (equal, NaN where
    torch has NaN)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    compare_close(actual, expected, rtol=rel, atol=rel, what=what)


def run_without_porter(jobs, tmp_path) -> list:
    """Run ``[(mlxfn_path, [input arrays]), ...]`` in a subprocess where torch and porter cannot be imported.

    Returns, per job, the list of outputs (numpy) or the error text MLX raised.
    """
    spec = []
    for k, (path, inputs) in enumerate(jobs):
        names = []
        for i, a in enumerate(inputs):
            names.append(str(tmp_path / f"job{k}_in{i}.npy"))
            np.save(names[-1], np.array(a))
        spec.append({"file": str(path), "inputs": names, "out": str(tmp_path / f"job{k}_out")})
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, RUNNER, str(jobs_file)], capture_output=True, text=True, env=env,
                         cwd=str(tmp_path), timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "without torch or porter" in run.stdout
    results = []
    for k in range(len(jobs)):
        error = tmp_path / f"job{k}_out.error.txt"
        if error.exists():
            results.append(error.read_text())
            continue
        outs, i = [], 0
        while (tmp_path / f"job{k}_out{i}.npy").exists():
            outs.append(np.load(tmp_path / f"job{k}_out{i}.npy"))
            i += 1
        results.append(outs)
    return results
