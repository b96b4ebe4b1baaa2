"""Per-module comparison: every torch submodule's output, collected with forward hooks, against the port's
``trace`` of the same module (matched by torch's qualified name)."""

from __future__ import annotations

from typing import Any, Dict, Tuple

from porter.compare import compare, leaves, mlx_to_numpy, torch_to_numpy


class ModuleRecord(dict):
    """``{name: (type, output)}``, each module's last call, in the order the calls finished; a module registered
    under several names (one instance used in several places) also keeps every call: ``calls[name]`` (outputs and
    finishing order, in call order) and ``aliases[name]`` (all its names), ``name`` being its first name."""

    def __init__(self):
        super().__init__()
        self.calls: Dict[str, list] = {}
        self.aliases: Dict[str, list] = {}
        self.order: Dict[str, int] = {}


def torch_module_outputs(model, inputs, kwargs=None):
    """Run ``model`` with forward hooks on every submodule; return (outputs, {name: (type, output)}) with a
    module called several times keeping its last call, in the order the calls finished (a
    :class:`ModuleRecord`)."""
    import torch

    record = ModuleRecord()
    handles = []
    names_of: Dict[int, list] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if name:
            names_of.setdefault(id(module), []).append(name)
    finished = iter(range(1 << 62))

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

    def make_hook(name, shared):
        def hook(module, args, output):
            out, order = snapshot(output), next(finished)
            record.pop(name, None)
            record[name] = (type(module).__name__, out)
            record.order[name] = order
            if shared:
                record.calls.setdefault(name, []).append((out, order))
        return hook

    for name, module in model.named_modules():
        if name:
            aliases = names_of[id(module)]
            if len(aliases) > 1:
                record.aliases[name] = aliases
            handles.append(module.register_forward_hook(make_hook(name, len(aliases) > 1)))
    try:
        with torch.no_grad():
            outputs = model(*inputs, **(kwargs or {}))
    finally:
        for h in handles:
            h.remove()
    return outputs, record


def _per_place(record, ported_record):
    """``record`` with each shared module's calls under the names the port traced them by.

    One module instance used in several places (ultralytics' ``Conv.default_act``: one SiLU for every conv) runs
    once per place; torch's hook cannot tell the places apart, the port's trace names each (and the module's first
    name is only its first place). When the port traced as many of its names as torch saw calls, they pair up in
    call order; otherwise its last call is compared with the name the port traced last."""
    calls = getattr(record, "calls", None)
    if not calls:
        return record
    entries = []
    for name, (mtype, value) in record.items():
        order = record.order.get(name, 0)
        if name not in calls:
            entries.append((order, name, (mtype, value)))
            continue
        aliases = set(record.aliases[name])
        traced = [k for k in ported_record if k in aliases]
        if traced and len(traced) == len(calls[name]):
            entries.extend((o, k, (mtype, v)) for k, (v, o) in zip(traced, calls[name]))
        else:
            entries.append((order, traced[-1] if traced else name, (mtype, value)))
    return {name: entry for _, name, entry in sorted(entries, key=lambda e: e[0])}


def module_rows(torch_record, ported_record, rtol: float, atol: float, half=None, half_record=None):
    torch_record = _per_place(torch_record, ported_record)
    half_record = _per_place(half_record, ported_record) if half_record else half_record
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
            # Several of that shape (WaveNet's layer returns (residual, skip), and the last layer's residual is
            # dead code the capture dropped): which one the port kept is not recorded, so the closest is taken;
            # a wrong value still matches none of them.
            p_shape = tuple(p_leaves[0].shape)
            same = [i for i, t in enumerate(t_leaves) if tuple(t.shape) == p_shape] or [0]
            p_value = mlx_to_numpy(p_leaves[0])
            index = [min(same, key=lambda i: compare(p_value, torch_to_numpy(t_leaves[i]), rtol, atol)["max_rel"])]
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
