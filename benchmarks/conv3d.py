"""The 3-d convs of the video ResNets (R3D-18, MC3-18, R(2+1)D-18 at 1x3x16x112x112) against torch's F.conv3d.

    python benchmarks/conv3d.py [--batch 1] [--filter stem] [--repeat 5] [--threads 2] [--grad]

Torch runs every case in one process, Porter (``porter.layers.functional.conv3d``, the engine a converted model
calls) in another, so neither's threads or BLAS touch the other's. Per case: forward, and with ``--grad`` forward +
backward (input and weight gradients of ``sum(y * g)``). Columns: best wall ms and best process CPU ms of
``--repeat`` runs (the best is the steadiest figure on a shared machine), Porter/torch ratios, and the MLX peak
allocation of the Porter case (MB). Shapes are torch's ``(N, C, D, H, W)``; Porter gets the same data channels-last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, input (C, D, H, W) without batch, C_out, kernel, stride, padding; from torchvision's video ResNets at 16x112
CASES = [
    ("stem 3x7x7 s(1,2,2) 3->64", (3, 16, 112, 112), 64, (3, 7, 7), (1, 2, 2), (1, 3, 3)),
    ("3x3x3 s1 64@16x56", (64, 16, 56, 56), 64, (3, 3, 3), (1, 1, 1), (1, 1, 1)),
    ("3x3x3 s2 64->128 @16x56", (64, 16, 56, 56), 128, (3, 3, 3), (2, 2, 2), (1, 1, 1)),
    ("3x3x3 s1 128@8x28", (128, 8, 28, 28), 128, (3, 3, 3), (1, 1, 1), (1, 1, 1)),
    ("3x3x3 s2 128->256 @8x28", (128, 8, 28, 28), 256, (3, 3, 3), (2, 2, 2), (1, 1, 1)),
    ("3x3x3 s1 256@4x14", (256, 4, 14, 14), 256, (3, 3, 3), (1, 1, 1), (1, 1, 1)),
    ("3x3x3 s2 256->512 @4x14", (256, 4, 14, 14), 512, (3, 3, 3), (2, 2, 2), (1, 1, 1)),
    ("3x3x3 s1 512@2x7", (512, 2, 7, 7), 512, (3, 3, 3), (1, 1, 1), (1, 1, 1)),
    ("1x1x1 s2 64->128 @16x56", (64, 16, 56, 56), 128, (1, 1, 1), (2, 2, 2), (0, 0, 0)),
    ("1x1x1 s2 256->512 @4x14", (256, 4, 14, 14), 512, (1, 1, 1), (2, 2, 2), (0, 0, 0)),
    ("mc3 1x3x3 s1 128@16x28", (128, 16, 28, 28), 128, (1, 3, 3), (1, 1, 1), (0, 1, 1)),
    ("mc3 1x3x3 s(1,2,2) 64->128 @16x56", (64, 16, 56, 56), 128, (1, 3, 3), (1, 2, 2), (0, 1, 1)),
    ("r2+1d stem 1x7x7 s(1,2,2) 3->45", (3, 16, 112, 112), 45, (1, 7, 7), (1, 2, 2), (0, 3, 3)),
    ("r2+1d stem 3x1x1 45->64 @16x56", (45, 16, 56, 56), 64, (3, 1, 1), (1, 1, 1), (1, 0, 0)),
    ("r2+1d 1x3x3 64->144 @16x56", (64, 16, 56, 56), 144, (1, 3, 3), (1, 1, 1), (0, 1, 1)),
    ("r2+1d 3x1x1 144->64 @16x56", (144, 16, 56, 56), 64, (3, 1, 1), (1, 1, 1), (1, 0, 0)),
    ("r2+1d 3x1x1 s2 230->128 @16x28", (230, 16, 28, 28), 128, (3, 1, 1), (2, 1, 1), (1, 0, 0)),
]


def _best(fn, repeat: int, warmup: int = 2) -> tuple:
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return min(wall), min(cpu)


def _data(case, batch):
    import numpy as np

    _, (c, *spatial), c_out, k, _, _ = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, c, *spatial)).astype(np.float32)
    w = (rng.standard_normal((c_out, c, *k)) / (c * k[0] * k[1] * k[2]) ** 0.5).astype(np.float32)
    return x, w


def run_torch(args) -> list:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    rows = []
    for case in _cases(args):
        name, _, _, _, stride, padding = case
        x, w = (torch.from_numpy(a) for a in _data(case, args.batch))
        with torch.no_grad():
            fwd = _best(lambda: F.conv3d(x, w, stride=stride, padding=padding), args.repeat)
        row = {"name": name, "fwd": fwd}
        if args.grad:
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            g = torch.randn_like(F.conv3d(x, w, stride=stride, padding=padding))

            def step():
                xg.grad = wg.grad = None
                F.conv3d(xg, wg, stride=stride, padding=padding).backward(g)

            row["train"] = _best(step, args.repeat)
        rows.append(row)
    return rows


def run_porter(args) -> list:
    import porter  # noqa: F401  (first: MLX's BLAS)
    import mlx.core as mx
    import numpy as np

    from porter.layers import functional as F

    rows = []
    for case in _cases(args):
        name, _, _, _, stride, padding = case
        xn, wn = _data(case, args.batch)
        x = mx.array(np.ascontiguousarray(np.moveaxis(xn, 1, -1)))
        w = mx.array(np.ascontiguousarray(np.moveaxis(wn, 1, -1)))
        mx.eval(x, w)
        mx.reset_peak_memory()
        fwd = _best(lambda: mx.eval(F.conv3d(x, w, stride=stride, padding=padding)), args.repeat)
        row = {"name": name, "fwd": fwd, "peak_mb": mx.get_peak_memory() / 2**20}
        if args.grad:
            g = mx.random.normal(F.conv3d(x, w, stride=stride, padding=padding).shape, key=mx.random.key(1))
            grad = mx.grad(lambda a, b: (F.conv3d(a, b, stride=stride, padding=padding) * g).sum(), argnums=(0, 1))
            mx.reset_peak_memory()
            row["train"] = _best(lambda: mx.eval(grad(x, w)), args.repeat)
            row["train_peak_mb"] = mx.get_peak_memory() / 2**20
        rows.append(row)
        mx.clear_cache()
    return rows


def _cases(args):
    return [c for c in CASES if args.filter in c[0]]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--filter", default="")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--grad", action="store_true", help="also forward + input and weight gradients")
    parser.add_argument("--worker", choices=("torch", "porter"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps((run_torch if args.worker == "torch" else run_porter)(args)))
        return
    rows = {}
    for worker in ("torch", "porter"):
        env = dict(os.environ, PORTER_BLAS_THREADS=str(args.threads), PORTER_NUM_THREADS=str(args.threads))
        if worker == "torch":
            env["PORTER_BLAS"] = "none"
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", worker, *(argv or sys.argv[1:])]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        if out.returncode:
            raise SystemExit(f"{worker} worker failed:\n{out.stderr[-3000:]}")
        rows[worker] = json.loads(out.stdout.strip().splitlines()[-1])
    head = "| conv (batch %d) | torch ms (cpu) | Porter ms (cpu) | ratio | CPU ratio | MLX peak MB |" % args.batch
    if args.grad:
        head += " torch fwd+bwd ms (cpu) | Porter fwd+bwd ms (cpu) | ratio | CPU ratio | MLX peak MB |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for t, p in zip(rows["torch"], rows["porter"]):
        line = (f"| {t['name']} | {t['fwd'][0]:.1f} ({t['fwd'][1]:.0f}) | {p['fwd'][0]:.1f} ({p['fwd'][1]:.0f}) | "
                f"{p['fwd'][0] / t['fwd'][0]:.2f} | "
                f"{p['fwd'][1] / t['fwd'][1]:.2f} | {p['peak_mb']:.0f} |")
        if args.grad:
            line += (f" {t['train'][0]:.1f} ({t['train'][1]:.0f}) | {p['train'][0]:.1f} ({p['train'][1]:.0f}) | "
                     f"{p['train'][0] / t['train'][0]:.2f} | "
                     f"{p['train'][1] / t['train'][1]:.2f} | {p['train_peak_mb']:.0f} |")
        print(line, flush=True)


if __name__ == "__main__":
    main()
