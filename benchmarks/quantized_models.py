"""A quantized port against the float port of the same model: size on disk, peak memory, forward time, error.

    python benchmarks/quantized_models.py                       # resnet18, mobilenet_v2; float, 8-bit, 4-bit
    python benchmarks/quantized_models.py --models resnet18 --batch 8 --repeat 20 --group-size 32

Each model is converted once (``porter.convert``), saved as a float artifact, and quantized with
``porter.layers.quantize_model`` (convolutions, Linear; layers whose sizes do not allow it stay float) into an 8-bit
and a 4-bit artifact. Every artifact is then loaded and run in a fresh torch-free process (``porter.load``), which
reports the median forward time, the process's peak resident memory and MLX's peak allocation. The error column is
the largest difference from the float port's output on the same seeded input, relative to its largest value.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODELS = {"resnet18": "porter.examples:resnet18", "mobilenet_v2": "porter.examples:mobilenet_v2",
          "resnet50": "porter.examples:resnet50"}


def _run(directory: str, shape: list, repeat: int) -> dict:
    """In a fresh process: load, run, time. Never imports torch."""
    import resource
    import statistics
    import time

    import mlx.core as mx
    import numpy as np

    import porter

    start = time.perf_counter()
    model = porter.load(directory)
    load_s = time.perf_counter() - start
    x = mx.array(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    for _ in range(3):
        mx.eval(model(x))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        out = model(x)
        mx.eval(out)
        times.append((time.perf_counter() - start) * 1e3)
    np.save(os.path.join(directory, "out.npy"), np.array(out))
    return {"ms": statistics.median(times), "load_s": load_s,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "mlx_peak_mb": mx.get_peak_memory() / 2**20}


def _size_mb(directory: str) -> float:
    return sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)
               if f.endswith(".safetensors")) / 2**20


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--group-size", type=int, default=64)
    parser.add_argument("--run", help=argparse.SUPPRESS)  # worker mode: an artifact folder
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        print(json.dumps(_run(args.run, json.loads(args.shape), args.repeat)))
        return

    import importlib

    import numpy as np
    import torch

    import porter
    from porter.layers import quantize_model

    print(f"{'model':<14} {'weights':<8} {'disk MB':>8} {'ms':>8} {'x float':>8} {'peak RSS MB':>12} "
          f"{'MLX peak MB':>12} {'rel err':>9}  layers left float")
    for name in args.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"--models: unknown model {name!r} (known: {', '.join(MODELS)})")
        module, factory = MODELS[name].split(":")
        torch.manual_seed(0)
        model = getattr(importlib.import_module(module), factory)().eval()
        x = torch.randn(args.batch, 3, args.size, args.size)
        shape = [args.batch, args.size, args.size, 3]
        with tempfile.TemporaryDirectory() as tmp:
            rows = []
            for label, bits in (("float32", None), ("8-bit", 8), ("4-bit", 4)):
                ported = porter.convert(model, x)
                left = 0
                if bits is not None:
                    left = len(quantize_model(ported, group_size=args.group_size, bits=bits).skipped)
                folder = os.path.join(tmp, label)
                porter.save(ported, folder)
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", folder, "--shape",
                                       json.dumps(shape), "--repeat", str(args.repeat)], capture_output=True,
                                      text=True, cwd=ROOT)
                if proc.returncode:
                    raise SystemExit(f"the {label} worker failed:\n{proc.stderr[-2000:]}")
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                result.update(label=label, disk=_size_mb(folder), left=left,
                              out=np.load(os.path.join(folder, "out.npy")))
                rows.append(result)
            base = rows[0]
            for r in rows:
                err = np.abs(r["out"] - base["out"]).max() / np.abs(base["out"]).max()
                print(f"{name:<14} {r['label']:<8} {r['disk']:>8.1f} {r['ms']:>8.2f} {r['ms'] / base['ms']:>8.2f} "
                      f"{r['rss_mb']:>12.0f} {r['mlx_peak_mb']:>12.1f} {err:>9.2e}  {r['left']}")


if __name__ == "__main__":
    main()
