"""A saved port's forward with Porter switches at their defaults and at given "off" values, alternately in one
process, wall time on every thread (the switches that split work over threads: ``model_switch.py`` measures
1-thread CPU time). Prints each side's median of per-round minima and the median per-round ratio on/off.

    python benchmarks/switch_wall.py PORT_DIR 1,224,224,3 \
        porter.layers.matmul:BATCHED_NODE=False porter.layers.binary:MIN_ELEMENTS=0 --rounds 10
"""

from __future__ import annotations

import argparse
import ast
import importlib
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", help="a saved port's folder (porter.save)")
    parser.add_argument("shape", help="the input's shape in the port's layout, comma-separated")
    parser.add_argument("switches", nargs="+", help="module:ATTRIBUTE=off_value (a Python literal)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3, help="timed forwards per side per round (the minimum kept)")
    args = parser.parse_args()

    import porter  # first: the BLAS
    import mlx.core as mx

    flips = []
    for spec in args.switches:
        target, _, value = spec.partition("=")
        module, _, attr = target.partition(":")
        if not (module and attr and value):
            parser.error(f"switch {spec!r}: expected module:ATTRIBUTE=off_value")
        mod = importlib.import_module(module)
        flips.append((mod, attr, getattr(mod, attr), ast.literal_eval(value)))
    port = porter.load(args.port)
    x = mx.random.normal(tuple(int(v) for v in args.shape.split(",")))
    mx.eval(x)
    times = {True: [], False: []}
    for r in range(args.rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):  # alternate who goes first
            for mod, attr, default, off in flips:
                setattr(mod, attr, default if on else off)
            for _ in range(2):
                mx.eval(port(x))
            best = float("inf")
            for _ in range(args.reps):
                t0 = time.perf_counter()
                mx.eval(port(x))
                best = min(best, time.perf_counter() - t0)
            times[on].append(best * 1e3)
    for on in (True, False):
        print(f"{'defaults' if on else 'off'}: median {statistics.median(times[on]):.1f} ms, "
              f"min {min(times[on]):.1f} ms")
    ratio = statistics.median(a / b for a, b in zip(times[True], times[False]))
    print(f"defaults / off (median of per-round ratios): {ratio:.3f}")


if __name__ == "__main__":
    main()
