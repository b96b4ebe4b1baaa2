"""Which input dims a capture keeps dynamic, and a time budget with fallbacks (imports torch; conversion only).

``torch.export`` with ``Dim.AUTO`` reasons about every dynamic size with sympy. On most models that costs well
under a second, but on some (many floor divisions and paddings: EfficientNet's "same" padding, Swin's windows)
it runs for minutes, or fails inside sympy. Porter's default, ``dynamic="auto"``, therefore tries in turn, each
attempt under a time budget (``PORTER_CAPTURE_BUDGET`` seconds, default 10; the batch-only attempt gets half):

1. every dim dynamic (``Dim.AUTO``: torch makes static what the model fixes, e.g. channels);
2. the batch dim only;
3. static shapes (no budget; what a port of this capture accepts is the example's sizes).

The first attempt that finishes wins; a failure or timeout falls through to the next (a warning says why).
Whatever is captured, the port checks the conditions it was built under on every call (``capture_guards.py``).
``dynamic="static"``, ``"batch"``, ``"all"`` (every dim, no budget, no fallback) or a list of torch dims choose
directly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import warnings

import torch

MODES = ("auto", "all", "batch", "static")
DEFAULT_BUDGET_S = 10.0


class CaptureTimeout(BaseException):
    """Raised inside torch.export when an attempt runs past its budget (a BaseException, so that torch's own
    ``except Exception`` handlers do not swallow it)."""


def normalise_dynamic(dynamic):
    """``dynamic`` as a mode string or a sorted tuple of torch dims; ``ValueError`` naming it otherwise."""
    if dynamic is None or dynamic is False:
        return "static"
    if dynamic is True:
        return "all"
    if isinstance(dynamic, str):
        if dynamic not in MODES:
            raise ValueError(f"dynamic must be one of {', '.join(repr(m) for m in MODES)} or a list of dims, "
                             f"but got {dynamic!r}")
        return dynamic
    if isinstance(dynamic, (list, tuple)) and all(type(d) is int for d in dynamic):
        return tuple(sorted(set(dynamic)))
    raise ValueError(f"dynamic must be one of {', '.join(repr(m) for m in MODES)} or a list of int dims, "
                     f"but got {dynamic!r}")


def _dims_for(mode, x) -> list:
    if not isinstance(x, torch.Tensor):
        return []
    if mode == "static":
        return []
    if mode in ("all", "auto"):
        return list(range(x.ndim))
    if mode == "batch":
        return [0] if x.ndim >= 1 else []
    dims = []
    for d in mode:
        if not -x.ndim <= d < x.ndim:
            raise ValueError(f"dynamic dim {d} is out of range for an example input of shape {tuple(x.shape)}")
        dims.append(d % x.ndim)
    return sorted(set(dims))


def _dynamic_shapes(mode, inputs):
    auto = torch.export.Dim.AUTO
    return tuple({d: auto for d in _dims_for(mode, x)} if isinstance(x, torch.Tensor) else None for x in inputs)


def budget_seconds() -> float:
    raw = os.environ.get("PORTER_CAPTURE_BUDGET", "")
    if not raw:
        return DEFAULT_BUDGET_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"PORTER_CAPTURE_BUDGET must be a number of seconds, but got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"PORTER_CAPTURE_BUDGET must be positive, but got {raw!r}")
    return value


@contextlib.contextmanager
def time_limit(seconds):
    """Raise :class:`CaptureTimeout` in this thread after ``seconds`` (no limit off the main thread, without
    ``setitimer``, or when another timer, such as pytest-timeout's, is already running)."""
    usable = (seconds is not None and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread()
              and signal.getitimer(signal.ITIMER_REAL)[0] == 0)
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise CaptureTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _quiet_solver():
    # torch logs each inequality sympy cannot solve (a traceback per guard); the fallback handles the outcome
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _export(model, inputs, mode, seconds):
    with _quiet_solver(), time_limit(seconds):
        return torch.export.export(model, inputs, dynamic_shapes=_dynamic_shapes(mode, inputs), strict=False)


def _attempt(model, inputs, mode, seconds, double_batch):
    """Export with ``mode``'s dims dynamic; a batch-of-one example whose batch dim is dynamic is captured at
    batch two first (export specialises size-1 dims). Returns ``(program, doubled)``."""
    batch_dynamic = any(0 in _dims_for(mode, x) for x in inputs)
    if double_batch and batch_dynamic and any(
            isinstance(x, torch.Tensor) and x.ndim >= 2 and x.shape[0] == 1 for x in inputs):
        doubled = tuple(torch.cat([x, x]) if isinstance(x, torch.Tensor) and x.ndim >= 2 and x.shape[0] == 1
                        else x for x in inputs)
        start = time.monotonic()
        try:
            return _export(model, doubled, mode, seconds), True
        except CaptureTimeout:
            raise
        except Exception:  # noqa: BLE001  (the model may insist on its example batch: capture it as given)
            if seconds is not None:
                seconds = max(seconds - (time.monotonic() - start), 0.5)
    return _export(model, inputs, mode, seconds), False


def export_program(model, inputs: tuple, *, dynamic="auto", double_batch: bool = True):
    """Capture ``model`` (in its current mode) with ``torch.export``; returns ``(program, doubled, note)``.

    ``note`` says, when the capture fell back, what was tried and why (also issued as a warning).
    """
    mode = normalise_dynamic(dynamic)
    if mode == "auto":
        budget = budget_seconds()
        plan = [("all", budget), ("batch", budget / 2), ("static", None)]
    elif mode == "static":
        plan = [("static", None)]
    elif mode == "all":
        plan = [("all", None)]
    else:
        plan = [(mode, None), ("static", None)]  # dims the user chose; static if torch cannot keep them
    failures = []
    for i, (attempt, seconds) in enumerate(plan):
        last = i == len(plan) - 1
        start = time.monotonic()
        try:
            ep, doubled = _attempt(model, inputs, attempt, seconds, double_batch)
        except CaptureTimeout:
            failures.append(f"{_describe(attempt)} capture ran past its {seconds:g} s budget")
            continue
        except Exception as e:  # noqa: BLE001  (sympy's NotImplementedError and friends: try the next plan)
            if last:
                raise
            failures.append(f"{_describe(attempt)} capture failed after {time.monotonic() - start:.1f} s "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
            continue
        note = None
        if failures:
            note = "; ".join(failures) + f": captured with {_describe(attempt)} instead"
            warnings.warn(f"torch.export: {note} (the port checks the sizes it accepts; choose with "
                          "porter.convert(..., dynamic=...) or `porter convert --dynamic`)", stacklevel=4)
        return ep, doubled, note
    raise RuntimeError("no capture attempt was made")  # unreachable: the last attempt raises or returns


def _describe(mode) -> str:
    if mode == "all":
        return "every dim dynamic"
    if mode == "batch":
        return "the batch dim dynamic"
    if mode == "static":
        return "static shapes"
    return f"dims {list(mode)} dynamic"
