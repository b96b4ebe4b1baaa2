"""glibc's allocator as the buffer cache for MLX on Linux CPU (issue 15: run-time memory).

MLX's CPU allocator gets every buffer from ``malloc``. glibc serves a block above its mmap threshold (dynamic, at most
32 MiB) with a fresh ``mmap`` and unmaps it on ``free``, so each large temporary page-faults on first touch; MLX's own
buffer cache avoids that only by holding freed buffers, and it reuses one only for a request of almost exactly its
size (within two pages), so a cache large enough to be fast also holds many buffers no later request fits.

:func:`keep_freed_blocks` makes glibc keep them instead: no block comes from ``mmap`` (``M_MMAP_MAX = 0``, so large
blocks come from the heap and a freed one is coalesced with its free neighbours and reused for any size that fits),
and free memory at the heap's top goes back to the system only above ``trim`` bytes (``M_TRIM_THRESHOLD``). The
process's resident size then follows what MLX holds live at its peak, not the peak plus a cache of mismatched sizes.
Process-wide; other libraries' blocks (numpy, torch) follow the same rule.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_MAX = -4
_INT_MAX = (1 << 31) - 1

_state = {"trim": None}


def _glibc():
    """The C library when it is glibc (it has ``mallopt`` and ``gnu_get_libc_version``), else None (musl, macOS)."""
    if platform.system() != "Linux":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc


def available() -> bool:
    """Whether this process's allocator is glibc's (the only one :func:`keep_freed_blocks` can tune)."""
    return _glibc() is not None


def keep_freed_blocks(trim: int) -> bool:
    """Serve every block from glibc's heap (never ``mmap``) and keep up to ``trim`` bytes of free heap top.

    Args:
        trim (int): bytes of free memory at the heap's top kept for reuse (at most ``2**31 - 1``).

    Returns True when applied, False where the allocator is not glibc's (nothing changed).
    """
    if isinstance(trim, bool) or not isinstance(trim, int):
        raise TypeError(f"[keep_freed_blocks] 'trim' must be an int but got {type(trim).__name__}.")
    if not 0 <= trim <= _INT_MAX:
        raise ValueError(f"[keep_freed_blocks] 'trim' must be in [0, {_INT_MAX}] but got {trim}.")
    libc = _glibc()
    if libc is None:
        return False
    if libc.mallopt(M_MMAP_MAX, 0) != 1 or libc.mallopt(M_TRIM_THRESHOLD, trim) != 1:
        return False
    _state["trim"] = trim
    return True


def kept_trim() -> int | None:
    """The trim threshold :func:`keep_freed_blocks` set in this process, or None when it was not applied."""
    return _state["trim"]
