"""The single-op table of issue 15: MLX's own op, Porter's layer, and torch, on the same data, same process.

    python benchmarks/ops.py                 # 2 threads, 5 rounds of 10 timed calls each
    python benchmarks/ops.py --rounds 3 --grad
    python benchmarks/ops.py --processes --only "layer norm,group norm,conv3d"   # each side in its own process

Porter hands MLX its BLAS without touching torch's (porter/_bind.py), so one process is fair here. Rounds interleave
the three so machine load hits them alike; the table gives the median over rounds of each round's minimum, and the
range of the ratio Porter/torch over rounds. ``--grad`` times forward + backward (sum of output times a fixed
random cotangent) instead. ``--processes`` runs every (case, side, round) in a fresh process (torch's without
Porter's BLAS, ``PORTER_BLAS=none``), alternating the sides round by round; each process reports its minimum.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import porter  # noqa: E402,F401  (first: MLX's BLAS)

import mlx.core as mx  # noqa: E402
import mlx.nn as mnn  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from porter.layers import functional as PF  # noqa: E402

TF = torch.nn.functional


def cases():
    """(name, input shape (channels-last), MLX fn, Porter fn, torch fn[, torch layout of the input])."""
    s, silu_s = (1, 56, 56, 384), (1, 112, 112, 96)
    rng = np.random.default_rng(0)
    w_g = rng.standard_normal((104, 3, 3, 8)).astype(np.float32) * 0.1
    w3 = rng.standard_normal((64, 3, 3, 3, 64)).astype(np.float32) * 0.05
    mw_g, tw_g = mx.array(w_g), torch.from_numpy(w_g.transpose(0, 3, 1, 2).copy())
    mw3, tw3 = mx.array(w3), torch.from_numpy(w3.transpose(0, 4, 1, 2, 3).copy())
    norm = {c: (mx.array(a), torch.from_numpy(a).requires_grad_())  # weights and biases, trained (grads in --grad)
            for c, a in ((c, rng.standard_normal((2, c)).astype(np.float32)) for c in (64, 96, 768))}
    gn = mnn.GroupNorm(32, 64, pytorch_compatible=True)
    gn.weight, gn.bias = norm[64][0][0], norm[64][0][1]

    def layer_norm_case(shape, eps):
        c = shape[-1]
        (mw, tw) = norm[c]
        return (f"layer norm {c}ch {tuple(shape)}", shape, lambda x: mx.fast.layer_norm(x, mw[0], mw[1], eps),
                lambda x: PF.layer_norm(x, c, mw[0], mw[1], eps), lambda t: TF.layer_norm(t, (c,), tw[0], tw[1], eps))

    return [
        ("exp", s, mx.exp, PF.exp, torch.exp),
        ("sigmoid", s, mx.sigmoid, PF.sigmoid, torch.sigmoid),
        ("tanh", s, mx.tanh, PF.tanh, torch.tanh),
        ("gelu (erf)", s, mnn.gelu, PF.gelu, TF.gelu),
        ("gelu tanh", s, mnn.gelu_approx, lambda x: PF.gelu(x, "tanh"), lambda t: TF.gelu(t, approximate="tanh")),
        ("softmax last axis", s, lambda x: mx.softmax(x, axis=-1), PF.softmax, lambda t: torch.softmax(t, -1)),
        ("softmax axis 1", s, lambda x: mx.softmax(x, axis=1), lambda x: PF.softmax(x, 1),
         lambda t: torch.softmax(t, 1)),
        ("silu (1,112,112,96)", silu_s, mnn.silu, PF.silu, TF.silu),
        ("grouped 3x3 104ch g13 (1,28,28,104)", (1, 28, 28, 104),
         lambda x: mx.conv2d(x, mw_g, padding=1, groups=13), lambda x: PF.conv2d(x, mw_g, padding=1, groups=13),
         lambda t: TF.conv2d(t, tw_g, padding=1, groups=13), "nchw"),
        ("grouped 3x3/2 104ch g13 (1,56,56,104)", (1, 56, 56, 104),
         lambda x: mx.conv2d(x, mw_g, stride=2, padding=1, groups=13),
         lambda x: PF.conv2d(x, mw_g, stride=2, padding=1, groups=13),
         lambda t: TF.conv2d(t, tw_g, stride=2, padding=1, groups=13), "nchw"),
        ("conv3d 3x3x3 64->64 (1,8,56,56,64)", (1, 8, 56, 56, 64), lambda x: mx.conv3d(x, mw3, padding=1),
         lambda x: PF.conv3d(x, mw3, padding=1), lambda t: TF.conv3d(t, tw3, padding=1), "ncdhw"),
        layer_norm_case((1, 56, 56, 96), 1e-6),  # ConvNeXt-T / Swin-T stage 1 (torch: the same channels-last tensor)
        layer_norm_case((1, 197, 768), 1e-6),  # ViT-B/16 tokens
        ("group norm 32g (1,56,56,64)", (1, 56, 56, 64), gn, lambda x: PF.group_norm(x, 32, gn.weight, gn.bias),
         lambda t: TF.group_norm(t, 32, norm[64][1][0], norm[64][1][1]), "nchw"),
    ]


def _time(fn, n):
    fn()
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _runners(case, grad: bool):
    """Zero-argument callables for the MLX, Porter and torch sides of ``case``."""
    name, shape, f_mlx, f_porter, f_torch = case[:5]
    layout = case[5] if len(case) > 5 else None
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    xm = mx.array(x)
    if layout == "nchw":
        xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy())
    elif layout == "ncdhw":
        xt = torch.from_numpy(x.transpose(0, 4, 1, 2, 3).copy())
    else:
        xt = torch.from_numpy(x)
    if grad:
        xt.requires_grad_()

        def run_mx(f):
            g = mx.grad(lambda a: f(a).sum())
            return lambda: mx.eval(g(xm))

        def run_torch():
            xt.grad = None
            f_torch(xt).sum().backward()
    else:
        def run_mx(f):
            return lambda: mx.eval(f(xm))

        def run_torch():
            with torch.no_grad():
                f_torch(xt)
    return {"mlx": run_mx(f_mlx), "porter": run_mx(f_porter), "torch": run_torch}


def _row(name, rows):
    m, p, t = (statistics.median(r[i] for r in rows) for i in range(3))
    ratios = [r[1] / r[2] for r in rows]
    print(f"| {name} | {m:.2f} | {p:.2f} | {t:.2f} | {p / t:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
          f"{p / m:.3f} |", flush=True)


def _in_process(case_name: str, side: str, args) -> float:
    """One fresh process times one side of one case; returns its best time (ms)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--only", case_name, "--repeat",
           str(args.repeat), "--threads", str(args.threads)] + (["--grad"] if args.grad else [])
    env = dict(os.environ, **({"PORTER_BLAS": "none"} if side == "torch" else {}))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if run.returncode != 0:
        raise SystemExit(f"worker {side} {case_name!r} failed:\n{run.stdout}{run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])["ms"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--grad", action="store_true", help="forward + backward")
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    parser.add_argument("--processes", action="store_true", help="each side of each round in its own process")
    parser.add_argument("--worker", choices=("mlx", "porter", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from porter.layers import _native

    _native.set_num_threads(args.threads)
    if args.worker:  # one side of the one case named exactly by --only
        (case,) = [c for c in cases() if c[0] == args.only]
        print(json.dumps({"ms": _time(_runners(case, args.grad)[args.worker], args.repeat)}))
        return
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), mlx {mx.__version__}, "
          f"native kernels: {_native.status()['available']}; {'forward+backward' if args.grad else 'forward'}"
          f"{'; each side in its own process' if args.processes else ''}")
    print("| op | MLX ms | Porter ms | torch ms | Porter/torch (range) | Porter/MLX |")
    print("|---|---|---|---|---|---|")
    for case in cases():
        name = case[0]
        if args.only and not any(k in name for k in args.only.split(",")):
            continue
        if args.processes:
            rows = [tuple(_in_process(name, side, args) for side in ("mlx", "porter", "torch"))
                    for _ in range(args.rounds)]
        else:
            run = _runners(case, args.grad)
            rows = [tuple(_time(run[side], args.repeat) for side in ("mlx", "porter", "torch"))
                    for _ in range(args.rounds)]
        _row(name, rows)


if __name__ == "__main__":
    main()
