"""A bound on what one call of a port may build over its whole graph: the bytes alive at once and the
multiply-adds of its products. Torch-free.

``limits.check_elements`` bounds each array on its own (2**31 elements), so a small ``graph.json`` could still ask
for several 8 GiB ``full``s alive together, or a chain of 2**15-square matmuls (4 GiB and 2**45 multiply-adds
each: hours of CPU), and exhaust memory or time from a file of a few kilobytes.

MLX is lazy: a node's output shape is known when the node is built, before anything is evaluated. So the walk
runs as ``PortedModel._run`` builds the call's graph, node by node (:class:`Walk`): each node's outputs count from
that node until the last node (or graph output) that reads them (a liveness walk over the recorded graph; the
inputs count from the start), and the peak of that sum must stay within ``max_bytes``; the multiply-adds of the
products (``linear``, ``matmul``, ``addmm``, ``sdpa``, ``conv``, mapped ``Linear``/``Conv``/``MultiheadAttention``
layers, ``n**3`` per matrix for the factorizations and matrix functions; an estimate: other kernels, ``einsum`` among them, count bytes only) summed over
the call must stay within ``max_macs``. A call over either bound raises :class:`GraphLimitError` before anything
of it is evaluated. ``porter.load`` runs the same walk on the example's sizes (graph input ``meta.hint``) and
refuses the artifact over a bound; dynamic dims are bounded per call, for the actual sizes.

Defaults: 16 GiB alive at once, 2**43 multiply-adds (~8.8e12: ViT-L/16 at batch 8 is ~0.5e12). Raise them with
``porter.load(..., max_graph_bytes=..., max_graph_macs=...)``, ``PortedModel.set_graph_limits``, or the CLI's
``porter --max-graph-bytes N --max-graph-macs N <command>``.
"""

from __future__ import annotations

import mlx.core as mx

from .axis_checks import NodeAxisError
from .limits import ResourceLimitError
from .schema import ArtifactError

DEFAULT_BYTES = 16 << 30
DEFAULT_MACS = 1 << 43
# factorizations and matrix functions of (..., n, n) inputs: ~n**3 per matrix, from n**2 bytes (an svd of a
# 2**15-square matrix is 4 GiB of input and ~3.5e13 multiply-adds)
_CUBIC_KERNELS = frozenset({"matrix_fn", "cholesky", "solve", "solve_triangular", "cholesky_solve", "eigvalsh", "svd",
                            "pinv", "qr", "lu_factor", "lu_solve", "matrix_exp"})
_PRODUCT_KERNELS = frozenset({"linear", "matmul", "addmm", "sdpa", "conv", "conv_transpose", "conv_runtime_groups",
                              "conv_transpose_runtime_groups"}) | _CUBIC_KERNELS
_defaults = {"bytes": None, "macs": None}  # process-wide overrides (the CLI's flags)


class GraphLimitError(ResourceLimitError):
    """A call (or the example's sizes, at load) would build more than the graph's bounds allow."""


