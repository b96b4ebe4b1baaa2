"""The one place runtime kernels reach Porter's layers (``porter.layers.functional``).

Every conv/pool/pad kernel calls ``fn("max_pool2d")``: the exact torch semantics of those ops live only in Porter's
layers. Names come from an artifact, so they are looked up in the explicit table :data:`FUNCTIONS`, never with
``getattr`` on the module.
"""

from __future__ import annotations

from porter.layers import functional as _functional

_ND = (1, 2, 3)
CONV = tuple(f"conv{n}d" for n in _ND) + tuple(f"conv_transpose{n}d" for n in _ND)
POOLS = {
    "max": tuple(f"max_pool{n}d" for n in _ND),
    "avg": tuple(f"avg_pool{n}d" for n in _ND),
    "adaptive_avg": tuple(f"adaptive_avg_pool{n}d" for n in _ND),
    "adaptive_max": tuple(f"adaptive_max_pool{n}d" for n in _ND),
}
UNPOOL = tuple(f"max_unpool{n}d" for n in _ND)
FRACTIONAL = ("fractional_max_pool2d", "fractional_max_pool3d")
FUNCTIONS = {name: getattr(_functional, name)
             for name in CONV + sum(POOLS.values(), ()) + UNPOOL + FRACTIONAL + ("pad",)}


def fn(name: str):
    try:
        return FUNCTIONS[name]
    except (KeyError, TypeError):
        raise NotImplementedError(f"porter.layers.functional has no kernel function {name!r}") from None
