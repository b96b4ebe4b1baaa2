"""Capture dispatch: nn.Module / ExportedProgram / TorchScript -> IR graph (imports torch)."""

from __future__ import annotations

import torch

from .capture_buffers import example_copy
from .ir import Graph


def normalise_inputs(example_inputs) -> tuple:
    if example_inputs is None:
        return ()
    if isinstance(example_inputs, dict):
        raise TypeError("example_inputs must be a torch.Tensor or a tuple of them; give keyword inputs as "
                        "example_kwargs={name: tensor} (torch.export.export's kwargs)")
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)):
        for i, x in enumerate(example_inputs):
            if not isinstance(x, torch.Tensor):
                _check_nested(x, f"example_inputs[{i}]", "a torch.Tensor")
        return tuple(example_inputs)
    raise TypeError(f"example_inputs must be a torch.Tensor or a tuple of them, but got {type(example_inputs).__name__}")


def normalise_kwargs(example_kwargs) -> dict:
    """``example_kwargs`` as a dict ``{parameter name: Tensor, or None/bool/int/float/str baked into the port}``;
    ``TypeError`` naming the entry otherwise."""
    from .input_binding import check_name, is_scalar

    if example_kwargs is None:
        return {}
    if not isinstance(example_kwargs, dict):
        raise TypeError(f"example_kwargs must be a dict of keyword example inputs, but got "
                        f"{type(example_kwargs).__name__}")
    for key, value in example_kwargs.items():
        try:
            check_name(key, "an example_kwargs key")
        except ValueError as e:
            raise TypeError(str(e)) from None
        if not isinstance(value, torch.Tensor) and not is_scalar(value):
            _check_nested(value, f"example_kwargs[{key!r}]",
                          "a torch.Tensor, or None/bool/int/float/str (baked into the port)")
    return dict(example_kwargs)


MAX_NESTING = 8  # a tuple of tuples of tensors: transformers' legacy ``past_key_values`` (layer, key/value) is 2


def _check_nested(value, label: str, expected: str, depth: int = 0) -> None:
    """``value`` (not a tensor) must be a non-empty tuple or list, at most :data:`MAX_NESTING` deep, whose leaves are
    tensors (transformers' ``past_key_values``: a tuple of ``(key, value)`` per layer); ``TypeError`` naming the
    entry otherwise."""
    if not isinstance(value, (tuple, list)) or not value or depth >= MAX_NESTING or not any(
            isinstance(x, torch.Tensor) for x in torch.utils._pytree.tree_leaves(value)):
        what = "an empty tuple" if isinstance(value, (tuple, list)) and not value else (
            f"tuples nested deeper than {MAX_NESTING}" if isinstance(value, (tuple, list)) and depth >= MAX_NESTING
            else type(value).__name__ if not isinstance(value, (tuple, list)) else f"a {type(value).__name__} "
            "without tensors")
        raise TypeError(f"{label} must be {expected}, or a tuple/list of tensors (nested at most {MAX_NESTING} deep), "
                        f"but got {what}")
    for i, x in enumerate(value):
        if not isinstance(x, torch.Tensor):
            _check_nested(x, f"{label}[{i}]", "a torch.Tensor", depth + 1)


def example_tensors(args: tuple, kwargs: dict) -> list:
    """The example's tensors in the port's input order (torch.export's flattening: positional, then keywords in
    the order given, a tuple of tensors (``past_key_values``) element by element)."""
    leaves = torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs)))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def with_tensors(args: tuple, kwargs: dict, values: list) -> tuple:
    """``(args, kwargs)`` with their tensors replaced by ``values`` (in :func:`example_tensors` order), nested
    tuples rebuilt as tuples."""
    it = iter(values)
    args, kwargs = torch.utils._pytree.tree_map(lambda x: next(it) if isinstance(x, torch.Tensor) else x,
                                                (tuple(args), dict(kwargs)))
    return args, kwargs


def is_module(model) -> bool:
    """Whether ``model`` is an eager ``nn.Module`` (not an ExportedProgram; a ScriptModule counts, as torch says)."""
    return isinstance(model, torch.nn.Module)


