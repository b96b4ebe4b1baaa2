"""Conversion: captured IR graph -> runtime graph (kernels + MLX-layout weights). Torch-free.

The layout pass lives here and in the converters: every tensor value carries a layout (see layout.py). Converters
ask for their inputs in the layout they need (``ctx.tensor(ref, perm)``); a transpose is emitted only when the
value is not already in that layout, and counted in ``num_transposes`` when it actually reorders data.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import numpy as np

from . import ir_fusion
from . import layout as L
from . import transforms
from .guards import static_checks
from .ir import Graph, Node, Ref, ValueMeta, dead_code_elimination, iter_refs
from .layer_map import map_layers, spec_names
from .registry import UnsupportedOpsError, get_converter, has_converter

from .schema import FORMAT_VERSION  # noqa: E402  (the artifact format this writer produces)


@dataclass
class Info:
    """Conversion-time knowledge about a value: its layout (tensors) and example meta."""

    meta: ValueMeta
    perm: Optional[tuple] = None  # tensors only
    items: Optional[list] = None  # list values: Info per element


@dataclass
class ParamRecord:
    torch_name: str
    transform: str
    attrs: dict
    trainable: bool
    torch_shape: list


class Call:
    """A node being converted: argument access that remembers what the converter read."""

    def __init__(self, node: Node):
        self.node = node
        self.name = node.name
        self.op = node.op
        self.meta = node.meta
        self._read: set = set()

    def arg(self, name: str):
        self._read.add(name)
        return self.node.args[name]

    def has(self, name: str) -> bool:
        return name in self.node.args

    def unread_explicit(self) -> list:
        return [a for a in self.node.explicit if a not in self._read]

    def fail(self, argument: str, why: str):
        """Raise for an argument value the conversion cannot honour."""
        value = self.node.args.get(argument)
        raise NotImplementedError(
            f"[{self.op}] argument {argument!r}={value!r} cannot be honoured: {why}"
            + (f" (in module {self.node.module!r})" if self.node.module else "")
        )


class ConvertContext:
    def __init__(self, graph: Graph, io_layout: str):
        self.graph = graph
        self.io_layout = io_layout
        self.values: dict = {}
        self.nodes: list = []
        self.sources: list = []  # the captured node each runtime node came from (None: none)
        self.params: dict = {}  # torch name -> ParamRecord
        self.num_transposes = 0
        self._counter = itertools.count()
        self._layout_cache: dict = {}
        self._current: Optional[Node] = None

    # ------------------------------------------------------------------------------------------------ values
    def info(self, ref) -> Info:
        return self.values[ref.name]

    def perm(self, ref) -> tuple:
        return self.values[ref.name].perm

    def meta(self, ref) -> ValueMeta:
        return self.values[ref.name].meta

    def is_tensor(self, value) -> bool:
        return isinstance(value, Ref) and self.values[value.name].perm is not None

    def is_param(self, value) -> bool:
        return isinstance(value, Ref) and value.name in self.graph.param_values

    def used_items(self, name: str) -> set:
        """Indices read (through getitem) from the tuple value ``name``; all of them if read otherwise."""
        used = set()
        for node in self._users.get(name, []):
            if node.op == "operator.getitem" and node.args.get("a") == Ref(name):
                used.add(node.args["b"])
            else:
                return {"all"}
        return used

    def fresh(self, hint: str) -> str:
        return f"{hint}__{next(self._counter)}"

    def value(self, value):
        """Runtime spec of a non-tensor argument (literal, symbolic int, list of them)."""
        if isinstance(value, Ref):
            if self.is_param(value):
                return self.param(value)
            return {"ref": value.name}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value

    def tensor(self, value, perm: Optional[tuple] = None):
        """Runtime spec of a tensor argument, in layout ``perm`` (None: whatever layout it has)."""
        if not isinstance(value, Ref):
            return value  # a Python scalar standing in for a tensor
        if self.is_param(value):
            rank = self.meta(value).rank
            if perm is None or tuple(perm) == L.identity(rank):
                return self.param(value)
            return self.param(value, "permute", perm=list(perm))
        info = self.values[value.name]
        if perm is None or tuple(perm) == info.perm:
            return {"ref": value.name}
        return {"ref": self.relayout(value, tuple(perm))}

    def relayout(self, ref: Ref, perm: tuple) -> str:
        """Name of ``ref``'s value in layout ``perm`` (emitting one transpose, shared by every reader)."""
        key = (ref.name, perm)
        if key in self._layout_cache:
            return self._layout_cache[key]
        info = self.values[ref.name]
        axes = L.to_layout_axes(info.perm, perm)
        name = self.fresh(f"{ref.name}_to_{''.join(map(str, perm))}")
        self._emit_raw("transpose", [{"ref": ref.name}], {"axes": list(axes)}, [name], perm)
        self.values[name] = Info(info.meta, perm)
        if L.moves_data(info.meta.shape, info.perm, perm):
            self.num_transposes += 1
        self._layout_cache[key] = name
        return name

    def param(self, ref: Ref, transform: str = "identity", **attrs) -> dict:
        """Runtime spec of a parameter, stored in MLX layout by ``transform`` (chosen by the op type)."""
        torch_name = self.graph.param_values[ref.name]
        record = self.params.get(torch_name)
        if record is None:
            self.params[torch_name] = ParamRecord(
                torch_name, transform, attrs, torch_name in self.graph.trainable,
                list(self.graph.params[torch_name].shape),
            )
        elif (record.transform, record.attrs) != (transform, attrs):
            raise NotImplementedError(
                f"parameter {torch_name!r} is used in two layouts ({record.transform} {record.attrs} and "
                f"{transform} {attrs}); Porter stores each parameter once"
            )
        return {"param": torch_name}

    # ------------------------------------------------------------------------------------------------ emit
    def _emit_raw(self, kernel: str, inputs: list, attrs: dict, outputs: list, layout=None) -> None:
        node = self._current
        self.sources.append(node)
        self.nodes.append(
            {
                "kernel": kernel,
                "inputs": inputs,
                "attrs": attrs,
                "outputs": outputs,
                # the output's layout: array axis i holds torch dim layout[i] (None: not a single tensor)
                "layout": list(layout) if layout is not None else None,
                "op": node.op if node else "",
                "module": node.module if node else "",
                "module_type": node.module_type if node else "",
            }
        )

    def emit(self, kernel: str, inputs: list, attrs: Optional[dict] = None, *, out: Optional[str] = None,
             perm: Optional[tuple] = None, meta: Optional[ValueMeta] = None, items: Optional[list] = None) -> Ref:
        """Emit a runtime node producing one value (tensor with layout ``perm``, or a list with ``items``)."""
        name = out or self._current.name
        if meta is None:
            meta = self._current.meta
        self._emit_raw(kernel, inputs, attrs or {}, [name], perm)
        self.values[name] = Info(meta, tuple(perm) if perm is not None else None, items)
        return Ref(name)

    def alias(self, ref: Ref, *, out: Optional[str] = None) -> Ref:
        """The current node's value is ``ref`` itself (contiguous, clone, eval dropout)."""
        info = self.values[ref.name]
        # a parameter or buffer is not a run-time value: read it through tensor() ({"param": name})
        source = self.tensor(ref) if self.is_param(ref) else {"ref": ref.name}
        return self.emit("identity", [source], perm=info.perm, items=info.items, out=out)


