"""What the module tree (issue 12) costs at run time: the same converted model as a tree of layers (``call_module``
nodes calling ``porter.layers``/``mlx.nn`` layers) and as a flat program (every node a kernel, as before the tree),
timed alternately in one process on the same input, so machine load hits both alike.

    python benchmarks/tree.py                            # resnet18, mobilenet_v2, efficientnet_b0; batch 1
    python benchmarks/tree.py --models resnet18 --batch 8 --repeat 30

Prints per model the median forward time of each form and the ratio tree/flat (1.00: no cost). The layers run the
same functions as the kernels, so any difference is Python dispatch (path lookup per layer call).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MODELS = {"resnet18": "porter.examples:resnet18", "mobilenet_v2": "porter.examples:mobilenet_v2",
          "efficientnet_b0": "benchmarks.twins:efficientnet_b0", "convnext_tiny": "benchmarks.twins:convnext_tiny"}


def _build(spec: str):
    import importlib

    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)()


def _convert(model, x, *, flat: bool):
    import importlib

    import porter

    convert_module = importlib.import_module("porter.converters.convert")  # the module (the package exports a function)

    if not flat:
        return porter.convert(model, x)
    original = convert_module.map_layers
    convert_module.map_layers = lambda nodes, *args: (nodes, {})
    try:
        return porter.convert(model, x)
    finally:
        convert_module.map_layers = original


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,efficientnet_b0")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args(argv)

    import mlx.core as mx
    import numpy as np
    import torch

    torch.manual_seed(0)
    print(f"{'model':<16} {'tree ms':>9} {'flat ms':>9} {'tree/flat':>9}  layers")
    for name in args.models.split(","):
        if name not in MODELS:
            raise SystemExit(f"--models: unknown model {name!r} (known: {', '.join(MODELS)})")
        model = _build(MODELS[name]).eval()
        x = torch.randn(args.batch, 3, args.size, args.size)
        tree, flat = _convert(model, x, flat=False), _convert(model, x, flat=True)
        xm = mx.array(x.numpy().transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(np.array(tree(xm)), np.array(flat(xm)))  # the same numbers, bit for bit
        times = {"tree": [], "flat": []}
        for i in range(args.repeat + 3):
            for label, port in (("tree", tree), ("flat", flat)) if i % 2 else (("flat", flat), ("tree", tree)):
                start = time.perf_counter()
                mx.eval(port(xm))
                if i >= 3:
                    times[label].append((time.perf_counter() - start) * 1e3)
        t, f = statistics.median(times["tree"]), statistics.median(times["flat"])
        layers = len(tree._program.layer_keys)
        print(f"{name:<16} {t:>9.2f} {f:>9.2f} {t / f:>9.3f}  {layers}")


if __name__ == "__main__":
    main()
