"""One model's forward with a Porter switch off and on, and torch's, alternately in one process (1-thread CPU time).

A switch is a module attribute read while the MLX graph is built (``porter.converters.layer_types:MHA_PACKED``,
``porter.layers._conv_engine:MATMUL_1X1``): each round runs torch, the port with the switch False, then True, and the
minimum process CPU time per forward over rounds is kept (the machine is shared: wall time is noise).

    python benchmarks/model_switch.py --model vit_b_16 --batches 1,8 \
        --switch porter.converters.layer_types:MHA_PACKED
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("PORTER_BLAS_THREADS", "1")
os.environ.setdefault("PORTER_NUM_THREADS", "1")

import porter  # noqa: E402  (first: the BLAS)
import mlx.core as mx  # noqa: E402
import torch  # noqa: E402

from benchmarks import model_list  # noqa: E402
from benchmarks.cpu_time import cpu_per_call  # noqa: E402
from porter.bench import load_spec  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--switch", required=True, help="module:attribute (a bool)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2, help="forwards per timing")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    module_name, attr = args.switch.split(":")
    module = importlib.import_module(module_name)
    entry = model_list.MODELS[args.model]
    shape = entry["chw"]
    torch.manual_seed(0)
    model = load_spec(entry["builder"])(**entry["builder_kwargs"]).eval()
    for batch in (int(b) for b in args.batches.split(",")):
        x = torch.randn(batch, *shape)
        ported = porter.convert(model, (x,), dynamic="static")
        xm = mx.array(x.permute(0, 2, 3, 1).contiguous().numpy())

        def run_torch():
            with torch.no_grad():
                model(x)

        def run_port(value):
            setattr(module, attr, value)
            mx.eval(ported(xm))

        for fn in (run_torch, lambda: run_port(False), lambda: run_port(True)):
            fn()
        best = {"torch": float("inf"), False: float("inf"), True: float("inf")}
        for _ in range(args.rounds):
            best["torch"] = min(best["torch"], cpu_per_call(run_torch, args.reps, warmup=False))
            for value in (False, True):
                best[value] = min(best[value], cpu_per_call(lambda: run_port(value), args.reps, warmup=False))
        setattr(module, attr, True)
        t = best["torch"]
        print(f"{args.model} b{batch}: torch {t * 1e3:.0f} ms, {attr}=False {best[False] * 1e3:.0f} ms "
              f"({best[False] / t:.2f}), True {best[True] * 1e3:.0f} ms ({best[True] / t:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