# ---------------------------------------------------------------------------------------------------- driver
_VIEW_OPS = ("slice", "select", "view", "narrow", "as_strided", "diagonal", "transpose", "permute", "unsqueeze",
             "squeeze", "expand", "alias", "t", "unfold", "unflatten", "split", "split_with_sizes", "chunk",
             "unbind", "getitem", "movedim", "swapaxes", "reshape", "flatten", "_reshape_alias")


def _refuse_writes_through_views(graph: Graph) -> None:
    """An in-place op writing into a view (``mask[a:b, c:d] = 1``) changes the tensor the view was taken from;
    Porter's in-place handling only renames the written value, so a later reader of that tensor would silently
    see its old values (and dead-code elimination would drop the write). Refuse such graphs clearly instead."""
    producers = {n.name: n for n in graph.nodes}
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    outputs = {r.name for r in iter_refs(graph.outputs)}

    def view_source(name):
        node = producers.get(name)
        if node is None or node.op.count(".") < 1 or node.op.split(".")[1] not in _VIEW_OPS:
            return None
        first = next(iter(node.args.values()), None)
        return first.name if isinstance(first, Ref) else None

    for node in graph.nodes:
        base = node.op.split(".")[1] if node.op.startswith("aten.") else ""
        first = next(iter(node.args.values()), None)
        if not (base.endswith("_") and not base.startswith("_") and isinstance(first, Ref)):
            continue
        chain, root = [first.name], view_source(first.name)
        while root is not None:
            chain.append(root)
            root = view_source(root)
        if len(chain) == 1:
            continue  # written directly, not through a view: later readers are renamed to the result
        aliased = set(chain[1:])  # the tensors the view came from
        later = [n for n in graph.nodes[position[node.name] + 1:] if aliased & set(n.refs())]
        if later or aliased & outputs:
            where = f" in module {node.module!r}" if node.module else ""
            raise NotImplementedError(
                f"[{node.op}] writes in place into a view ({producers[first.name].op}) of a tensor that is read "
                f"again{where}, e.g. `mask[a:b, c:d] = value`; Porter cannot convert writes through views yet "
                "(the write would be lost): build the tensor out of place (torch.cat, torch.where, F.pad)")


