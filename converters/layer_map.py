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
    sole: bool = False  # mapped only when the module computes nothing else and holds no parameters or children


def maps(*torch_types: str):
    def decorate(fn):
        for name in torch_types:
            _MAPPERS[name] = fn
        return fn

    return decorate


_KERNEL_MAPPERS: dict = {}


def maps_kernel(*kernels: str):
    """Register a mapper for nodes of these runtime kernels, whatever the torch class of their module (the marker
    ops of ``converters/ops/stochastic.py``: a DropPath may be any user class)."""
    def decorate(fn):
        for name in kernels:
            _KERNEL_MAPPERS[name] = fn
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
    config = {"num_embeddings": num, "embedding_dim": dim}
    if node["attrs"].get("padding_idx") is not None:
        config["padding_idx"] = node["attrs"]["padding_idx"]
    return Mapping("Embedding", config, 1, slots)


@maps("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm")  # SyncBatchNorm: one process, no group
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
    if info.get("count_batches") is False:  # a subclass calling F.batch_norm itself (capture_batch_norms.py)
        if momentum is None:
            return None
        config["count_batches"] = False
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


@maps("RMSNorm")
def _rms_norm(node, source, info, shapes, module_type):
    if node["kernel"] != "rms_norm" or source is None:
        return None
    slots = _slots(node, {"weight": (1, "identity", False)})
    shape = source.args.get("normalized_shape")
    if slots is None or not isinstance(shape, (list, tuple)) or not all(isinstance(s, int) for s in shape) \
            or len(shape) != node["attrs"]["k"]:
        return None
    eps = node["attrs"].get("eps")
    if eps is not None and not eps >= 0:
        return None  # the layer refuses a negative eps: the kernel node stays
    config = {"normalized_shape": list(shape), "eps": None if eps is None else float(eps),
              "elementwise_affine": "weight" in slots}
    return Mapping("RMSNorm", config, 0, slots)


def _instance_norm_running(node, source, info, shapes):
    """An ``InstanceNorm*d(track_running_stats=True)`` captured in eval: a batch norm node over its running
    statistics (channels last), mapped to ``porter.layers.InstanceNorm`` with the statistics."""
    if node["layout"] is None or node["attrs"]["axis"] != len(node["layout"]) - 1 or not node["attrs"]["eps"] > 0:
        return None
    slots = _slots(node, {"weight": (1, "identity", False), "bias": (2, "identity", False),
                          "running_mean": (3, "identity", True), "running_var": (4, "identity", True)})
    if slots is None or ("weight" in slots) != ("bias" in slots) or "momentum" not in info:
        return None
    momentum = info["momentum"]
    if momentum is not None and not 0.0 <= float(momentum) <= 1.0:
        return None
    (channels,) = shapes[_param(node, 3)]
    return Mapping("InstanceNorm", {"num_features": channels, "eps": float(node["attrs"]["eps"]),
                                    "affine": "weight" in slots, "momentum": momentum,
                                    "track_running_stats": True}, 0, slots)


@maps("GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")
def _group_norm(node, source, info, shapes, module_type):
    if node["kernel"] == "batch_norm" and module_type.startswith("InstanceNorm") \
            and node["op"] == "aten.instance_norm.default":
        return _instance_norm_running(node, source, info, shapes)
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


@maps("Dropout")
def _dropout(node, source, info, shapes, module_type):
    if node["kernel"] != "identity" or node["op"] != "aten.dropout.default" or source is None \
            or module_type != "Dropout":
        return None
    p = source.args.get("p")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        return None
    return Mapping("Dropout", {"p": float(p)}, 0)


_TORCH_DROPOUTS = {"aten.feature_dropout.default": "feature", "aten.alpha_dropout.default": "alpha",
                   "aten.feature_alpha_dropout.default": "feature_alpha"}


@maps("Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout")
def _torch_dropout(node, source, info, shapes, module_type):
    kind = _TORCH_DROPOUTS.get(node["op"])
    if node["kernel"] != "identity" or kind is None or source is None or (kind == "alpha") != (
            module_type == "AlphaDropout"):
        return None
    p = source.args.get("p")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0 or source.args.get("train"):
        return None
    layout = node.get("layout")
    if kind == "alpha":
        axes = [0, 1]  # unused: the noise is per element
    elif layout is None or len(layout) < 2:
        return None
    else:
        axes = [list(layout).index(0), list(layout).index(1)]  # where torch's dims 0 and 1 are in the array
    return Mapping("TorchDropout", {"p": float(p), "kind": kind, "axes": axes}, 0)


@maps_kernel("stochastic_depth")
def _stochastic_depth(node, source, info, shapes, module_type):
    a = node["attrs"]
    return Mapping("StochasticDepth", {"p": a["p"], "mode": a["mode"], "scale": a["scale"], "axis": a["axis"]}, 0,
                   sole=True)


