"""TorchScript values as the IR sees them (conversion time, imports torch): a value's metadata, Python literals
(dtypes, devices) as graph.json values, ScalarType codes as dtype names, module scopes of a node, and a returned
value as an output tree. Used by the TorchScript interpreter (``capture_script.py``)."""

from __future__ import annotations

import torch

from .capture_export import _dtype_name, storage_order
from .ir import Ref, ValueMeta


def meta(value) -> ValueMeta:
    if isinstance(value, torch.Tensor):
        shape = [int(s) for s in value.shape]
        return ValueMeta("tensor", shape, _dtype_name(value.dtype), hint=list(shape), storage_order=storage_order(value))
    if isinstance(value, bool):
        return ValueMeta("bool")
    if isinstance(value, int):
        return ValueMeta("int")
    if isinstance(value, float):
        return ValueMeta("float")
    if isinstance(value, (list, tuple)):
        return ValueMeta("list", items=[meta(v) for v in value])
    if value is None:
        return ValueMeta("none")
    return ValueMeta("other")


def dtype_from_code(code: int) -> torch.dtype:
    """The dtype of a c10 ScalarType code (TorchScript passes ``dtype=torch.float64`` as 7): torch.ops reads it."""
    return torch.ops.aten.empty.memory_format([0], dtype=code).dtype


def scalar_type(name, ir, dtype_args):
    """A ``ScalarType`` argument's code (``dtype_args``: the names the schema declares so; its parsed types say
    only ``int``) as the dtype name every converter reads; anything else unchanged."""
    if name not in dtype_args or isinstance(ir, bool) or not isinstance(ir, int):
        return ir
    try:
        return _dtype_name(dtype_from_code(ir))
    except Exception:  # noqa: BLE001  (not a code torch knows)
        raise NotImplementedError(f"TorchScript passes dtype code {ir} for argument {name!r}, which is no dtype "
                                  "torch knows") from None


def literal(value):
    if isinstance(value, torch.dtype):
        return _dtype_name(value)
    if isinstance(value, (torch.device, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [literal(v) for v in value]
    return value


def hierarchy(node) -> list:
    """[(path, type)] of the module calls enclosing ``node``, outermost first."""
    try:
        text = node.getModuleHierarchy()
    except Exception:  # noqa: BLE001
        return []
    scopes, path = [], []
    for part in filter(None, text.split(".")):
        name, _, type_name = part.partition("(")
        type_name = type_name.rstrip(")")
        if name in ("SELF", "UNKNOWN_INSTANCE") or type_name == "UNKNOWN_TYPE":
            continue
        path.append(name)
        scopes.append((".".join(path), type_name))
    return scopes


def python_scalar(value):
    """A leaf of ``torch.tensor``'s data as the Python scalar torch reads (a 0-d tensor passed through
    ``float(t)``/``int(t)`` keeps its tensor here)."""
    return value.item() if isinstance(value, torch.Tensor) else value


def map_leaves(fn, value):
    return [map_leaves(fn, v) for v in value] if isinstance(value, (list, tuple)) else fn(value)


def output_tree(ir, value, outputs: list, depth: int = 0) -> dict:
    """The ``output_tree`` node (``converters/output_tree.py``) of a returned value, its tensors appended to
    ``outputs``: a dict (``prim::DictConstruct``) by its keys, a tuple or list as a tuple (the interpreter keeps
    both as lists), ``None`` as none."""
    if depth > 32:
        raise NotImplementedError("the TorchScript model's output is nested more than 32 levels deep")
    if isinstance(ir, dict):
        return {"dict": [[k, output_tree(ir[k], value[k], outputs, depth + 1)] for k in ir]}
    if isinstance(ir, list):
        return {"tuple": [output_tree(i, v, outputs, depth + 1) for i, v in zip(ir, value)]}
    if value is None:
        return {"none": True}
    if not isinstance(value, torch.Tensor):
        raise NotImplementedError(f"the TorchScript model returns a {type(value).__name__} inside its output; a port "
                                  "returns tensors (in tuples, lists, dicts) only")
    outputs.append(ir)
    return {"leaf": len(outputs) - 1}


def snapshot(value):
    return [snapshot(v) for v in value] if isinstance(value, list) else value


def isinstance_of(value, type_names) -> bool:
    checks = {"Tensor": torch.Tensor, "int": int, "float": float, "bool": bool, "str": str, "NoneType": type(None)}
    for name in type_names:
        head = name.split("[")[0].split("(")[0]
        if head in ("List", "list") and isinstance(value, list):
            return True
        if head in ("Tuple", "tuple") and isinstance(value, tuple):
            return True
        if head in checks and isinstance(value, checks[head]):
            return True
    return False


def has_ref(value) -> bool:
    if isinstance(value, Ref):
        return True
    if isinstance(value, (list, tuple)):
        return any(has_ref(v) for v in value)
    return False