def _find_unsupported(graph: Graph) -> dict:
    missing: dict = {}
    for node in graph.nodes:
        if not has_converter(node.op):
            missing.setdefault(node.op, []).append(node.module)
    return missing


# Ops that compute in whatever layout their tensor input has and keep its rank: an input reaching a conv or pool
# only through them (timm's dynamic padding before a patch embedding, a normalisation by per-channel constants) is
# still taken channels-last, so the transpose is not left inside the graph.
_LAYOUT_FOLLOWING = frozenset(
    [f"aten.{op}.default" for op in ("pad", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d",
                                     "reflection_pad3d", "replication_pad1d", "replication_pad2d",
                                     "replication_pad3d", "relu", "clamp", "_to_copy", "contiguous", "clone",
                                     "alias")]
    + [f"aten.{op}.{overload}" for op in ("add", "sub", "mul", "div", "rsub") for overload in ("Tensor", "Scalar")]
    + ["aten.to.dtype", "aten.type_as.default"])
_FOLLOW_DEPTH = 8  # layout-following ops walked from an input before giving up


def _channels_last_readers(graph: Graph, name: str, rank: int) -> list:
    """The channels-last ops (conv, pool, norm) that read the value ``name`` directly or through at most
    ``_FOLLOW_DEPTH`` layout-following ops of the same rank, nearest first."""
    frontier, seen = [name], {name}
    for _ in range(_FOLLOW_DEPTH + 1):
        readers = [n for n in graph.nodes if any(v in n.refs() for v in frontier)]
        found = [n for n in readers if get_converter(n.op).channels_last]
        if found:
            return found
        frontier = [n.name for n in readers if n.op in _LAYOUT_FOLLOWING and n.name not in seen
                    and n.meta.kind == "tensor" and n.meta.rank == rank]
        if not frontier:
            return []
        seen.update(frontier)
    return []


def _input_perm(graph: Graph, index: int, io_layout: str) -> tuple:
    meta = graph.input_meta[index]
    rank = meta.rank
    if io_layout == "torch" or not 3 <= rank <= 5:
        return L.identity(rank)
    readers = _channels_last_readers(graph, graph.inputs[index], rank)
    if not readers:
        return L.identity(rank)
    # an Nd conv/pool reading a rank-(N+1) tensor takes it unbatched: (C, *S) -> (*S, C)
    match = re.search(r"(\d)d", readers[0].op.split(".")[1])
    if match and rank == int(match.group(1)) + 1:
        return L.channels_last_unbatched(rank)
    return L.channels_last(rank)


def _module_outputs(graph: Graph) -> list:
    """Per torch submodule call, the one tensor value leaving it; later calls of the same module win."""
    members: dict = {}
    info: dict = {}
    for node in graph.nodes:
        for depth, (call_id, path, type_name) in enumerate(node.scopes):
            if path == "":
                continue
            members.setdefault(call_id, set()).add(node.name)
            info[call_id] = (path, type_name, depth)
    users = graph.users()
    graph_outputs = {r.name for r in iter_refs(graph.outputs)}
    metas = {n.name: n.meta for n in graph.nodes}
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    result = []
    for call_id, names in members.items():
        leaving = [
            name for name in names
            if name in graph_outputs or any(u.name not in names for u in users.get(name, []))
        ]
        tensors = [n for n in leaving if metas[n].kind == "tensor"]
        if len(tensors) == 1:
            path, type_name, depth = info[call_id]
            # a value leaving nested modules: the inner module's hook fires first in torch
            result.append((position[tensors[0]], -depth, tensors[0], path, type_name))
    result.sort()
    return [{"value": v, "module": p, "type": t} for _, _, v, p, t in result]


