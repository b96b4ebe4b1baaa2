"""Conversion time per model (``porter.convert``, capture + conversion, after imports and one warm-up conversion).

Usage: python benchmarks/conversion.py [--dynamic auto|all|batch|static] [--filter NAME] [--json out.json]

Models: every entry of tests/models (REGISTRY), the shape-branching twins of tests/models/shape_guarded.py, and
porter.examples' resnet18 / mobilenet_v2 at 1x3x224x224. ``--dynamic all`` is Porter's capture before issue 11
(``Dim.AUTO`` on every dim, no budget); ``auto`` is the default since. Prints wall and CPU seconds (CPU time is
what the capture budget counts, and what a loaded machine leaves comparable) and the dims kept dynamic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root: `tests` is a package

import porter  # noqa: E402  (before mlx.core and torch: BLAS first)
import torch  # noqa: E402

from tests.models import REGISTRY, make_inputs  # noqa: E402
from tests.models._common import randomize_  # noqa: E402
from tests.models.shape_guarded import (BasicUNetSmall, MobileViTSmall, SwinSmall,  # noqa: E402
                                  TFEfficientNetLiteSmall)


def _seeded(make):
    def build():
        torch.manual_seed(0)
        return randomize_(make(), 0)
    return build


def cases():
    from porter import examples

    out = {name: (spec.builder, spec.inputs) for name, spec in REGISTRY.items()}
    out["basic_unet (twin)"] = (_seeded(BasicUNetSmall), ((1, 3, 17, 15),))
    out["mobilevit (twin)"] = (_seeded(MobileViTSmall), ((1, 3, 32, 32),))
    out["swin (twin)"] = (_seeded(lambda: SwinSmall(mask_out_of_place=True)), ((1, 3, 32, 32),))
    out["tf_efficientnet_lite (twin)"] = (_seeded(TFEfficientNetLiteSmall), ((1, 3, 64, 64),))
    out["examples.resnet18"] = (lambda: examples.EXAMPLES["resnet18"]().eval(), ((1, 3, 224, 224),))
    out["examples.mobilenet_v2"] = (lambda: examples.EXAMPLES["mobilenet_v2"]().eval(), ((1, 3, 224, 224),))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dynamic", default="auto")
    parser.add_argument("--filter", default="")
    parser.add_argument("--json")
    args = parser.parse_args()
    warm = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    porter.convert(warm, torch.randn(1, 3, 16, 16), dynamic=args.dynamic)
    rows = []
    for name, (build, shapes) in cases().items():
        if args.filter and args.filter not in name:
            continue
        model, inputs = build(), make_inputs(shapes)
        start, cpu = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ported = porter.convert(model, inputs, dynamic=args.dynamic)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        dims = ",".join(str(d["axis"]) for d in ported.dynamic_dims) or "-"
        note = getattr(ported, "capture_note", None) or ""
        rows.append({"model": name, "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
                     "dynamic_dims": dims, "note": note})
        print(f"{name:24s} {seconds:7.2f} s  {cpu:7.2f} CPU s  dynamic dims {dims:8s} {note}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
