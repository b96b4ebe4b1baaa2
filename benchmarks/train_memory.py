"""MLX's peak memory of one training step of a converted model, with and without the gradient-order gate on its
functional weight nodes (``PortedModel._weights_first``, ``layers/_grad_order.py``), and where its parameter
gradients come from.

    python benchmarks/train_memory.py --models swin_t --batch 4 [--size 224]

Any twin of ``tests/zoo/twins`` (``swin_t``, ``vit_b_16``, ...) at torchvision's default size, or ``gpt2`` (a
6-layer transformers twin, ``--size`` tokens), dropout and stochastic depth off (a training step is then
deterministic). The step is ``nn.value_and_grad`` of the mean squared
output plus an SGD update, evaluated at once; the peak is ``mx.get_peak_memory()`` above the memory active before
the step (weights and input), after one warm-up step. Parameters are counted by their readers: the mapped layers'
(``call_module`` nodes: ``porter.layers`` gate them themselves) and the functional nodes' (kernels reading
``{"param": name}``, torchvision Swin's ``F.linear(x, self.qkv.weight)``), those with an activation input (the
ones the runtime gates) counted apart.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NO_DROP = {"dropout": 0.0, "attention_dropout": 0.0}


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="swin_t")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--size", type=int, default=224)
    return parser.parse_args(argv)


def _twin(name: str):
    from tests.zoo.twins import CASES

    case = CASES[name]
    kwargs = dict(NO_DROP, **({"stochastic_depth_prob": 0.0} if name.startswith("swin") else {}))
    return case.twin(**kwargs).eval()


def _model_and_input(name: str, batch: int, size: int) -> tuple:
    """``(torch model in eval mode, torch input)``: a torchvision twin on a ``size`` image, or ``gpt2``: the
    transformers twin (``tests/models/gpt2.py``: every projection an ``addmm`` node reading its ``Conv1D``'s
    parameters, the head tied to the embedding) with 6 layers of width 256 on ``size`` tokens, dropout off."""
    import torch

    generator = torch.Generator().manual_seed(0)
    if name != "gpt2":
        return _twin(name), torch.randn(batch, 3, size, size, generator=generator)
    from tests.models.gpt2 import GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(vocab=1000, embed=256, layers=6, heads=8, positions=size)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model.eval(), torch.randint(0, 1000, (batch, size), generator=generator)


def readers(ported) -> dict:
    """``{"layers", "functional", "gated"}``: the trainable parameters read by mapped layers, by functional nodes,
    and by functional nodes that also read an activation (``{"ref": ...}``)."""
    graph = ported.graph
    trainable = {n for n, s in graph["params"].items() if s["trainable"]}
    functional, gated = set(), set()
    for node in graph["nodes"]:
        if node["kernel"] == "call_module":
            continue
        names = {s["param"] for s in node["inputs"] if isinstance(s, dict) and set(s) == {"param"}} & trainable
        functional |= names
        if any(isinstance(s, dict) and set(s) == {"ref"} for s in node["inputs"]):
            gated |= names
    return {"layers": len(trainable - functional), "functional": len(functional), "gated": len(gated)}


def step_peak_mb(ported, x, gate: bool) -> float:
    """MLX's peak above the active memory of one training step (after a warm-up step)."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim

    from porter.converters.runtime import PortedModel

    original = PortedModel._weights_first
    if not gate:
        PortedModel._weights_first = lambda self, index, args, program: args
    try:
        opt = optim.SGD(learning_rate=1e-4)
        loss_and_grad = nn.value_and_grad(ported, lambda m, x: m(x).square().mean())

        def step():
            loss, grads = loss_and_grad(ported, x)
            opt.update(ported, grads)
            mx.eval(loss, ported.parameters(), opt.state)

        step()
        mx.synchronize()
        base = mx.get_active_memory()
        mx.reset_peak_memory()
        step()
        return (mx.get_peak_memory() - base) / 2**20
    finally:
        PortedModel._weights_first = original


def main(argv=None):
    args = _parse(argv)
    import numpy as np

    import mlx.core as mx
    import porter

    for name in args.models.split(","):
        model, x = _model_and_input(name, args.batch, args.size)
        ported = porter.convert(model, x[:1])
        ported.train()
        xm = mx.array(np.ascontiguousarray(x.permute(0, 2, 3, 1).numpy() if x.ndim == 4 else x.numpy()))
        counts = readers(ported)
        plain, gated = step_peak_mb(ported, xm, False), step_peak_mb(ported, xm, True)
        print(f"{name} b{args.batch} size {args.size}: parameters read by layers {counts['layers']}, by functional "
              f"nodes {counts['functional']} ({counts['gated']} with an activation input); step peak "
              f"{plain:.0f} MB ungated -> {gated:.0f} MB gated ({gated / plain:.3f})", flush=True)


if __name__ == "__main__":
    main()
