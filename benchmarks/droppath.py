"""Stochastic depth in a port: what the marker nodes cost in eval, a training step, and conversion's survey.

torchvision's ConvNeXt twin (``tests/zoo/twins/convnext.py``, stochastic depth 0.1 as torchvision's default), one
thread, process CPU time, minimum over rounds, the variants alternated in one process:

* eval forward: the port with its ``StochasticDepth`` layers (new) against the same weights converted with every
  rate 0 (no node: what an eval port was before), and torch;
* training step (forward + backward, mean of the output squared): the port in training mode and torch;
* conversion: ``porter.convert`` with the survey (``capture_train_marks.find``) and with it switched off
  (``api._train_marks`` returning None: the previous conversion).

    python benchmarks/droppath.py --batch 1 --size 224 --rounds 3
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("PORTER_BLAS_THREADS", "1")
os.environ.setdefault("PORTER_NUM_THREADS", "1")

import porter  # noqa: E402  (first: the BLAS)
import mlx.core as mx  # noqa: E402
import mlx.nn as mnn  # noqa: E402
import torch  # noqa: E402

from benchmarks.cpu_time import cpu_per_call  # noqa: E402


def _model(width_scale: float):
    from tests.zoo.twins import convnext

    widths = tuple(int(w * width_scale) for w in (96, 192, 384, 768))
    torch.manual_seed(0)
    return convnext.CASES["convnext_tiny"].twin(widths=widths, num_classes=1000).eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--width", type=float, default=1.0, help="channel widths relative to ConvNeXt-T")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--convert-rounds", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from porter.converters import api

    model = _model(args.width)
    flat = copy.deepcopy(model)
    for m in flat.modules():
        if type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    x = torch.randn(args.batch, 3, args.size, args.size)
    xm = mx.array(x.permute(0, 2, 3, 1).numpy())

    survey = api._train_marks
    convert = {"new": [], "old": []}
    ported = flat_port = None
    for _ in range(args.convert_rounds):
        for name in ("old", "new"):
            api._train_marks = survey if name == "new" else (lambda *a, **k: None)
            try:
                start = time.process_time()
                port = porter.convert(model, (x,), dynamic="batch")
                convert[name].append(time.process_time() - start)
            finally:
                api._train_marks = survey
            if name == "new":
                ported = port
    flat_port = porter.convert(flat, (x,), dynamic="batch")
    nodes = sum(n["kernel"] == "call_module" and ported.graph["modules"][n["attrs"]["module"]]["type"]
                == "StochasticDepth" for n in ported.graph["nodes"])

    def port_eval(p):
        return lambda: mx.eval(p(xm))

    def torch_eval():
        with torch.no_grad():
            model(x)

    loss_and_grad = mnn.value_and_grad(ported, lambda m, a: (m(a) ** 2).mean())

    def port_train():
        mx.eval(loss_and_grad(ported, xm))

    def torch_train():
        model.zero_grad(set_to_none=True)
        (model(x) ** 2).mean().backward()

    times = {k: [] for k in ("eval_new", "eval_old", "eval_torch", "train_port", "train_torch")}
    for _ in range(args.rounds):
        ported.eval(), model.eval()
        times["eval_torch"].append(cpu_per_call(torch_eval, args.reps))
        times["eval_old"].append(cpu_per_call(port_eval(flat_port), args.reps))
        times["eval_new"].append(cpu_per_call(port_eval(ported), args.reps))
        ported.train(), model.train()
        times["train_torch"].append(cpu_per_call(torch_train, args.reps))
        times["train_port"].append(cpu_per_call(port_train, args.reps))
    ported.eval(), model.eval()
    result = {"batch": args.batch, "size": args.size, "width": args.width, "stochastic_depth_nodes": nodes,
              **{k: min(v) for k, v in times.items()}, "convert_new": min(convert["new"]),
              "convert_old": min(convert["old"]), "rounds": args.rounds, "reps": args.reps}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
