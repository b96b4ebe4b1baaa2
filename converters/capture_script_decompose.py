"""TorchScript ops without a converter, decomposed by torch's own decompositions (imports torch; conversion only).

TorchScript records composite ops as the model called them (``cdist``, ``mse_loss``, ``linspace``, ``tile``,
``rot90``, ``logaddexp``, ...), where ``torch.export`` would have handed Porter their decomposition
(``capture_decompose``). :func:`decompose_call` traces one such call with ``make_fx`` on fake copies of its tensor
arguments, decomposing every op of torch's default table that Porter has no converter for, and returns the traced
ATen calls for the TorchScript capture to record in its place. Decompositions are torch's, so torch stays the oracle
and the parity tests hold the result to it; what is still unsupported afterwards is reported by name, as before.
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Callable, Optional

import torch

from .capture_export import op_name
from .registry import has_converter

MAX_ROUNDS = 4  # a decomposition can produce another composite without a converter (hstack -> atleast_1d)


@lru_cache(maxsize=1)
def _table() -> dict:
    """torch's default decompositions of the ops Porter has no converter for (the registry is fixed once imported:
    built once, not per call and per traced node)."""
    table = torch.export.default_decompositions()
    return {op: fn for op, fn in table.items() if not has_converter(op_name(op))}


def decomposable(op) -> bool:
    """Whether ``op`` (an OpOverload) has no converter and torch can decompose it."""
    return isinstance(op, torch._ops.OpOverload) and not has_converter(op_name(op)) and (
        op in _table() or torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"))


def decompose_call(op, args: list, kwargs: dict) -> Optional[torch.fx.GraphModule]:
    """A graph of ``op(*args, **kwargs)`` in ATen ops Porter converts where torch can decompose; its placeholders
    are the tensor arguments in order (top-level ones and those inside lists). None when tracing fails."""
    slots = []  # (where, index or (list index, item index)) of each tensor argument

    def collect(values, where):
        for i, v in enumerate(values):
            if isinstance(v, torch.Tensor):
                slots.append((where, i, None))
            elif isinstance(v, (list, tuple)):
                slots.extend((where, i, j) for j, item in enumerate(v) if isinstance(item, torch.Tensor))

    collect(args, "arg")
    kw_keys = list(kwargs)
    collect([kwargs[k] for k in kw_keys], "kw")
    tensors = [_get(args, kwargs, kw_keys, s) for s in slots]

    def call(*ts):
        # fresh lists (tuples too) to put the traced tensors into; the caller's arguments stay as they were
        a = [list(v) if isinstance(v, (list, tuple)) else v for v in args]
        k = {key: list(v) if isinstance(v, (list, tuple)) else v for key, v in kwargs.items()}
        for slot, t in zip(slots, ts):
            _set(a, k, kw_keys, slot, t)
        return op(*a, **k)

    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gm = make_fx(call, decomposition_table=_table(), tracing_mode="fake")(*tensors)
            for _ in range(MAX_ROUNDS):
                left = {n.target for n in gm.graph.nodes if n.op == "call_function" and decomposable(n.target)}
                if not left:
                    break
                gm = make_fx(gm, decomposition_table=_table(), tracing_mode="fake")(*tensors)
            # then functionalized: decompositions write in place (ceil_, squeeze_); the IR records values
            gm = make_fx(torch.func.functionalize(gm, remove="mutations"), tracing_mode="fake")(*tensors)
    except Exception:  # noqa: BLE001  (torch cannot trace this decomposition: the op is reported unsupported)
        return None
    if any(n.op == "get_attr" or not _static(n.meta.get("val")) for n in gm.graph.nodes):
        return None  # a tensor constant made inside the decomposition, or a size that depends on values
    return gm


def _static(value) -> bool:
    if isinstance(value, torch.Tensor):
        return all(isinstance(s, int) for s in value.shape)
    if isinstance(value, (list, tuple)):
        return all(_static(v) for v in value)
    return not isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _get(args, kwargs, keys, slot):
    where, i, j = slot
    value = args[i] if where == "arg" else kwargs[keys[i]]
    return value if j is None else value[j]


def _set(args, kwargs, keys, slot, tensor):
    where, i, j = slot
    if where == "arg":
        if j is None:
            args[i] = tensor
        else:
            args[i][j] = tensor
    elif j is None:
        kwargs[keys[i]] = tensor
    else:
        kwargs[keys[i]][j] = tensor


def tensor_irs(ins: list) -> list:
    """The IR values of a call's tensor arguments, in :func:`decompose_call`'s placeholder order (positional
    arguments as TorchScript passes them, list items in place)."""
    out = []
    for ir, value in ins:
        if isinstance(value, torch.Tensor):
            out.append(ir)
        elif isinstance(value, (list, tuple)):
            out.extend(ir[j] for j, item in enumerate(value) if isinstance(item, torch.Tensor))
    return out


def replay(gm: torch.fx.GraphModule, inputs: list, record: Callable, literal: Callable):
    """Record ``gm``'s calls through ``record(op_name, args, explicit, concrete)``; ``inputs`` are the IR values of
    its placeholders. Returns the IR of its output (a value, or a list for a tuple output)."""
    env = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, ir in zip(placeholders, inputs):
        env[node.name] = ir

    def lift(value):
        if isinstance(value, torch.fx.Node):
            return env[value.name]
        if isinstance(value, (list, tuple)):
            return [lift(v) for v in value]
        return literal(value)

    output = None
    for node in gm.graph.nodes:
        if node.op == "call_function":
            if isinstance(node.target, torch._ops.OpOverload):
                schema = node.target._schema.arguments
                args, explicit = {}, []
                for a, value in zip(schema, node.args):
                    args[a.name] = lift(value)
                    explicit.append(a.name)
                for a in schema[len(node.args):]:
                    if a.name in node.kwargs:
                        args[a.name] = lift(node.kwargs[a.name])
                        explicit.append(a.name)
                    else:
                        args[a.name] = literal(a.default_value) if a.has_default_value() else None
                env[node.name] = record(op_name(node.target), args, explicit, node.meta.get("val"))
            else:  # operator.getitem on a tuple result
                env[node.name] = record(op_name(node.target), {"a": lift(node.args[0]), "b": node.args[1]},
                                        ["a", "b"], node.meta.get("val"))
        elif node.op == "output":
            output = lift(node.args[0])
    return output
