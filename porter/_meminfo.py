"""How much memory this process could get now: the one reader of ``/proc/meminfo``.

Two checks use it: ``porter.load`` (``converters/limits.py``: weights must fit in RAM plus free swap) and the
checkpoint budget (``porter/checkpoints/budget.py``: conversion and validation must fit in RAM, swap left out). Each
caller picks ``swap`` and what to assume when nothing is known.
"""

from __future__ import annotations

import os

MEMINFO = "/proc/meminfo"


def available_memory(*, swap: bool, unknown: int, meminfo: str | None = None) -> int:
    """Bytes of memory available now.

    Args:
        swap (bool): add ``SwapFree`` to ``MemAvailable`` (a missing ``SwapFree`` line counts as 0).
        unknown (int): the answer when neither ``meminfo`` nor the physical memory size can be read.
        meminfo (str, optional): the file to read. Default: :data:`MEMINFO` (``/proc/meminfo``).

    Returns ``MemAvailable`` (+ ``SwapFree``) on Linux; the physical memory size where ``meminfo`` is missing, has no
    ``MemAvailable`` line or cannot be parsed (macOS, an odd kernel); ``unknown`` where that fails too.
    """
    wanted = ("MemAvailable", "SwapFree") if swap else ("MemAvailable",)
    try:
        fields = {}
        with open(meminfo or MEMINFO, encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in wanted:
                    fields[key] = int(rest.split()[0]) * 1024
        if "MemAvailable" in fields:
            return sum(fields.values())
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return unknown
