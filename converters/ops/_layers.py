"""The one place runtime kernels reach Porter's layers (``porter.layers.functional``).

Every conv/pool/pad kernel calls ``fn("max_pool2d")``. A function that has not landed on main yet falls back to
the TEMPORARY stand-in of the same name in ``_interim.py``; :func:`interim_in_use` says which ones.
"""

from __future__ import annotations

from porter.layers import functional as _functional

from . import _interim


def fn(name: str):
    real = getattr(_functional, name, None)
    if real is not None:
        return real
    return getattr(_interim, name)


def interim_in_use(names) -> list:
    return [n for n in names if getattr(_functional, n, None) is None]
