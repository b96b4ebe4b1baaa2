"""The ``torch.export`` node walk: context-manager regions inlined (``torch.no_grad()`` /
``torch.set_grad_enabled(...)`` and ``torch.autocast(...)`` blocks) and in-place writes into views made explicit
(imports torch; conversion only).

Export records such a block as a higher-order op (``wrap_with_set_grad_enabled``, ``wrap_with_autocast``) whose
body is a submodule read through a ``get_attr`` node (Llama's rotary embedding runs under ``@torch.no_grad()``,
EfficientViT under ``torch.autocast``). The body's ops are captured as if they were written inline, with the
region's effects made explicit:

* grad disabled: every tensor leaving the region goes through ``aten.detach`` (no gradient flows back into it,
  as in torch);
* CPU autocast enabled: torch casts the floating inputs (not float64) of some ops; the capture inserts those casts
  as ``aten._to_copy`` nodes: the ops of :data:`LOWER` run in the autocast dtype, those of :data:`FP32` in
  float32, those of :data:`PROMOTE` in the widest input dtype (torch's CPU autocast lists, checked against torch
  in ``tests/converters/test_capture_regions.py``). The dtype torch recorded for every op of the region is checked
  against the result, so an op whose autocast behaviour Porter does not know fails the conversion by name instead
  of computing in another precision.

An in-place write into a view (``y[:, 0] = 1``: ``select`` then ``fill_``) changes the view's base in torch; the
walk appends ``select_scatter``/``slice_scatter``/inverse-view nodes that write the new view back up to the base,
and renames the base, so later readers and the outputs see the write (torch's functionalization, done here).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch

from .ir import Node, Ref, ValueMeta, iter_refs

# torch's CPU autocast op lists (aten base names)
LOWER = frozenset({
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "_convolution",
    "convolution", "conv_tbc", "linear", "matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "linalg_vecdot",
    "prelu", "scaled_dot_product_attention", "_native_multi_head_attention", "einsum", "mkldnn_rnn_layer",
})
FP32 = frozenset({
    "avg_pool3d", "max_pool3d", "max_pool3d_with_indices", "adaptive_avg_pool3d", "max_unpool2d", "max_unpool3d",
    "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "fractional_max_pool2d", "fractional_max_pool3d", "prod", "binary_cross_entropy", "grid_sampler", "polar",
    "quantile", "nanquantile", "stft", "cdist", "trace", "view_as_complex", "cholesky", "cholesky_inverse",
    "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr", "pinverse", "mse_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss", "cross_entropy_loss",
    "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "ctc_loss", "kl_div", "multilabel_margin_loss", "binary_cross_entropy_with_logits",
})
PROMOTE = frozenset({"cat", "concat", "stack", "index_copy"})
_CASTABLE = ("float32", "float16", "bfloat16")  # autocast never touches float64
_CASTS = frozenset({"to", "_to_copy", "type_as"})  # ops that set their own dtype


@dataclass(frozen=True)
class RegionState:
    grad: bool = True
    autocast: Optional[str] = None  # dtype name while CPU autocast is on


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


_RESHAPES = frozenset({
    "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.unsqueeze.default",
    "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.flatten.using_ints",
    "aten.unflatten.int", "aten.alias.default", "aten.view_as.default", "aten.reshape_as.default",
    "aten.detach.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten.to.other",
})


def _copies(fx_node, node: Node, metas: dict, guarded: bool = True) -> bool:
    """Ops whose schema says alias but which copy depending on their input: ``x.to(dtype)`` aliases ``x`` only when
    the dtype is already ``dtype``, ``x.contiguous()`` only when ``x`` already is contiguous (in the asked memory
    format; read from the capture's fake value). A write into such a copy stays in it (DeBERTa-v2's ``ConvLayer``
    zeroes ``conv(x.permute(...)).permute(...).contiguous()`` in place).

    ``guarded=False``: contiguity at the example's sizes, asked of a meta tensor of those sizes and strides, so that
    no guard is recorded. Asking the fake value itself reasons on its symbolic sizes and records a guard on the
    inputs in the program's shape env, which ``capture_guards`` checks as a condition of the model: DaViT's
    cropped ``window_reverse`` output (``Wp // (Wp // 4) != Wp``) refused one-window maps torch runs. Whether
    ``.contiguous()`` copies matters only to an in-place write, so the walk asks with guards once the graph
    writes in place (``Inliner.record_contiguity``)."""
    source = node.args.get("self")
    if node.op.startswith("aten.to."):
        return isinstance(source, Ref) and source.name in metas and metas[source.name].dtype != node.meta.dtype
    value = _contiguous_input(fx_node, node)
    if value is None:
        return False
    value, memory_format = value
    if not guarded:
        from .capture_export import _number

        sizes, strides = [_number(s) for s in value.shape], [_number(s) for s in value.stride()]
        if None not in sizes and None not in strides:
            return not torch.empty_strided(sizes, strides, device="meta").is_contiguous(memory_format=memory_format)
    return not value.is_contiguous(memory_format=memory_format)


def _contiguous_input(fx_node, node: Node):
    """``(fake input, memory format)`` of an ``aten.contiguous`` call, else None."""
    if node.op == "aten.contiguous.default" and fx_node.args and isinstance(fx_node.args[0], torch.fx.Node):
        value = fx_node.args[0].meta.get("val")
        if isinstance(value, torch.Tensor):
            return value, fx_node.kwargs.get("memory_format") or torch.contiguous_format
    return None


def _is_view(target) -> bool:
    """An op whose single result aliases its input (select, slice, view, permute...), read from its schema."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    returns = target._schema.returns
    info = returns[0].alias_info if len(returns) == 1 else None
    return info is not None and not info.is_write and str(returns[0].type) == "Tensor"


def _returns_views(target) -> bool:
    """An op returning a list of views (split, chunk, unbind)."""
    returns = target._schema.returns
    return len(returns) == 1 and returns[0].alias_info is not None and str(returns[0].type) != "Tensor"


def _pad_kernel(mode, dims: int) -> str:
    """The aten kernel ``F.pad`` dispatches to (what torch's autocast sees)."""
    return {"reflect": f"reflection_pad{dims}d", "replicate": f"replication_pad{dims}d"}.get(mode, "pad")


# in-place writes that leave the same values on every call (renormalising rows to at most max_norm: a second
# call finds them within the bound), so a port that redoes the write each call matches torch's later calls too
_SAME_EVERY_CALL = ("embedding_renorm_",)


class Inliner:
    """Walks an exported graph (and the bodies of its regions) emitting IR nodes.

    ``make_node(fx_node, name, resolve)`` builds the IR node of one call, ``scopes_of(fx_node.meta)`` its module
    scopes; ``env`` maps fx node names of the current scope to value names; ``metas`` maps value names to
    :class:`ValueMeta`. In-place writes are followed here too: into a view (written back into its bases), and
    views made stale by a write into their base (reading one raises). ``folder`` (constant folding,
    ``capture_fold_export.py``) evaluates the calls whose inputs are all constants instead of emitting them.
    """

    def __init__(self, make_node: Callable, scopes_of: Callable, nodes: list, metas: dict, in_place: Callable,
                 folder=None, followers=frozenset(), literals=frozenset()):
        self.folder = folder  # constant folding (capture_fold_export.ExportFolder), or None
        # fx call nodes whose float dtype follows the model's / is float32 whatever it is (capture_dtypes.py)
        self.followers, self.literals = followers, literals
        self.followed: set = set()  # the IR names of the first
        self.literal_keys: set = set()  # the names of the second, as folding keys them
        self.make_node = make_node
        self.scopes_of = scopes_of
        self.nodes = nodes
        self.metas = metas
        self.in_place = in_place
        self.regions: dict = {}  # value name of a region call -> value names of its outputs
        self.views: dict = {}  # value name -> (IR node of the view op, or None when unknown; base value name)
        self.multi_views: set = set()  # values that are tuples of views (split, chunk, unbind)
        self.latest: dict = {}  # a base written through a view -> its value after the write
        self.stale: set = set()  # views whose base was written in place after they were taken
        self.written: set = set()  # value names written in place (directly or through a view)
        # ``.contiguous()`` calls decided at the example's sizes without guards (``_copies``): torch's guarded
        # answer is asked for them all once the graph writes in place (their sizes then matter)
        self.unguarded: list = []

    # ------------------------------------------------------------------------------------------------ walking
    def call(self, fx_node, owner, env: dict, prefix: str = "", state: RegionState = RegionState()) -> None:
        def resolve(node):
            return Ref(env.get(node.name, node.name))

        if isinstance(fx_node.target, torch._ops.HigherOrderOperator):
            return self._inline(fx_node, owner, env, prefix, state, resolve)
        if fx_node.target is operator.getitem and isinstance(fx_node.args[0], torch.fx.Node):
            region = self.regions.get(resolve(fx_node.args[0]).name)
            if region is not None:
                env[fx_node.name] = region[fx_node.args[1]]
                return
        if fx_node in self.literals:
            self.literal_keys.add(prefix + fx_node.name)
        if self.folder is not None and self.folder.folds(prefix + fx_node.name):
            self.folder.run(fx_node, prefix + fx_node.name, env)  # a constant: evaluated now, no graph call
            env[fx_node.name] = prefix + fx_node.name
            return
        node = self.make_node(fx_node, prefix + fx_node.name, resolve)
        if fx_node in self.followers:
            self.followed.add(node.name)
        if self.folder is not None:
            self.folder.rewrite(node, fx_node)  # folded values it reads -> graph constants
        for ref in node.refs():
            self.check_readable(ref, f"[{node.op}] (in module {node.module!r})")
        if state.autocast is not None:
            self._autocast(node, state.autocast)
        self._append(node)
        env[fx_node.name] = node.name
        if _is_view(fx_node.target) and not self._copies(fx_node, node):
            base = node.args.get("self")
            self.views[node.name] = (node, base.name if isinstance(base, Ref) else None)
        elif fx_node.target is operator.getitem and resolve(fx_node.args[0]).name in self.multi_views:
            self.views[node.name] = (None, resolve(fx_node.args[0]).name)  # a piece of split/chunk/unbind
        if isinstance(fx_node.target, torch._ops.OpOverload) and _returns_views(fx_node.target):
            self.multi_views.add(node.name)
        op_base = node.op.split(".")[1] if node.op.startswith("aten.") else ""
        first = fx_node.args[0] if fx_node.args else None
        if self.in_place(op_base) and isinstance(first, torch.fx.Node):
            # an in-place op (relu_, add_, __iand__) updates its first argument: later readers see the result
            self.record_contiguity()
            old = resolve(first).name
            renames = {old: node.name}
            if old in self.views:  # a write into a view writes into its base: scatter it back
                renames.update(self._write_back(old, node))
            else:  # views taken of the written tensor before the write would see it in torch
                self.stale.update(v for v in self.views if self._root(v) == old)
            if op_base not in _SAME_EVERY_CALL:
                self.written.update(renames)
            for key, value in list(env.items()):
                if value in renames:
                    env[key] = renames[value]
            for old, new in renames.items():  # a written placeholder (a parameter) reads under its own name
                env.setdefault(old, new)
            env[first.name] = node.name

    def _copies(self, fx_node, node: Node) -> bool:
        """Module ``_copies``, guard-free for ``.contiguous()`` until the graph writes in place."""
        guarded = self.unguarded is None
        if not guarded and _contiguous_input(fx_node, node) is not None:
            self.unguarded.append((fx_node, node))
        return _copies(fx_node, node, self.metas, guarded=guarded)

    def record_contiguity(self) -> None:
        """The graph writes in place: whether each ``.contiguous()`` so far copies is asked of torch with its
        guards (the port then refuses sizes at which the answer differs), and so is every later one."""
        if self.unguarded is None:
            return
        for fx_node, node in self.unguarded:
            _copies(fx_node, node, self.metas)
        self.unguarded = None

    def _write_back(self, view: str, written: Node) -> dict:
        """Scatter the value ``written`` into the bases of ``view`` (a chain of select/slice/reshape/permute
        views), emitting ``select_scatter``/``slice_scatter``/inverse-view nodes; returns {old base: new base}.
        Other views of the same base go stale (a later read of one raises)."""
        chain_root = self._root(view)
        source, current, step = written.name, view, 0
        renames = {}
        while current in self.views:
            view_node, base = self.views[current]
            if view_node is None or base is None:
                raise NotImplementedError(
                    f"[{written.op}] writes in place into {view!r}, a piece of a split/chunk/unbind or a view "
                    f"Porter cannot write back (in module {written.module!r}); write out of place instead")
            base = self.latest.get(base, base)
            self.views[source] = (view_node, base)  # the written value is still that view of the base
            source = self._scatter(view_node, base, source, written, step)
            renames[base] = source  # every base up the chain: later readers (and outputs) see the write
            current, step = base, step + 1
        chain = set(renames) | {view, written.name}
        for name in list(self.views):
            if name not in chain and name not in renames.values() and self._root(name) == chain_root:
                self.stale.add(name)
        for old, new in renames.items():
            self.latest[old] = new
            if old in self.views:
                self.views[new] = (self.views[old][0], self.latest.get(self.views[old][1], self.views[old][1]))
        return renames

    def check_readable(self, name: str, where: str) -> None:
        """Raise when ``name`` is a view whose base was written in place after the view was taken."""
        if name in self.stale:
            raise NotImplementedError(
                f"{where} reads {name!r}, a view of a tensor that was modified in place after the view was taken; "
                "Porter does not follow that aliasing: take the view after the write, or write out of place")

    def _root(self, name: str) -> str:
        seen = set()
        while name in self.views and self.views[name][1] is not None and name not in seen:
            seen.add(name)
            name = self.latest.get(self.views[name][1], self.views[name][1])
        return name

    def _scatter(self, view_node: Node, base: str, source: str, written: Node, step: int) -> str:
        op, args = view_node.op, view_node.args
        name = f"{written.name}__writeback{step}"
        if op == "aten.select.int":
            new = ("aten.select_scatter.default",
                   {"self": Ref(base), "src": Ref(source), "dim": args["dim"], "index": args["index"]})
        elif op == "aten.slice.Tensor":
            new = ("aten.slice_scatter.default",
                   {"self": Ref(base), "src": Ref(source), "dim": args["dim"], "start": args["start"],
                    "end": args["end"], "step": args["step"]})
        elif op == "aten.detach.default":
            return self._write_through_detach(base, source, written, name)
        elif op in _RESHAPES:
            new = ("aten.reshape_as.default", {"self": Ref(source), "other": Ref(base)})
        elif op == "aten.permute.default":
            dims = [d % len(args["dims"]) for d in args["dims"]]
            new = ("aten.permute.default", {"self": Ref(source), "dims": [dims.index(d) for d in range(len(dims))]})
        elif op in ("aten.transpose.int", "aten.t.default"):
            new = (op, {k: (Ref(source) if k == "self" else v) for k, v in args.items()})
        else:
            raise NotImplementedError(
                f"[{written.op}] writes in place into a view made by {op} (in module {written.module!r}); Porter "
                "writes back through select, slice, reshape-like and permute views only: write out of place")
        meta = self.metas[base]
        self._append(Node(name, new[0], new[1], list(new[1]), meta, written.module, written.module_type,
                          written.scopes))
        return name

    def _write_through_detach(self, base: str, source: str, written: Node, name: str) -> str:
        """A write into ``base.detach()`` changes ``base``'s values where autograd does not see it (``nn.Embedding
        (max_norm=...)`` renormalises its weight so): ``base + detach(written - base)``, the written values with
        ``base``'s gradient passing through unchanged, as torch's later readers of ``base`` have it."""
        meta = self.metas[base]
        nodes = [(f"{name}_delta", "aten.sub.Tensor", {"self": Ref(source), "other": Ref(base)}),
                 (f"{name}_frozen", "aten.detach.default", {"self": Ref(f"{name}_delta")}),
                 (name, "aten.add.Tensor", {"self": Ref(base), "other": Ref(f"{name}_frozen")})]
        for node_name, op, args in nodes:
            self._append(Node(node_name, op, args, list(args), meta, written.module, written.module_type,
                              written.scopes))
        return name

    def _append(self, node: Node) -> None:
        self.nodes.append(node)
        self.metas[node.name] = node.meta

    def _inline(self, fx_node, owner, env, prefix, state, resolve) -> None:
        kind = fx_node.target.name()
        if kind == "wrap_with_set_grad_enabled":
            enabled, body_node, *operands = fx_node.args
            inner = replace(state, grad=bool(enabled))
        elif kind == "wrap_with_autocast":
            device, dtype, enabled, _cache, body_node, *operands = fx_node.args
            if device != "cpu":
                inner = state  # autocast for another device leaves CPU tensors alone
            elif not enabled:
                inner = replace(state, autocast=None)
            else:
                inner = replace(state, autocast=_dtype_name(dtype or torch.get_autocast_dtype("cpu")))
        else:
            raise NotImplementedError(f"unsupported higher-order op {kind} ({fx_node.name}): Porter inlines "
                                      "torch.no_grad/set_grad_enabled and torch.autocast regions only")
        body = getattr(owner, body_node.target)
        placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(operands) or not all(isinstance(o, torch.fx.Node) for o in operands):
            raise NotImplementedError(f"{kind} ({fx_node.name}): cannot match the region's inputs")
        inner_env = {p.name: resolve(o).name for p, o in zip(placeholders, operands)}
        inner_prefix = f"{prefix}{fx_node.name}__"
        outputs = []
        for node in body.graph.nodes:
            if node.op == "call_function":
                self.call(node, body, inner_env, inner_prefix, inner)
            elif node.op == "output":
                outputs = list(node.args[0])
            elif node.op not in ("placeholder", "get_attr"):
                raise NotImplementedError(f"unsupported node kind {node.op} in {kind} region ({node.name})")
        if not all(isinstance(o, torch.fx.Node) for o in outputs):
            raise NotImplementedError(f"{kind} ({fx_node.name}): a region output is not a graph value")
        names = [inner_env.get(o.name, o.name) for o in outputs]
        if state.grad and not inner.grad:
            names = [self._detach(v, fx_node, f"{inner_prefix}nograd{i}") for i, v in enumerate(names)]
        self.regions[prefix + fx_node.name] = names
        env[fx_node.name] = prefix + fx_node.name

    def _detach(self, value: str, fx_node, name: str) -> str:
        meta = self.metas.get(value)
        if meta is None or meta.kind != "tensor":
            return value
        scopes = self.scopes_of(fx_node.meta)
        module, module_type = (scopes[-1][1], scopes[-1][2]) if scopes else ("", "")
        self._append(Node(name, "aten.detach.default", {"self": Ref(value)}, ["self"], meta, module, module_type,
                          scopes))
        return name

    # ------------------------------------------------------------------------------------------------ autocast
    def _autocast(self, node: Node, dtype: str) -> None:
        base = node.op.split(".")[1] if node.op.startswith("aten.") else ""
        if base == "pad":
            base = _pad_kernel(node.args.get("mode"), len(node.args.get("pad") or []) // 2)
        floats = [r for r in iter_refs(list(node.args.values())) if self._float(r.name)]
        if base in LOWER or base in FP32 or base in PROMOTE:
            if base in LOWER:
                target = dtype
            elif base in FP32:
                target = "float32"
            else:
                present = {self.metas[r.name].dtype for r in floats}
                target = present.pop() if len(present) == 1 else "float32"
            casts: dict = {}
            node.args = {k: self._cast_refs(v, target, node, casts) for k, v in node.args.items()}
            floats = [Ref(casts.get(r.name, r.name)) for r in floats]
        if base in _CASTS or node.meta.kind != "tensor" or node.meta.dtype not in _CASTABLE:
            return
        inputs = {self.metas[r.name].dtype for r in floats}
        if len(inputs) == 1 and node.meta.dtype not in inputs:
            raise NotImplementedError(
                f"[{node.op}] ran in {node.meta.dtype} on {inputs.pop()} inputs under torch.autocast "
                f"(in module {node.module!r}); Porter does not know this op's autocast rule: move it out of the "
                "autocast region or cast its inputs explicitly"
            )

    def _float(self, name: str) -> bool:
        meta = self.metas.get(name)
        return meta is not None and meta.kind == "tensor" and meta.dtype in _CASTABLE

    def _cast_refs(self, value, target: str, node: Node, casts: dict):
        if isinstance(value, (list, tuple)):
            return [self._cast_refs(v, target, node, casts) for v in value]
        if not isinstance(value, Ref) or not self._float(value.name) or self.metas[value.name].dtype == target:
            return value
        if value.name not in casts:
            meta = self.metas[value.name]
            cast = Node(f"{node.name}__autocast{len(casts)}", "aten._to_copy.default",
                        {"self": value, "dtype": target}, ["self", "dtype"],
                        ValueMeta("tensor", list(meta.shape), target, hint=meta.hint and list(meta.hint)),
                        node.module, node.module_type, node.scopes)
            self._append(cast)
            casts[value.name] = cast.name
        return Ref(casts[value.name])
