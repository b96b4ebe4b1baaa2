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


def capture(model, example_inputs) -> Graph:
    """Capture ``model``'s forward as an IR graph (the model's current train/eval mode is respected)."""
    if isinstance(model, torch.jit.ScriptModule):
        from .capture_script import capture_script

        return capture_script(model, normalise_inputs(example_inputs) if example_inputs is not None else None)
    from .capture_export import capture_exported, export_module

    if isinstance(model, torch.export.ExportedProgram):
        source = _exported_class(model)
        return capture_exported(model, source)
    if isinstance(model, torch.nn.Module):
        inputs = normalise_inputs(example_inputs)
        ep = export_module(model, inputs)
        return capture_exported(ep, f"{type(model).__module__}.{type(model).__qualname__}")
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