def capture(model, example_inputs, *, double_batch: bool = True, dynamic="auto", example_kwargs=None,
            train_marks=None) -> Graph:
    """Capture ``model``'s forward as an IR graph (the model's current train/eval mode is respected).

    ``example_kwargs`` are keyword example inputs (an nn.Module's only); ``graph.signature`` records the forward's
    signature and each input's argument (``capture_signature.py``). ``dynamic`` chooses the input dims kept
    dynamic (see ``capture_strategy.py``); ``graph.batch_doubled`` tells whether a batch-of-one example was
    captured at batch two, ``graph.capture_note`` whether the capture fell back. ``train_marks``
    (``capture_train_marks.find``): an nn.Module's stochastic depth and functional dropouts recorded as marker ops.
    """
    from .capture_strategy import normalise_dynamic

    mode = normalise_dynamic(dynamic)
    kwargs = normalise_kwargs(example_kwargs)
    if kwargs and (isinstance(model, torch.jit.ScriptModule) or not isinstance(model, torch.nn.Module)):
        frontend = "TorchScript" if isinstance(model, torch.jit.ScriptModule) else type(model).__name__
        raise TypeError(f"example_kwargs cannot be honoured for a {frontend} model: that frontend takes its "
                        "inputs positionally (give them as example_inputs, in the forward's order)"
                        + ("; an ExportedProgram has its keyword inputs already" if frontend == "ExportedProgram"
                           else ""))
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
        graph = capture_exported(decompose_unsupported(model), source)
        _record_signature(graph, None)
        return graph
    if isinstance(model, torch.nn.Module):
        from .capture_strategy import export_program

        inputs = normalise_inputs(example_inputs)
        from .capture_decompose import decompose_unsupported

        _check_binds(model, inputs, kwargs)
        from .capture_train_marks import routed

        from .capture_dtypes import dtype_followers
        from .capture_strategy import _doubled

        with routed(model, train_marks):
            ep, doubled, note, graph_mode = export_program(
                model, inputs, dynamic=mode, double_batch=double_batch, kwargs=kwargs,
                forward_cpu_s=getattr(train_marks, "forward_cpu_s", None))
            ep = decompose_unsupported(ep)
            examples = (tuple(_doubled(x) for x in inputs), {k: _doubled(v) for k, v in kwargs.items()}) \
                if doubled else (inputs, kwargs)
            flow = dtype_followers(model, *examples, ep)  # dtypes taken from tensors, float32 literals
        from .capture_attributes import warn_baked_attributes

        warn_baked_attributes(model, ep)
        graph = capture_exported(ep, f"{type(model).__module__}.{type(model).__qualname__}", flow)
        _record_signature(graph, model, strict=bool(kwargs))
        graph.batch_doubled = doubled
        graph.capture_note = note
        graph.capture_mode = graph_mode
        graph.dtype_note = flow.note
        return graph
    raise TypeError(
        "model must be a torch.nn.Module, a torch.export.ExportedProgram or a torch.jit.ScriptModule, "
        f"but got {type(model).__name__}"
    )


def _check_binds(model, args, kwargs) -> None:
    """With keyword inputs, the example binds to the forward as a call would: an argument given twice, an unknown
    keyword or a missing required one is the caller's ``TypeError``, named, before any capture (positional-only
    examples are left to torch, as before: a decorated forward's ``inspect`` signature need not be the real one)."""
    import inspect

    if not kwargs:
        return

    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        raise TypeError("example_kwargs need a forward whose signature Python can read") from None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"the example inputs do not fit {type(model).__name__}.forward{signature}: {e}") from None


def _record_signature(graph, model, strict: bool = False) -> None:
    """``graph.signature`` from the forward's parameters (a program's: from its inputs), when the frontend knows
    where each input came from. A signature Porter cannot record (a forward whose ``inspect`` signature is not the
    one torch bound) leaves the port positional, as before; ``strict`` (keyword inputs given) raises instead."""
    from .capture_signature import forward_params, program_params, signature_record

    if graph.input_locations is None or any(loc is None for loc in graph.input_locations):
        return
    if model is None:
        params = program_params(graph.input_locations + [loc for loc, _ in graph.input_constants],
                                graph.inputs + [None] * len(graph.input_constants))
    else:
        params = forward_params(model.forward)
    if params is None:
        return
    try:
        graph.signature = signature_record(params, graph.input_locations, graph.input_constants, len(graph.inputs))
    except ValueError as e:
        if strict:
            raise TypeError(f"the keyword example inputs cannot be recorded for {type(model).__name__}.forward: "
                            f"{e}") from None
        # the port then takes its inputs by position (a program's placeholder names that are no parameter names)


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


def reproduces(ported, model, inputs, kwargs=None) -> bool:
    """Whether ``ported`` gives the model's output shapes and (loosely: ``porter.compare.REPRODUCES_RTOL``) values
    on the example (``kwargs``: its keyword inputs, passed to both by name)."""
    from porter.compare import REPRODUCES_RTOL, mlx_to_numpy, port_inputs, to_torch_layout, torch_to_numpy, within_bar

    import mlx.core as mx

    from porter.layers import no_weight_cache

    kwargs = kwargs or {}
    torch_args, torch_kwargs = example_copy(inputs, kwargs)  # a forward writing into its input leaves the example
    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(model(*torch_args, **torch_kwargs))
    try:
        arrays = port_inputs(ported, example_tensors(inputs, kwargs))[0]
        args, kw = with_tensors(inputs, kwargs, arrays)
        with no_weight_cache():  # a one-off forward: activations only, no cached 16/9 copy of the 3x3 weights
            out = ported(*args, **kw)
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
