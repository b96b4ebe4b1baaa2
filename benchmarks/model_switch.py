"""Models' forwards with a Porter switch off and on (or, without ``--switch``, the port alone) and torch's,
alternately in one process (1-thread CPU time).

A switch is a module attribute read while the MLX graph is built (``porter.converters.layer_types:MHA_PACKED``,
``porter.layers._conv_engine:MATMUL_1X1``) or at conversion (``porter.converters.ir_fusion:L2_NORMALIZE``: the model
is converted once per switch value, with the switch set): each round runs torch, the port with the switch False, then
True, and the minimum process CPU time per forward over rounds is kept (the machine is shared: wall time is noise).

    python benchmarks/model_switch.py --model vit_b_16 --batches 1,8 \
        --switch porter.converters.layer_types:MHA_PACKED
    python benchmarks/model_switch.py --model swin_t,resnet50 --batches 1,8   # port vs torch only
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
from porter.bench import load_spec, native_kernels, native_problem  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model names (benchmarks/model_list.py), comma-separated")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--switch", help="module:attribute (a bool), or several comma-separated (flipped together); "
                                         "without it the port runs as it is")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2, help="forwards per timing")
    args = parser.parse_args(argv)
    problem = native_problem(native_kernels())
    if problem:  # the port would time the pure-MLX fallback
        parser.exit(2, f"{parser.prog}: refusing to time: {problem}\n")
    torch.set_num_threads(1)
    for name in args.model.split(","):
        _run_model(name, args)
    return 0


def _run_model(name: str, args) -> None:
    switches = []  # (module, attribute): all set False, then all True
    for item in (args.switch.split(",") if args.switch else []):
        module_name, attr = item.strip().split(":")
        switches.append((importlib.import_module(module_name), attr))
    module = switches[0][0] if switches else None
    attr = "+".join(a for _, a in switches)
    values = (False, True) if switches else (None,)
    entry = model_list.MODELS[name]
    shape = entry["chw"]
    torch.manual_seed(0)
    model = load_spec(entry["builder"])(**entry["builder_kwargs"]).eval()
    for batch in (int(b) for b in args.batches.split(",")):
        x = torch.randn(batch, *shape)
        ports = {}
        for value in values:  # converted with the switch set: a conversion-time switch takes effect too
            for switch_module, switch_attr in switches:
                setattr(switch_module, switch_attr, value if value is not None else getattr(switch_module, switch_attr))
            ports[value] = porter.convert(model, (x,), dynamic="static")
        xm = mx.array(x.permute(0, 2, 3, 1).contiguous().numpy())

        def run_torch():
            with torch.no_grad():
                model(x)

        def run_port(value):
            for switch_module, switch_attr in switches:
                setattr(switch_module, switch_attr, value)
            mx.eval(ports[value](xm))

        run_torch()
        for value in values:
            run_port(value)
        best = {"torch": float("inf"), **{value: float("inf") for value in values}}
        for _ in range(args.rounds):
            best["torch"] = min(best["torch"], cpu_per_call(run_torch, args.reps, warmup=False))
            for value in values:
                best[value] = min(best[value], cpu_per_call(lambda: run_port(value), args.reps, warmup=False))
        t = best["torch"]
        if module is None:
            print(f"{name} b{batch}: torch {t * 1e3:.0f} ms, port {best[None] * 1e3:.0f} ms ({best[None] / t:.2f})",
                  flush=True)
            continue
        for switch_module, switch_attr in switches:
            setattr(switch_module, switch_attr, True)
        print(f"{name} b{batch}: torch {t * 1e3:.0f} ms, {attr}=False {best[False] * 1e3:.0f} ms "
              f"({best[False] / t:.2f}), True {best[True] * 1e3:.0f} ms ({best[True] / t:.2f})", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
