"""Tensors a module holds in plain attributes (neither parameters nor buffers) that a capture bakes in as constants
(imports torch; conversion only).

torch.export lifts such a tensor into the program as a constant with its current value. When it is a cache of
something computed from the weights (timm's LeViT keeps ``attention_biases[:, attention_bias_idxs]`` in
``attention_bias_cache`` after its first eval call), the port computes torch's numbers today, but the weights it
derives from are then dead in the port: ``load_torch_state_dict`` / ``porter update`` and training leave the
baked value as it was, silently. ``warn_baked_attributes`` names each such attribute at conversion.
"""

from __future__ import annotations

import warnings

import torch

_DEPTH = 3  # containers nested this deep are searched (a dict of device -> tensor, a list of tuples)


def _tensors(value, path: str, depth: int = 0):
    if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
        yield path, value
    elif depth < _DEPTH and isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{path}[{key!r}]", depth + 1)
    elif depth < _DEPTH and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{path}[{i}]", depth + 1)


def _storage(t: torch.Tensor):
    try:
        return t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype
    except (RuntimeError, NotImplementedError):  # a tensor without storage (fake, meta, sparse)
        return None


def attribute_tensors(model: torch.nn.Module) -> dict:
    """``{storage identity: "qualified.attribute[key]"}`` for every tensor held in a plain module attribute."""
    out = {}
    for prefix, module in model.named_modules():
        for name, value in vars(module).items():
            if name.startswith("_") or name == "training":
                continue  # torch's own bookkeeping (_parameters, _buffers, _modules, hooks)
            for path, t in _tensors(value, f"{prefix}.{name}" if prefix else name):
                key = _storage(t)
                if key is not None and t.numel():
                    out.setdefault(key, path)
    return out


def warn_baked_attributes(model: torch.nn.Module, ep) -> list:
    """Warn, naming them, about the attribute tensors ``ep`` took in as constants; returns their paths."""
    from torch.export.graph_signature import InputKind

    held = attribute_tensors(model)
    if not held:
        return []
    baked = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.CONSTANT_TENSOR or spec.target not in ep.constants:
            continue
        value = ep.constants[spec.target]
        path = held.get(_storage(value)) if isinstance(value, torch.Tensor) else None
        if path is not None:
            baked.append(path)
    if baked:
        warnings.warn(
            f"{', '.join(baked)} hold{'s' if len(baked) == 1 else ''} a tensor that is neither a parameter nor a "
            "buffer: the port bakes in its current value as a constant. If it is a cache of something computed from "
            "the weights (timm's LeViT fills attention_bias_cache on its first eval call), those weights are dead "
            "in the port: load_torch_state_dict / porter update and training will not change it. Clear the cache "
            "before converting (timm: model.train().eval()), or register the tensor as a buffer.", stacklevel=4)
    return baked