@maps_kernel("train_dropout")
def _functional_dropout(node, source, info, shapes, module_type):
    p = node["attrs"]["p"]
    return Mapping("Dropout", {"p": float(p)}, 0, sole=True) if 0.0 <= p < 1.0 else None


@maps("RReLU")
def _rrelu(node, source, info, shapes, module_type):
    if node["kernel"] != "unary" or node["op"] != "aten.rrelu.default" or source is None:
        return None
    lower, upper = source.args.get("lower", 1.0 / 8), source.args.get("upper", 1.0 / 3)
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in (lower, upper)) or upper < lower \
            or node["attrs"].get("negative_slope") != (lower + upper) / 2:
        return None
    return Mapping("TorchRReLU", {"lower": float(lower), "upper": float(upper)}, 0)


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
def map_layers(nodes: list, sources: list, params: dict, module_info: dict, values=None, keep=()) -> tuple:
    """Replace the nodes of mapped layers by ``call_module`` nodes.

    Args:
        nodes: the runtime nodes (dicts, as emitted); ``sources[i]`` is the captured node ``nodes[i]`` came from.
        params: torch name -> ``{"transform", "attrs", "torch_shape", ...}`` (the runtime graph's ``params``).
        module_info: module path -> attributes read from the torch module (may be empty).
        values: value name -> conversion-time ``Info`` (meta and layout), for the subgraph mappings.
        keep: value names the graph's outputs read.

    Returns ``(nodes, modules)``: the new node list and ``{path: {"type", "config"}}``.
    """
    shapes = {name: p["torch_shape"] for name, p in params.items()}
    readers: dict = {}  # parameter -> indices of the nodes reading it
    for i, node in enumerate(nodes):
        for name in spec_names(node["inputs"], "param"):
            readers.setdefault(name, set()).add(i)
    candidates: dict = {}  # path -> [(node index, Mapping or None)]
    for i, node in enumerate(nodes):
        path = node.get("module") or ""
        # a torch subclass that keeps its base's forward maps as the base (api._torch_base)
        type_name = module_info.get(path, {}).get("torch_type") or node.get("module_type") or ""
        mapper = _KERNEL_MAPPERS.get(node["kernel"]) or _MAPPERS.get(type_name)
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
        if first.sole and not _alone(path, indices, nodes, params):
            continue
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
    nodes = [replaced.get(i, node) for i, node in enumerate(nodes)]
    if values is not None:
        nodes = _map_attention(nodes, params, module_info, modules, readers, values, set(keep))
    return nodes, modules


def _alone(path: str, indices: set, nodes: list, params: dict) -> bool:
    """Module ``path`` computes only the nodes ``indices`` and holds no parameter or child: a layer there replaces
    nothing else of it."""
    inside = path + "."
    if any(name.startswith(inside) for name in params):
        return False
    return not any(i not in indices and ((node.get("module") or "") == path
                                         or (node.get("module") or "").startswith(inside))
                   for i, node in enumerate(nodes))


# ---------------------------------------------------------------------------------------------------- blocks
# kernels torch's F.multi_head_attention_forward decomposes into (no masks, no bias_k/bias_v, packed projection)
_MHA_KERNELS = frozenset({"linear", "reshape", "unsqueeze", "squeeze", "identity", "select", "int_op", "transpose",
                          "sdpa", "getitem", "permute", "split", "chunk", "mul", "contiguous", "unflatten"})


