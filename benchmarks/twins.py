"""Full-size torch twins of torchvision architectures for the model benchmark (torchvision is not a dependency).

The twins are the zoo tests' (``tests/zoo/twins``: torchvision's module structure and ``state_dict`` names, one
module per family, collected in ``CASES``); :func:`build` makes one at torchvision's default configuration, in eval
mode with its default (random) initialisation. ``benchmarks/models.py`` registers them with their standard input
shape. The named builders below are kept for older callers (``benchmarks/tree.py``).
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def build(name: str):
    """The twin of torchvision's ``name`` (a key of ``tests.zoo.twins.CASES``) at its default size, in eval mode."""
    from tests.zoo.twins import CASES

    if name not in CASES:
        raise ValueError(f"[benchmarks.twins] 'name' must be a twin in tests.zoo.twins.CASES but got {name!r}")
    return CASES[name].twin().eval()


def efficientnet_b0():
    return build("efficientnet_b0")


def regnet_y_400mf():
    return build("regnet_y_400mf")


def convnext_tiny():
    return build("convnext_tiny")


def vit_b_16():
    return build("vit_b_16")


def swin_t():
    return build("swin_t")


def r3d_18():
    return build("r3d_18")
