"""Zoo models against the converted graph of the same architecture (issue 14's speed bar).

For each name: the torch twin (tests/zoo/twins, torchvision's structure) with its default weights, the zoo model
loaded with that state_dict, and ``porter.convert`` of the twin (static capture); both run on the same
channels-last input in one process, alternating, and the script prints the median of each and their ratio (below
1: the zoo model is faster). 224x224 unless the model needs otherwise (video 8x112x112, S3D 16x224x224,
Inception 299x299).

    .venv/bin/python benchmarks/zoo.py resnet18 efficientnet_b0 vit_b_16 [--rounds 7] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository root: `tests` is a package

import porter  # noqa: E402  (before mlx.core: BLAS)
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from porter import zoo  # noqa: E402
from tests.zoo.twins import CASES  # noqa: E402

SHAPES = {"r3d_18": (1, 3, 8, 112, 112), "mc3_18": (1, 3, 8, 112, 112), "r2plus1d_18": (1, 3, 8, 112, 112),
          "s3d": (1, 3, 16, 224, 224), "inception_v3": (1, 3, 299, 299)}


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.moveaxis(a, 1, -1)


def measure(name: str, rounds: int) -> tuple:
    twin = CASES[name].twin().eval()
    model = zoo.create(name).load_torch_state_dict({k: v.detach().numpy() for k, v in twin.state_dict().items()})
    x = torch.randn(*SHAPES.get(name, (1, 3, 224, 224)))
    ported = porter.convert(twin, x, dynamic="static")
    xm = mx.array(_channels_last(x.numpy()))
    times = {"zoo": [], "converted": []}
    runners = {"zoo": model, "converted": ported}
    for _ in range(2):  # warm-up: caches, weight transforms
        for fn in runners.values():
            mx.eval(fn(xm))
    for _ in range(rounds):
        for key, fn in runners.items():
            start = time.perf_counter()
            mx.eval(fn(xm))
            times[key].append(time.perf_counter() - start)
    return float(np.median(times["zoo"])) * 1e3, float(np.median(times["converted"])) * 1e3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+", help="zoo model names (porter zoo list)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2, help="torch threads during conversion")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    unknown = [n for n in args.names if n not in CASES]
    if unknown:
        ap.error(f"no zoo model or test twin named {unknown}")
    print(f"{'model':24s} {'zoo ms':>9s} {'converted ms':>13s} {'ratio':>6s}")
    for name in args.names:
        z, c = measure(name, args.rounds)
        print(f"{name:24s} {z:9.1f} {c:13.1f} {z / c:6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