def convert_graph(graph: Graph, io_layout: str = "mlx", *, weights: bool = True) -> dict:
    """Convert a captured graph; returns the runtime graph (a JSON-able dict) and MLX-layout weights.

    Returns ``{"graph": dict, "weights": {torch name: mx.array}}`` (``{}`` with ``weights=False``: the graph
    only). Each weight is copied once, from the capture's view of torch's memory into a row-contiguous MLX array
    in MLX layout, one tensor at a time (a transposed weight passes through one numpy copy of itself on the way).
    Raises :class:`UnsupportedOpsError` listing every op without a converter before converting anything.
    """
    build_weights = weights
    if io_layout not in ("mlx", "torch"):
        raise ValueError(f"io_layout must be 'mlx' or 'torch', but got {io_layout!r}")
    if graph.frontend != "torch.export":  # the export frontend writes views back (capture_regions.py)
        _refuse_writes_through_views(graph)
    ir_fusion.fuse(graph)  # before dead-code elimination, which drops the chains a fused node replaced
    dead_code_elimination(graph)
    missing = _find_unsupported(graph)
    if missing:
        raise UnsupportedOpsError(missing)

    ctx = ConvertContext(graph, io_layout)
    ctx._users = graph.users()
    for name in graph.param_values:
        torch_name = graph.param_values[name]
        shape = list(graph.params[torch_name].shape)
        dtype = graph.param_dtypes.get(torch_name, str(graph.params[torch_name].dtype))
        ctx.values[name] = Info(ValueMeta("tensor", shape, dtype), L.identity(len(shape)))

    inputs = []
    for i, name in enumerate(graph.inputs):
        meta = graph.input_meta[i]
        perm = _input_perm(graph, i, io_layout) if meta.kind == "tensor" else None
        ctx.values[name] = Info(meta, perm)
        inputs.append({"name": name, "perm": list(perm) if perm is not None else None, "meta": meta.to_json()})

    for node in graph.nodes:
        ctx._current = node
        call = Call(node)
        get_converter(node.op).fn(ctx, call)
        if node.name not in ctx.values:
            raise RuntimeError(f"converter for {node.op} produced no value for {node.name}")
        unread = call.unread_explicit()
        if unread:
            raise NotImplementedError(f"[{node.op}] the converter does not handle argument(s) {unread}")
    ctx._current = None

    outputs = []
    for out in graph.outputs:
        if ctx.is_tensor(out):
            rank = ctx.meta(out).rank
            current = ctx.perm(out)
            want = L.identity(rank)
            if io_layout == "mlx" and 3 <= rank <= 5 and current in (L.channels_last(rank),
                                                                      L.channels_last_unbatched(rank)):
                want = current  # image-like output: stays channels-last (batched or unbatched)
            outputs.append({"value": ctx.tensor(out, want), "perm": list(want)})
        else:
            outputs.append({"value": ctx.value(out), "perm": None})

    module_outputs = []
    for entry in _module_outputs(graph):
        perm = ctx.values[entry["value"]].perm
        module_outputs.append(dict(entry, perm=list(perm)))

    for torch_name, array in graph.params.items():
        if torch_name not in ctx.params:  # unused by the forward (num_batches_tracked): kept for a full state_dict
            ctx.params[torch_name] = ParamRecord(torch_name, "identity", {}, torch_name in graph.trainable,
                                                 list(array.shape))
    weights = {}
    params = {}
    for torch_name, record in ctx.params.items():
        dtype = graph.param_dtypes.get(torch_name, str(graph.params[torch_name].dtype))
        if build_weights:
            forward, _ = transforms.get(record.transform)
            weights[torch_name] = _mlx_weight(forward(graph.params[torch_name], **record.attrs), dtype)
        params[torch_name] = {
            "transform": record.transform,
            "attrs": record.attrs,
            "trainable": record.trainable,
            "torch_shape": record.torch_shape,
            "dtype": dtype,
        }
        if torch_name in graph.not_in_state_dict:  # absent: in the state_dict (artifacts written before it)
            params[torch_name]["state_dict"] = False

    keep = {r.name for r in iter_refs(graph.outputs)} | {name for o in outputs for name in spec_names(o["value"])}
    nodes, modules = map_layers(ctx.nodes, ctx.sources, params, graph.module_attrs or {}, ctx.values, keep)
    defined = {name for node in nodes for name in node["outputs"]} | set(graph.inputs)
    module_outputs = [entry for entry in module_outputs if entry["value"] in defined]  # a subgraph became one call
    for path, record in modules.items():
        counter = f"{path}.num_batches_tracked"
        if record["type"] == "BatchNorm" and counter not in params:  # a frontend that drops the unused counter
            if build_weights:
                weights[counter] = mx.array(np.array(0, dtype=np.int64))
            params[counter] = {"transform": "identity", "attrs": {}, "trainable": False, "torch_shape": [],
                               "dtype": "int64"}
    runtime_graph = {
        "format_version": FORMAT_VERSION,
        "io_layout": io_layout,
        "source_class": graph.source_class,
        "frontend": graph.frontend,
        "inputs": inputs,
        "outputs": outputs,
        "output_structure": graph.output_structure,
        "nodes": nodes,
        "params": params,
        "modules": modules,
        "module_types": _module_types(graph),
        "module_outputs": module_outputs,
        "num_transposes": ctx.num_transposes,
    }
    runtime_graph.update(_input_checks(graph))
    if graph.output_tree is not None:
        runtime_graph["output_tree"] = graph.output_tree
    if graph.signature is not None:
        runtime_graph["signature"] = graph.signature
    if graph.aliases:
        runtime_graph["tied_weights"] = {alias: name for alias, name in graph.aliases.items() if name in params}
    follows = _dtype_follows(nodes, graph.dtype_follows)
    if follows:
        runtime_graph["dtype_follows"] = follows
    kept = sorted(name for name in graph.float32_constants if params.get(name, {}).get("dtype") == "float32")
    if kept:
        runtime_graph["float32_constants"] = kept  # float32 in a half port too (capture_dtypes.py)
    return {"graph": runtime_graph, "weights": weights}


