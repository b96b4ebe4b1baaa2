"""Capture dispatch: nn.Module / ExportedProgram / TorchScript -> IR graph (imports torch)."""

from __future__ import annotations

import torch

from .ir import Graph


def normalise_inputs(example_inputs) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)):
        for i, x in enumerate(example_inputs):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"example_inputs[{i}] must be a torch.Tensor but got {type(x).__name__}")
        return tuple(example_inputs)
    raise TypeError(f"example_inputs must be a torch.Tensor or a tuple of them, but got {type(example_inputs).__name__}")


def capture(model, example_inputs, *, double_batch: bool = True, dynamic="auto") -> Graph:
    """Capture ``model``'s forward as an IR graph (the model's current train/eval mode is respected).

    ``dynamic`` chooses the input dims kept dynamic (see ``capture_strategy.py``); ``graph.batch_doubled`` tells
    whether a batch-of-one example was captured at batch two, ``graph.capture_note`` whether the capture fell back.
    """
    from .capture_strategy import normalise_dynamic

    mode = normalise_dynamic(dynamic)
    if isinstance(model, torch.jit.ScriptModule):
        from .capture_script import capture_script

        if mode not in ("auto", "static"):
            raise ValueError(f"dynamic={dynamic!r} cannot be honoured for a TorchScript model: its sizes are read "
                             "at run time; use 'auto' or 'static' (every dim checked against the example)")
        graph = capture_script(model, normalise_inputs(example_inputs) if example_inputs is not None else None)
        if mode == "static":
            graph.input_checks, graph.dynamic_dims = None, None  # the conversion then checks every dim
        return graph
    from .capture_export import capture_exported

    if isinstance(model, torch.export.ExportedProgram):
        if mode != "auto":
            raise ValueError(f"dynamic={dynamic!r} cannot be honoured for an ExportedProgram: its dynamic dims were "
                             "chosen when it was exported (torch.export.export(..., dynamic_shapes=...))")
        source = _exported_class(model)
        return capture_exported(model, source)
    if isinstance(model, torch.nn.Module):
        from .capture_strategy import export_program

        inputs = normalise_inputs(example_inputs)
        ep, doubled, note, graph_mode = export_program(model, inputs, dynamic=mode, double_batch=double_batch)
        graph = capture_exported(ep, f"{type(model).__module__}.{type(model).__qualname__}")
        graph.batch_doubled = doubled
        graph.capture_note = note
        graph.capture_mode = graph_mode
        return graph
    raise TypeError(
        "model must be a torch.nn.Module, a torch.export.ExportedProgram or a torch.jit.ScriptModule, "
        f"but got {type(model).__name__}"
    )


def _exported_class(ep) -> str:
    try:
        for node in ep.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if stack:
                path, type_ = next(iter(stack.values()))
                return type_ if isinstance(type_, str) else f"{type_.__module__}.{type_.__qualname__}"
    except Exception:  # noqa: BLE001
        pass
    return "ExportedProgram"


def reproduces(ported, model, inputs) -> bool:
    """Whether ``ported`` gives the model's output shapes and (loosely) values on the example."""
    import mlx.core as mx
    import numpy as np

    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(model(*inputs))
    args = []
    for x, spec in zip(inputs, ported.graph["inputs"]):
        a = x.detach().float().numpy() if x.dtype == torch.bfloat16 else x.detach().numpy()
        a = np.ascontiguousarray(a.transpose(spec["perm"]))
        args.append(mx.array(a, dtype=mx.float64 if a.dtype == np.float64 else None))  # numpy float64 -> float32 else
    try:
        out = ported(*args)
    except Exception:  # noqa: BLE001  (failing on the example is not reproducing it)
        return False
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(expected):
        return False
    for got, spec, want in zip(outs, ported.graph["outputs"], expected):
        if not isinstance(want, torch.Tensor):
            continue
        g = np.array(got.astype(mx.float32) if got.dtype == mx.bfloat16 else got)
        if spec["perm"] is not None:
            g = g.transpose([spec["perm"].index(d) for d in range(len(spec["perm"]))])
        w = want.detach().float().numpy()
        if g.shape != w.shape:
            return False
        if w.size and not np.allclose(g, w, rtol=1e-2, atol=1e-2 * float(np.abs(w).max()), equal_nan=True):
            return False
    return True