def check_limit(value, name: str):
    """``value`` when it is a positive int or ``None``; ``ValueError`` naming the argument otherwise."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"porter.load: {name!r} must be a positive int or None but got {value!r}")
    return value


def set_default_limits(max_bytes=None, max_macs=None) -> None:
    """Process-wide bounds for the ports loaded afterwards (``None``: the built-in default)."""
    _defaults["bytes"] = check_limit(max_bytes, "max_graph_bytes")
    _defaults["macs"] = check_limit(max_macs, "max_graph_macs")


def _references(spec, out: set) -> None:
    if isinstance(spec, dict) and set(spec) == {"ref"}:
        out.add(spec["ref"])
    elif isinstance(spec, list):
        for item in spec:
            _references(item, out)


class GraphBudget:
    """The liveness of a recorded graph and the bounds a call is held to.

    Attributes:
        max_bytes (int): bytes of node outputs and inputs alive at once.
        max_macs (int): multiply-adds of the products, per call.
    """

    def __init__(self, graph: dict, max_bytes=None, max_macs=None):
        nodes = graph["nodes"]
        last: dict = {}
        for index, node in enumerate(nodes):
            found: set = set()
            _references(node["inputs"], found)
            for name in found:
                last[name] = index
        for index, node in enumerate(nodes):  # a value nothing reads is never evaluated: it counts at its node only
            for name in node["outputs"]:
                last.setdefault(name, index)
        for output in graph["outputs"]:
            found = set()
            _references(output["value"], found)
            for name in found:
                last[name] = len(nodes)  # alive until the call returns
        self.frees: dict = {}
        for name, index in last.items():
            self.frees.setdefault(index, []).append(name)
        modules = graph.get("modules", {})
        self.products: dict = {}  # node index -> multiply-adds per output element (None: from the inputs' shapes)
        for index, node in enumerate(nodes):
            if node["kernel"] in _PRODUCT_KERNELS:
                self.products[index] = None
            elif node["kernel"] == "call_module" and node["attrs"].get("module") in modules:
                per_output = _layer_macs(modules[node["attrs"]["module"]])
                if per_output:
                    self.products[index] = per_output
        self.set_limits(max_bytes, max_macs)

    def set_limits(self, max_bytes=None, max_macs=None) -> None:
        self.max_bytes = check_limit(max_bytes, "max_graph_bytes") or _defaults["bytes"] or DEFAULT_BYTES
        self.max_macs = check_limit(max_macs, "max_graph_macs") or _defaults["macs"] or DEFAULT_MACS

    def walk(self, env: dict) -> "Walk":
        return Walk(self, env)


def _nbytes(value) -> int:
    if type(value) is mx.array:
        return value.nbytes
    items = value if isinstance(value, (list, tuple)) else (value,)
    return sum(item.nbytes for item in items if isinstance(item, mx.array))


def _size(value) -> int:
    if type(value) is mx.array:
        return value.size
    items = value if isinstance(value, (list, tuple)) else (value,)
    return sum(item.size for item in items if isinstance(item, mx.array))


def _layer_macs(record: dict) -> int:
    """Multiply-adds per output element of a mapped layer, from its recorded config (0: not a product layer)."""
    config = record.get("config") or {}
    if record.get("type") in ("Linear", "QuantizedLinear"):
        return int(config.get("in_features", 0))
    if record.get("type") == "MultiheadAttention":  # its q/k/v and output projections (the scores not counted)
        return 4 * int(config.get("embed_dim", 0))
    if record.get("type") in ("Conv", "ConvTranspose"):
        taps = 1
        for k in config.get("kernel_size", []):
            taps *= int(k)
        return int(config.get("in_channels", 0)) // max(int(config.get("groups", 1)), 1) * taps
    return 0


def _macs(node: dict, args: list, result) -> int:
    """Multiply-adds of a product kernel's node: output elements times the contraction length."""
    kernel, out = node["kernel"], _size(result)
    arrays = [a for a in args if isinstance(a, mx.array)]
    if kernel in _CUBIC_KERNELS:
        return sum(a.size * a.shape[-1] for a in arrays if a.ndim >= 2)
    if kernel in ("linear", "matmul", "addmm") and len(arrays) >= 2:
        a = arrays[-2] if kernel == "addmm" else arrays[0]
        k = a.shape[-2] if node["attrs"].get("swap_a") and a.ndim >= 2 else (a.shape[-1] if a.ndim else 1)
        return out * k
    if kernel == "sdpa" and len(arrays) >= 2 and arrays[1].ndim >= 2:
        return 2 * out * arrays[1].shape[-2]  # scores then the weighted sum, over the keys
    if kernel in ("conv", "conv_transpose", "conv_runtime_groups", "conv_transpose_runtime_groups") \
            and len(arrays) >= 2 and arrays[1].ndim and arrays[1].shape[0]:
        w = arrays[1]
        return max(out, arrays[0].size) * (w.size // w.shape[0])
    return 0


class Walk:
    """One call's count: :meth:`add` after each node is built, :meth:`done` with each node index passed."""

    def __init__(self, budget: GraphBudget, env: dict):
        self.budget, self.sizes = budget, {name: _nbytes(v) for name, v in env.items()}
        self.live, self.peak, self.macs = sum(self.sizes.values()), 0, 0
        self._check(None)

    def add(self, index: int, node: dict, args: list, result) -> None:
        """Node ``index`` built ``result``; raises :class:`GraphLimitError` when that goes over a bound."""
        name = node["outputs"][0]
        size = _nbytes(result)
        self.live += size - self.sizes.get(name, 0)
        self.sizes[name] = size
        if index in self.budget.products:
            per_output = self.budget.products[index]
            self.macs += _macs(node, args, result) if per_output is None else _size(result) * per_output
        if self.live > self.peak:
            self.peak = self.live
            if self.live > self.budget.max_bytes or self.macs > self.budget.max_macs:
                self._check(node)
        elif self.macs > self.budget.max_macs:
            self._check(node)

    def done(self, index: int) -> None:
        """Node ``index`` was the last reader of the values it frees."""
        for name in self.budget.frees.get(index, ()):
            self.live -= self.sizes.pop(name, 0)

    def _check(self, node) -> None:
        self.peak = max(self.peak, self.live)
        where = "the inputs" if node is None else (
            f"kernel {node['kernel']!r}" + (f" in module {node['module']!r}" if node.get("module") else ""))
        if self.live > self.budget.max_bytes:
            raise GraphLimitError(f"{where}: {_gib(self.live)} of arrays alive at once, over max_graph_bytes = "
                                  f"{_gib(self.budget.max_bytes)} (raise it: porter --max-graph-bytes N, "
                                  "porter.load(..., max_graph_bytes=N))")
        if self.macs > self.budget.max_macs:
            raise GraphLimitError(f"{where}: {self.macs:.3g} multiply-adds, over max_graph_macs = "
                                  f"{self.budget.max_macs:.3g} (raise it: porter --max-graph-macs N, "
                                  "porter.load(..., max_graph_macs=N))")


def _gib(count: int) -> str:
    return f"{count / (1 << 30):.3f} GiB ({count} bytes)"

_DTYPES = {name: getattr(mx, name) for name in ("float32", "float16", "bfloat16", "float64", "int64", "int32",
                                                 "int16", "int8", "uint8", "uint16", "uint32", "uint64", "bool_")}
_DTYPES["bool"] = mx.bool_


def example_inputs(graph: dict):
    """Zeros of the example's sizes (graph input ``meta.hint``, in the port's layout), lazily; ``None`` when an
    input records no example size (a non-tensor input, an older artifact)."""
    inputs = []
    for spec in graph["inputs"]:
        meta = spec.get("meta") or {}
        hint, dtype = meta.get("hint"), _DTYPES.get(meta.get("dtype") or "float32")
        if meta.get("kind") != "tensor" or not isinstance(hint, list) or dtype is None:
            return None
        perm = spec.get("perm")
        shape = hint if perm is None else [hint[p] for p in perm]
        inputs.append(mx.zeros(shape, dtype))
    return inputs


class GraphArtifactError(ArtifactError, GraphLimitError):
    """``porter.load``: the artifact's graph at the example's sizes is over a bound."""


def check_example(ported, path: str) -> None:
    """``porter.load``'s check: the graph built at the example's sizes (nothing evaluated) stays within the
    port's bounds, the training-mode graph's too (``train_graph.py``). Raises ``ArtifactError`` naming ``path``
    and the node over them. A build that fails otherwise (an example of zeros a kernel refuses) is left to the
    calls, where each is checked for its actual sizes."""
    from .train_graph import switched_on

    inputs = example_inputs(ported.graph)
    if inputs is None:
        return
    _check_example_run(ported, inputs, path, "nodes")
    if ported._program.train is not None:
        with switched_on(ported):
            _check_example_run(ported, inputs, path, "train_graph: nodes")


def _check_example_run(ported, inputs: list, path: str, field: str) -> None:
    """One graph of ``ported`` (the one its modes run) built at the example's sizes, for :func:`check_example`."""
    try:
        ported._run(inputs, None)
    except GraphLimitError as e:
        raise GraphArtifactError(path, field, "", f"at the example's sizes, {e}") from None
    except NodeAxisError as e:  # the ranks are the example's: an axis past one is the file's fault at any size
        raise ArtifactError(path, e.where if field == "nodes" else f"train_graph: {e.where}", e.field,
                            e.problem) from None
    except Exception:  # noqa: BLE001 - not the bound's business: every call is checked again for its sizes
        pass
    finally:  # nothing of the walk is kept: the first call computes (and checks) the input-independent values
        for program in ported._program.programs():
            program.static.clear()
