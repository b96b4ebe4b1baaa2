"""Per-module comparison: every torch submodule's output, collected with forward hooks, against the port's
``trace`` of the same module (matched by torch's qualified name)."""

from __future__ import annotations

from typing import Any, Dict, Tuple

from porter.compare import compare, leaves, mlx_to_numpy, torch_to_numpy


def torch_module_outputs(model, inputs):
    """Run ``model`` with forward hooks on every submodule; return (outputs, {name: (type, output)}) with a
    module called several times keeping its last call, in the order the calls finished."""
    import torch

    record: Dict[str, Tuple[str, Any]] = {}
    handles = []

    def snapshot(value):
        # Clone: an in-place op later in the forward (ReLU(inplace=True), +=) would overwrite what we saw.
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (tuple, list)):
            return type(value)(snapshot(v) for v in value) if not hasattr(value, "_fields") else tuple(
                snapshot(v) for v in value)
        if isinstance(value, dict):
            return {k: snapshot(v) for k, v in value.items()}
        return value

    def make_hook(name):
        def hook(module, args, output):
            record.pop(name, None)
            record[name] = (type(module).__name__, snapshot(output))
        return hook

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(make_hook(name)))
    try:
        with torch.no_grad():
            outputs = model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return outputs, record


def module_rows(torch_record, ported_record, rtol: float, atol: float):
    rows, unmatched = [], []
    for name, (mtype, t_out) in torch_record.items():
        if name not in ported_record:
            unmatched.append(name)
            continue
        t_leaves = [t for t in leaves(t_out) if hasattr(t, "shape")]
        p_leaves = [p for p in leaves(ported_record[name]) if hasattr(p, "shape")]
        if not t_leaves or not p_leaves:
            unmatched.append(name)
            continue
        if len(p_leaves) < len(t_leaves):
            # The port recorded one value for a multi-output module (e.g. MaxPool2d(return_indices=True)):
            # compare it with the torch output of the same shape, the first one if several.
            p_shape = tuple(p_leaves[0].shape)
            pick = next((t for t in t_leaves if tuple(t.shape) == p_shape), t_leaves[0])
            t_leaves = [pick]
        compared = [compare(mlx_to_numpy(p), torch_to_numpy(t), rtol, atol) for t, p in zip(t_leaves, p_leaves)]
        # One row per module: its first failing output, else its largest error.
        row = next((c for c in compared if not c["ok"]), None) or max(compared, key=lambda c: c["max_rel"])
        rows.append(dict(row, name=name, type=mtype))
    return rows, unmatched
