"""The training-mode graph of a port whose torch forward branches on ``self.training`` without a random op. Torch-free.

Conversion captures the forward in eval mode. Where the training forward of some modules differs from their eval
forward deterministically (torchvision's Inception v3 and GoogLeNet return their auxiliary logits in training, timm's
distilled DeiT its two heads, MONAI's DynUNet its deep-supervision heads, a hand-written ``if self.training:``
branch), conversion captures the forward a second time with those modules in training mode, every other module in
eval mode (``capture_train_graph.py``), and records it in ``graph.json`` as ``train_graph``::

    {"switch": [torch module paths], "nodes": [...], "outputs": [...], "output_structure": ..., "module_outputs":
     [...], optional "output_tree", "input_checks", "dtype_follows"}

The port runs it when every ``switch`` module (its nearest holder in the tree) trains and the eval graph when none
does; mixed modes are refused by name (``runtime.py``). Everything else (inputs, signature, parameters, the module
tree) is the eval graph's: one parameter tree, torch's names, so fine-tuning in training mode and evaluating in eval
mode use the same arrays. The port's train-aware layers (batch norm, dropout, stochastic depth) compute their
training form by their own modes in either graph, as in the eval graph.
"""

from __future__ import annotations


KEY = "train_graph"
# the keys a training graph replaces (the rest of graph.json is shared with the eval graph)
PER_GRAPH = ("nodes", "outputs", "output_structure", "module_outputs", "output_tree", "input_checks", "dtype_follows")
REQUIRED = ("switch", "nodes", "outputs", "output_structure", "module_outputs")
MAX_SWITCH = 1 << 12


def view(graph: dict) -> dict:
    """The graph the port runs in training mode: ``graph`` with the ``train_graph`` record's own nodes, outputs and
    checks in place of the eval graph's (keys the record leaves out are absent, never the eval graph's)."""
    record = graph[KEY]
    out = {key: value for key, value in graph.items() if key != KEY and key not in PER_GRAPH}
    out.update({key: record[key] for key in PER_GRAPH if key in record})
    pinned = {tuple(c["lhs"]["dim"]) for c in out.get("input_checks") or []
              if isinstance(c, dict) and c.get("cmp") == "eq" and type(c.get("rhs")) is int
              and isinstance(c.get("lhs"), dict) and "dim" in c["lhs"]}
    # the eval graph's dynamic dims that this graph's own checks do not pin to one size (a training branch
    # flattening a map into a fixed linear layer pins its height and width)
    out["dynamic_dims"] = [d for d in graph.get("dynamic_dims") or [] if (d["input"], d["axis"]) not in pinned]
    return out


def switch_problem(path: str, params) -> str:
    """Why ``path`` cannot be a ``switch`` entry (``""`` when it can): a torch module path is ``""`` (the root) or
    dot-separated non-empty names, none of its prefixes a recorded parameter or buffer (``params``: torch names).
    A module without parameters has no place in the port's tree (its nearest holder's mode is its mode), so a path
    the tree does not hold is a module's all the same; a parameter's path would take its layer's mode."""
    if path == "":
        return ""
    parts = path.split(".")
    if any(not part or part != part.strip() for part in parts):
        return f"{path[:80]!r} is not a module path (names joined by single dots, '' for the root)"
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if prefix in params:
            return f"{path[:80]!r} names the parameter or buffer {prefix[:80]!r}, not a module"
    return ""


def parameters_read(graph: dict) -> list:
    """The node lists and output lists of both graphs (the training graph's only when recorded): what reads
    parameters."""
    graphs = [graph] + ([graph[KEY]] if isinstance(graph.get(KEY), dict) else [])
    return [(g.get("nodes", []), g.get("outputs", [])) for g in graphs]
