"""Ops without a converter, decomposed by torch's own decompositions before conversion (imports torch).

``torch.export`` keeps composite ops as the model called them (``hstack``, ``tile``, ``rot90``, ``logaddexp``,
``isclose``, ...). Porter converts a few hundred ATen ops directly; for the others, torch ships a decomposition into
simpler ATen ops (``torch.export.default_decompositions()``). When a captured program uses ops Porter has no
converter for, :func:`decompose_unsupported` runs exactly those decompositions (``ExportedProgram.run_decompositions``
with a table of those ops only), then looks again, since a decomposition can produce another unsupported composite
(``hstack`` -> ``atleast_1d``). A program whose ops are all supported is returned untouched, so this never changes a
port that converted before. What is left without a converter and without a decomposition is reported by the
converter as an unsupported op, as before.

Decompositions are torch's: they compute what the op computes in torch's own terms (``logaddexp`` -> max + log1p of
exp of the difference), so torch stays the oracle and the parity tests hold the result to it.
"""

from __future__ import annotations

import warnings

import torch

from .capture_export import op_name
from .registry import has_converter

MAX_ROUNDS = 4  # hstack -> atleast_1d -> view: each round decomposes what the previous one produced


def _targets(ep) -> set:
    """Every OpOverload called in the program, its nested graphs (no_grad / autocast regions) included."""
    out = set()
    for module in ep.graph_module.modules():
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        for node in graph.nodes:
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                out.add(node.target)
    return out


def unsupported_with_decomposition(ep, table) -> dict:
    """``{op: decomposition}`` for the program's ops that have no converter and that ``table`` decomposes, except
    ops whose every call is folded into a constant at capture (``capture_fold.py``: torch's own kernel computes
    them, ``hann_window`` included)."""
    todo = [op for op in _targets(ep) if not has_converter(op_name(op)) and op in table]
    if not todo:
        return {}
    from . import capture_fold
    from .capture_fold_export import folded_ops

    folded = folded_ops(ep) if capture_fold.ENABLED else set()
    return {op: table[op] for op in todo if op not in folded}


def decompose_unsupported(ep):
    """``ep`` with every op Porter cannot convert but torch can decompose, decomposed; ``ep`` itself when none."""
    table = torch.export.default_decompositions()
    for _ in range(MAX_ROUNDS):
        todo = unsupported_with_decomposition(ep, table)
        if not todo:
            return ep
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's notes on the IR change; the conversion reports what matters
                ep = ep.run_decompositions(todo)
        except Exception:  # noqa: BLE001  (a decomposition torch cannot trace: those ops are reported unsupported)
            return ep
    return ep
