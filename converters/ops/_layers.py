"""The one place runtime kernels reach Porter's layers (``porter.layers.functional``).

Every conv/pool/pad kernel calls ``fn("max_pool2d")``: the exact torch semantics of those ops live only in Porter's
layers.
"""

from __future__ import annotations

from porter.layers import functional as _functional


def fn(name: str):
    try:
        return getattr(_functional, name)
    except AttributeError:
        raise NotImplementedError(f"porter.layers.functional has no {name!r}") from None
