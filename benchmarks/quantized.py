"""Quantized convolutions (porter.layers.QuantizedConv*d) against the float conv, per shape and bit width.

For each conv shape and bits 4 / 8 (group size 64): the float ``porter.layers.Conv*d`` (ms), the quantized layer
as it runs by default on this device (``STRATEGY='auto'``: on the CPU, Porter's native dequantize + the float
conv), ``mx.quantized_matmul`` over the unfolded input (the layer's path on GPUs, forced), ``mx.dequantize`` of
the weight + the float conv (the baseline), and the weight's bytes in float32 and quantized (packed weight + scales
+ biases; the conv bias is the same float in both and not counted). Median and, in brackets, minimum over
``--repeat`` rounds in which the variants alternate, after a warm-up, all in one process (on a machine shared with
other jobs the minimum is the steadier figure); forward only, batch 1.

    .venv/bin/python benchmarks/quantized.py [--repeat 10] [--bits 4,8] [--filter 3x3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import porter  # noqa: E402,F401  (before mlx.core: BLAS)
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

import porter.layers as L  # noqa: E402
from porter.layers import _native  # noqa: E402
import porter.layers.quantized_conv as Q  # noqa: E402
from porter.layers.conv import conv_nd  # noqa: E402

# name, float conv factory, input shape (channels-last); the conv1d is a speech encoder's (Whisper-style, 30 s)
SHAPES = [
    ("3x3 64->64 @56x56", lambda: L.Conv2d(64, 64, 3, padding=1), (1, 56, 56, 64)),
    ("1x1 256->64 @56x56", lambda: L.Conv2d(256, 64, 1), (1, 56, 56, 256)),
    ("3x3 512->512 @7x7", lambda: L.Conv2d(512, 512, 3, padding=1), (1, 7, 7, 512)),
    ("conv1d k3 512->512 @1500", lambda: L.Conv1d(512, 512, 3, padding=1), (1, 1500, 512)),
]


def interleaved_ms(runners: dict, x, rounds: int, slow: tuple = ()) -> dict:
    """Median ms of each runner over ``rounds`` rounds, runners alternating within a round (a loaded machine slows
    them alike); ``slow`` runners (the CPU quantized matmul) get a third of the rounds."""
    for fn in runners.values():  # warm-up: buffers, Winograd weight caches
        mx.eval(fn(x))
    times = {name: [] for name in runners}
    for r in range(rounds):
        for name, fn in runners.items():
            if name in slow and r % 3:
                continue
            start = time.perf_counter()
            mx.eval(fn(x))
            times[name].append(time.perf_counter() - start)
    return {name: (float(np.median(t)) * 1e3, float(np.min(t)) * 1e3) for name, t in times.items()}


def with_strategy(q, strategy: str):
    def run(x):
        old, Q.STRATEGY = Q.STRATEGY, strategy
        try:
            return q(x)
        finally:
            Q.STRATEGY = old

    return run


def mlx_dequantize_then_conv(q):
    """The baseline the layer must beat: ``mx.dequantize`` of the weight, then Porter's float conv."""
    def run(x):
        w = mx.dequantize(q.weight, q.scales, q.biases, q.group_size, q.bits).reshape(q.weight_shape)
        return conv_nd(x, w, q.get("bias"), q.stride, q.padding, q.dilation, q.groups, nd=q.nd, layer="bench")

    return run


def nbytes(module) -> int:
    return sum(v.nbytes for k, v in tree_flatten(module.parameters()) if k != "bias")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--bits", default="4,8")
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--filter", default="", help="only shapes whose name contains this")
    args = ap.parse_args(argv)
    blas = porter.runtime_info()["blas"]
    print(f"device {mx.default_device()}, BLAS {blas.get('config')} ({blas.get('threads')} threads), native kernels "
          f"{'on' if _native.active() else 'off'}, group size {args.group_size}, {args.repeat} rounds: median (min) ms")
    print("| conv | input | bits | float ms | quantized ms (layer) | quantized/float | quantized matmul ms "
          "| mx.dequantize + float ms | weight bytes float | weight bytes quantized |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, make, shape in SHAPES:
        if args.filter not in name:
            continue
        mx.random.seed(0)
        conv = make()
        x = mx.random.normal(shape)
        for bits in (int(b) for b in args.bits.split(",")):
            q = conv.to_quantized(args.group_size, bits)
            ms = interleaved_ms({"float": conv, "layer": q, "matmul": with_strategy(q, "matmul"),
                                 "mx_dequantize": mlx_dequantize_then_conv(q)}, x, args.repeat, slow=("matmul",))
            cell = {k: f"{v[0]:.2f} ({v[1]:.2f})" for k, v in ms.items()}
            print(f"| {name} | {shape} | {bits} | {cell['float']} | {cell['layer']} "
                  f"| {ms['layer'][0] / ms['float'][0]:.2f} ({ms['layer'][1] / ms['float'][1]:.2f}) "
                  f"| {ms['matmul'][0]:.1f} | {cell['mx_dequantize']} | {nbytes(conv):,} | {nbytes(q):,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
