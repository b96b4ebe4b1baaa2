"""Transformer ops through Porter's API against torch, each framework in its own process (issue 15, native13-14).

    python benchmarks/transformer_ops.py                       # every case, 5 rounds
    python benchmarks/transformer_ops.py --only softmax --rounds 7

Softmax over the last axis at the attention shapes of Swin-T (49 keys per window, each stage's windows x heads) and
ViT-B/16 (197 keys), float32/float16/bfloat16, forward and forward+backward, LayerNorm at Swin-T's and
ViT-B's shapes (float32 and float16), and L2 normalisation (``F.normalize(x, dim=-1)``) at Swin V2-T's cosine-attention
q/k shapes (windows x heads, 49, 32), forward and forward+backward. Each round starts one torch process and one Porter process (torch first, then Porter, alternating
round by round is not needed: each process keeps its own minimum); a process times every case single-threaded
(``PORTER_NUM_THREADS=1 PORTER_BLAS_THREADS=1``, torch ``set_num_threads(1)``) as process CPU time per call, the
minimum over its repeats. The Porter process also times the previous path where a switch keeps it
(``porter.layers.activation.SOFTMAX_ROWS`` off: the any-axis softmax kernel; for the L2 normalisation the four
kernels a converted graph ran before ``converters/ir_fusion.py``: vector_norm, clamp, expand, divide), alternated with
the new one. The table
gives the minimum over rounds of each side and torch/Porter ratios. CPU time is what survives a shared machine;
wall time is noise there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SOFTMAX_SHAPES = [(64, 3, 49, 49), (16, 6, 49, 49), (4, 12, 49, 49), (1, 24, 49, 49), (1, 12, 197, 197)]
LAYER_NORM_SHAPES = [(1, 56, 56, 96), (1, 7, 7, 768), (1, 197, 768), (1, 49, 96)]
NORMALIZE_SHAPES = [(64, 3, 49, 32), (16, 6, 49, 32), (1, 24, 49, 32), (512, 3, 49, 32)]
DTYPES = ("float32", "float16", "bfloat16")


def cases():
    """(name, kind, shape, dtype, grad)."""
    out = []
    for dtype in DTYPES:
        for shape in SOFTMAX_SHAPES:
            out.append((f"softmax {dtype} {shape}", "softmax", shape, dtype, False))
    for shape in SOFTMAX_SHAPES[:1] + SOFTMAX_SHAPES[-1:]:
        out.append((f"softmax fwd+bwd float32 {shape}", "softmax", shape, "float32", True))
    for dtype in DTYPES[:2]:
        for shape in LAYER_NORM_SHAPES:
            out.append((f"layer_norm {dtype} {shape}", "layer_norm", shape, dtype, False))
    for dtype in DTYPES:
        for shape in NORMALIZE_SHAPES:
            out.append((f"l2_normalize {dtype} {shape}", "l2_normalize", shape, dtype, False))
    for shape in NORMALIZE_SHAPES[:1]:
        out.append((f"l2_normalize fwd+bwd float32 {shape}", "l2_normalize", shape, "float32", True))
    return out


def _cpu(fn, reps: int) -> float:
    fn()
    start = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - start) / reps


def _data(shape, seed=0):
    import numpy as np

    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3


def _torch_runner(case):
    import torch

    _, kind, shape, dtype, grad = case
    x = torch.from_numpy(_data(shape)).to(getattr(torch, dtype))
    if kind == "softmax":
        if grad:
            x.requires_grad_()
            g = torch.from_numpy(_data(shape, 1))

            def run():
                x.grad = None
                torch.autograd.backward(torch.softmax(x, -1), g)
            return run
        return lambda: torch.softmax(x, -1)
    if kind == "l2_normalize":
        if grad:
            x.requires_grad_()
            g = torch.from_numpy(_data(shape, 1))

            def run():
                x.grad = None
                torch.autograd.backward(torch.nn.functional.normalize(x, dim=-1), g)
            return run
        return lambda: torch.nn.functional.normalize(x, dim=-1)
    c = shape[-1]
    w, b = torch.from_numpy(_data((c,), 2)).to(x.dtype), torch.from_numpy(_data((c,), 3)).to(x.dtype)
    return lambda: torch.nn.functional.layer_norm(x, (c,), w, b, 1e-6)


def _porter_runners(case):
    """{label: callable}: the port's path, and the previous one where a switch keeps it."""
    import mlx.core as mx

    from porter.layers import activation
    from porter.layers import functional as F

    _, kind, shape, dtype, grad = case
    x = mx.array(_data(shape)).astype(getattr(mx, dtype))
    mx.eval(x)
    if kind == "softmax":
        if grad:
            g = mx.array(_data(shape, 1))
            step = mx.vjp(lambda a: F.softmax(a, -1), [x], [g])  # warm: nothing cached between calls
            del step
            fn = lambda: mx.eval(mx.vjp(lambda a: F.softmax(a, -1), [x], [g]))  # noqa: E731
        else:
            fn = lambda: mx.eval(F.softmax(x, -1))  # noqa: E731

        def switched(on):
            def run():
                activation.SOFTMAX_ROWS = on
                fn()
            return run
        return {"porter": switched(True), "previous": switched(False)}
    if kind == "l2_normalize":
        from porter.converters.registry import get_kernel
        from porter.converters.ops.misc import k_vector_norm

        clamp, expand, divide = get_kernel("unary"), get_kernel("expand"), get_kernel("binary")

        def previous(a):  # the converted graph's four kernels before ir_fusion.py (float32 norm, as precision.py)
            n = k_vector_norm(a.astype(mx.float32), ord=2.0, axes=[-1], keepdims=True).astype(a.dtype)
            c = clamp(n, fn="clamp", min=1e-12, max=None)
            return divide(a, expand(c, list(a.shape), lead=0, perm=list(range(a.ndim))), fn="div")

        def porter_fn(a):
            return F.l2_normalize(a, -1, 1e-12)
        runs = {}
        for label, f in (("porter", porter_fn), ("previous", previous)):
            if grad:
                g = mx.array(_data(shape, 1))
                runs[label] = lambda f=f, g=g: mx.eval(mx.vjp(lambda a: f(a), [x], [g]))
            else:
                runs[label] = lambda f=f: mx.eval(f(x))
            runs[label]()
        return runs
    c = shape[-1]
    w, b = mx.array(_data((c,), 2)).astype(x.dtype), mx.array(_data((c,), 3)).astype(x.dtype)
    mx.eval(w, b)
    return {"porter": lambda: mx.eval(F.layer_norm(x, c, w, b, 1e-6))}


