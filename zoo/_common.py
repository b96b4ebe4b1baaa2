"""Pieces shared by the zoo's architectures."""

from __future__ import annotations

import mlx.core as mx


def apply_sequence(layers: list, x: mx.array) -> mx.array:
    """Run ``x`` through a list of modules in order (torch's ``nn.Sequential``; nested lists run as one step).

    Plain lists rather than ``mlx.nn.Sequential`` keep torch's parameter names: the list ``features`` holds
    ``features.0.weight``, where ``nn.Sequential`` would add a ``layers`` level.
    """
    for layer in layers:
        x = apply_sequence(layer, x) if isinstance(layer, list) else layer(x)
    return x


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round a channel count to a multiple of ``divisor``, never losing more than 10% (torchvision's rule)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded
