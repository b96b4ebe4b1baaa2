"""Which input dims a capture keeps dynamic, and a time budget with fallbacks (imports torch; conversion only).

``torch.export`` with ``Dim.AUTO`` reasons about every dynamic size with sympy. On most models that costs well
under a second, but on some (many floor divisions and paddings: EfficientNet's "same" padding, Swin's windows)
it runs for minutes, or fails inside sympy. Porter's default, ``dynamic="auto"``, therefore tries, each attempt
under a budget proportional to what a static capture of the model costs on this machine (16x it + 2 s for every
dim, 4x + 2 s for the batch dim), and at most ``PORTER_CAPTURE_BUDGET`` seconds (default 25) together
(``PORTER_CAPTURE_BUDGET=off``: no budget, each attempt runs to completion):

1. every dim dynamic (``Dim.AUTO``: torch makes static what the model fixes, e.g. channels);
2. the batch dim only;
3. otherwise static shapes (a port of it accepts the example's sizes only).

The static capture's cost is estimated from the warm eager forward conversion's survey timed (``forward_cpu_s``:
250x it; 130-400x measured) so that the usual case, every dim captured at the first attempt, never pays for
a static capture; it is captured (and its time measured, for the batch-only budget) only once an attempt fails, or
first when no forward was timed (a frontend without the survey).

Budgets are CPU seconds of this process (other processes' load does not count). The first attempt that finishes wins; a
failure or timeout falls through to the next (a warning says why). Whatever is captured, the port checks the conditions
it was built under on every call (``capture_guards.py``). ``dynamic="static"``, ``"batch"``, ``"all"`` (every dim, no
budget, no fallback) or a list of torch dims choose directly.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
import signal
import threading
import time
import warnings

import torch

from .capture_containers import shared_containers_kept
from .capture_combinations import combinations_by_length
from .capture_literals import symbolic_tensor_literals
from .capture_pools import symbolic_pool_sizes
from .capture_moe import sparse_experts_dense
from .capture_rnn import symbolic_recurrent_shapes
from .errors import CaptureError

MODES = ("auto", "all", "batch", "static")
DEFAULT_BUDGET_S = 25.0  # the most the dynamic attempts may take together, whatever the model
# A dynamic capture normally costs 1.5-9x the static one (measured on tests/models); 100x and more means sympy is
# lost in the model's size arithmetic. Budgets: every dim, 16x static + 2 s; batch only, 4x static + 2 s.
DYNAMIC_FACTOR, BATCH_FACTOR, DYNAMIC_MARGIN_S = 16.0, 4.0, 2.0
# A static capture costs 130-400x the model's warm eager forward (CPU time, 1 thread; 2026-11-28, nine twins from a
# 1 ms ConvNeXt to T5 and NFNet): 250x stands for it until a static capture is measured (the every-dim budget is
# then 10-30x a static capture, not 16x).
STATIC_PER_FORWARD, MIN_STATIC_S = 250.0, 0.1


_CAUSED_BY = re.compile(r"Caused by: \(([^)\n]{1,300})\)")
# torch's user frame for a failed guard: 'The following call raised this error:\n  File "...", line N, in f\n  code'
_RAISED_AT = re.compile(r'The following call raised this error:\s*File "([^"\n]{1,500})", line (\d+), in ([^\s]+)'
                        r'(?:\n[ \t]+([^\n]{1,200}))?')


def _failing_line(message: str) -> str:
    """Where torch says a capture failed, in words: the model's own line when torch names it (``Caused by`` can
    be a torch-internal frame, e.g. ``_prims_common`` for a ``view`` of a data-dependent size), else ``Caused by``'s
    frame, else nothing."""
    raised = _RAISED_AT.search(message)
    if raised:
        path, line, function, code = raised.groups()
        return f" at {path}:{line} in {function}" + (f" ({code.strip()})" if code and code.strip() else "")
    caused = _CAUSED_BY.search(message)
    return f" at {caused.group(1)}" if caused else ""


class CaptureTimeout(BaseException):
    """Raised inside torch.export when an attempt runs past its budget (a BaseException, so that torch's own
    ``except Exception`` handlers do not swallow it)."""


def _static(model, inputs, kwargs=None):
    """The static-shape capture: the last resort, so its failure is the conversion's, in words."""
    try:
        return _export(model, inputs, "static", None, kwargs)
    except CaptureTimeout:
        raise
    except Exception as e:  # noqa: BLE001  (torch raises TypeError, RuntimeError, UserError, ... here)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        at = _failing_line(str(e))
        raise CaptureError(
            f"torch.export could not capture the model's forward{at} ({type(e).__name__}: {first}). Porter "
            "converts what torch.export captures: Python control flow on tensor values, sizes read from tensor "
            "values (.item(), int(tensor)), PackedSequence inputs and Python objects torch cannot trace are the "
            "usual causes; run torch.export.export(model, inputs) to see the line, or pass a torch.jit.script "
            "module") from e


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