def worker(side: str, only: str, reps_elements: float) -> None:
    os.environ["PORTER_NUM_THREADS"] = "1"
    os.environ["PORTER_BLAS_THREADS"] = "1"
    if side == "porter":
        import porter  # noqa: F401  (the BLAS first)
    else:
        import torch

        torch.set_num_threads(1)
    result = {}
    for case in cases():
        if only and not any(k in case[0] for k in only.split(",")):
            continue
        runners = _porter_runners(case) if side == "porter" else {"torch": _torch_runner(case)}
        size = 1
        for d in case[2]:
            size *= d
        reps = max(5, int(reps_elements / size))
        best = {k: float("inf") for k in runners}
        for _ in range(3):
            for label, fn in runners.items():  # switches alternate in one process
                best[label] = min(best[label], _cpu(fn, reps))
        result[case[0]] = best
    print(json.dumps(result))


def _run_side(side, args):
    env = dict(os.environ, PORTER_NUM_THREADS="1", PORTER_BLAS_THREADS="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--only", args.only,
           "--elements", str(args.elements)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if run.returncode != 0:
        raise SystemExit(f"{side} worker failed:\n{run.stdout}{run.stderr}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    parser.add_argument("--elements", type=float, default=2e6, help="elements per timed batch of calls")
    parser.add_argument("--worker", choices=("porter", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.only, args.elements)
        return 0
    best: dict = {}
    for _ in range(args.rounds):
        for side in ("torch", "porter"):
            for name, row in _run_side(side, args).items():
                for label, sec in row.items():
                    cur = best.setdefault(name, {})
                    cur[label] = min(cur.get(label, float("inf")), sec)
    print("single-threaded process CPU time per call (us), min over rounds; each framework in its own process")
    print("| op | torch | Porter | Porter/torch | previous path | previous/torch |")
    print("|---|---|---|---|---|---|")
    for name, row in best.items():
        t, p = row["torch"], row["porter"]
        prev = row.get("previous")
        extra = f"{prev * 1e6:.1f} | {prev / t:.2f}" if prev is not None else "- | -"
        print(f"| {name} | {t * 1e6:.1f} | {p * 1e6:.1f} | {p / t:.2f} | {extra} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
