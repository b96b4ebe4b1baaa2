"""Resource limits of a loaded graph: no node may build an array with more elements than :func:`max_elements`.

A converted graph computes some shapes at run time (``full``, ``arange``, ``expand``, ``repeat``, ``reshape``,
``upsample``, ``pad``, adaptive pool and unpool sizes, ...). A crafted or mistaken artifact could ask for an
array of 1e15 elements, which would kill the process instead of raising. Kernels that compute a shape check it
here before building anything, and the runtime checks every node's result (MLX arrays are lazy: their shape is
known before memory is allocated).

The limit defaults to 2**31 elements (8 GiB of float32); ``PORTER_MAX_ELEMENTS`` or :func:`set_max_elements`
raise it.

Loading weights is bounded too (:func:`check_weight_bytes`): ``porter.load`` refuses, before reading a byte of
tensor data, weights larger than the memory available now (RAM the kernel can hand out plus free swap). A sparse
file in a downloaded archive can declare terabytes on no disk space; read, it would fill memory until the kernel
kills the process.
"""

from __future__ import annotations

import os

from porter import _meminfo

ENV = "PORTER_MAX_ELEMENTS"
DEFAULT = 1 << 31
_state = {"limit": None}


class ResourceLimitError(ValueError):
    """A node would build an array larger than the element limit."""


def max_elements() -> int:
    """The largest number of elements any one array of a loaded graph may have."""
    if _state["limit"] is None:
        text = os.environ.get(ENV, "").strip()
        limit = DEFAULT
        if text:
            try:
                limit = int(float(text))
            except ValueError:
                raise ValueError(f"{ENV}={text!r} is not a number of elements") from None
            if limit <= 0:
                raise ValueError(f"{ENV}={text!r} must be positive")
        _state["limit"] = limit
    return _state["limit"]


def set_max_elements(limit) -> None:
    """Set the element limit (an int > 0); ``None`` goes back to ``PORTER_MAX_ELEMENTS`` or the default."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise ValueError(f"set_max_elements: 'limit' must be a positive int or None but got {limit!r}")
    _state["limit"] = limit


def check_elements(shape, what: str) -> None:
    """Raise :class:`ResourceLimitError` when ``shape`` is invalid or holds more than :func:`max_elements`."""
    count = 1
    for s in shape:
        s = int(s)
        if s < 0:
            raise ResourceLimitError(f"{what}: negative size {s} in shape {list(shape)}")
        count *= s
    limit = max_elements()
    if count > limit:
        raise ResourceLimitError(
            f"{what}: an array of shape {list(shape)} ({count} elements) exceeds the limit of {limit} elements; "
            f"raise it with porter.set_max_elements(n) or {ENV} if this model really needs it")


def available_memory() -> int:
    """Bytes of memory the process could get now: ``MemAvailable`` plus ``SwapFree`` on Linux, physical memory
    elsewhere (no limit known: 2**62)."""
    return _meminfo.available_memory(swap=True, unknown=1 << 62)


def check_weight_bytes(total: int, where: str) -> None:
    """Refuse to read ``total`` bytes of weights (of the artifact ``where``) that cannot fit in memory now."""
    free = available_memory()
    if total > free:
        raise ResourceLimitError(f"porter.load: the weights of {where!r} take {total / (1 << 30):.2f} GiB, more than "
                                 f"the {free / (1 << 30):.2f} GiB of memory available now (a sparse or crafted file "
                                 "can declare any size); free memory, or load it on a larger machine")
