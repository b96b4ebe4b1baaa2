"""Which torch state a TorchScript port keeps, and under which names (conversion time, imports torch): names the
module's ``state_dict`` lacks (non-persistent buffers, ``_ts_constant``s), entries the forward never reads (kept so
strict round trips work), and tied names of one tensor. Used by ``capture_script.py`` after the interpreter ran."""

from __future__ import annotations

import torch


def not_in_state_dict(module, interp) -> set:
    """The names read that ``module.state_dict()`` lacks: non-persistent buffers, ``_ts_constant``s."""
    try:
        keys = set(module.state_dict())
    except Exception:  # noqa: BLE001  (a ScriptModule that cannot list its state: expect every name)
        return set()
    return {name for name in interp.params if name not in keys}


def keep_unread_state(module, interp) -> None:
    """Every ``state_dict`` entry the forward never reads (an unused head, a persistent buffer nothing reads) is
    kept as a parameter of the port, as the ``torch.export`` frontend keeps it (the program lifts every entry):
    ``torch_parameters()`` then round-trips into the model with a strict ``load_state_dict``, and the model's own
    ``state_dict`` loads into the port strictly. A further name of a tensor already kept is a tied name
    (:func:`tied_names`)."""
    try:
        state = module.state_dict(keep_vars=True)
    except Exception:  # noqa: BLE001  (a ScriptModule that cannot list its state: only what the forward reads)
        return
    for name, tensor in state.items():
        if name in interp.params or not isinstance(tensor, torch.Tensor):
            continue
        first = interp.param_names.get(id(tensor), interp.buffer_names.get(id(tensor), name))
        if first != name:
            continue  # a second name of one tensor: tied to the first
        interp.tensor_param(tensor, name, id(tensor) in interp.param_names)


def tied_names(module, interp) -> dict:
    """``{name: first name}`` for every further state_dict name of a tensor the graph reads (tied weights)."""
    tied = {}
    for named, first in ((module.named_parameters, interp.param_names), (module.named_buffers, interp.buffer_names)):
        try:
            entries = list(named(remove_duplicate=False))
        except TypeError:  # a ScriptModule's accessors without the keyword: no way to see the other names
            entries = []
        for name, tensor in entries:
            if first.get(id(tensor), name) != name and first[id(tensor)] in interp.params:
                tied[name] = first[id(tensor)]
    return tied
