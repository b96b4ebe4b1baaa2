"""Loading torchvision-format weights into zoo models, by parameter role (no torch import).

Every zoo model names its submodules as torchvision does, so a module's path is its torch prefix. What a torch
tensor becomes is decided by the kind of module that owns it, never by the tensor's shape:

* :class:`porter.layers.Conv1d/2d/3d`: ``weight`` ``(C_out, C_in/g, *k)`` -> ``(C_out, *k, C_in/g)``; ``bias`` as is.
* :class:`porter.layers.ConvTranspose1d/2d/3d`: ``weight`` ``(C_in, C_out/g, *k)`` -> ``(C_out, *k, C_in/g)``.
* :class:`mlx.nn.LayerNorm`, :class:`mlx.nn.GroupNorm`, :class:`mlx.nn.Embedding`: as is.
* a module defining ``torch_parameter_specs()``: its own roles (class tokens, position tables, ...).
* :class:`mlx.nn.Linear`: ``weight`` ``(out, in)`` and ``bias`` as is (same layout in both libraries).
* :class:`FlattenLinear`: a Linear after a flatten of a ``(C, H, W)`` map; torch flattens channels-first, the zoo
  channels-last, so the weight's input axis is reordered ``(C, H, W)`` -> ``(H, W, C)``.
* :class:`mlx.nn.BatchNorm` (and :class:`porter.layers.BatchNorm`, torch's training rule): ``weight``, ``bias``,
  ``running_mean``, ``running_var``; ``num_batches_tracked`` is optional, loaded where the layer keeps it (it only
  matters for training with ``momentum=None``).
"""

from __future__ import annotations

from typing import Callable, Mapping

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from porter.layers import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from porter.layers.conv_weights import (mlx_conv_transpose_weight_to_torch, mlx_conv_weight_to_torch,
                                       torch_conv_transpose_weight_to_mlx, torch_conv_weight_to_mlx)
from porter.torch_files import TORCH_SUFFIXES

__all__ = ["FlattenLinear", "TorchCheckpointMixin", "torch_parameter_specs"]

_OPTIONAL_KEYS = ("num_batches_tracked",)


class FlattenLinear(nn.Linear):
    """``nn.Linear`` applied to a channels-last ``(N, H, W, C)`` map flattened to ``(N, H*W*C)``.

    Args:
        map_shape (tuple): ``(C, H, W)`` of the map torch flattens (channels-first).
        output_dims (int): output features.
        bias (bool, optional): add a bias. Default: ``True``.
    Shape: ``(N, H, W, C)`` -> ``(N, output_dims)``.
    """

    def __init__(self, map_shape: tuple, output_dims: int, bias: bool = True):
        c, h, w = map_shape
        super().__init__(c * h * w, output_dims, bias=bias)
        self.map_shape = (c, h, w)

    def __call__(self, x: mx.array) -> mx.array:
        return super().__call__(x.reshape(x.shape[0], -1))

    def torch_weight_to_mlx(self, w: np.ndarray) -> np.ndarray:
        c, h, w_ = self.map_shape
        out = w.shape[0]
        return np.ascontiguousarray(w.reshape(out, c, h, w_).transpose(0, 2, 3, 1).reshape(out, -1))


def _same(w: np.ndarray) -> np.ndarray:
    return w


def _plain(module: nn.Module, names) -> list:
    return [(n, tuple(module[n].shape), _same) for n in names if n in module]


def _module_specs(module: nn.Module) -> list[tuple[str, tuple, Callable]] | None:
    """``(attribute, torch shape, torch -> mlx transform)`` for a module's tensors, or None for a parameter-free
    module. Raises TypeError for a module with parameters but no known role.

    A module with tensors of its own role (a class token, a relative-position table) declares them by defining
    ``torch_parameter_specs()`` returning the same triples.
    """
    custom = getattr(type(module), "torch_parameter_specs", None)
    if callable(custom):
        return module.torch_parameter_specs()
    if isinstance(module, (Conv1d, Conv2d, Conv3d)):
        specs = [("weight", mlx_conv_weight_to_torch(np.empty(module.weight.shape, np.uint8)).shape,
                  torch_conv_weight_to_mlx)]
        return specs + _plain(module, ["bias"])
    if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)):
        groups = module.groups

        def transform(w, groups=groups):
            return torch_conv_transpose_weight_to_mlx(w, groups)

        shape = mlx_conv_transpose_weight_to_torch(np.empty(module.weight.shape, np.uint8), groups).shape
        return [("weight", shape, transform)] + _plain(module, ["bias"])
    if isinstance(module, FlattenLinear):
        specs = [("weight", tuple(module.weight.shape), module.torch_weight_to_mlx)]
        return specs + _plain(module, ["bias"])
    if isinstance(module, (nn.Linear, nn.LayerNorm, nn.GroupNorm, nn.Embedding)):
        return _plain(module, ["weight", "bias"])
    if isinstance(module, nn.BatchNorm):
        if not module.track_running_stats:
            raise TypeError("[porter.zoo] BatchNorm without running statistics has no torchvision checkpoint form.")
        return _plain(module, ["weight", "bias", "running_mean", "running_var"])
    own = [k for k, v in module.items() if isinstance(v, mx.array)]
    if own:
        raise TypeError(f"[porter.zoo] no checkpoint role for {type(module).__name__} holding {own}.")
    return None


