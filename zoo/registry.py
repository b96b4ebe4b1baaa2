"""The zoo's registry: architecture name -> factory plus a description, filled by :func:`register_model`.

A model family registers each named configuration once::

    @register_model("resnet18", family="resnet", summary="ResNet-18 (BasicBlock 2-2-2-2)",
                    torch_model="porter.examples:resnet18")
    def resnet18(num_classes: int = 1000, **kwargs) -> ResNet: ...

``create(name, **kwargs)`` calls the factory; ``entry(name)`` is its typed registry entry (:class:`ZooEntry`, cheap:
nothing is built); ``model_info(name)`` describes it as a dict (the parameter count is measured on a default build
the first time it is asked for, then cached).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Tuple

import mlx.nn as nn
from mlx.utils import tree_flatten



@dataclass(frozen=True)
class ZooEntry:
    """One registered architecture.

    Attributes:
        name (str): the architecture name (``porter zoo list``, ``porter convert --arch NAME``).
        factory (Callable): builds the MLX model; keyword arguments as torchvision's builder.
        family (str): the model family, e.g. ``"resnet"``.
        summary (str): one line describing the model.
        torch_model (str): ``"package.module:factory"`` of the torch model whose ``state_dict`` it loads.
        input_shape (tuple): a typical input in torch's layout ``(N, C, H, W)``.
    """

    name: str
    factory: Callable
    family: str
    summary: str
    torch_model: str
    input_shape: Tuple[int, ...]


_MODELS: dict[str, ZooEntry] = {}
_PARAMETER_COUNTS: dict[str, int] = {}


def register_model(name: str, *, family: str, summary: str, torch_model: str,
                   input_shape: tuple = (1, 3, 224, 224)) -> Callable:
    """Decorator registering a factory under ``name``.

    Args:
        name (str): the architecture name (``porter zoo list``, ``porter convert --arch NAME``).
        family (str): the model family, e.g. ``"resnet"``.
        summary (str): one line describing the model.
        torch_model (str): ``"package.module:factory"`` of the torch model whose ``state_dict`` format the zoo
            model loads (torchvision's names).
        input_shape (tuple, optional): a typical input in torch's layout ``(N, C, H, W)``; the zoo model takes it
            channels-last. Default: ``(1, 3, 224, 224)``.
    Raises:
        ValueError: ``name`` is already registered, or the summary spans several lines.
    """
    if name in _MODELS:
        raise ValueError(f"[porter.zoo] model '{name}' is already registered.")
    if "\n" in summary:
        raise ValueError(f"[porter.zoo] the summary of '{name}' must be one line.")

    def decorator(factory: Callable) -> Callable:
        _MODELS[name] = ZooEntry(name, factory, family, summary, torch_model, tuple(input_shape))
        return factory

    return decorator


def list_models() -> list[str]:
    """Names of the registered architectures, sorted."""
    return sorted(_MODELS)


def entry(name: str) -> ZooEntry:
    """The registry entry of ``name`` (nothing is built).

    Raises:
        ValueError: ``name`` is not registered; the message lists the known names.
    """
    if name not in _MODELS:
        known = ", ".join(list_models()) or "none"
        raise ValueError(f"[porter.zoo] unknown model '{name}'; known models: {known}.")
    return _MODELS[name]


def create(name: str, **kwargs) -> nn.Module:
    """Build the registered architecture ``name`` (random weights; load a checkpoint into it afterwards).

    Args:
        name (str): a name from :func:`list_models`.
        **kwargs: passed to the model's factory (e.g. ``num_classes``).
    Returns:
        The MLX module, in eval mode. Input ``(N, H, W, 3)``, output ``(N, num_classes)``.
    """
    model = entry(name).factory(**kwargs)
    model.eval()
    return model


def model_info(name: str) -> dict:
    """Describe ``name``: ``summary``, ``family``, ``input_shape`` (torch layout), ``num_parameters`` (of the
    default configuration, BatchNorm running statistics excluded, as torch's ``parameters()``) and
    ``torch_model``."""
    found = entry(name)
    if name not in _PARAMETER_COUNTS:
        model = found.factory()
        _PARAMETER_COUNTS[name] = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    return {"name": name, "summary": found.summary, "family": found.family, "input_shape": found.input_shape,
            "num_parameters": _PARAMETER_COUNTS[name], "torch_model": found.torch_model}
