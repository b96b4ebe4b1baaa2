"""Public conversion entry points: convert() and inspect_model() (import torch lazily, at call time)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .convert import convert_graph
from .registry import UnsupportedOpsError, get_converter, has_converter
from .runtime import PortedModel


def convert(model, example_inputs=None, *, example_kwargs=None, io_layout: str = "mlx", dynamic="auto",
            dtype=None) -> PortedModel:
    """Convert a torch model to a :class:`PortedModel` (an ``mlx.nn.Module``).

    Args:
        model: a ``torch.nn.Module`` (its current train/eval mode is respected: convert in eval mode), a
            ``torch.export.ExportedProgram`` or a TorchScript ``torch.jit.ScriptModule``.
        example_inputs (Tensor or tuple of Tensors): positional example inputs in torch's layout; not needed for
            an ExportedProgram.
        example_kwargs (dict, optional): keyword example inputs, as ``torch.export.export``'s ``kwargs``
            (``{"token_type_ids": tt}``; an nn.Module only): tensors become inputs the port takes by that name;
            ``None``/bool/int/float/str values are baked in (the port accepts that value only). Arguments given
            neither way take the forward's defaults and the port refuses them (``ported.call_signature``).
            Default: ``None``.
        io_layout (str, optional): ``"mlx"``: image-like inputs/outputs channels-last ``(N, H, W, C)``;
            ``"torch"``: torch's layout exactly. Default: ``"mlx"``.
        dynamic (str or list of int, optional): which input dims stay dynamic (the port runs at other sizes of
            them; every other dim is checked against the example's size on each call). ``"auto"``: every dim
            torch can keep dynamic, captured under a time budget with fallbacks to the batch dim only, then
            static shapes; ``"all"``: every dim, no budget or fallback; ``"batch"``: dim 0 only; ``"static"``
            (or ``False``): the example's shapes only; a list of torch dims (``[0, 2, 3]``) for every tensor
            input. ``ported.dynamic_dims`` reports the outcome. Default: ``"auto"``.
        dtype (str, optional): ``"float16"`` or ``"bfloat16"``: weights and compute in that dtype, with norm
            statistics, softmax and reductions in float32 as torch's autocast and half kernels keep them; float
            inputs are cast to it (``ported.astype(dtype)``, ``converters/precision.py``). ``"float32"``: every
            floating weight in float32. Default: ``None`` (the torch model's dtypes).

    Raises:
        UnsupportedOpsError: listing every op of the model Porter cannot convert.

    Example:
        >>> ported = porter.convert(model.eval(), torch.randn(1, 3, 224, 224), io_layout="torch")
        >>> y = ported(mx.array(x.numpy()))
        >>> ported = porter.convert(bert.eval(), (ids,), example_kwargs={"token_type_ids": tt})
        >>> y = ported(mx.array(ids.numpy()), token_type_ids=mx.array(tt.numpy()))
    """
    if io_layout not in ("mlx", "torch"):
        raise ValueError(f"io_layout must be 'mlx' or 'torch', but got {io_layout!r}")
    if dtype is not None:
        from .precision import check_dtype

        dtype = check_dtype(dtype)  # before the (slow) capture
    path_modes = _path_modes(model)
    training = _eval_modes(model)
    from .capture_buffers import ContainerSnapshot

    containers = ContainerSnapshot(model)  # caches the conversion's forwards fill go back to what the user had
    try:
        marks = _train_marks(model, example_inputs, example_kwargs)
        ported, settings = _convert_eval(model, example_inputs, example_kwargs, io_layout, dynamic, marks)
        ported = _record_train_refusals(ported, model, example_inputs, example_kwargs, marks, settings)
    finally:
        _restore_modes(training)
        containers.restore()
    if any(path_modes.values()):
        # the port follows the torch model's modes, module by module (a fine-tuning model with frozen batch norms)
        from .runtime import TrainModeError

        try:
            ported.set_torch_modes(path_modes)
        except TrainModeError as e:
            raise TrainModeError(e.refusals, converting=True) from None
    return ported if dtype is None else ported.astype(dtype)


def _path_modes(model) -> dict:
    """``{module path: training}`` of a torch module (``{}`` for a program)."""
    named = getattr(model, "named_modules", None)
    if named is None or not hasattr(model, "training"):
        return {}
    return {path: bool(m.training) for path, m in named()}


def _train_marks(model, example_inputs, example_kwargs):
    """Stochastic depth modules and functional dropouts of an ``nn.Module`` the capture records as marker ops, so
    that the port trains them as torch (``capture_train_marks.py``); None for a program or TorchScript."""
    from .capture import is_module, normalise_inputs, normalise_kwargs

    if not is_module(model):
        return None
    from .capture_train_marks import find

    return find(model, normalise_inputs(example_inputs), normalise_kwargs(example_kwargs))


def _convert_eval(model, example_inputs, example_kwargs, io_layout, dynamic, marks=None) -> tuple:
    """``(port, settings)``: the eval-mode port and the capture settings that made it (``io_layout``, ``dynamic``,
    ``double_batch``: a training-mode capture repeats them, ``capture_train_graph.py``)."""
    from .capture import capture, is_module, normalise_inputs, normalise_kwargs, reproduces

    graph = capture(model, example_inputs, dynamic=dynamic, example_kwargs=example_kwargs, train_marks=marks)
    kwargs = normalise_kwargs(example_kwargs)
    graph.module_attrs = _module_attrs(model, marks)
    result = convert_graph(graph, io_layout)
    ported = PortedModel(result["graph"], result["weights"])
    first_note = graph.capture_note
    settings = {"io_layout": io_layout, "dynamic": graph.capture_mode or dynamic, "double_batch": True}
    if graph.batch_doubled and not reproduces(ported, model, normalise_inputs(example_inputs), kwargs):
        # the graph captured at batch two differs at batch one (e.g. x.squeeze(0)): keep the example's batch
        # (with the dims that capture managed: the fallbacks need not be tried again)
        ported = result = None  # the first port's weights go before the second is built
        graph = capture(model, example_inputs, double_batch=False, dynamic=graph.capture_mode or dynamic,
                        example_kwargs=kwargs, train_marks=marks)
        graph.module_attrs = _module_attrs(model, marks)
        result = convert_graph(graph, io_layout)
        ported = PortedModel(result["graph"], result["weights"])
        settings.update(dynamic=graph.capture_mode or dynamic, double_batch=False)
    ported.capture_note = graph.capture_note or first_note
    ported.frozen_constants = _frozen_refusals(graph.frozen_constants)
    if (example_inputs is not None or kwargs) and is_module(model):  # a program has no forward to ask
        _record_scalar_inputs(ported, model, normalise_inputs(example_inputs), kwargs)
    return ported, settings


def _frozen_refusals(frozen: dict) -> dict:
    """``{module path: reason}`` for the tensors the capture took as constants although torch computed them from
    parameters before it (their autograd history shows it): a cache in a Python attribute, such as timm's
    eval-mode ``attention_bias_cache`` (TinyViT, LeViT, EfficientFormer) filled by an earlier eval forward
    (``capture_attributes.py`` warns about it). The port keeps their values: its eval outputs are torch's (which
    reads the same cache), but gradients cannot reach the parameters they came from, so training mode is refused
    for those modules rather than run with those parameters dead."""
    names = {}
    for target, op in frozen.items():
        names.setdefault(target.rsplit(".", 1)[0] if "." in target else "", []).append(f"{target} ({op})")
    return {path: f"reads {', '.join(found)}, a tensor computed from parameters before the capture (a cache in a "
                  "Python attribute) and frozen in the port, so gradients cannot reach those parameters; clear the "
                  "cache before converting (timm: model.train().eval())"
            for path, found in names.items()}


def _record_train_refusals(ported, model, example_inputs, example_kwargs, marks=None, settings=None):
    """Record the modules whose training mode the port cannot reproduce (``capture_train.py``): the port then
    refuses training mode by name. Only an ``nn.Module`` (a program has no modes to switch). The functional
    dropouts ``marks`` routed into the port run in their eval form while the probe looks for the rest. Modules
    whose training forward differs without a random op get a training-mode capture instead
    (``capture_train_graph.py``): returns the port that carries it, or ``ported``."""
    from .capture import is_module, normalise_inputs, normalise_kwargs

    if not is_module(model) or not hasattr(model, "named_modules"):
        return ported
    from .capture_train import TRAIN_AWARE, scripted, spectral_norm_state, train_refusals

    graph = ported._program.graph
    state = spectral_norm_state(model, graph)
    if state:
        graph["train_state"] = state
        ported._program.set_train_state(state)
    handled = {path for path, m in graph.get("modules", {}).items() if m["type"] in TRAIN_AWARE}
    handled |= {entry["module"] for entry in graph.get("train_state", [])}
    handled |= {node["module"] for node in graph["nodes"] if node["kernel"] in ("stochastic_depth", "drop_block")}
    from .capture_train_marks import neutral

    inputs, kwargs = normalise_inputs(example_inputs), normalise_kwargs(example_kwargs)
    with neutral(marks):
        refusals = train_refusals(model, inputs, kwargs, handled)
    if refusals and settings is not None and not scripted(model):  # a script's code cannot be captured in another mode
        ported, refusals = _capture_training_branches(ported, model, inputs, kwargs, marks, settings, refusals)
    reasons = marks.batch_norm_reasons if marks is not None else {}
    refusals = {path: (f"its forward ({type(model.get_submodule(path)).__name__}) is a batch norm subclass that "
                       f"{reasons[path]}, and conversion captured the eval-mode forward" if path in reasons else why)
                for path, why in refusals.items()}
    refusals = {**getattr(ported, "frozen_constants", {}), **refusals}
    if refusals:
        ported._program.graph["train_refusals"] = refusals
        ported._program.train_refusals = dict(refusals)
    return ported


def _capture_training_branches(ported, model, inputs, kwargs, marks, settings, refusals) -> tuple:
    """``(port, refusals)``: the refused modules whose training forward is deterministic
    (``capture_train.deterministic``) captured a second time in training mode into the port
    (``capture_train_graph.py``) and no longer refused; where that capture cannot stand for torch's, they stay
    refused, with the reason."""
    from .capture_train import deterministic
    from .capture_train_graph import NotReproduced, with_train_graph
    from .capture_train_marks import neutral

    with neutral(marks):
        paths = deterministic(model, inputs, kwargs, list(refusals))
    if not paths:
        return ported, refusals
    try:
        ported = with_train_graph(ported, model, inputs, kwargs, paths, marks, settings)
    except NotReproduced as e:
        return ported, {path: f"{why}; {e}" if path in paths else why for path, why in refusals.items()}
    return ported, {path: why for path, why in refusals.items() if path not in paths}


def _record_scalar_inputs(ported, model, inputs, kwargs) -> None:
    """Mark the 1-d inputs torch shows may also come 0-d (``capture_scalars.py``); the runtime repeats them."""
    from .capture_scalars import scalar_sizes

    graph = ported._program.graph
    for i, size in scalar_sizes(model, tuple(inputs), graph, kwargs).items():
        graph["inputs"][i]["scalar_size"] = size


def _eval_modes(model) -> list:
    """Put a torch module in eval mode for the capture; return ``[(module, was_training), ...]`` (root first) to
    restore. A model in training mode is captured in eval mode and its port switched to training mode: the port's
    layers (batch norm, dropout) then behave as torch's do in training."""
    named = getattr(model, "named_modules", None)
    if named is None or not hasattr(model, "training"):
        return []
    modes = [(m, bool(m.training)) for _, m in named()]
    if any(was for _, was in modes):
        model.eval()
    return modes


def _restore_modes(modes: list) -> None:
    for module, was_training in modes:
        module.training = was_training


def _module_attrs(model, marks=None) -> dict:
    """What the captured ATen call does not carry but the MLX layer needs, read from the torch modules: batch
    norm's ``momentum`` (``None``, the cumulative average, reaches ATen as ``0.0`` in eval mode), and the torch
    class a module maps as (a subclass keeping its base's forward, or a batch norm subclass torch showed trains as
    its base: ``marks.batch_norms``, ``capture_batch_norms.py``)."""
    named = getattr(model, "named_modules", None)
    out: dict = {}
    if named is None:
        return out
    try:
        modules = list(named())
    except Exception:  # noqa: BLE001  (a ScriptModule without the Python module list)
        return out
    from .layer_map import mapped_torch_types

    mappable = mapped_torch_types()
    for path, module in modules:
        base = _torch_base(module, mappable)
        if base is not None:
            out.setdefault(path, {})["torch_type"] = base
        if marks is not None and path in marks.batch_norms:
            out.setdefault(path, {}).update(marks.batch_norms[path])
        if type(module).__name__ == "MultiheadAttention" and type(module).__module__.startswith("torch.nn"):
            if (getattr(module, "_qkv_same_embed_dim", False) and getattr(module, "bias_k", None) is None
                    and not getattr(module, "add_zero_attn", True)):
                out.setdefault(path, {})["mha"] = {
                    "embed_dim": int(module.embed_dim), "num_heads": int(module.num_heads),
                    "dropout": float(module.dropout), "batch_first": bool(module.batch_first)}
        if hasattr(module, "momentum") and hasattr(module, "running_mean"):
            momentum = module.momentum
            if momentum is None or (isinstance(momentum, (int, float)) and not isinstance(momentum, bool)):
                out.setdefault(path, {})["momentum"] = None if momentum is None else float(momentum)
    return out


def _torch_base(module, mappable) -> "str | None":
    """The torch.nn class a subclass stands for (torchvision's ``Conv3DSimple(nn.Conv3d)``) when it keeps that
    class's forward: it then computes what the class does and maps like it. A subclass with a forward of its own
    (``LayerNorm2d`` permuting around the norm) keeps its own name and stays unmapped unless that name maps."""
    cls = type(module)
    if cls.__name__ in mappable:
        return None
    for base in cls.__mro__[1:]:
        if base.__module__.startswith("torch.nn.modules") and base.__name__ in mappable:
            return base.__name__ if getattr(cls, "forward", None) is getattr(base, "forward", None) else None
    return None


@dataclass
class InspectReport:
    """What conversion would do: one row per captured op."""

    rows: list = field(default_factory=list)
    unsupported: list = field(default_factory=list)
    transposes: int = 0
    num_parameters: int = 0

    def __str__(self) -> str:
        header = ("module", "type", "op", "converter", "params")
        table = [header] + [
            (r["module"] or "<root>", r["type"], r["op"], r["converter"] or "UNSUPPORTED", str(r["params"]))
            for r in self.rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
        lines.insert(1, "  ".join("-" * w for w in widths))
        lines.append("")
        lines.append(f"parameters: {self.num_parameters:,}   transposes inserted: {self.transposes}")
        if self.unsupported:
            lines.append(f"unsupported ops ({len(self.unsupported)}): " + ", ".join(self.unsupported))
        else:
            lines.append("all ops supported")
        return "\n".join(lines)


def inspect_model(model, example_inputs=None, *, example_kwargs=None) -> InspectReport:
    """Capture ``model`` (keyword inputs ``example_kwargs`` as :func:`convert`) and report per op the converter it
    maps to, parameter counts, unsupported ops (all of them) and the transposes the layout pass will insert."""
    from .capture import capture
    from .ir import dead_code_elimination

    graph = capture(model, example_inputs, example_kwargs=example_kwargs)
    dead_code_elimination(graph)
    report = InspectReport()
    counted = set()
    for node in graph.nodes:
        supported = has_converter(node.op)
        params = 0
        for ref in node.refs():
            name = graph.param_values.get(ref)
            if name is not None and name not in counted:
                counted.add(name)
                params += int(graph.params[name].size)
        report.rows.append({
            "module": node.module,
            "type": node.module_type,
            "op": node.op,
            "converter": get_converter(node.op).fn.__name__ if supported else None,
            "params": params,
        })
        if not supported and node.op not in report.unsupported:
            report.unsupported.append(node.op)
    report.num_parameters = sum(int(graph.params[n].size) for n in graph.params if n in graph.trainable)
    if not report.unsupported:
        report.transposes = convert_graph(graph, "mlx", weights=False)["graph"]["num_transposes"]
    return report


__all__ = ["convert", "inspect_model", "InspectReport", "UnsupportedOpsError"]