def _dtype_follows(nodes: list, followers: set) -> list:
    """The runtime nodes computing a captured call whose float32 dtype the model took from a tensor
    (``capture_dtypes.py``) with that dtype as an attribute (a cast, a creation, a result cast to the captured
    dtype): their outputs, which a half port computes in its dtype (``precision.node_policies``)."""
    return [node["outputs"][0] for node in nodes
            if node["outputs"][0] in followers and node["attrs"].get("dtype") == "float32"]


def _mlx_weight(array, dtype: str) -> mx.array:
    """The port's one copy of a weight: a row-contiguous MLX array of ``array`` (a numpy view in MLX layout; a
    bfloat16 weight as its ``uint16`` bits). Only a view that is not row-contiguous (a transposed conv weight) is
    first copied by numpy, and that copy is freed before the next weight."""
    # np.ascontiguousarray turns a 0-d array (weight norm's g with dim=None) into shape (1,)
    array = np.ascontiguousarray(array) if np.ndim(array) else np.array(array)
    if dtype == "bfloat16" and array.dtype == np.uint16:
        return mx.array(array).view(mx.bfloat16)
    if array.dtype == np.float64:
        return mx.array(array, dtype=mx.float64)  # mx.array reads float64 numpy as float32 otherwise
    return mx.array(array)


def _module_types(graph: Graph) -> dict:
    """Torch class name per module path that ran in the forward (shown by the tree's containers)."""
    types: dict = {}
    for node in graph.nodes:
        for _, path, type_name in node.scopes:
            if path:
                types.setdefault(path, type_name)
    return types


def _input_checks(graph: Graph) -> dict:
    """``input_checks`` and ``dynamic_dims`` (see guards.py); a frontend that records none gets static checks."""
    if graph.input_checks is not None:
        return {"input_checks": list(graph.input_checks), "dynamic_dims": list(graph.dynamic_dims or [])}
    shapes = [m.hint if m.kind == "tensor" else None for m in graph.input_meta]
    checks = static_checks(graph.inputs, shapes, "the port was captured for the example's sizes only (static "
                                                 "shapes, or a TorchScript branch on a size taken as for the example)")
    return {"input_checks": checks, "dynamic_dims": []}
