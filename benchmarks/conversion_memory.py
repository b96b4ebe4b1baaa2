"""Conversion's own memory: peak RSS and time of ``porter.convert``, ``porter.save`` and ``porter.load`` per model.

Usage: python benchmarks/conversion_memory.py [--models vit_l_16,resnet152,resnet18] [--size 224] [--json out.json]

Each step runs in its own fresh process (``--phase``), batch 1, one small input (the weights dominate):

* ``convert``: build the seeded torch model (baseline RSS: torch, Porter and the model in memory), then
  ``porter.convert``; reports the peak RSS above that baseline (``VmHWM`` reset by ``/proc/self/clear_refs``), i.e.
  what conversion adds to a process that already holds the torch model.
* ``save``: build and convert as above, drop the torch model, reset the peak, ``porter.save`` to a folder; reports
  the peak above the baseline (the port in memory).
* ``load``: a process that never imports torch: ``porter.load`` and one forward; reports the peak RSS (absolute and
  above the interpreter with Porter and MLX imported; also the peak before the forward, the load alone) and asserts
  torch was never imported.

``extra / weights`` is the peak above baseline over the bytes of the model's ``state_dict``. Models: the ViT-L/16
and ResNet-152 torch twins of the zoo's tests (``tests/zoo/twins``), ResNet-18, and ``mlp300`` (a ~300 MB stack of
Linear layers, the slow test's model).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("vit_l_16", "resnet152", "resnet18", "mlp300")


def status_mb() -> dict:
    """``VmRSS`` and ``VmHWM`` of this process, in MB (10**6 bytes)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024 / 1e6
    return out


def reset_peak() -> None:
    """Set ``VmHWM`` to the current RSS (Linux >= 4.0); the phases need it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def build(name: str, size: int):
    """``(torch model in eval mode, example input, weight bytes)`` for ``name``, seeded."""
    import torch

    torch.manual_seed(0)
    if name == "mlp300":
        model = torch.nn.Sequential(*[m for _ in range(3) for m in (torch.nn.Linear(3072, 4096), torch.nn.GELU(),
                                                                      torch.nn.Linear(4096, 3072))])
        x = torch.randn(1, 3072)
    else:
        sys.path.insert(0, ROOT)
        from tests.zoo.twins import CASES

        model = CASES[name].twin(**({"image_size": size} if name.startswith("vit") else {}))
        x = torch.randn(1, 3, size, size)
    model.eval()
    weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    return model, x, weight_bytes


def warm_up() -> None:
    """Convert a tiny model first: torch.export's and Porter's code and caches (~100 MB, whatever the model) are
    then in the baseline, and the peak above it is what grows with the model."""
    import torch

    import porter

    tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).eval()
    porter.convert(tiny, torch.randn(1, 8))


def phase_convert(name: str, size: int, directory: str, warm: bool = False) -> dict:
    import gc

    import porter  # noqa: F401  (before torch: BLAS first)

    if warm:
        warm_up()
    model, x, weight_bytes = build(name, size)
    gc.collect()
    base = status_mb()["VmRSS"]
    reset_peak()
    start = time.perf_counter()
    ported = porter.convert(model, x)
    seconds = time.perf_counter() - start
    peak = status_mb()["VmHWM"]
    del ported
    return {"weights_mb": weight_bytes / 1e6, "seconds": seconds, "base_mb": base, "peak_mb": peak,
            "extra_mb": peak - base}


def phase_save(name: str, size: int, directory: str, warm: bool = False) -> dict:
    import gc

    import mlx.core as mx

    import porter

    model, x, weight_bytes = build(name, size)
    ported = porter.convert(model, x)
    del model
    gc.collect()
    mx.clear_cache()
    base = status_mb()["VmRSS"]
    reset_peak()
    start = time.perf_counter()
    porter.save(ported, directory)
    seconds = time.perf_counter() - start
    peak = status_mb()["VmHWM"]
    return {"weights_mb": weight_bytes / 1e6, "seconds": seconds, "base_mb": base, "peak_mb": peak,
            "extra_mb": peak - base}


def phase_load(name: str, size: int, directory: str, warm: bool = False) -> dict:
    import mlx.core as mx

    import porter

    base = status_mb()["VmRSS"]
    reset_peak()
    start = time.perf_counter()
    ported = porter.load(directory)
    mx.eval(ported.parameters())
    load_seconds = time.perf_counter() - start
    load_peak = status_mb()["VmHWM"]  # the weights read, before the forward's activations and kernel caches
    x = mx.random.normal([1, 3072] if name == "mlp300" else [1, size, size, 3])  # channels-last (io_layout mlx)
    start = time.perf_counter()
    y = ported(x)
    mx.eval(y)
    forward_seconds = time.perf_counter() - start
    peak = status_mb()["VmHWM"]
    if "torch" in sys.modules:
        raise AssertionError("porter.load imported torch")
    weight_bytes = sum(a.nbytes for _, a in _flat(ported.parameters()))
    return {"weights_mb": weight_bytes / 1e6, "seconds": load_seconds, "forward_seconds": forward_seconds,
            "base_mb": base, "peak_mb": peak, "extra_mb": peak - base, "load_only_extra_mb": load_peak - base}


def _flat(tree):
    from mlx.utils import tree_flatten

    return tree_flatten(tree)


PHASES = {"convert": phase_convert, "save": phase_save, "load": phase_load}


def run_phase(phase: str, name: str, size: int, directory: str, warm: bool = False) -> dict:
    """One phase in a fresh interpreter; its result dict (``warm``: :func:`warm_up` before the baseline)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT] + sys.path)}
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase, "--models", name, "--size", str(size),
           "--dir", directory] + (["--warm"] if warm else [])
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"{phase} {name} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vit_l_16,resnet152,resnet18")
    parser.add_argument("--size", type=int, default=224, help="input height and width (ViT: its image_size)")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true",
                        help="convert a tiny model before the convert baseline (leaves out torch.export's fixed cost)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(PHASES[args.phase](args.models, args.size, args.dir, args.warm)))
        return
    rows = []
    print(f"{'model':10s} {'weights MB':>10s} | {'step':7s} {'s':>6s} {'peak MB':>8s} {'extra MB':>8s} "
          f"{'extra/weights':>13s}")
    for name in args.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"--models: unknown model {name!r} (choose from {', '.join(MODELS)})")
        with tempfile.TemporaryDirectory(prefix="porter-mem-") as tmp:
            folder = os.path.join(tmp, name)
            for phase in ("convert", "save", "load"):
                row = run_phase(phase, name, args.size, folder, args.warm)
                row.update(model=name, step=phase, ratio=row["extra_mb"] / row["weights_mb"])
                rows.append(row)
                timing = f"{row['seconds']:6.2f}" + (f" (+{row['forward_seconds']:.2f} fwd)" if phase == "load" else "")
                only = (f"  (load alone: +{row['load_only_extra_mb']:.0f} MB, "
                        f"{row['load_only_extra_mb'] / row['weights_mb']:.2f}x)" if phase == "load" else "")
                print(f"{name:10s} {row['weights_mb']:10.0f} | {phase:7s} {timing} {row['peak_mb']:8.0f} "
                      f"{row['extra_mb']:8.0f} {row['ratio']:13.2f}{only}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
