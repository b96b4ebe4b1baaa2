"""The gradient-order gate on a converted graph's functional weight nodes (training memory). Torch-free.

``porter.layers``' Conv/ConvTranspose/Linear pass their input and trainable parameters through an identity gate in
training mode, so MLX computes a layer's weight gradients while its cotangent is live instead of after the whole
input-gradient walk (``layers/_grad_order.py``). A converted graph also computes with kernels that read parameters
directly: ``F.linear(x, self.qkv.weight)`` in torchvision's Swin, ``addmm``, a head tied to the embedding. Their
weight gradients waited for the walk, so every such node's cotangent stayed live until the end of the backward.

:func:`weight_nodes` finds, once per graph, the nodes that read a trainable parameter (``{"param": name}`` in their
inputs, ``trainable`` in ``graph["params"]``) beside an activation (``{"ref": name}``); :func:`weights_first`
gates one such node's arguments for a call: the floating activations and the parameters that train now (their
holder in the tree is in training mode, the name is not frozen: ``module.freeze()`` puts it in the holder's
``_no_grad``, as buffers are at load). The caller builds no gate in eval mode or while exporting.
"""

from __future__ import annotations

import mlx.core as mx
from porter.layers import gradient_order_gate

from .tree import resolve


def weight_nodes(graph: dict) -> dict:
    """``{node index: (activation positions, [(position, parameter name), ...])}`` for the kernel nodes (not
    ``call_module``: those layers gate themselves) reading a trainable parameter and an activation."""
    trainable = {name for name, spec in graph["params"].items() if spec.get("trainable")}
    found = {}
    for index, node in enumerate(graph["nodes"]):
        if node["kernel"] == "call_module":
            continue
        refs, params = [], []
        for position, spec in enumerate(node["inputs"]):
            if isinstance(spec, dict) and set(spec) == {"ref"}:
                refs.append(position)
            elif isinstance(spec, dict) and set(spec) == {"param"} and spec["param"] in trainable:
                params.append((position, spec["param"]))
        if refs and params:
            found[index] = (tuple(refs), tuple(params))
    return found


def _floating(value) -> bool:
    return isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating)


def weights_first(root, keys: dict, entry: tuple, args: list) -> list:
    """``args`` of the node ``entry`` describes (:func:`weight_nodes`) with its floating activations and its
    parameters that train now passed through the gate; ``args`` itself when either list is empty. ``keys``: torch
    name -> key path in the tree under ``root``."""
    refs, params = entry
    inputs = [i for i in refs if _floating(args[i])]
    if not inputs:
        return args
    training = []
    for position, name in params:
        path = keys[name]
        holder = resolve(root, path[:-1])
        if holder.training and path[-1] not in holder._no_grad and _floating(args[position]):
            training.append(position)
    if not training:
        return args
    gated_inputs, gated_params = gradient_order_gate([args[i] for i in inputs], [args[i] for i in training])
    args = list(args)
    for position, value in zip(inputs + training, [*gated_inputs, *gated_params]):
        args[position] = value
    return args
