"""sgemm shapes of the GEMM-bound models, MLX (through each BLAS given) against torch, in one process.

Every BLAS is loaded locally and MLX's GOT slots are re-pointed at it between measurements (``porter._blas.bind_mlx``,
as ``import porter`` does once), so the libraries are compared alternately in the same process under the same load;
torch (its own MKL/oneDNN) runs in the same rounds. Figures are process CPU time per call, the minimum over rounds
(the machine is shared: wall time is noise), single-threaded unless ``--threads`` says otherwise.

Shapes are ``x (M, K) @ W.T (K, N) + b`` as Porter's Linear runs them (``mx.addmm(b, x, W.T)``; torch: ``F.linear``),
and batched attention products ``(B*H, L, 64) @ (B*H, 64, L)`` and ``(B*H, L, L) @ (B*H, L, 64)``.

    python benchmarks/gemm.py --models vit_b_16,resnet50 --batches 1,8 --blas auto,/path/libmkl_rt.so.2
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys

os.environ.setdefault("PORTER_BLAS_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.cpu_time import cpu_per_call  # noqa: E402

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import porter  # noqa: E402,F401
from porter import _blas  # noqa: E402

# (label, M per example, K, N) of x @ W.T; "attn" rows: (label, heads, L, head dim)
SHAPES: dict[str, list[tuple]] = {
    "vit_b_16": [("qkv 197x768->2304", 197, 768, 2304), ("proj 197x768->768", 197, 768, 768),
                 ("fc1 197x768->3072", 197, 768, 3072), ("fc2 197x3072->768", 197, 3072, 768),
                 ("attn", 12, 197, 64)],
    "resnet50": [("1x1 56: 64->256", 3136, 64, 256), ("1x1 56: 256->64", 3136, 256, 64),
                 ("1x1 56: 64->64", 3136, 64, 64), ("1x1 28: 128->512", 784, 128, 512),
                 ("1x1 28: 512->128", 784, 512, 128), ("1x1 14: 256->1024", 196, 256, 1024),
                 ("1x1 14: 1024->256", 196, 1024, 256), ("1x1 7: 512->2048", 49, 512, 2048),
                 ("1x1 7: 2048->512", 49, 2048, 512)],
    "convnext_tiny": [("56: 96->384", 3136, 96, 384), ("56: 384->96", 3136, 384, 96),
                      ("28: 192->768", 784, 192, 768), ("28: 768->192", 784, 768, 192),
                      ("14: 384->1536", 196, 384, 1536), ("14: 1536->384", 196, 1536, 384),
                      ("7: 768->3072", 49, 768, 3072), ("7: 3072->768", 49, 3072, 768)],
    "swin_t": [("s1 qkv 3136x96->288", 3136, 96, 288), ("s1 fc1 96->384", 3136, 96, 384),
               ("s1 fc2 384->96", 3136, 384, 96), ("s3 qkv 196x384->1152", 196, 384, 1152),
               ("s3 fc1 384->1536", 196, 384, 1536), ("s3 fc2 1536->384", 196, 1536, 384),
               ("attn", 3 * 64, 49, 32)],
}


def _load(spec: str):
    """(label, handle, path, prefix) for a BLAS spec: ``auto`` (what import porter chose) or a library path."""
    if spec == "auto":
        choice = _blas.CHOICE
        if not choice.library:
            raise SystemExit(f"no BLAS chosen: {choice.reason}")
        path = choice.library
    else:
        path = spec
    lib = _blas.load_candidate(_blas.Candidate("bench", path))
    prefix = _blas.symbol_prefix(lib)
    if prefix is None:
        raise SystemExit(f"{path}: no cblas_sgemm")
    return os.path.basename(path), lib, path, prefix


def _use(blas, threads: int):
    _, lib, path, prefix = blas
    why = _blas.bind_mlx(lib, path, prefix)
    if why:
        raise SystemExit(f"{path}: {why}")
    _blas._set_threads(lib, {_blas.ENV_THREADS: str(threads)}, prefix)


def _cases(model: str, batch: int):
    rng = np.random.default_rng(0)
    for row in SHAPES[model]:
        if row[0] == "attn":
            _, heads, length, dim = row
            q, k = (rng.standard_normal((batch * heads, length, dim), dtype=np.float32) for _ in range(2))
            p = rng.random((batch * heads, length, length), dtype=np.float32)
            mq, mk, mp = mx.array(q), mx.array(k), mx.array(p)
            tq, tk, tp = torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(p)
            flops = 2 * batch * heads * length * length * dim
            yield (f"QK^T {batch * heads}x{length}x{dim}", flops,
                   lambda: mx.eval(mq @ mk.swapaxes(-1, -2)), lambda: tq @ tk.transpose(-1, -2))
            yield (f"AV {batch * heads}x{length}x{length}", flops,
                   lambda: mx.eval(mp @ mq), lambda: tp @ tq)
            continue
        label, m, k, n = row
        x = rng.standard_normal((batch * m, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32)
        b = rng.standard_normal((n,), dtype=np.float32)
        mx_x, mx_w, mx_b = mx.array(x), mx.array(w), mx.array(b)
        t_x, t_w, t_b = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)
        yield (f"{label} b{batch}", 2 * batch * m * k * n,
               lambda: mx.eval(mx.addmm(mx_b, mx_x, mx_w.T)), lambda: torch.nn.functional.linear(t_x, t_w, t_b))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SHAPES))
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--blas", default="auto", help="comma-separated: auto (Porter's choice) or library paths")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.05, help="CPU seconds per timed batch of calls")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    blases = [_load(s.strip()) for s in args.blas.split(",")]
    names = [b[0] for b in blases]
    print(f"threads {args.threads}; process CPU ms per call, min of {args.rounds} rounds; ratio = MLX/torch")
    print(f"{'case':<30}{'GFLOP':>7}" + "".join(f"{n[:18]:>20}" for n in names) + f"{'torch':>10}"
          + "".join(f"{'r ' + n[:8]:>12}" for n in names))
    rows = []
    totals = {n: 0.0 for n in names + ["torch"]}
    for model in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            for label, flops, mlx_fn, torch_fn in _cases(model, batch):
                probe = cpu_per_call(torch_fn, 1)
                reps = max(1, int(args.min_seconds / max(probe, 1e-5)))
                best = {n: float("inf") for n in names + ["torch"]}
                for _ in range(args.rounds):
                    for blas in blases:
                        _use(blas, args.threads)
                        best[blas[0]] = min(best[blas[0]], cpu_per_call(mlx_fn, reps))
                    best["torch"] = min(best["torch"], cpu_per_call(torch_fn, reps))
                for n in best:
                    totals[n] += best[n]
                rows.append({"model": model, "batch": batch, "case": label, "gflop": flops / 1e9,
                             **{f"{n}_ms": best[n] * 1e3 for n in best}})
                print(f"{model[:6] + ' ' + label:<30}{flops / 1e9:>7.2f}"
                      + "".join(f"{best[n] * 1e3:>20.3f}" for n in names) + f"{best['torch'] * 1e3:>10.3f}"
                      + "".join(f"{best[n] / best['torch']:>12.2f}" for n in names))
                sys.stdout.flush()
    print("total ms: " + ", ".join(f"{n} {v * 1e3:.1f}" for n, v in totals.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