def torch_parameter_specs(model: nn.Module) -> dict[str, tuple[str, tuple, Callable]]:
    """Torch state_dict key -> ``(mlx parameter path, torch shape, transform)`` for every tensor of ``model``."""
    specs = {}
    for path, module in reversed(model.named_modules()):  # MLX lists them leaves first
        for attr, shape, transform in _module_specs(module) or ():
            key = f"{path}.{attr}" if path else attr
            specs[key] = (key, tuple(int(s) for s in shape), transform)
    return specs


def _as_numpy(value) -> np.ndarray:
    if isinstance(value, mx.array) and value.dtype == mx.bfloat16:
        value = value.astype(mx.float32)  # numpy has no bfloat16
    return np.asarray(value)


class TorchCheckpointMixin:
    """Adds ``load_torch_state_dict`` and ``load_checkpoint`` to a zoo model (an ``mlx.nn.Module``)."""

    def load_torch_state_dict(self, state_dict: Mapping, strict: bool = True):
        """Load a torchvision-format ``state_dict`` (name -> numpy array, or anything with ``__array__``).

        Each tensor is converted by the role of the module owning it and cast to that parameter's dtype (as torch's
        ``load_state_dict`` copies into the existing tensors).

        Args:
            state_dict (Mapping): torch names -> arrays in torch's layout.
            strict (bool, optional): refuse missing and unexpected keys. Mis-shaped keys are always refused.
                Default: ``True``.
        Returns:
            ``self``.
        Raises:
            ValueError: listing every missing, unexpected and mis-shaped key by name, in one message.
        """
        specs = torch_parameter_specs(self)
        optional = {k for k in state_dict if k.rsplit(".", 1)[-1] in _OPTIONAL_KEYS
                    and f"{k.rsplit('.', 1)[0]}.running_mean" in specs}
        missing = [k for k in specs if k not in state_dict]
        unexpected = [k for k in state_dict if k not in specs and k not in optional]
        arrays, mis_shaped = {}, []
        for key, (path, shape, transform) in specs.items():
            if key not in state_dict:
                continue
            value = _as_numpy(state_dict[key])
            if tuple(value.shape) != shape:
                mis_shaped.append(f"{key}: checkpoint {tuple(value.shape)} vs expected {shape}")
                continue
            arrays[path] = transform(value)
        for key in sorted(optional):  # torch's is one int64: any other size or kind is not a step count
            value = _as_numpy(state_dict[key])
            if value.size != 1 or value.dtype.kind not in "iu":
                mis_shaped.append(f"{key}: checkpoint {tuple(value.shape)} {value.dtype} vs expected () int64")
        problems = ([f"missing: {k}" for k in missing] if strict else []) + \
                   ([f"unexpected: {k}" for k in unexpected] if strict else []) + \
                   [f"mis-shaped: {m}" for m in mis_shaped]
        if problems:
            counts = ", ".join(f"{n} {what}" for n, what in (
                (len(missing) if strict else 0, "missing"), (len(unexpected) if strict else 0, "unexpected"),
                (len(mis_shaped), "mis-shaped")) if n)
            raise ValueError(f"[{type(self).__name__}] the state_dict does not match the model ({counts} keys):\n  "
                             + "\n  ".join(problems))
        current = dict(tree_flatten(self.parameters()))
        for key in optional:  # num_batches_tracked: loaded where the model keeps it (porter.layers.BatchNorm)
            if key in current:
                arrays[key] = np.asarray(_as_numpy(state_dict[key])).reshape(current[key].shape)
        self.load_weights([(path, mx.array(value).astype(current[path].dtype)) for path, value in arrays.items()],
                          strict=False)
        mx.eval(self.parameters())
        return self

    def load_checkpoint(self, path: str, strict: bool = True):
        """Load a torchvision-format checkpoint: ``.safetensors``, or torch's ``.pth``/``.pt``/``.bin`` read without
        torch (:mod:`porter.torch_files`: a restricted unpickler, nothing in the file runs). Returns ``self``."""
        from porter.torch_files import load_state_dict

        if not str(path).endswith((".safetensors",) + TORCH_SUFFIXES):
            raise ValueError(f"[{type(self).__name__}] load_checkpoint reads .safetensors, .pth, .pt and .bin files, "
                             f"but got '{path}'.")
        return self.load_torch_state_dict(load_state_dict(str(path)), strict=strict)
