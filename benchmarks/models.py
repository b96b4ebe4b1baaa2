"""Whole-model forward and training-step time in MLX through Porter against torch, each in its own process.

    python benchmarks/models.py                          # every registered model (--models all), batch 1 and 8, forward
    python benchmarks/models.py --models classification --batches 1 --rounds 1 --repeat 3 --json rows.json
    python benchmarks/models.py --models resnet18 --batches 8 --rounds 5 --repeat 10
    python benchmarks/models.py --modes forward,train --models resnet18,convnext_tiny --batches 8
    python benchmarks/models.py --models regnet_y_400mf --batches 1 --profile   # + where the MLX time goes
    python benchmarks/models.py --models video --profile slow   # per-op profile of the rows above the target only
    python benchmarks/models.py --env PORTER_CACHE_LIMIT=mlx   # e.g. MLX's default cache limit, for comparison

``--models`` takes model names and the groups ``all``, ``classification``, ``video``, ``segmentation``
(``benchmarks/model_list.py``: one twin per torchvision family at its standard input; torchvision is not needed).
A training step is forward, backward of the mean squared output and an SGD update (torch: ``torch.optim.SGD``; MLX:
``nn.value_and_grad`` and ``mlx.optimizers.SGD`` on the loaded port), both with the model in eval mode (batch norm
frozen: the converted graph is the eval graph); the row notes it when the two sides train a different number of
parameters. ``--profile`` adds the MLX side's per-op time attribution (``porter.bench.op_profile``).

The MLX side must run Porter's native CPU kernels built for the current ``layers/csrc`` sources (``porter
build-kernels``): without that build the layers would silently fall back to pure-MLX ops, so the run is refused
before anything is converted, and an MLX worker that finds no build later (a source edited mid-run) fails its row.
``--allow-pure-mlx`` times the fallback on purpose (warned, marked in the MLX path column, ``native`` in the JSON);
``--env PORTER_NATIVE=0`` is the explicit pure-MLX comparison and needs no flag.

Per model, one converter process (holding torch) converts it with ``porter.convert``, saves it with ``porter.save``
and saves torch's output for each batch. Each round then starts a fresh torch process and a fresh MLX process that
only loads the artifact (``porter.load``) and runs it: the MLX process never imports torch (checked: column
torch-free), and its output is compared with torch's (max rel err). Rounds alternate the two so machine load hits
both alike. The table gives the median over all timed runs of all rounds, the ratio MLX/torch (below 1: MLX faster)
with its range over rounds (the noise), the same ratio in process CPU time (steadier on a loaded machine, most of all
with --threads 1), peak memory (``rss``: the process's peak resident size, interpreter and libraries included;
``mlx``: MLX's own peak allocation), the BLAS MLX used. Under the table: the geometric mean of the forward ratios per
batch and the rows above 1.0 (forward) / 1.2 (train). ``--path zoo`` runs the hand-written ``porter.zoo`` model
instead, converted in the timed process (which then holds torch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.model_list import MODELS, register, select  # noqa: E402,F401  (register: for scripts adding models)
from benchmarks.model_report import (FORWARD_TARGET, HEADER, TRAIN_TARGET, error_row, format_row, make_row,  # noqa: E402
                                     profile_lines, summary)
from porter.bench import benchmark_isolated, native_problem  # noqa: E402


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


def run_case(name: str, batch: int, mode: str, args, env: dict, convert: dict | None, out=print) -> dict:
    """Rounds of (torch process, MLX process) for one model, batch and mode; returns the row (``model_report``)."""
    entry = MODELS[name]
    spec = dict(builder=entry["builder"], builder_kwargs=entry["builder_kwargs"], shape=[batch, *entry["chw"]],
                repeat=args.repeat, warmup=args.warmup, sys_path=[ROOT], compile=args.compile,
                threads=args.threads or None, mode=mode, max_seconds=args.max_seconds,
                require_native=not args.allow_pure_mlx)
    if convert is None:  # --path zoo: convert in the timed process
        mlx_spec = dict(spec, framework="mlx", converter=f"benchmarks.models:zoo_{entry['zoo']}")
    else:
        mlx_spec = dict(spec, framework="loaded", artifact=convert["artifacts"][str(batch)],
                        ref=convert["refs"][str(batch)])
    torch_rows, mlx_rows = [], []
    start = time.perf_counter()
    for i in range(args.rounds):
        torch_rows.append(benchmark_isolated(dict(spec, framework="torch")))
        last = i == args.rounds - 1 or (args.max_seconds and time.perf_counter() - start > args.max_seconds)
        profile = args.profile == "all" and mode == "forward" and last
        mlx_rows.append(benchmark_isolated(dict(mlx_spec, profile=profile), env=env))
        if last:
            break
    row = make_row(name, batch, mode, torch_rows, mlx_rows, convert)
    target = TRAIN_TARGET if mode == "train" else FORWARD_TARGET
    if args.profile == "slow" and mode == "forward" and row["ratio"] > target:
        row["profile"] = benchmark_isolated(dict(mlx_spec, profile=True, repeat=1, warmup=1), env=env)["profile"]
    return row


def main(argv=None, out=print) -> list:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="all", help="model names and groups: all, classification, video, "
                                                         "segmentation (comma-separated)")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--modes", default="forward", help="forward, train, or both: forward,train")
    parser.add_argument("--profile", nargs="?", const="all", choices=("all", "slow"),
                        help="per-op time attribution of the MLX forward: every row, or (slow) only the rows above "
                             "the target, in one extra MLX process")
    parser.add_argument("--rounds", type=int, default=3, help="fresh torch+MLX process pairs per case")
    parser.add_argument("--repeat", type=int, default=10, help="timed forwards per process")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="per case: no new round once this many seconds have passed, and each process stops "
                             "timing after this many seconds of timed runs (at least one round, one run)")
    parser.add_argument("--path", choices=("convert", "zoo"), default="convert",
                        help="MLX model from porter.convert (saved, loaded torch-free), or the porter.zoo model")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for torch and for MLX's BLAS (default: all usable cores)")
    parser.add_argument("--compile", action="store_true", help="wrap the MLX forward in mx.compile")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment for the MLX processes (e.g. PORTER_BLAS=none)")
    parser.add_argument("--json", metavar="PATH", help="write every row (and the summary) to PATH as JSON")
    parser.add_argument("--allow-pure-mlx", action="store_true",
                        help="time the MLX side even when Porter's native CPU kernels for the current layers/csrc "
                             "are not built (its layers then run pure-MLX ops): warned on stderr, marked in each "
                             "row's MLX path and recorded in the JSON. Without it such a run is refused, and a row "
                             "whose worker finds no build (a source edited mid-run) fails")
    args = parser.parse_args(argv)
    try:
        names = select(args.models)
    except ValueError as e:
        parser.error(str(e))
    if args.path == "zoo":
        missing = [n for n in names if not MODELS[n]["zoo"]]
        if missing:
            parser.error(f"--path zoo: no porter.zoo model registered for {', '.join(missing)}")
    env = dict(item.split("=", 1) for item in args.env)
    if args.threads:
        env["PORTER_BLAS_THREADS"] = str(args.threads)
    batches = [int(b) for b in args.batches.split(",")]
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in ("forward", "train")]
    if bad:
        parser.error(f"--modes: expected forward and/or train but got {', '.join(bad)}")

    native = benchmark_isolated(dict(framework="native"), env=env)
    problem = native_problem(native)
    if problem and not args.allow_pure_mlx:
        parser.exit(2, f"{parser.prog}: refusing to time the MLX side: {problem} Or pass --allow-pure-mlx to time "
                       "the pure-MLX layers on purpose.\n")
    if problem:
        print(f"WARNING: {problem} --allow-pure-mlx: every MLX row below times pure-MLX layers, not Porter's "
              "native kernels.", file=sys.stderr, flush=True)

    out(HEADER)
    out("|---" * (HEADER.count("|") - 1) + "|")
    rows = []
    for name in names:
        entry = MODELS[name]
        with tempfile.TemporaryDirectory(prefix=f"porter-bench-{name}-") as tmp:
            convert = None
            if args.path == "convert":
                try:
                    convert = benchmark_isolated(dict(framework="convert", builder=entry["builder"],
                                                      builder_kwargs=entry["builder_kwargs"], chw=list(entry["chw"]),
                                                      batches=batches, out=tmp, sys_path=[ROOT]), env=env)
                except Exception as e:  # noqa: BLE001  (one model's failure must not end a sweep)
                    for batch in batches:
                        for mode in modes:
                            rows.append(error_row(name, batch, mode, f"conversion: {e}"))
                            out(format_row(rows[-1]))
                    continue
            for batch in batches:
                for mode in modes:
                    try:
                        rows.append(run_case(name, batch, mode, args, env, convert, out))
                    except Exception as e:  # noqa: BLE001
                        rows.append(error_row(name, batch, mode, str(e)))
                    out(format_row(rows[-1]))
    lines = summary(rows)
    out("")
    for line in lines:
        out(line)
    for row in rows:
        if row.get("profile"):
            out("")
            for line in profile_lines(row):
                out(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"argv": sys.argv[1:] if argv is None else list(argv), "native": native, "rows": rows,
                       "summary": lines}, f, indent=1)
    return rows


if __name__ == "__main__":
    main(out=lambda line: print(line, flush=True))
