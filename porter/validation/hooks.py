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


def module_rows(torch_record, ported_record, rtol: float, atol: float, half=None, half_record=None):
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
        index = list(range(len(t_leaves)))
        if len(p_leaves) < len(t_leaves):
            # The port recorded one value for a multi-output module (e.g. MaxPool2d(return_indices=True)):
            # compare it with the torch output of the same shape, the first one if several.
            p_shape = tuple(p_leaves[0].shape)
            index = [next((i for i, t in enumerate(t_leaves) if tuple(t.shape) == p_shape), 0)]
            t_leaves = [t_leaves[index[0]]]
        compared = [compare(mlx_to_numpy(p), torch_to_numpy(t), rtol, atol) for t, p in zip(t_leaves, p_leaves)]
        if half is not None:  # judged against what torch itself loses in the port's dtype (validate_half.py)
            h_leaves = leaves(half_record[name][1]) if half_record and name in half_record else []
            compared = [derived(row, t, h_leaves[i] if i < len(h_leaves) else None, half, rtol, atol)
                        for row, t, i in zip(compared, t_leaves, index)]
        # One row per module: its first failing output, else its largest error.
        row = next((c for c in compared if not c["ok"]), None) or max(compared, key=lambda c: c["max_rel"])
        rows.append(dict(row, name=name, type=mtype))
    return rows, unmatched


def derived(row, expected, torch_half, half, rtol: float, atol: float):
    """``row`` under the half-precision bar; ``torch_half`` is torch's own output in the port's dtype, or None."""
    from porter.validate_half import derived_row

    torch_row = None
    if torch_half is not None and hasattr(torch_half, "shape"):
        torch_row = compare(torch_to_numpy(torch_half), torch_to_numpy(expected), rtol, atol)
    return derived_row(row, torch_row, half["dtype"], rtol, atol, half["factor"])
