"""The native kernels' transformed-weight cache, seen from outside ``porter.layers``.

The Winograd kernel keeps each 3x3 weight's transform (16/9 the weight's bytes) while the weight lives, up to a
limit (``PORTER_WINOGRAD_CACHE_MB``). A one-off forward, such as the check ``porter.convert`` runs on the example,
need not leave a 16/9 copy of those weights behind: :func:`no_weight_cache` turns the cache off for a block.
"""

from __future__ import annotations

from contextlib import contextmanager

from . import _native

__all__ = ["no_weight_cache"]


@contextmanager
def no_weight_cache():
    """Within the block, native kernels cache no transformed weights (each call transforms its weight and frees
    it); the previous limit is restored after, and the block's transforms are not kept. Without a native build
    (or with ``PORTER_NATIVE=0``) nothing changes.

    Example:
        >>> with porter.layers.no_weight_cache():
        ...     y = ported(x)  # activations only: no 16/9 copy of the 3x3 weights stays cached
    """
    if _native.kernels() is None:
        yield
        return
    limit = _native.winograd_cache_info()["limit"]
    _native.set_winograd_cache_limit(0)
    try:
        yield
    finally:
        _native.set_winograd_cache_limit(limit)
