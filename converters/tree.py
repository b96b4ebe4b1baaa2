"""The module tree of a ported model: MLX modules under torch's names. Torch-free.

``build_tree(root, graph, weights)`` hangs, under ``root``, one module per torch submodule path that holds
parameters or a mapped layer:

* a mapped layer (``graph["modules"][path]``: a ``Conv``, ``Linear``, ``BatchNorm``, ... record, see
  ``layer_types.py``) becomes that MLX layer, its arrays replaced by the recorded weights;
* any other path becomes a :class:`Submodule`, a plain container holding its parameters and buffers under torch's
  attribute names (its forward runs as program nodes);
* a parent whose children are named ``0 .. n-1`` (``nn.Sequential``, ``nn.ModuleList``) holds them as a Python
  list, so ``ported.layer1[0].conv1`` works and MLX's parameter names are torch's ``state_dict`` names.

Buffers (torch's non-parameters: running statistics, lifted constants) are frozen, so ``trainable_parameters()``
and optimizers see exactly torch's parameters.

Every key comes from the artifact: keys are only ever used as dict keys or list indices, never as attribute names
looked up on a class (``getattr``), so no name in a file reaches code.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from .layer_types import LAYER_TYPES

MAX_LIST = 1 << 16  # a Sequential/ModuleList longer than this (or with big gaps) is kept as a keyed container


# Keys MLX's own ``Module.__setattr__`` assigns non-array values to (``train()``/``eval()`` set ``_training``), which
# drops a dict entry of the same name: a torch name equal to one of them cannot be held in a container.
RESERVED_KEYS = frozenset({"_training", "_no_grad"})
ROOT_RESERVED_KEYS = frozenset({"_program"})  # the ported model's own plain attribute


class TorchNamed(nn.Module):
    """A container whose keys are torch's names, leading underscore included.

    MLX treats a key starting with ``_`` as private: ``parameters()``, ``trainable_parameters()``, ``freeze()`` and
    ``apply()`` skip it. Torch does not (``_conv_stem.weight`` is an ordinary ``state_dict`` name, e.g. in the
    widely used EfficientNet-PyTorch), so a port holding such a child would neither train, cast, nor save it. In
    Porter's containers every dict entry is a torch name (a parameter, buffer, child module or module list; Porter's
    own state is held in plain attributes), so the filters below keep underscore keys here; MLX layers nested inside
    keep MLX's rule for their own keys.
    """

    @staticmethod
    def valid_parameter_filter(module, key, value):
        return isinstance(value, (dict, list, mx.array)) and (
            not key.startswith("_") or isinstance(module, TorchNamed))

    @staticmethod
    def trainable_parameter_filter(module, key, value):
        return TorchNamed.valid_parameter_filter(module, key, value) and key not in module._no_grad

    def apply(self, map_fn, filter_fn=None):
        """``nn.Module.apply`` whose default filter keeps torch's underscore names (MLX's default skips them)."""
        return super().apply(map_fn, filter_fn or self.valid_parameter_filter)


class Submodule(TorchNamed):
    """A torch submodule that Porter has no layer class for: its parameters and buffers, by torch's names.

    Attributes:
        torch_type (str): the torch class name (for ``repr``), ``""`` when unknown.
    """

    def __init__(self, torch_type: str = ""):
        super().__init__()
        object.__setattr__(self, "torch_type", torch_type)

    def _extra_repr(self) -> str:
        return self.torch_type

    def __call__(self, *args, **kwargs):
        raise TypeError(f"this {self.torch_type or 'submodule'} has no forward of its own in MLX: its computation "
                        "runs as part of the ported model's program")


def split_path(name: str) -> list:
    """``"layer1.0.conv1.weight"`` -> ``["layer1", "0", "conv1", "weight"]``; ``""`` (the root) -> ``[]``."""
    return name.split(".") if name else []


class TreeError(ValueError):
    """The recorded names or modules cannot form a tree (a name both an array and a module, an empty segment)."""


class LoadedArrayError(ValueError):
    """A mapped layer refuses the value of one of its arrays (a negative batch count): the weights' fault.

    Attributes:
        name (str): the array's torch name.
        problem (str): what is wrong with it.
    """

    def __init__(self, name: str, problem: str):
        self.name, self.problem = name, problem
        super().__init__(f"{name!r} {problem}")


def _as_index(key: str):
    return int(key) if key.isdigit() and (key == "0" or not key.startswith("0")) else None


def _check_key(key: str, segments: list) -> None:
    if key in RESERVED_KEYS or (len(segments) == 1 and key in ROOT_RESERVED_KEYS):
        raise TreeError(f"the name {'.'.join(segments)[:120]!r} uses {key!r}, which MLX's Module (or the ported "
                        "model) keeps for its own state; rename that attribute in the torch model")


def build_tree(root: nn.Module, params: dict, arrays: dict, modules: dict, types: dict, read=None) -> tuple:
    """Populate ``root`` (a fresh ``nn.Module``); return ``({torch name: key path}, {layer path: key path})``, the
    key paths (dict keys and list indices) that reach every array and every mapped layer from ``root``.

    Args:
        params: torch name -> record (``trainable`` says parameter or buffer).
        arrays: torch name -> ``mx.array`` (MLX layout).
        modules: path -> ``{"type", "config"}`` for mapped layers (config already checked).
        types: path -> torch class name, for containers' ``repr`` (may be partial).
        read: the torch names the program's nodes read (``{"param": name}``); ``None``: all of them.

    Raises:
        TreeError: a name is both an array and a module, or has an empty segment.
        ValueError: a mapped layer's recorded weights do not fit its config (shape), miss one of its arrays, or
            hold one it does not make (:func:`_check_foreign`).
    """
    # 1. the nested key structure: node = {"children": {key: node}, "arrays": {leaf: torch name}, "path": str}
    top = {"children": {}, "arrays": {}, "path": ""}

    def node_at(segments):
        node = top
        for depth, seg in enumerate(segments):
            if seg == "":
                raise TreeError(f"the name {'.'.join(segments)[:120]!r} has an empty segment")
            _check_key(seg, segments[:depth + 1])
            if seg in node["arrays"]:
                raise TreeError(f"{'.'.join(segments[:depth + 1])[:120]!r} is both an array and a module")
            node = node["children"].setdefault(seg, {"children": {}, "arrays": {}, "path": ".".join(segments[:depth + 1])})
        return node

    for path in modules:
        node_at(split_path(path))["mapped"] = True
    for name in params:
        segments = split_path(name)
        if not segments or any(s == "" for s in segments):
            raise TreeError(f"the parameter name {name[:120]!r} has an empty segment")
        owner = node_at(segments[:-1])
        _check_key(segments[-1], segments)
        if segments[-1] in owner["children"]:
            raise TreeError(f"{name[:120]!r} is both an array and a module")
        owner["arrays"][segments[-1]] = name

    # 2. materialise bottom-up
    key_paths: dict = {}
    layer_keys: dict = {}

    def make(node, prefix: list, existing=None):
        path, children = node["path"], node["children"]
        indices = [_as_index(k) for k in children]
        if (existing is None and path and path not in modules and not node["arrays"] and children
                and None not in indices
                and max(indices) < min(MAX_LIST, 4 * len(indices) + 64)):
            items = [None] * (max(indices) + 1)  # nn.Sequential / nn.ModuleList: a list, indexed as in torch
            for key, child in children.items():
                items[int(key)] = make(child, prefix + [int(key)])
            # a child without parameters or a mapped layer (an unmapped nn.ReLU, say): an empty placeholder
            return [item if item is not None else Submodule("") for item in items]
        record = modules.get(path)
        if record is not None:
            try:
                module = LAYER_TYPES[record["type"]].build(record["config"])
            except (ValueError, TypeError, OverflowError, RuntimeError) as e:  # MLX's own checks ([quantize] ...)
                # name no layer: say which recorded layer and which config
                raise ValueError(f"the {record['type']} layer at {path!r} cannot be built from its recorded config"
                                 f"{_quant_fields(record['config'])}: {str(e)[:300]}") from None
            layer_keys[path] = list(prefix)
            expected = {k: v for k, v in module.items() if isinstance(v, mx.array)}
        elif existing is not None:  # a child a mapped layer builds itself (MultiheadAttention's out_proj)
            module, record = existing, {"type": type(existing).__name__}
            expected = {k: v for k, v in module.items() if isinstance(v, mx.array)}
        else:
            module = root if path == "" else Submodule(types.get(path, ""))
            expected = None
        made = dict(expected) if expected is not None else None
        built = {k for k, v in module.items() if isinstance(v, nn.Module)} if made is not None else set()
        buffers = []
        for leaf, name in node["arrays"].items():
            array = arrays[name]
            if expected is not None and leaf in expected:
                want = expected.pop(leaf)
                if tuple(want.shape) != tuple(array.shape):
                    raise ValueError(f"the weight {name!r} has shape {tuple(array.shape)} but the "
                                     f"{record['type']} layer at {path!r} needs {tuple(want.shape)}")
                if not _dtype_fits(array.dtype, want.dtype):
                    raise ValueError(f"the weight {name!r} has dtype {array.dtype} but the {record['type']} layer "
                                     f"at {path!r} needs {_dtype_kind(want.dtype)}")
            module[leaf] = array
            key_paths[name] = prefix + [leaf]
            if not params[name]["trainable"]:
                buffers.append(leaf)
        if made is not None:  # after each array's own shape and dtype checks, which name the more precise fault
            _check_foreign(node, record, module, made, built, read)
        if record is not None and hasattr(module, "loaded_problem"):  # values a layer refuses (a negative batch count)
            problem = module.loaded_problem()
            if problem is not None:
                leaf, text = problem
                raise LoadedArrayError(node["arrays"].get(leaf, f"{path}.{leaf}"), text)
        if expected:
            raise ValueError(f"the {record['type']} layer at {path!r} has no recorded weight for "
                             f"{sorted(expected)} (every array of a mapped layer must come from the weights)")
        if buffers:
            module.freeze(keys=buffers, recurse=False)
        for key, child in children.items():
            own = module.get(key) if expected is not None or existing is not None else None
            module[key] = make(child, prefix + [key],
                               own if isinstance(own, nn.Module) and child["path"] not in modules else None)
        if record is not None:  # every child module the layer built must have received its weights
            for key, value in module.items():
                if isinstance(value, nn.Module) and key not in children and any(
                        isinstance(a, mx.array) for a in value.values()):
                    raise ValueError(f"the {record['type']} layer at {path!r} has no recorded weights for its "
                                     f"child {key!r}")
        return module

    make(top, [])
    return key_paths, layer_keys


def unused_arrays(params: dict, modules: dict, read: set) -> list:
    """The recorded arrays outside every mapped layer that no node of the program reads (``read``): bytes the
    artifact carries that the model never uses (an unused head torch kept in its ``state_dict``, or a payload).
    A mapped layer's arrays are used by the layer, and ones it does not make are refused (:func:`_check_foreign`)."""
    def in_layer(name):
        segments = split_path(name)
        return any(".".join(segments[:i]) in modules for i in range(len(segments)))

    return sorted(n for n in params if n not in read and not in_layer(n))


