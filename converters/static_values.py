"""Values a converted graph computes from its parameters and literals alone, kept between calls.

torchvision's Swin builds its shifted-window attention mask from the feature map's size on every forward (a zero
map, nine slice writes, a difference of window ids, two masked fills: ~80 nodes per shifted block) and gathers its
relative-position bias from the table on every forward (Swin V2 and MaxViT likewise); in Swin-T that is 412 of the
graph's 962 nodes, none of which an input reaches. :class:`StaticValues` finds those nodes once (no graph input
reaches them through their ``ref`` arguments; that includes a layer of the module tree called on such values:
Swin V2's bias MLP) and the port computes them on the first call and reuses them while every parameter and layer
they read is the same object (a layer replaced at its path, or its weights, is a miss).

Why identity is enough: MLX arrays are values, and a port's weights change by replacing the arrays in the tree (an
optimizer step, ``model.update``, ``load_torch_state_dict``, ``porter.update_weights``), never in place through
the port's API; a gradient transform (``mx.grad``, ``nn.value_and_grad``) hands the forward copies, so the values
are recomputed from them and the gradient reaches the table as torch's does. The runtime uses the cache only in
eval mode, outside export mode, without a per-module trace and without spectral norm's per-call vectors.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["ENABLED", "StaticValues"]

CALL_MODULE = "call_module"

# the runtime's switch (an A/B in one process: benchmarks/model_switch.py --switch
# porter.converters.static_values:ENABLED); off, every node runs on every call as before (identity nodes called too)
ENABLED = True


def _refs_and_params(spec, refs: list, params: list) -> None:
    if isinstance(spec, dict):
        if set(spec) == {"ref"}:
            refs.append(spec["ref"])
        elif set(spec) == {"param"}:
            params.append(spec["param"])
    elif isinstance(spec, list):
        for item in spec:
            _refs_and_params(item, refs, params)


class StaticValues:
    """Which nodes of ``graph`` no input reaches, and the values of the last call that computed them.

    Attributes:
        nodes (frozenset): indices of the input-independent nodes.
        params (tuple): the parameter names those nodes read (the cache key: the arrays now at those names).
        modules (tuple): the paths of the layers those nodes call (Swin V2's bias MLP): the key also holds each
            layer now at its path and its parameter arrays, and a layer in training mode turns the cache off.
        frontier (tuple): the values of those nodes read by other nodes or returned as outputs (what a hit puts
            back into the call's environment).
    """

    def __init__(self, graph: dict):
        static_names, nodes, params, modules = set(), [], {}, {}
        for index, node in enumerate(graph["nodes"]):
            refs, read = [], []
            _refs_and_params(node["inputs"], refs, read)
            if not all(r in static_names for r in refs):
                continue
            if node["kernel"] == CALL_MODULE:
                modules.setdefault(node["attrs"]["module"], None)
            nodes.append(index)
            static_names.update(node["outputs"])
            params.update(dict.fromkeys(read))
        read_later, static_nodes = set(), set(nodes)
        for index, node in enumerate(graph["nodes"]):
            if index not in static_nodes:
                refs = []
                _refs_and_params(node["inputs"], refs, [])
                read_later.update(r for r in refs if r in static_names)
        for output in graph["outputs"]:
            refs = []
            _refs_and_params(output["value"], refs, [])
            read_later.update(r for r in refs if r in static_names)
        self.nodes = frozenset(static_nodes)
        self.params = tuple(params)
        self.modules = tuple(modules)
        self.frontier = tuple(sorted(read_later))
        self._kept: Optional[tuple] = None  # (key arrays, values): one attribute, replaced whole (two calls at once)

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def lookup(self, arrays: list) -> Optional[dict]:
        """The kept values when ``arrays`` (the arrays now at :attr:`params`, in order) are the very arrays they
        were computed from; else ``None``."""
        kept = self._kept
        if kept is None or len(kept[0]) != len(arrays) or any(a is not b for a, b in zip(arrays, kept[0])):
            return None
        return kept[1]

    def store(self, arrays: list, env: dict) -> None:
        """Keep the frontier values of a call that computed them from ``arrays`` (holding the arrays keeps their
        identities from being reused)."""
        self._kept = (tuple(arrays), {name: env[name] for name in self.frontier})

    def clear(self) -> None:
        self._kept = None
