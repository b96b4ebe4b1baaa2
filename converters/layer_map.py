"""Conversion: which runtime nodes are calls of a torch layer that Porter maps to an MLX layer. Torch-free.

After the converters have emitted the program, each node that is the core computation of a torch layer (the conv of
an ``nn.Conv2d``, the linear of an ``nn.Linear``, the batch norm of an ``nn.BatchNorm2d``, ...) is replaced by a
``call_module`` node that calls the MLX layer at the module's path in the tree (``converters/tree.py``). The layer
computes exactly what the node computed (same functions underneath); the nodes around it (layout transposes, a
padding mode's explicit pad, a custom module's extra ops) stay in the program.

A module is mapped only when every core node recorded for it maps to the same layer and reads the module's own
parameters (``{path}.weight``, ...) in the layout the layer keeps them in, and nothing else reads those parameters
(a tied weight stays a plain array: quantizing one reader would break the other). Otherwise the module's nodes stay
as they are and its parameters live in a plain container at its path.

A mapper is registered per torch class name: ``mapper(node, source, info) -> Mapping | None``; ``source`` is the
captured node (its ATen arguments), ``info`` the attributes read from the torch module itself when the model was an
``nn.Module`` (``momentum``), else ``{}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .ir import Ref

_MAPPERS: dict = {}


@dataclass
class Mapping:
    """A node recognised as a call of a layer: the layer's type and config (``layer_types.py``), the node input
    that is the layer's input, and the layer's parameters: ``{attribute: (node input index, transform)}``."""

    type: str
    config: dict
    x: int
    params: dict = field(default_factory=dict)


def maps(*torch_types: str):
    def decorate(fn):
        for name in torch_types:
            _MAPPERS[name] = fn
        return fn

    return decorate


def mapped_torch_types() -> frozenset:
    """The torch class names a mapper is registered for."""
    return frozenset(_MAPPERS)


def _param(node, index) -> Optional[str]:
    inputs = node["inputs"]
    if index >= len(inputs) or not isinstance(inputs[index], dict) or set(inputs[index]) != {"param"}:
        return None
    return inputs[index]["param"]


def _optional(node, index) -> bool:
    """The node input ``index`` is absent or None."""
    return index >= len(node["inputs"]) or node["inputs"][index] is None


def _slots(node, wanted: dict) -> Optional[dict]:
    """``{attribute: (index, transform)}`` for the given ``{attribute: (index, transform, required)}`` when each
    input is a parameter (or absent where allowed)."""
    out = {}
    for attr, (index, transform, required) in wanted.items():
        if _param(node, index) is not None:
            out[attr] = (index, transform)
        elif required or not _optional(node, index):
            return None
    return out


@maps("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
def _conv(node, source, info, shapes, module_type):
    transposed = module_type.startswith("ConvTranspose")
    if node["kernel"] != ("conv_transpose" if transposed else "conv"):
        return None
    a = node["attrs"]
    transform = "conv_transpose_weight" if transposed else "conv_weight"
    slots = _slots(node, {"weight": (1, transform, True), "bias": (2, "identity", False)})
    if slots is None or int(module_type[-2]) != a["nd"]:
        return None
    w = shapes[_param(node, 1)]
    nd, groups = a["nd"], a["groups"]
    ints = (lambda v: [v] * nd if isinstance(v, int) else list(v))
    kernel_size = list(w[2:])
    if transposed:
        in_channels, out_channels = w[0], w[1] * groups
    else:
        in_channels, out_channels = w[1] * groups, w[0]
    config = {"nd": nd, "in_channels": in_channels, "out_channels": out_channels, "kernel_size": kernel_size,
              "stride": ints(a["stride"]), "padding": a["padding"] if isinstance(a["padding"], str)
              else ints(a["padding"]), "dilation": ints(a["dilation"]), "groups": groups, "bias": "bias" in slots}
    if transposed:
        if isinstance(a["padding"], str):
            return None
        config["output_padding"] = ints(a["output_padding"])
    return Mapping("ConvTranspose" if transposed else "Conv", config, 0, slots)


@maps("Linear")
def _linear(node, source, info, shapes, module_type):
    if node["kernel"] != "linear":
        return None
    slots = _slots(node, {"weight": (1, "identity", True), "bias": (2, "identity", False)})
    if slots is None:
        return None
    out_features, in_features = shapes[_param(node, 1)]
    return Mapping("Linear", {"in_features": in_features, "out_features": out_features, "bias": "bias" in slots},
                   0, slots)


@maps("Embedding")
def _embedding(node, source, info, shapes, module_type):
    if node["kernel"] != "embedding":
        return None
    slots = _slots(node, {"weight": (0, "identity", True)})
    if slots is None or len(shapes[_param(node, 0)]) != 2:
        return None
    num, dim = shapes[_param(node, 0)]
    return Mapping("Embedding", {"num_embeddings": num, "embedding_dim": dim}, 1, slots)


@maps("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")
def _batch_norm(node, source, info, shapes, module_type):
    if node["kernel"] != "batch_norm" or node["layout"] is None or node["attrs"]["axis"] != len(node["layout"]) - 1:
        return None
    slots = _slots(node, {"weight": (1, "identity", False), "bias": (2, "identity", False),
                          "running_mean": (3, "identity", True), "running_var": (4, "identity", True)})
    if slots is None or ("weight" in slots) != ("bias" in slots):
        return None
    momentum = info.get("momentum", source.args.get("momentum", 0.1) if source is not None else 0.1)
    if momentum is not None and (isinstance(momentum, Ref) or not 0.0 <= float(momentum) <= 1.0):
        return None
    (channels,) = shapes[_param(node, 3)]
    if not node["attrs"]["eps"] > 0:
        return None
    config = {"num_features": channels, "eps": float(node["attrs"]["eps"]),
              "momentum": None if momentum is None else float(momentum), "affine": "weight" in slots,
              "track_running_stats": True}
    return Mapping("BatchNorm", config, 0, slots)


@maps("LayerNorm")
def _layer_norm(node, source, info, shapes, module_type):
    if node["kernel"] != "layer_norm" or source is None:
        return None
    slots = _slots(node, {"weight": (1, "identity", False), "bias": (2, "identity", False)})
    shape = source.args.get("normalized_shape")
    if slots is None or ("bias" in slots and "weight" not in slots) or not isinstance(shape, (list, tuple)) \
            or not all(isinstance(s, int) for s in shape) or len(shape) != node["attrs"]["k"]:
        return None
    if not node["attrs"]["eps"] > 0:
        return None  # MLX's norm layers refuse eps <= 0: the kernel node stays
    config = {"normalized_shape": list(shape), "eps": float(node["attrs"]["eps"]),
              "elementwise_affine": "weight" in slots, "bias": "bias" in slots}
    return Mapping("LayerNorm", config, 0, slots)


@maps("GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")
def _group_norm(node, source, info, shapes, module_type):
    if node["kernel"] != "group_norm" or source is None:
        return None
    slots = _slots(node, {"weight": (1, "identity", False), "bias": (2, "identity", False)})
    if slots is None or ("weight" in slots) != ("bias" in slots):
        return None
    channels = source.meta.shape[1] if source.meta.kind == "tensor" and source.meta.shape else None
    if not isinstance(channels, int):
        return None
    eps, groups = float(node["attrs"]["eps"]), node["attrs"]["groups"]
    if not eps > 0:
        return None
    if module_type == "GroupNorm":
        return Mapping("GroupNorm", {"num_groups": groups, "num_channels": channels, "eps": eps,
                                     "affine": "weight" in slots}, 0, slots)
    if groups != channels:
        return None
    return Mapping("InstanceNorm", {"num_features": channels, "eps": eps, "affine": "weight" in slots}, 0, slots)


@maps("Dropout", "Dropout1d", "AlphaDropout")
def _dropout(node, source, info, shapes, module_type):
    if node["kernel"] != "identity" or node["op"] != "aten.dropout.default" or source is None \
            or module_type != "Dropout":
        return None
    p = source.args.get("p")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        return None
    return Mapping("Dropout", {"p": float(p)}, 0)


_POOLS = {f"{name}Pool{n}d": f"{kind}_pool{n}d" for kind, name in (("max", "Max"), ("avg", "Avg"),
                                                                    ("adaptive_avg", "AdaptiveAvg"),
                                                                    ("adaptive_max", "AdaptiveMax")) for n in (1, 2, 3)}


@maps(*_POOLS)
def _pool(node, source, info, shapes, module_type):
    from .layer_types import POOL_FAMILY_ARGS, pool_family

    a = node["attrs"]
    if node["kernel"] != "pool" or a.get("fn") != _POOLS[module_type] or a.get("values_only") \
            or a.get("return_indices"):
        return None  # indices returned: the node's output is a tuple, kept as a kernel node
    family = pool_family(a["fn"])
    args = {k: v for k, v in a.items() if k in POOL_FAMILY_ARGS[family]}
    if family.startswith("adaptive"):
        size = node["inputs"][1] if len(node["inputs"]) > 1 else None
        if not (isinstance(size, int) and not isinstance(size, bool)) and not (
                isinstance(size, list) and all(s is None or (isinstance(s, int) and not isinstance(s, bool))
                                               for s in size)):
            return None  # an output size computed at run time
        args["output_size"] = size
    return Mapping("Pool", {"fn": a["fn"], "args": args}, 0)


@maps("PReLU")
def _prelu(node, source, info, shapes, module_type):
    if node["kernel"] != "prelu" or node["attrs"].get("axis") is None or node["layout"] is None:
        return None
    slots = _slots(node, {"weight": (1, "identity", True)})
    if slots is None or len(shapes[_param(node, 1)]) != 1:
        return None
    (count,) = shapes[_param(node, 1)]
    if count != 1 and node["attrs"]["axis"] != len(node["layout"]) - 1:
        return None  # a per-channel slope on a value whose channels are not last
    return Mapping("PReLU", {"num_parameters": count}, 0, slots)


_ACTIVATIONS = {"ReLU": "relu", "ReLU6": "hardtanh", "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid",
                "Tanh": "tanh", "Hardswish": "hardswish", "Hardsigmoid": "hardsigmoid", "LeakyReLU": "leaky_relu",
                "ELU": "elu", "Mish": "mish", "Softplus": "softplus", "Hardtanh": "hardtanh"}


@maps(*_ACTIVATIONS)
def _activation(node, source, info, shapes, module_type):
    if node["kernel"] != "unary" or node["attrs"].get("fn") != _ACTIVATIONS[module_type]:
        return None
    attrs = {k: v for k, v in node["attrs"].items() if k != "fn"}
    return Mapping("Activation", {"fn": node["attrs"]["fn"], "torch_type": module_type, "attrs": attrs}, 0)


# ---------------------------------------------------------------------------------------------------- the pass
def map_layers(nodes: list, sources: list, params: dict, module_info: dict) -> tuple:
    """Replace the nodes of mapped layers by ``call_module`` nodes.

    Args:
        nodes: the runtime nodes (dicts, as emitted); ``sources[i]`` is the captured node ``nodes[i]`` came from.
        params: torch name -> ``{"transform", "attrs", "torch_shape", ...}`` (the runtime graph's ``params``).
        module_info: module path -> attributes read from the torch module (may be empty).

    Returns ``(nodes, modules)``: the new node list and ``{path: {"type", "config"}}``.
    """
    shapes = {name: p["torch_shape"] for name, p in params.items()}
    readers: dict = {}  # parameter -> indices of the nodes reading it
    for i, node in enumerate(nodes):
        for name in _params_read(node["inputs"]):
            readers.setdefault(name, set()).add(i)
    candidates: dict = {}  # path -> [(node index, Mapping or None)]
    for i, node in enumerate(nodes):
        path = node.get("module") or ""
        # a torch subclass that keeps its base's forward maps as the base (api._torch_base)
        type_name = module_info.get(path, {}).get("torch_type") or node.get("module_type") or ""
        mapper = _MAPPERS.get(type_name)
        if mapper is None or not path:
            continue
        mapping = mapper(node, sources[i], module_info.get(path, {}), shapes, type_name)
        if mapping is None and not _is_core(node, type_name):
            continue  # plumbing inside the module (a layout transpose, an explicit pad): stays in the program
        candidates.setdefault(path, []).append((i, mapping))
    modules: dict = {}
    replaced: dict = {}
    for path, found in candidates.items():
        mappings = [m for _, m in found]
        first = mappings[0]
        if any(m is None for m in mappings) or any((m.type, m.config) != (first.type, first.config)
                                                    for m in mappings):
            continue
        indices = {i for i, _ in found}
        ok = True
        for attr, (index, transform) in first.params.items():
            for i, _ in found:
                name = _param(nodes[i], index)
                if name != f"{path}.{attr}" or params[name]["transform"] != transform:
                    ok = False
            if not readers.get(f"{path}.{attr}", set()) <= indices:
                ok = False
        if not ok:
            continue
        modules[path] = {"type": first.type, "config": first.config}
        for i, m in found:
            node = nodes[i]
            replaced[i] = dict(node, kernel="call_module", inputs=[node["inputs"][m.x]], attrs={"module": path})
    return [replaced.get(i, node) for i, node in enumerate(nodes)], modules


_CORE = {"PReLU": ("prelu",), "Conv": ("conv",), "ConvTranspose": ("conv_transpose",), "Linear": ("linear",), "Embedding": ("embedding",),
         "BatchNorm": ("batch_norm",), "LayerNorm": ("layer_norm",), "GroupNorm": ("group_norm",),
         "InstanceNorm": ("group_norm",)}


def _is_core(node, type_name: str) -> bool:
    """A node of the kernel a layer of this torch type computes (one the mapper declined: the module stays)."""
    for prefix, kernels in _CORE.items():
        if type_name.startswith(prefix) and node["kernel"] in kernels:
            return True
    return False


def _params_read(value):
    if isinstance(value, dict):
        if set(value) == {"param"}:
            yield value["param"]
        else:
            for v in value.values():
                yield from _params_read(v)
    elif isinstance(value, list):
        for v in value:
            yield from _params_read(v)
