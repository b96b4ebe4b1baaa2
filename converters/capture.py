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


def is_module(model) -> bool:
    """Whether ``model`` is an eager ``nn.Module`` (not an ExportedProgram; a ScriptModule counts, as torch says)."""
    return isinstance(model, torch.nn.Module)


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
        from .capture_decompose import decompose_unsupported

        source = _exported_class(model)
        return capture_exported(decompose_unsupported(model), source)
    if isinstance(model, torch.nn.Module):
        from .capture_strategy import export_program

        inputs = normalise_inputs(example_inputs)
        from .capture_decompose import decompose_unsupported

        ep, doubled, note, graph_mode = export_program(model, inputs, dynamic=mode, double_batch=double_batch)
        graph = capture_exported(decompose_unsupported(ep), f"{type(model).__module__}.{type(model).__qualname__}")
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
    """Whether ``ported`` gives the model's output shapes and (loosely: ``porter.compare.REPRODUCES_RTOL``) values
    on the example."""
    from porter.compare import REPRODUCES_RTOL, mlx_to_numpy, port_inputs, to_torch_layout, torch_to_numpy, within_bar

    import mlx.core as mx

    from porter.layers import no_weight_cache

    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(model(*inputs))
    try:
        with no_weight_cache():  # a one-off forward: activations only, no cached 16/9 copy of the 3x3 weights
            out = ported(*port_inputs(ported, inputs)[0])
            mx.eval(out)
    except Exception:  # noqa: BLE001  (failing on the example is not reproducing it)
        return False
    finally:
        mx.clear_cache()  # the forward's freed buffers go back: conversion leaves the weights, not activations
    from .output_tree import leaves

    outs = leaves(out, ported.output_layouts)  # nested as the model's (output_tree.py), in tree_leaves order
    if len(outs) != len(expected):
        return False
    for (got, layout), want in zip(outs, expected):
        if not isinstance(want, torch.Tensor):
            continue
        try:
            got = to_torch_layout(mlx_to_numpy(got), layout)
        except ValueError:  # an output of another rank than its layout's
            return False
        if not within_bar(got, torch_to_numpy(want), REPRODUCES_RTOL, 0.0):
            return False
    return True
