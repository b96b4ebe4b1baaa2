"""Which MLX runtime settings pay off on CPU: cache limit, mx.compile, 1x1 convolution as matmul.

    python benchmarks/runtime_options.py --model resnet18 --batch 8 --rounds 5
    PORTER_BLAS_THREADS=1 python benchmarks/runtime_options.py ...   # single-threaded: CPU time is steadier

One MLX process; the variants are timed in interleaved rounds (A B C A B C ...) so that load from other processes on
the machine hits each alike. Prints, per variant, the median forward time over all rounds, its ratio to the first
variant with the range of per-round ratios (the noise), MLX's peak active memory and the memory its buffer cache
held after the runs (bounded by the cache limit).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import porter  # noqa: E402  (first: the BLAS)
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import porter.layers._conv_engine as conv_layers  # noqa: E402
from porter.bench import time_fn  # noqa: E402
from porter.examples import EXAMPLES  # noqa: E402


def one_by_one_through_conv(forward):
    """``forward`` with Porter's 1x1 convolutions built through ``mx.conv_general`` instead of a matmul."""

    def run(x):
        conv_layers.MATMUL_1X1 = False  # read while the (lazy) graph is built, so restoring it after is safe
        try:
            return forward(x)
        finally:
            conv_layers.MATMUL_1X1 = True

    return run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", choices=sorted(EXAMPLES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = EXAMPLES[args.model]().eval()
    plain = porter.convert(model, torch.randn(1, 3, 224, 224))  # channels-last input
    x = mx.array(np.random.default_rng(0).standard_normal((args.batch, 224, 224, 3)).astype(np.float32))
    conv1x1 = one_by_one_through_conv(plain)
    compiled = mx.compile(plain)
    default_limit = porter.get_cache_limit()
    variants = {
        f"porter default (cache {default_limit >> 20} MiB, 1x1 as matmul)": (plain, default_limit),
        "MLX default cache limit (32 MiB)": (plain, 32 << 20),
        "cache 512 MiB": (plain, 512 << 20),
        "1x1 through mx.conv2d": (conv1x1, default_limit),
        "mx.compile": (compiled, default_limit),
    }
    times = {name: [] for name in variants}
    cpu = {name: [] for name in variants}
    peaks = {name: 0.0 for name in variants}
    cached = {name: 0.0 for name in variants}
    for _ in range(args.rounds):
        for name, (fn, limit) in variants.items():
            porter.set_cache_limit(limit)
            mx.clear_cache()
            mx.reset_peak_memory()
            timing = time_fn(lambda: mx.eval(fn(x)), warmup=2, repeat=args.repeat)
            times[name].append(timing["median_ms"])
            cpu[name].append(timing["cpu_median_ms"])
            peaks[name] = max(peaks[name], mx.get_peak_memory() / 2**20)
            cached[name] = max(cached[name], mx.get_cache_memory() / 2**20)
    porter.set_cache_limit(default_limit)
    base = list(times.values())[0]
    cpu_base = statistics.median(list(cpu.values())[0])
    print(f"{args.model} batch {args.batch}, {args.rounds} rounds x {args.repeat} runs; BLAS: "
          f"{porter.runtime_info()['blas']['config']}")
    print("| variant | median ms | vs first (range over rounds) | CPU-time vs first | MLX peak MB "
          "| cache held after MB |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, base)]
        print(f"| {name} | {statistics.median(ts):.1f} | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) | {statistics.median(cpu[name]) / cpu_base:.2f} | "
              f"{peaks[name]:.0f} | {cached[name]:.0f} |")


if __name__ == "__main__":
    main()
