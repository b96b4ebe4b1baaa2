"""Eval-time fusion in a converted model's runtime (issue 15): a batch norm whose only reader is the next node, a
ReLU, ReLU6, SiLU or hardswish, runs as one native pass (``porter.layers.BatchNorm.eval_activation``: the channel
affine and the activation together, the activation applied to the value rounded as torch stores it); a batch norm
whose only reader is the next node, a residual add of another value (``bn(x) + skip``: MobileNetV2's inverted
residuals), optionally followed by a ReLU that is the sum's only reader (``relu(bn(x) + skip)``: ResNet's block
ends), runs as one native pass too (``BatchNorm.eval_residual``): one read and write of the map instead of three.

The graph and the module tree are unchanged: :func:`batch_norm_activation_pairs` only lists the candidate pairs, and
the runtime decides at every call from the layers then at those paths (a layer replaced by the user, a batch norm in
training mode, float64, a traced call that records module outputs, or no native kernels: the two nodes run as
usual).
"""

from __future__ import annotations

FUSABLE = ("relu", "relu6", "silu", "hardswish")

# the runtime's switch for the batch norm + residual add (+ ReLU) runs, read per call (an A/B in one process)
RESIDUAL = True


def activation_name(fn, attrs) -> "str | None":
    """The fusable activation a runtime function ``fn`` with arguments ``attrs`` computes, or ``None``."""
    if fn == "hardtanh" and attrs == {"min_val": 0.0, "max_val": 6.0}:
        return "relu6"
    return fn if fn in FUSABLE and fn != "relu6" and not attrs else None


def _refs(spec, out: list) -> None:
    if isinstance(spec, dict) and set(spec) == {"ref"}:
        out.append(spec["ref"])
    elif isinstance(spec, list):
        for item in spec:
            _refs(item, out)


def batch_norm_activation_pairs(graph: dict) -> dict:
    """``{index of a BatchNorm call_module node: activation}`` where the next node is a fusable activation (an
    ``Activation`` layer or a ``unary`` kernel: :func:`activation_name`) and the only reader of the batch norm's output
    (no other node, no graph output)."""
    nodes, modules = graph["nodes"], graph.get("modules", {})
    readers = _readers(graph)
    pairs = {}
    for i in range(len(nodes) - 1):
        node, nxt = nodes[i], nodes[i + 1]
        name = _single_read_batch_norm(node, modules, readers)
        if name is None or nxt["inputs"] != [{"ref": name}]:
            continue
        fn = activation_of(nxt, modules)
        if fn is not None:
            pairs[i] = fn
    return pairs


def batch_norm_residual_runs(graph: dict) -> dict:
    """``{index of a BatchNorm call_module node: (position of the skip value among the add's inputs, activation or
    None, nodes the run spans after the batch norm)}`` where the next node is a ``binary`` add (alpha 1) of the batch
    norm's output and another node's value, the batch norm's output has no other reader, and, when the node after the
    add is a ReLU reading only the sum and nothing else reads the sum, that ReLU too."""
    nodes, modules = graph["nodes"], graph.get("modules", {})
    readers = _readers(graph)
    runs = {}
    for i in range(len(nodes) - 1):
        node, add = nodes[i], nodes[i + 1]
        name = _single_read_batch_norm(node, modules, readers)
        attrs = add["attrs"]
        if (name is None or add["kernel"] != "binary" or attrs.get("fn") != "add"
                or attrs.get("alpha", 1) != 1 or len(add["inputs"]) != 2):
            continue
        refs = [spec.get("ref") if isinstance(spec, dict) and set(spec) == {"ref"} else None
                for spec in add["inputs"]]
        if sorted(r == name for r in refs) != [False, True] or None in refs:
            continue
        (total,) = add["outputs"]
        after = nodes[i + 2] if i + 2 < len(nodes) else None
        relu = (after is not None and readers.get(total) == 1 and after["inputs"] == [{"ref": total}]
                and activation_of(after, modules) == "relu")
        runs[i] = (refs.index(name) ^ 1, "relu" if relu else None, 2 if relu else 1)
    return runs


def _single_read_batch_norm(node: dict, modules: dict, readers: dict):
    """The output name of ``node`` when it calls a BatchNorm layer and exactly one input reads that output, else
    None."""
    if node["kernel"] != "call_module" or modules.get(node["attrs"]["module"], {}).get("type") != "BatchNorm":
        return None
    (name,) = node["outputs"]
    return name if readers.get(name) == 1 else None


def _readers(graph: dict) -> dict:
    """``{value name: how many node inputs and graph outputs read it}``."""
    readers: dict = {}
    for spec in [n["inputs"] for n in graph["nodes"]] + [[o["value"] for o in graph["outputs"]]]:
        found: list = []
        _refs(spec, found)
        for name in found:
            readers[name] = readers.get(name, 0) + 1
    return readers


def activation_of(node: dict, modules: dict):
    """The fusable activation a node computes (from the graph), or ``None``."""
    if node["kernel"] == "unary":
        attrs = {k: v for k, v in node["attrs"].items() if k != "fn"}
        return activation_name(node["attrs"].get("fn"), attrs)
    if node["kernel"] == "call_module":
        entry = modules.get(node["attrs"]["module"], {})
        if entry.get("type") == "Activation":
            return activation_name(entry["config"].get("fn"), entry["config"].get("attrs") or {})
    return None
