"""Process CPU time per call: the figure that survives a shared machine (other jobs inflate wall time, not this)."""

from __future__ import annotations

import time
from typing import Callable


def cpu_per_call(fn: Callable[[], object], reps: int, *, warmup: bool = True) -> float:
    """Seconds of this process's CPU time per call of ``fn``, averaged over ``reps`` calls (after one untimed call
    when ``warmup``)."""
    if warmup:
        fn()
    start = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - start) / reps
