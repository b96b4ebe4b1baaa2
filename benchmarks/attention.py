"""A converted ``nn.MultiheadAttention`` (``converters.layer_types.MultiheadAttention``) against torch's, in one process.

The layer's implementation switch (``layer_types.MHA_PACKED``: one packed in-projection GEMM and one copy into
heads, against three projections on a transposed view) is flipped between measurements, so both run alternately
under the same load; torch runs in the same rounds. Figures are process CPU time per call, the minimum over rounds,
single-threaded unless ``--threads`` says otherwise (the machine is shared: wall time is noise).

    python benchmarks/attention.py --cases vit_b_16,swin_t --batches 1,8
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PORTER_BLAS_THREADS", "1")
os.environ.setdefault("PORTER_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.cpu_time import cpu_per_call  # noqa: E402

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import porter  # noqa: E402,F401
from porter.converters import layer_types  # noqa: E402

# name: (embed_dim, heads, tokens); batch_first as torchvision's ViT
CASES = {"vit_b_16": (768, 12, 197), "vit_l_16": (1024, 16, 197), "small": (64, 4, 50)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="vit_b_16")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--layouts", default="batch_first,seq_first",
                        help="the array order the port's layer sees: (N, L, E) or (L, N, E)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}; process CPU ms per call, min of {args.rounds} rounds")
    print(f"{'case':<34}{'torch':>9}{'old':>9}{'new':>9}{'old/t':>8}{'new/t':>8}{'max |new-torch|':>17}")
    for name in args.cases.split(","):
        e, h, length = CASES[name]
        torch.manual_seed(0)
        ref = torch.nn.MultiheadAttention(e, h, batch_first=True).eval()
        for layout in args.layouts.split(","):
            seq_first = layout == "seq_first"
            layer = layer_types.MultiheadAttention(e, h, batch_first=not seq_first)
            layer.load_weights([(k, mx.array(v.detach().numpy())) for k, v in ref.state_dict().items()])
            layer.eval()
            for batch in (int(b) for b in args.batches.split(",")):
                x = torch.randn(batch, length, e)
                xm = mx.array((x.transpose(0, 1) if seq_first else x).contiguous().numpy())

                def run_torch():
                    with torch.no_grad():
                        return ref(x, x, x, need_weights=False)[0]

                def run_port():
                    y = layer(xm)
                    mx.eval(y)
                    return y

                results = {}
                for packed in (False, True):
                    layer_types.MHA_PACKED = packed
                    y = np.array(run_port())
                    results[packed] = np.swapaxes(y, 0, 1) if seq_first else y
                expected = run_torch().numpy()
                err = max(float(np.abs(results[p] - expected).max()) for p in results)
                reps = max(1, int(args.min_seconds / max(cpu_per_call(run_torch, 1), 1e-5)))
                best = {"torch": float("inf"), False: float("inf"), True: float("inf")}
                for _ in range(args.rounds):
                    best["torch"] = min(best["torch"], cpu_per_call(run_torch, reps))
                    for packed in (False, True):
                        layer_types.MHA_PACKED = packed
                        best[packed] = min(best[packed], cpu_per_call(run_port, reps))
                layer_types.MHA_PACKED = True
                t, old, new = best["torch"], best[False], best[True]
                print(f"{f'{name} {layout} b{batch}':<34}{t * 1e3:>9.2f}{old * 1e3:>9.2f}{new * 1e3:>9.2f}"
                      f"{old / t:>8.2f}{new / t:>8.2f}{err:>17.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