def _check_foreign(node: dict, record: dict, layer: nn.Module, made: dict, built: set, read) -> None:
    """A mapped layer holds only the arrays it makes, plus arrays of its torch module that program nodes read (a
    custom module's extra parameter): an array attached beside them changed what the layer computes without a
    word (``bias`` on a conv recorded ``bias: false``: MLX's layers add a ``bias`` whenever one is present), or sat
    unused. One the layer type makes under another config is refused even when a node reads it; so is a child
    module the layer does not build (unless it is a mapped layer itself, recorded under ``modules``)."""
    path, kind = node["path"], record["type"]
    vocabulary = set(made) | _optional_arrays(record) | built  # an array in place of a child it builds, too
    for leaf, name in node["arrays"].items():
        if leaf in made:
            continue
        if leaf in vocabulary:
            raise ValueError(f"the {kind} layer at {path!r} holds the array {name!r} ({leaf!r}), which its recorded "
                             f"config does not make (it makes {sorted(made)}): it would change what the layer "
                             "computes")
        if read is not None and name not in read:
            raise ValueError(f"the {kind} layer at {path!r} holds the array {name!r}, which the layer does not make "
                             f"(it makes {sorted(made)}) and no node of the program reads")
    for key, child in node["children"].items():
        if key not in built and not child.get("mapped"):
            inside = sorted(_arrays_below(child))
            raise ValueError(f"the {kind} layer at {path!r} has no child {key!r}, yet the weights hold "
                             f"{inside[:3]} under it")