def _map_attention(nodes, params, module_info, modules, readers, values, keep):
    """``nn.MultiheadAttention`` calls -> one ``call_module`` node each (a subgraph, not one node): when the module
    was called once, its nodes are contiguous, read only its own packed parameters, take 1-3 outside tensors of
    shape ``(., ., embed_dim)`` in torch's layout (self-attention: one; ``key is value``: two; else three, in the
    order the projections read them), use no mask, and one tensor leaves the block."""
    by_path: dict = {}
    for i, node in enumerate(nodes):
        if node.get("module_type") == "MultiheadAttention" and node.get("module"):
            by_path.setdefault(node["module"], []).append(i)
    replace: dict = {}
    skip: set = set()
    for path, indices in by_path.items():
        info = module_info.get(path, {}).get("mha")
        if info is None or indices != list(range(indices[0], indices[-1] + 1)):
            continue
        block = [nodes[i] for i in indices]
        if any(n["kernel"] not in _MHA_KERNELS for n in block):
            continue
        if any(n["kernel"] == "sdpa" and (len(n["inputs"]) > 3 and n["inputs"][3] is not None
                                          or n["attrs"].get("is_causal")) for n in block):
            continue
        own = {f"{path}.in_proj_weight", f"{path}.in_proj_bias", f"{path}.out_proj.weight", f"{path}.out_proj.bias"}
        read = {p for n in block for p in spec_names(n["inputs"], "param")}
        if not read <= own or f"{path}.in_proj_weight" not in read or any(
                params[p]["transform"] != "identity" for p in read):
            continue
        if any(not readers.get(p, set()) <= set(indices) for p in read):
            continue
        # size arithmetic (symbolic ints) stays in the program, before the call: later nodes may read it
        scalar = [i for i in indices if all(name in values and values[name].meta.kind in ("int", "float", "bool")
                                            for name in nodes[i]["outputs"])]
        removed = [i for i in indices if i not in scalar]
        made = {name for i in removed for name in nodes[i]["outputs"]}
        if any(set(spec_names(nodes[i]["inputs"])) & made for i in scalar):
            continue
        outside = []
        for i in removed:
            for ref in spec_names(nodes[i]["inputs"]):
                if ref not in made and ref not in outside:
                    outside.append(ref)
        inside = set(removed)
        leaving = [name for name in made if name in keep or any(
            name in set(spec_names(m["inputs"])) for j, m in enumerate(nodes) if j not in inside)]
        tensors = [r for r in outside if r in values and values[r].perm is not None]
        if any(r not in tensors and (r not in values or values[r].meta.kind not in ("int", "float", "bool"))
               for r in outside):
            continue  # something other than the q/k/v tensors and sizes flows in
        if len(leaving) != 1 or not 1 <= len(tensors) <= 3:
            continue
        e = info["embed_dim"]
        perms = {tuple(values[r].perm) for r in tensors if values[r].perm is not None}
        if len(perms) != 1 or next(iter(perms)) not in ((0, 1, 2), (1, 0, 2)) or any(
                values[r].meta.kind != "tensor" or values[r].meta.rank != 3 or values[r].meta.shape[-1] != e
                for r in tensors):
            continue
        (perm,) = perms
        out_perm = values[leaving[0]].perm if leaving[0] in values else None
        if leaving[0] not in nodes[removed[-1]]["outputs"] or out_perm is None \
                or tuple(out_perm) not in ((0, 1, 2), (1, 0, 2)):
            continue
        # the layer works in the arrays' order: torch's (N, L, E) with batch_first, unless the layout pass keeps
        # the value transposed (perm (1, 0, 2)), and the other way round
        batch_first = info["batch_first"] != (perm == (1, 0, 2))
        config = {"embed_dim": e, "num_heads": info["num_heads"], "dropout": info["dropout"],
                  "bias": f"{path}.in_proj_bias" in read, "batch_first": batch_first}
        modules[path] = {"type": "MultiheadAttention", "config": config}
        args = [{"ref": r} for r in tensors]
        last = nodes[removed[-1]]
        if tuple(out_perm) == perm:
            replace[removed[-1]] = [dict(last, kernel="call_module", inputs=args, attrs={"module": path})]
        else:  # the program kept the output in the other order: one transpose after the layer
            inner = f"{leaving[0]}__attention"
            replace[removed[-1]] = [
                dict(last, kernel="call_module", inputs=args, attrs={"module": path}, outputs=[inner],
                     layout=list(perm)),
                dict(last, kernel="transpose", inputs=[{"ref": inner}], attrs={"axes": [1, 0, 2]})]
        skip.update(removed[:-1])
    if not replace:
        return nodes
    out = []
    for i, node in enumerate(nodes):
        if i in replace:
            out.extend(replace[i])
        elif i not in skip:
            out.append(node)
    return out


_CORE = {"PReLU": ("prelu",), "Conv": ("conv",), "ConvTranspose": ("conv_transpose",), "Linear": ("linear",), "Embedding": ("embedding",),
         "BatchNorm": ("batch_norm",), "SyncBatchNorm": ("batch_norm",), "LayerNorm": ("layer_norm",), "RMSNorm": ("rms_norm",),
         "GroupNorm": ("group_norm",),
         "InstanceNorm": ("group_norm", "batch_norm")}


def _is_core(node, type_name: str) -> bool:
    """A node of the kernel a layer of this torch type computes (one the mapper declined: the module stays)."""
    for prefix, kernels in _CORE.items():
        if type_name.startswith(prefix) and node["kernel"] in kernels:
            return True
    return False



def spec_names(value, key: str = "ref"):
    """Every name a node input spec reads: ``{"ref": name}`` values (``key="ref"``) or ``{"param": name}`` weights
    (``key="param"``), inside lists and nested specs."""
    if isinstance(value, dict):
        if set(value) == {key}:
            yield value[key]
        else:
            for v in value.values():
                yield from spec_names(v, key)
    elif isinstance(value, list):
        for v in value:
            yield from spec_names(v, key)
