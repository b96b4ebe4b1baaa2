"""Whole-model forward and training-step time in MLX through Porter against torch, each in its own process.

    python benchmarks/models.py                          # every registered model, batch 1 and 8, forward
    python benchmarks/models.py --models resnet18 --batches 8 --rounds 5 --repeat 10
    python benchmarks/models.py --modes forward,train --models resnet18,convnext_tiny --batches 8
    python benchmarks/models.py --models regnet_y_400mf --batches 1 --profile   # + where the MLX time goes
    python benchmarks/models.py --env PORTER_CACHE_LIMIT=mlx   # e.g. MLX's default cache limit, for comparison

Models are registered torch twins (``register(name, builder, input shape)``: ``porter.examples`` and the
full-size twins of ``benchmarks/twins.py``; torchvision is not needed). A training step is forward, backward of the
mean squared output and an SGD update (torch: ``torch.optim.SGD``; MLX: ``nn.value_and_grad`` and
``mlx.optimizers.SGD`` on the converted model), both with the model in eval mode (batch norm frozen: the converted
graph is the eval graph). ``--profile`` adds the MLX side's per-op time attribution (``porter.bench.op_profile``).

Each round starts a fresh torch process and a fresh MLX process (porter.bench.benchmark_isolated), so the BLAS Porter
loads for MLX cannot change torch's speed, and alternates them so machine load hits both alike. The table gives the
median over all timed runs of all rounds, the ratio MLX/torch (below 1: MLX faster) with its range over rounds (the
noise), the same ratio in process CPU time (steadier on a loaded machine, most of all with --threads 1), the BLAS
MLX used, and peak memory: ``rss`` is the process's peak resident size (interpreter and libraries included; the MLX
process also holds torch, used to build and check the model), ``mlx`` is MLX's own peak allocation.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from porter.bench import benchmark_isolated  # noqa: E402

MODELS: dict = {}


def register(name: str, builder: str, chw: tuple, zoo: str | None = None) -> None:
    """Add a model: ``builder`` is ``"module:function"`` (no arguments, returns the torch model), ``chw`` the input
    shape without the batch (``(3, 224, 224)``; video ``(3, 16, 112, 112)``), ``zoo`` a ``porter.zoo`` model that
    loads the same state_dict (for ``--path zoo``)."""
    if name in MODELS:
        raise ValueError(f"[benchmarks.models] model {name!r} is already registered")
    MODELS[name] = (builder, zoo, tuple(chw))


register("resnet18", "porter.examples:resnet18", (3, 224, 224), zoo="resnet18")
register("resnet50", "porter.examples:resnet50", (3, 224, 224))
register("mobilenet_v2", "porter.examples:mobilenet_v2", (3, 224, 224), zoo="mobilenet_v2")
register("efficientnet_b0", "benchmarks.twins:efficientnet_b0", (3, 224, 224))
register("regnet_y_400mf", "benchmarks.twins:regnet_y_400mf", (3, 224, 224))
register("convnext_tiny", "benchmarks.twins:convnext_tiny", (3, 224, 224))
register("vit_b_16", "benchmarks.twins:vit_b_16", (3, 224, 224))
register("swin_t", "benchmarks.twins:swin_t", (3, 224, 224))
register("r3d_18", "benchmarks.twins:r3d_18", (3, 16, 112, 112))


def _zoo_forward(name: str, model, x=None):
    """The hand-written ``porter.zoo`` model ``name`` with the torch model's weights (channels-last forward)."""
    import porter.zoo

    ported = porter.zoo.create(name)
    ported.load_torch_state_dict(model.state_dict())
    return ported


def zoo_resnet18(model, x=None):
    return _zoo_forward("resnet18", model, x)


def zoo_mobilenet_v2(model, x=None):
    return _zoo_forward("mobilenet_v2", model, x)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--modes", default="forward", help="forward, train, or both: forward,train")
    parser.add_argument("--profile", action="store_true", help="per-op time attribution of the MLX forward")
    parser.add_argument("--rounds", type=int, default=3, help="fresh torch+MLX process pairs per case")
    parser.add_argument("--repeat", type=int, default=10, help="timed forwards per process")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--path", choices=("convert", "zoo"), default="convert",
                        help="MLX model from porter.convert, or the hand-written porter.zoo model")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for torch and for MLX's BLAS (default: all usable cores)")
    parser.add_argument("--compile", action="store_true", help="wrap the MLX forward in mx.compile")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment for the MLX processes (e.g. PORTER_BLAS=none)")
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    if args.threads:
        env["PORTER_BLAS_THREADS"] = str(args.threads)
    path = args.path

    header = ("| model | batch | mode | torch ms | MLX ms | MLX/torch (range over rounds) | CPU-time MLX/torch | "
              "torch peak rss | MLX peak rss / mlx | BLAS (threads) | MLX path | max rel err |")
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    profiles = []
    cases = [(n, int(b), mode) for n in args.models.split(",") for mode in args.modes.split(",")
             for b in args.batches.split(",")]
    for name, batch, mode in cases:
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}; registered: {', '.join(MODELS)}")
        builder, zoo_name, chw = MODELS[name]
        spec = dict(builder=builder, shape=[batch, *chw], repeat=args.repeat, warmup=args.warmup,
                    converter=None if path == "convert" else f"benchmarks.models:zoo_{zoo_name}", sys_path=[ROOT],
                    compile=args.compile, threads=args.threads or None, mode=mode)
        torch_rows, mlx_rows = [], []
        for i in range(args.rounds):
            torch_rows.append(benchmark_isolated(dict(spec, framework="torch")))
            profile = args.profile and mode == "forward" and i == args.rounds - 1
            mlx_rows.append(benchmark_isolated(dict(spec, framework="mlx", profile=profile), env=env))
        t = statistics.median([v for r in torch_rows for v in r["times_ms"]])
        m = statistics.median([v for r in mlx_rows for v in r["times_ms"]])
        ratios = [mr["median_ms"] / tr["median_ms"] for tr, mr in zip(torch_rows, mlx_rows)]
        cpu = statistics.median(r["cpu_median_ms"] for r in mlx_rows) / statistics.median(
            r["cpu_median_ms"] for r in torch_rows)
        last = mlx_rows[-1]
        if last.get("profile"):
            profiles.append((name, batch, last["profile"]))
        print(f"| {name} | {batch} | {mode} | {t:.1f} | {m:.1f} | {m / t:.2f} ({min(ratios):.2f}-"
              f"{max(ratios):.2f}) | {cpu:.2f} | "
              f"{max(r['peak_rss_mb'] for r in torch_rows):.0f} MB | "
              f"{max(r['peak_rss_mb'] for r in mlx_rows):.0f} / {max(r['mlx_peak_mb'] for r in mlx_rows):.0f} MB"
              f" | {last['blas']} ({last['threads']}) | {last['path']} | "
              f"{max(r['max_rel_err'] for r in mlx_rows):.1e} |", flush=True)
    for name, batch, profile in profiles:
        print(f"\nMLX forward of {name} at batch {batch}, per op (each node evaluated alone):")
        for op, ms, share in profile[:12]:
            print(f"  {op:32s} {ms:8.2f} ms  {100 * share:5.1f}%")


if __name__ == "__main__":
    main()