def _quant_fields(config: dict) -> str:
    """A quantized layer's recorded ``bits``/``group_size``/``mode`` for a message (MLX's own checks name none)."""
    fields = [f"{k}={config[k]!r}" for k in ("bits", "group_size", "mode") if k in config]
    return f" ({', '.join(fields)})" if fields else ""


def _optional_arrays(record: dict) -> set:
    """The arrays a layer of this type makes with every boolean option on (``bias``, ``affine``, ...)."""
    config = record.get("config")
    if not isinstance(config, dict):
        return set()
    try:
        layer = LAYER_TYPES[record["type"]].build({k: True if isinstance(v, bool) else v for k, v in config.items()})
    except Exception:  # noqa: BLE001 - a combination the type refuses: only the arrays of the recorded config count
        return set()
    return {k for k, v in layer.items() if isinstance(v, mx.array)}


def _arrays_below(node: dict):
    yield from node["arrays"].values()
    for child in node["children"].values():
        yield from _arrays_below(child)


def _dtype_fits(got, want) -> bool:
    """A layer's array may come in another floating dtype than the one its constructor made (float16, bfloat16 and
    float64 ports), never in another kind: a quantized layer's packed uint32 weight or uint8 scales read as
    float, or float scales read as int32, computed garbage without an error (session 13)."""
    if mx.issubdtype(want, mx.floating):
        return mx.issubdtype(got, mx.floating)
    return got == want


def _dtype_kind(dtype) -> str:
    return "a floating dtype" if mx.issubdtype(dtype, mx.floating) else str(dtype)


def resolve(root, path: list):
    """The object at a key path (dict keys and list indices only)."""
    obj = root
    for key in path:
        obj = obj[key]
    return obj
