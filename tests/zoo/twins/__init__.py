"""Torch twins of torchvision's architectures and the zoo's test cases, one module per family.

torchvision is not installed where the tests run, so each family module here holds torch models with torchvision's
module structure and ``state_dict`` names (or reuses ``porter.examples``), and declares
``CASES = {zoo model name: Case(...)}``. :data:`CASES` merges every family module's table; ``tests/zoo/test_zoo.py``
parametrizes over the zoo's registry and fails for a registered model without a case, so a new model is tested the
day it is registered.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Optional

from porter.compare import RTOL


@dataclass(frozen=True)
class Case:
    """How to test one zoo model against its torch twin.

    Args:
        twin: the torch factory, called like torchvision's builder (``twin(**kwargs)`` -> ``nn.Module``).
        small: keyword arguments of a reduced configuration (same structure and names, small widths) that both
            ``twin`` and ``porter.zoo.create`` accept; the forward and training tests use it.
        inputs: torch-layout input shapes for the forward test, ``(N, C, H, W)`` or ``(N, C, T, H, W)``: two sizes,
            one odd and non-square where the architecture allows it.
        train: this model is its family's member in the training-parity test.
        train_input: the torch-layout input of the training test: batch statistics of a few values per channel
            are ill-conditioned (two values normalize to +-1 whatever their distance), so it keeps a few positions
            per channel even in the last stage.
        train_kwargs: extra keyword arguments for the training test (e.g. ``dropout=0.0``,
            ``stochastic_depth_prob=0.0``), so both frameworks draw no random masks.
        num_params: torchvision's documented parameter count of the default configuration (an outside check that
            the twin, and so the zoo model, is torchvision's architecture), or None.
        atol: forward tolerance relative to the output's magnitude (default: porter.compare's bar, ``RTOL``).
    """

    twin: Callable
    small: dict
    inputs: tuple = ((2, 3, 32, 32), (1, 3, 45, 38))
    train: bool = False
    train_input: tuple = (4, 3, 64, 64)
    train_kwargs: dict = field(default_factory=dict)
    num_params: Optional[int] = None
    atol: float = RTOL


def _collect() -> dict:
    cases: dict = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, case in getattr(module, "CASES", {}).items():
            if name in cases:
                raise ValueError(f"zoo test case {name!r} is declared twice (again in {info.name})")
            cases[name] = case
    return cases


CASES = _collect()