def _dynamic_shapes(mode, inputs, model, kwargs=None):
    auto = torch.export.Dim.AUTO

    def spec(x):
        if isinstance(x, (tuple, list)):  # a tuple of tensors (past_key_values): one spec per element
            return tuple(spec(v) for v in x)
        return {d: auto for d in _dims_for(mode, x)} if isinstance(x, torch.Tensor) else None

    if kwargs:  # keyed by the forward's parameter names, as torch binds them (*args a tuple, **kwargs a dict)
        bound = inspect.signature(model.forward).bind(*inputs, **kwargs).arguments
        specs = {name: tuple(spec(v) for v in value) if isinstance(value, tuple)
                 else {k: spec(v) for k, v in value.items()} if isinstance(value, dict) else spec(value)
                 for name, value in bound.items()}
        # torch 2.13 refuses any dynamic_shapes (even all None) for a forward whose **kwargs receive entries
        # ("Must provide a tree_name"): static shapes are then passed as None, and dynamic attempts fall back
        return specs if any(torch.utils._pytree.tree_leaves(specs)) else None
    return _grouped_like_signature(model, tuple(spec(x) for x in inputs))


def _grouped_like_signature(model, specs):
    """``specs`` (one per positional input) nested as torch.export binds them to ``model.forward``'s signature:
    the inputs a ``*args`` parameter takes are one tuple there (``forward(self, x, *rest)`` -> ``(a, (b, c))``)."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # no introspectable signature: torch binds positionally as well
        return specs
    for i, param in enumerate(params):
        if param.kind is param.VAR_POSITIONAL:
            return specs[:i] + (specs[i:],)
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            break
    return specs


def budget_seconds():
    """The cap from ``PORTER_CAPTURE_BUDGET`` (seconds), or None for ``off`` (no budget at all)."""
    raw = os.environ.get("PORTER_CAPTURE_BUDGET", "")
    if not raw:
        return DEFAULT_BUDGET_S
    if raw.strip().lower() in ("off", "none"):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"PORTER_CAPTURE_BUDGET must be a number of seconds, but got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"PORTER_CAPTURE_BUDGET must be positive, but got {raw!r}")
    return value


@contextlib.contextmanager
def time_limit(seconds):
    """Raise :class:`CaptureTimeout` in this thread after ``seconds`` of this process's CPU time (``ITIMER_PROF``:
    other processes' load does not count; no limit off the main thread, without ``setitimer``, or when another
    profiling timer is already running)."""
    usable = (seconds is not None and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread()
              and signal.getitimer(signal.ITIMER_PROF)[0] == 0)
    if not usable:
        yield
        return

    def expire(signum, frame):
        # never inside an import: a half-imported torch module would break every later capture in the process
        probe = frame
        while probe is not None:
            if probe.f_code.co_filename.startswith("<frozen importlib"):
                signal.setitimer(signal.ITIMER_PROF, 0.05)
                return
            probe = probe.f_back
        raise CaptureTimeout()

    _preload()
    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _preload():
    """Import what torch.export and its solver import lazily, before any timer runs."""
    import importlib

    for name in ("torch._dynamo", "torch._dynamo.exc", "torch._dynamo.guards", "torch.export._trace",
                 "torch.fx.experimental.symbolic_shapes", "sympy.solvers.inequalities", "sympy.solvers.solveset"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (an optional module of another torch or sympy version)
            pass


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


@contextlib.contextmanager
def _mask_hints_as_given():
    """``nn.TransformerEncoder``/``Decoder`` compare an attention mask given without an ``is_causal`` hint against
    a causal mask, on its values: a capture cannot branch on data, so the export fails. During the capture the hint
    is taken as given (``None`` -> not causal): the layers then apply the mask itself, which gives the same numbers
    as the causal path the comparison could choose (that path is a faster route to the same masking)."""
    from torch.nn.modules import transformer

    original = getattr(transformer, "_detect_is_causal_mask", None)
    if original is None:
        yield
        return

    def as_given(mask, is_causal=None, size=None):
        return is_causal is True

    transformer._detect_is_causal_mask = as_given
    try:
        yield
    finally:
        transformer._detect_is_causal_mask = original


def _export(model, inputs, mode, seconds, kwargs=None):
    extra = {"kwargs": kwargs} if kwargs else {}  # keyword example inputs (a dict of them: torch's ``kwargs``)
    with _quiet_solver(), _mask_hints_as_given(), symbolic_recurrent_shapes(), combinations_by_length(), \
            symbolic_tensor_literals(), symbolic_pool_sizes(), shared_containers_kept(model), \
            sparse_experts_dense(model), time_limit(seconds):
        return torch.export.export(model, inputs, dynamic_shapes=_dynamic_shapes(mode, inputs, model, kwargs),
                                    strict=False, **extra)


def _doubled(x):
    if isinstance(x, (tuple, list)):
        return type(x)(_doubled(v) for v in x)
    return torch.cat([x, x]) if isinstance(x, torch.Tensor) and x.ndim >= 2 and x.shape[0] == 1 else x


def _attempt(model, inputs, mode, seconds, double_batch, kwargs=None):
    """Export with ``mode``'s dims dynamic; a batch-of-one example whose batch dim is dynamic is captured at
    batch two first (export specialises size-1 dims), keyword inputs too. Returns ``(program, doubled)``."""
    kwargs = kwargs or {}
    tensors = torch.utils._pytree.tree_leaves((tuple(inputs), dict(kwargs)))
    batch_dynamic = any(0 in _dims_for(mode, x) for x in tensors)
    if double_batch and batch_dynamic and any(
            isinstance(x, torch.Tensor) and x.ndim >= 2 and x.shape[0] == 1 for x in tensors):
        doubled = tuple(_doubled(x) for x in inputs)
        start = time.process_time()
        try:
            return _export(model, doubled, mode, seconds, {k: _doubled(v) for k, v in kwargs.items()}), True
        except CaptureTimeout:
            raise
        except Exception:  # noqa: BLE001  (the model may insist on its example batch: capture it as given)
            if seconds is not None:
                seconds = max(seconds - (time.process_time() - start), 0.5)
    return _export(model, inputs, mode, seconds, kwargs), False


def export_program(model, inputs: tuple, *, dynamic="auto", double_batch: bool = True, kwargs=None,
                   forward_cpu_s=None):
    """Capture ``model`` (in its current mode) with ``torch.export``; returns ``(program, doubled, note, mode)``.

    ``kwargs``: keyword example inputs (torch.export's ``kwargs``; their dims follow ``dynamic`` as positional
    ones do). ``note`` says, when the capture fell back, what was tried and why (also issued as a warning); ``mode`` is
    the dims that were kept dynamic ("all", "batch", "static" or the user's list). ``forward_cpu_s``: the CPU
    seconds of one eager forward of the model on the example, the budgets' scale for ``"auto"`` (None: a static
    capture first measures it).
    """
    mode = normalise_dynamic(dynamic)
    for x in torch.utils._pytree.tree_leaves((tuple(inputs), dict(kwargs or {}))):
        _dims_for(mode, x)  # a dim out of range is the caller's error, not a reason to fall back
    if mode == "static":
        return _static(model, inputs, kwargs), False, None, "static"
    if mode == "all":
        ep, doubled = _attempt(model, inputs, "all", None, double_batch, kwargs)
        return ep, doubled, None, "all"
    failures = []
    if mode != "auto":  # dims the user chose; static shapes if torch cannot keep them
        start = time.monotonic()
        try:
            ep, doubled = _attempt(model, inputs, mode, None, double_batch, kwargs)
            return ep, doubled, None, mode
        except Exception as e:  # noqa: BLE001
            failures.append(_failed(mode, start, e))
        return _fallback(_static(model, inputs, kwargs), failures, "static")
    # "auto": each dynamic attempt under a budget in this process's CPU time (a loaded machine does not turn a
    # normal capture into a timeout), scaled by what a static capture of this model costs on this machine
    cap = budget_seconds()
    static = None
    if forward_cpu_s is None:  # no eager forward was timed: the static capture first, its time the scale
        static, scale = _timed_static(model, inputs, kwargs)
    else:  # estimated from the eager forward; the static capture only when an attempt fails (the fallback)
        scale = max(STATIC_PER_FORWARD * forward_cpu_s, MIN_STATIC_S)
    deadline = None if cap is None else time.process_time() + cap
    for attempt, factor in (("all", DYNAMIC_FACTOR), ("batch", BATCH_FACTOR)):
        seconds = None
        if deadline is not None:
            # the every-dim attempt leaves the batch-only one its share
            reserve = min(BATCH_FACTOR * scale + DYNAMIC_MARGIN_S, cap / 3) if attempt == "all" else 0.0
            seconds = min(factor * scale + DYNAMIC_MARGIN_S, deadline - time.process_time() - reserve)
            if seconds <= 0.1:
                failures.append(f"no time left for {_describe(attempt)} within PORTER_CAPTURE_BUDGET={cap:g} s")
                continue
        start = time.monotonic()
        try:
            ep, doubled = _attempt(model, inputs, attempt, seconds, double_batch, kwargs)
            return _fallback(ep, failures, attempt, doubled)
        except CaptureTimeout:
            failures.append(f"{_describe(attempt)} capture ran past its budget of {seconds:.1f} CPU s")
        except Exception as e:  # noqa: BLE001  (sympy's NotImplementedError and friends: try the next plan)
            failures.append(_failed(attempt, start, e))
        if static is None:  # the fallback, and the measured scale for the batch-only attempt
            static, scale = _timed_static(model, inputs, kwargs)
            if deadline is not None:
                deadline += scale  # the static capture is not the dynamic attempts' time
    return _fallback(static, failures, "static")


def _timed_static(model, inputs, kwargs):
    """``(static capture, its CPU seconds)``."""
    start = time.process_time()
    static = _static(model, inputs, kwargs)
    return static, time.process_time() - start


def _failed(attempt, start, error) -> str:
    first = str(error).splitlines()[0] if str(error) else ""
    return (f"{_describe(attempt)} capture failed after {time.monotonic() - start:.1f} s "
            f"({type(error).__name__}: {first})")


def _fallback(ep, failures, attempt, doubled=False):
    """``(program, doubled, note, mode)``, warning about the attempts that failed."""
    note = None
    if failures:
        note = "; ".join(failures) + f": captured with {_describe(attempt)} instead"
        warnings.warn(f"torch.export: {note} (the port checks the sizes it accepts; choose with "
                      "porter.convert(..., dynamic=...) or `porter convert --dynamic`)", stacklevel=5)
    return ep, doubled, note, attempt


def _describe(mode) -> str:
    if mode == "all":
        return "every dim dynamic"
    if mode == "batch":
        return "the batch dim dynamic"
    if mode == "static":
        return "static shapes"
    return f"dims {list(mode)} dynamic"
