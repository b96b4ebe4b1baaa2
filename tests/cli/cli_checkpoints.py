"""Writing real checkpoints of every format from a small test model, for the CLI tests."""

import os
import torch

from tests.cli import tinynets

X_SHAPE = (2, 3, 12, 12)


def write_checkpoint(kind: str, directory, name=None):
    """Save ``tinynets.seeded()`` as a real checkpoint of ``kind``; returns (path, torch model)."""
    model = tinynets.seeded()
    x = torch.randn(X_SHAPE, generator=torch.Generator().manual_seed(1))
    path = str(directory / (name or {"torchscript": "scripted.pt", "traced": "traced.pt", "export": "prog.pt2",
                                      "state_dict": "weights.pt", "wrapped": "ckpt.pth", "dataparallel": "dp.bin",
                                      "legacy": "legacy.pt", "safetensors": "weights.safetensors",
                                      "pickled": "whole.pt"}[kind]))
    if kind == "torchscript":
        torch.jit.save(torch.jit.script(model), path)
    elif kind == "traced":
        torch.jit.save(torch.jit.trace(model, x), path)
    elif kind == "export":
        torch.export.save(torch.export.export(model, (x,)), path)
    elif kind == "state_dict":
        torch.save(model.state_dict(), path)
    elif kind == "wrapped":
        torch.save({"epoch": 7, "state_dict": model.state_dict(), "optimizer": {"lr": 0.1}}, path)
    elif kind == "dataparallel":
        torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, path)
    elif kind == "legacy":
        torch.save(model.state_dict(), path, _use_new_zipfile_serialization=False)
    elif kind == "safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    elif kind == "pickled":
        torch.save(model, path)
    else:
        raise ValueError(kind)
    return path, model


def listing(directory):
    """Every path under ``directory`` (to prove a failed command wrote nothing)."""
    found = []
    for root, dirs, files in os.walk(directory):
        found.extend(os.path.relpath(os.path.join(root, n), directory) for n in dirs + files)
    return sorted(found)
