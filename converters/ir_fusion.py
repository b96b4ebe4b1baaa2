"""Rewrites of the captured graph before conversion: a chain of ATen calls that one Porter kernel computes becomes
one node, so every model that records the chain runs the kernel (torch-free, on :class:`~converters.ir.Graph`).

* L2 normalisation, ``F.normalize(x, p=2, dim=d, eps)``. torch.export records it as
  ``linalg_vector_norm(x, 2, [d], keepdim=True)`` -> ``clamp_min(., eps)`` -> ``expand_as(., x)`` -> ``div(x, .)``;
  ``x / x.norm(dim=d, keepdim=True)`` (CLIP's embeddings) is the same chain without the clamp (eps 0: dividing by
  ``max(n, 0)`` is dividing by ``n``) and without the expand. The ``div`` node becomes ``porter.l2_normalize.default``
  (``self``, ``dim``, ``eps``) under its own name, module and scopes; the chain's other nodes are left for dead-code
  elimination when the div was their only reader (otherwise they stay and are computed as before). The converter
  (``converters/ops/norm.py``) emits the ``l2_normalize`` kernel: one native pass over a last axis
  (``porter.layers.normalize``), MLX ops along any other.

Switch :data:`L2_NORMALIZE` (read at conversion) keeps the four ops, for benchmarks.
"""

from __future__ import annotations

from .ir import Graph, Node, Ref, iter_refs

L2_NORMALIZE = True

_NORM = "aten.linalg_vector_norm.default"
_CLAMPS = ("aten.clamp_min.default", "aten.clamp.default")
_EXPAND = "aten.expand_as.default"
_DIV = "aten.div.Tensor"
_FLOATS = ("float32", "float16", "bfloat16", "float64")


def fuse(graph: Graph) -> None:
    """Apply every rewrite whose switch is on, in place."""
    if L2_NORMALIZE:
        _fuse_l2_normalize(graph)


def _single_reader(uses: dict, outputs: set, name: str) -> bool:
    return name not in outputs and len(uses.get(name, [])) == 1


def _eps_of(node: Node):
    """The clamp's lower bound when it is a finite number >= 0 and nothing else is clamped, else None."""
    if node.op not in _CLAMPS or set(node.args) - {"self", "min", "max"} or node.args.get("max") is not None:
        return None
    eps = node.args.get("min")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
        return None
    return float(eps)


def _l2_norm_dim(node: Node, x: Ref):
    """The one torch dim a ``linalg_vector_norm`` of ``x`` takes the 2-norm over with keepdim, else None."""
    if node.op != _NORM or node.args.get("self") != x or not node.args.get("keepdim"):
        return None
    ord_ = node.args.get("ord")
    dims = node.args.get("dim")
    if isinstance(ord_, bool) or ord_ != 2 or node.args.get("dtype") is not None:
        return None
    if not isinstance(dims, (list, tuple)) or len(dims) != 1 or isinstance(dims[0], bool) \
            or not isinstance(dims[0], int):
        return None
    rank = node.meta.rank
    if not rank or not -rank <= dims[0] < rank:
        return None
    return dims[0] % rank


def _fuse_l2_normalize(graph: Graph) -> None:
    producers = {node.name: node for node in graph.nodes}
    uses = graph.users()
    outputs = {r.name for r in iter_refs(graph.outputs)}
    metas = dict(zip(graph.inputs, graph.input_meta))
    metas.update((node.name, node.meta) for node in graph.nodes)
    for i, div in enumerate(graph.nodes):
        if div.op != _DIV or set(div.args) != {"self", "other"} or div.meta.kind != "tensor":
            continue
        x, other = div.args["self"], div.args["other"]
        if not isinstance(x, Ref) or not isinstance(other, Ref) or other == x:
            continue
        node = producers.get(other.name)
        # (expand_as x) of (clamp_min eps) of the norm: each optional, each read by the next alone
        if node is not None and node.op == _EXPAND and node.args.get("other") == x \
                and _single_reader(uses, outputs, node.name) and isinstance(node.args.get("self"), Ref):
            node = producers.get(node.args["self"].name)
        eps = 0.0
        if node is not None and _eps_of(node) is not None and _single_reader(uses, outputs, node.name) \
                and isinstance(node.args.get("self"), Ref):
            eps = _eps_of(node)
            node = producers.get(node.args["self"].name)
        if node is None or not _single_reader(uses, outputs, node.name):
            continue
        dim = _l2_norm_dim(node, x)
        if dim is None or div.meta.dtype not in _FLOATS or metas.get(x.name, div.meta).dtype != div.meta.dtype:
            continue
        graph.nodes[i] = Node(div.name, "porter.l2_normalize.default", {"self": x, "dim": dim, "eps": eps},
                              ["self", "dim", "eps"], div.meta, div.module, div.module_type, div.scopes)
