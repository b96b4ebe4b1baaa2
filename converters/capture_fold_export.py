"""Constant folding in the ``torch.export`` walk (what folds and why: ``capture_fold.py``; imports torch).

Which calls fold is decided before the walk, over the whole program, region bodies included (named as the walk
names them: the region's prefix + the node's name). A call folds when its op may fold (:func:`capture_fold.foldable`),
every value it reads is a constant, and its value's sizes are fixed (static, or data-dependent on constants only:
``nonzero`` of a constant mask) and within :data:`capture_fold.LIMIT_BYTES`. Calls in an enabled CPU autocast region
do not fold (torch would cast their inputs).

In-place writes: the exported graph keeps them (``rel[:, :, 0] += 3`` is ``select`` then ``add_`` then ``copy_``).
Folded calls run in the graph's order on real tensors, so a folded write lands where torch puts it, views included,
and a graph call reading a constant gets its value as of that call (a snapshot per version). A tensor written in
place folds only when every write into it and every view of it folds: a write of a value computed from the input,
or a view taken with a dynamic size, keeps that tensor and all its views in the graph (the walk then writes through
views as before), and a write into a parameter or buffer never folds (the walk refuses it as state).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Optional

import torch

from . import capture_fold as F
from .ir import Ref


@dataclass
class _Entry:
    key: str
    node: object  # the fx node
    inputs: list  # keys of the values it reads
    base: Optional[str]  # the key of the value it aliases: a view's input, an in-place op's first argument
    written: list = field(default_factory=list)  # keys of the arguments it writes in place
    candidate: bool = False  # the op may fold and its value's sizes allow it
    storable: bool = True  # its value can be stored as a constant (read by a graph call)


def _is_view(target) -> bool:
    from .capture_regions import _is_view as is_view, _returns_views

    return is_view(target) or (isinstance(target, torch._ops.OpOverload) and _returns_views(target))


def _written(target) -> list:
    """Indices of the arguments ``target`` writes in place."""
    if not isinstance(target, torch._ops.OpOverload):
        return []
    return [i for i, a in enumerate(target._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def _sizes_allowed(val) -> bool:
    """Sizes fixed at conversion: no dynamic (input) symbol; data-dependent ones of constants are fine."""
    from torch.fx.experimental.symbolic_shapes import free_symbols, free_unbacked_symbols

    try:
        return free_symbols(val) <= free_unbacked_symbols(val) and F.nbytes(_static(val)) <= F.LIMIT_BYTES
    except Exception:  # noqa: BLE001  (a value torch's helpers do not walk)
        return False


def _static(val):
    """``val`` with data-dependent sizes counted as 0 (for the size check of what is known)."""
    if isinstance(val, torch.Tensor):
        if all(isinstance(s, int) for s in val.shape):
            return val
        return torch.empty(0, dtype=val.dtype, device="meta")
    if isinstance(val, (list, tuple)):
        return [_static(v) for v in val]
    return None


def _metadata_only(node) -> bool:
    """``x.new_zeros(sizes)``, ``zeros_like(x)``...: ``x`` read for its dtype, device and static sizes only."""
    first = node.args[0] if node.args else None
    val = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return False
    base = F.op_base(node.target)
    return base in F.NEW_LIKE or (base in F.SIZED_LIKE and all(isinstance(s, int)
                                                                for s in list(val.shape) + list(val.stride())))


def _storable_meta(val) -> bool:
    if isinstance(val, torch.Tensor):
        return val.dtype in F.STORABLE and val.layout == torch.strided
    if isinstance(val, (list, tuple)):
        return all(_storable_meta(v) for v in val)
    return val is None or isinstance(val, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool))


def constant_inputs(ep) -> tuple:
    """``({placeholder: tensor}, lifted)``: the program's inputs that are constants (lifted constants and
    non-persistent buffers; never parameters or persistent buffers, which ``porter update`` changes), and which of
    them are lifted constants."""
    from torch.export.graph_signature import InputKind

    constants, lifted = {}, set()
    for spec in ep.graph_signature.input_specs:
        constant = spec.kind == InputKind.CONSTANT_TENSOR or (spec.kind == InputKind.BUFFER and not spec.persistent)
        if not constant:
            continue
        tensor = ep.constants.get(spec.target, ep.state_dict.get(spec.target))
        if isinstance(tensor, torch.Tensor):
            constants[spec.arg.name] = tensor.detach()
            if spec.kind == InputKind.CONSTANT_TENSOR:
                lifted.add(spec.arg.name)
    return constants, lifted


def folded_ops(ep) -> set:
    """The ops every call of which folds (no need to decompose them: ``capture_decompose.py``)."""
    folder = ExportFolder(ep, constant_inputs(ep)[0], None)
    calls: dict = {}
    for e in folder.entries:
        if isinstance(e.node.target, torch._ops.OpOverload):
            calls.setdefault(e.node.target, []).append(e.key)
    return {op for op, keys in calls.items() if all(key in folder.folded for key in keys)}


class ExportFolder:
    """The folding of one exported program. ``constants``: placeholder name -> tensor for the placeholders that are
    constants (lifted constants, non-persistent buffers); ``store`` makes the graph constants."""

    def __init__(self, ep, constants: dict, store: F.ConstantStore):
        self.real: dict = dict(constants)  # key -> the real value
        self.sources = set(constants)  # placeholders: read under their own names
        self.store = store
        self.bindings: dict = {}  # data-dependent size symbol ("u0") -> its value
        self.folded = self._analyse(ep)

    # ------------------------------------------------------------------------------------------------ analysis
    def _entries(self, graph, owner, prefix: str, env: dict, autocast: bool, entries: list, readers: set):
        def key_of(n):
            return env.get(n.name, prefix + n.name)

        regions: dict = {}
        outputs = []
        for node in graph.nodes:
            if node.op == "placeholder":
                if not prefix:
                    entries.append(_Entry(node.name, node, [], None, candidate=node.name in self.sources))
                continue
            if node.op == "output":  # a region's outputs by position (the walk's getitem reads them so)
                results = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
                outputs = [key_of(n) if isinstance(n, torch.fx.Node) else None for n in results]
                continue
            if node.op != "call_function":
                continue
            if isinstance(node.target, torch._ops.HigherOrderOperator):
                regions[node.name] = self._region(node, owner, prefix, key_of, autocast, entries, readers)
                continue
            if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) \
                    and node.args[0].name in regions:
                items = regions[node.args[0].name]
                if items is not None:
                    env[node.name] = items[node.args[1]]
                continue
            first = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
            inputs = [key_of(n) for n in node.all_input_nodes if n is not first or not _metadata_only(node)]
            written = [key_of(node.args[i]) for i in _written(node.target)
                       if i < len(node.args) and isinstance(node.args[i], torch.fx.Node)]
            aliases = _is_view(node.target) or (node.target is operator.getitem and first is not None) \
                or 0 in _written(node.target)
            val = node.meta.get("val")
            entries.append(_Entry(
                prefix + node.name, node, inputs, key_of(first) if aliases and first is not None else None, written,
                candidate=not autocast and (F.is_check(node.target) or F.foldable(node.target, node.kwargs)
                                            and _sizes_allowed(val)),
                storable=_storable_meta(val)))
        if not prefix:
            readers.update(k for k in outputs if k is not None)
        return outputs

    def _region(self, node, owner, prefix, key_of, autocast, entries, readers):
        """The keys of a region's outputs, its body's entries appended (None: a region the walk refuses)."""
        kind = node.target.name()
        if kind == "wrap_with_set_grad_enabled":
            body_node, operands = node.args[1], node.args[2:]
        elif kind == "wrap_with_autocast":
            device, _dtype, enabled, _cache, body_node, *operands = node.args
            autocast = autocast or (device == "cpu" and bool(enabled))
        else:
            readers.update(key_of(n) for n in node.all_input_nodes)
            return None
        body = getattr(owner, body_node.target, None)
        if not isinstance(body, torch.fx.GraphModule):
            readers.update(key_of(n) for n in node.all_input_nodes)
            return None
        placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
        inner = {p.name: key_of(o) for p, o in zip(placeholders, operands) if isinstance(o, torch.fx.Node)}
        return self._entries(body.graph, body, f"{prefix}{node.name}__", inner, autocast, entries, readers)

    def _analyse(self, ep) -> set:
        entries, readers = [], set()
        self._entries(ep.graph, ep.graph_module, "", {}, False, entries, readers)
        self.entries = entries
        by_key = {e.key: e for e in entries}
        demoted: set = set()
        while True:
            const = set()
            for e in entries:
                if e.candidate and e.key not in demoted and all(i in const for i in e.inputs):
                    const.add(e.key)
            root: dict = {}
            for e in entries:
                root[e.key] = root.get(e.base, e.base) if e.base is not None else e.key
            members: dict = {}
            for e in entries:
                members.setdefault(root[e.key], []).append(e.key)
            writers: dict = {}
            for e in entries:
                for w in e.written:
                    writers.setdefault(root.get(w, w), []).append(e.key)
            new = set()
            for r, writing in writers.items():
                group = members.get(r, [r])
                # a write into a placeholder (a constant, buffer, parameter or input) is state: never folded
                state = r not in by_key or by_key[r].node.op == "placeholder"
                if state or any(k not in const for k in group + writing):
                    new.update(k for k in group if k in const)
            for e in entries:  # a graph call reads a constant it cannot be given
                if e.key not in const:
                    new.update(i for i in e.inputs if i in const and not by_key[i].storable)
            new.update(k for k in readers if k in const and not by_key[k].storable)
            if new <= demoted:
                return const
            demoted |= new

    # ------------------------------------------------------------------------------------------------ the walk
    def folds(self, key: str) -> bool:
        return key in self.folded

    def run(self, fx_node, key: str, env: dict) -> None:
        """Evaluate the folded call ``fx_node`` on the real values of its inputs."""
        def real(n):
            return self.real[env.get(n.name, n.name)]

        if _metadata_only(fx_node):  # the first argument's metadata only: a stand-in of its sizes and dtype
            val = fx_node.args[0].meta["val"]
            first = F.stand_in(val) if F.op_base(fx_node.target) in F.SIZED_LIKE else torch.empty(0, dtype=val.dtype)
            args, kwargs = torch.fx.node.map_arg((fx_node.args[1:], fx_node.kwargs), real)
            args = (first, *args)
        else:
            args, kwargs = torch.fx.node.map_arg((fx_node.args, fx_node.kwargs), real)
        try:
            out = F.evaluate(fx_node.target, args, kwargs)
        except Exception as e:  # noqa: BLE001
            raise NotImplementedError(f"[{fx_node.target}] computes a constant in the forward that torch could not "
                                      f"evaluate at conversion: {type(e).__name__}: {e}") from None
        if F.nbytes(out) > F.LIMIT_BYTES:
            raise NotImplementedError(
                f"[{fx_node.target}] builds a constant of {F.nbytes(out) / 2**20:.0f} MiB from constants in the "
                f"forward (its size depends on their values), over the {F.LIMIT_BYTES >> 20} MiB Porter folds; "
                "compute it once outside the forward and register it as a buffer")
        self._bind(fx_node.meta.get("val"), out)
        self.real[key] = out

    def _bind(self, val, out) -> None:
        """Record the values of the data-dependent size symbols in ``val`` (the capture's) from ``out``."""
        if isinstance(val, torch.SymInt) and isinstance(out, int):
            from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

            expr = val.node.expr
            if getattr(expr, "is_Symbol", False) and free_unbacked_symbols(val):  # never an input's size
                self.bindings[str(expr)] = int(out)
        elif isinstance(val, torch.Tensor) and isinstance(out, torch.Tensor):
            for s, n in zip(val.shape, out.shape):
                self._bind(s, int(n))
        elif isinstance(val, (list, tuple)) and isinstance(out, (list, tuple)):
            for v, o in zip(val, out):
                self._bind(v, o)

    def substitute(self, value):
        """An IR argument with every folded value replaced by its graph constant."""
        if isinstance(value, Ref):
            if value.name in self.folded and value.name not in self.sources:
                real = self.real[value.name]
                return self._source_like(real) or self.store.value(real, value.name)
            return value
        if isinstance(value, (list, tuple)):
            return [self.substitute(v) for v in value]
        return value

    def _source_like(self, value) -> "Ref | None":
        """The constant input holding exactly ``value`` (``lift_fresh_copy`` of a ``torch.tensor`` literal, a
        ``clone``), read under its own name rather than stored twice; None when there is none."""
        if not isinstance(value, torch.Tensor):
            return None
        for name in self.sources:
            source = self.real[name]
            if source.dtype == value.dtype and source.shape == value.shape and torch.equal(source, value):
                return Ref(name)
        return None

    def rewrite(self, node, fx_node) -> None:
        """``node`` (the IR of a graph call) reading constants: their graph forms, constant boolean masks of
        indexing as their positions (the sizes they give bound)."""
        if node.op in F.MASK_OPS and isinstance(node.args.get("indices"), list) \
                and not F.keeps_mask(node.op, node.args["indices"], self._numel(node.args.get("values"))):
            indices = []
            for i in node.args["indices"]:
                mask = self.real.get(i.name) if isinstance(i, Ref) and i.name in self.folded else None
                if not F.is_mask(mask):
                    indices.append(i)
                    continue
                indices.extend(self.store.tensor(p, f"{i.name}_pos{d}") for d, p in enumerate(F.mask_positions(mask)))
                val = fx_node.meta.get("val")
                for s in getattr(val, "shape", ()):
                    self._bind(s, int(mask.sum()))
            node.args["indices"] = indices
        node.args = {k: self.substitute(v) for k, v in node.args.items()}

    def _numel(self, value) -> "int | None":
        """The element count of an IR value, when known at conversion."""
        if not isinstance(value, Ref):
            return None
        real = self.real.get(value.name) if value.name in self.folded else None
        if isinstance(real, torch.Tensor):
            return real.numel()
        meta = (self.store.metas or {}).get(value.name)
        shape = meta.shape if meta is not None and meta.kind == "tensor" else None
        return math.prod(shape) if shape is not None and all(isinstance(s, int) for s in shape) else None

    def resolve_sizes(self, metas) -> None:
        """Data-dependent sizes of folded values (``u0``) replaced by their values in ``metas`` (ValueMeta)."""
        if not self.bindings:
            return
        for meta in metas:
            _resolve(meta, self.bindings)


def _resolve(meta, bindings: dict) -> None:
    import sympy

    if meta is None:
        return
    if meta.shape is not None:
        shape, hint = [], list(meta.hint) if meta.hint else [None] * len(meta.shape)
        for i, s in enumerate(meta.shape):
            if isinstance(s, str) and any(name in s for name in bindings):
                try:
                    value = sympy.sympify(s).subs({sympy.Symbol(k): v for k, v in bindings.items()})
                    s = int(value) if value.is_Integer else str(value)
                except (sympy.SympifyError, TypeError, ValueError):
                    pass
            shape.append(s)
            if isinstance(s, int):
                hint[i] = s
        meta.shape, meta.hint = shape, hint
    for item in meta.items or []:
        _resolve(item, bindings)
