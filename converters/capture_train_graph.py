"""The forward captured a second time in training mode (conversion time, imports torch; ``train_graph.py``).

For the modules :func:`capture_train.deterministic` found (a training forward that differs from the eval forward
without a random op: torchvision's Inception v3 / GoogLeNet auxiliary logits, timm's distilled DeiT's two heads,
MONAI DynUNet's deep supervision), the model is captured and converted again with those modules in training mode
and every other module in eval mode. Batch norm, dropout and stochastic depth are then captured in their eval form,
as in the eval capture, and the port's layers compute their training form by their own modes in either graph.

The two conversions are merged into one artifact: the same inputs and signature (else the training capture is not
used), the union of the mapped layers (a layer both map must map the same way), one parameter record per array: an
array the eval graph never reads (an auxiliary head's) takes the training graph's layout. The merged port must give
torch's training-mode output on the example (those modules training, the rest in eval) before it is kept.
"""

from __future__ import annotations

import torch

from .capture_buffers import BufferSnapshot
from .runtime import PortedModel, _nearest_module, _params_read
from .train_graph import KEY, PER_GRAPH
from .tree import unused_arrays


class NotReproduced(Exception):
    """The training-mode capture cannot stand for torch's training forward; the message says why."""


def with_train_graph(ported, model, inputs: tuple, kwargs: dict, paths: list, marks, settings: dict) -> PortedModel:
    """A port of ``model`` (eval mode) like ``ported`` that runs the forward captured with ``paths`` in training
    mode while those modules train. ``settings``: the eval capture's ``io_layout``, ``dynamic`` and
    ``double_batch``. Raises :class:`NotReproduced` naming why it cannot."""
    from .api import _module_attrs
    from .capture import capture
    from .convert import convert_graph

    modules = [model.get_submodule(path) for path in paths]
    try:
        for module in modules:
            module.training = True
        try:
            graph = capture(model, inputs, double_batch=settings["double_batch"], dynamic=settings["dynamic"],
                            example_kwargs=kwargs, train_marks=marks)
            graph.module_attrs = _module_attrs(model, marks)
            result = convert_graph(graph, settings["io_layout"])
        except Exception as e:  # noqa: BLE001  (the eval port stands; training mode stays refused, saying why)
            raise NotReproduced(f"its training-mode forward could not be captured ({type(e).__name__}: "
                                f"{str(e)[:200]})") from None
        merged, weights = _merge(ported, result["graph"], result["weights"], paths)
        try:
            port = PortedModel(merged, weights)
        except (ValueError, TypeError) as e:  # a tree the two captures' layers cannot share
            raise NotReproduced(f"its training-mode capture does not fit the eval port ({e})") from None
        if not _reproduces(port, model, inputs, kwargs, paths):
            raise NotReproduced("its training-mode capture does not reproduce torch's training forward on the example")
    finally:
        for module in modules:
            module.training = False
    for name in ("capture_note", "frozen_constants"):
        setattr(port, name, getattr(ported, name, None))
    return port


def _merge(ported, train: dict, train_weights: dict, paths: list) -> tuple:
    """``(graph, weights)``: ``ported``'s graph with ``train`` as its ``train_graph`` record, layers and parameter
    records merged (module docstring)."""
    base = ported.graph
    if _call_form(base["inputs"]) != _call_form(train["inputs"]) or base.get("signature") != train.get("signature"):
        raise NotReproduced("its training-mode capture takes other inputs than the eval capture")
    modules = dict(base.get("modules", {}))
    for path, record in train.get("modules", {}).items():
        if modules.setdefault(path, record) != record:
            raise NotReproduced(f"the layer at {path!r} maps differently in the training-mode capture")
    unread = set(unused_arrays(base["params"], base.get("modules", {}), _params_read(base)))
    params, weights = dict(base["params"]), ported.named_arrays()
    for name, record in train["params"].items():
        if name not in params:
            raise NotReproduced(f"the training-mode capture records an array {name!r} the eval capture does not")
        if params[name] != record:
            if name not in unread:
                raise NotReproduced(f"the training-mode capture lays out {name!r} differently from the eval capture")
            params[name], weights[name] = record, train_weights[name]
    graph = dict(base, modules=modules, params=params)
    graph["module_types"] = {**train.get("module_types", {}), **base.get("module_types", {})}
    graph[KEY] = {"switch": sorted(paths), **{key: train[key] for key in PER_GRAPH if key in train}}
    return graph, weights


def _call_form(inputs: list) -> list:
    """What a call binds and checks of the graph inputs: names, layouts, kinds, dtypes, ranks, example sizes. The
    dims each capture kept symbolic may differ (a training branch reading a size pins it): the training graph's own
    ``input_checks`` hold its sizes."""
    form = []
    for spec in inputs:
        meta = {k: v for k, v in spec["meta"].items() if k != "shape"}
        form.append((spec["name"], spec["perm"], meta, len(spec["meta"].get("shape") or ())))
    return form


def _reproduces(port, model, inputs: tuple, kwargs: dict, paths: list) -> bool:
    """The port running its training-mode graph with every layer in eval mode gives torch's output with ``paths``
    training and the rest in eval (buffers and torch's RNG as before)."""
    from .capture import reproduces

    buffers = BufferSnapshot(model)
    port.eval()
    for path in paths:
        _nearest_module(port, path)._training = True  # its holder only: the layers below stay in eval mode
    try:
        with torch.random.fork_rng(devices=[]):
            return reproduces(port, model, inputs, kwargs)
    finally:
        port.eval()
        buffers.restore()
