"""Functional dropout whose training argument follows the module's training flag (imports torch; conversion only).

``F.dropout(x, p, training=self.training)`` (HF BART/Whisper/CLIP/Wav2Vec2-style attention, hand-written models)
and ``F.scaled_dot_product_attention(..., dropout_p=self.p if self.training else 0.0)`` (timm, HF SDPA attention)
leave nothing of their training behaviour in an eval capture: ``aten.dropout`` with ``train=False`` (and often
``p=0.0``), attention without dropout. Two eager forwards in training mode tell which calls follow the flag
(:func:`survey`): one with every module training (norms kept in eval: their batch statistics are not needed) records
each call's training arguments, call by call (the call site, ``file:line``, and how many times it ran before in the
same forward); one with the modules those calls ran in put back in eval shows which of them switch off with their
module's flag. Those calls are then routed through Porter's marker ops during the capture (:func:`routed`,
``capture_markers.py``) with their training rate, and neutralised while ``capture_train.py`` probes the rest of
the model's training differences (:func:`neutral`): the port reproduces them.

Left out on purpose: calls made inside torch itself (``nn.Dropout``, ``nn.MultiheadAttention``: their own mappers
handle them), ``inplace=True`` dropout, a rate that is not a Python number, calls whose flag is some other
module's, and functions imported by name (``from torch.nn.functional import dropout``): patching
``torch.nn.functional``'s attributes cannot reach them. Those keep refusing training mode by name.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .capture_buffers import BufferSnapshot, example_copy

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_FUNCTIONS = ("dropout", "scaled_dot_product_attention")
_SDPA_ARGS = (("query", None), ("key", None), ("value", None), ("attn_mask", None), ("dropout_p", 0.0),
              ("is_causal", False), ("scale", None), ("enable_gqa", False))
_DROPOUT_ARGS = (("input", None), ("p", 0.5), ("training", True), ("inplace", False))


@dataclass
class Survey:
    """What the eager training forwards showed: ``sites`` ``{call key: training rate}`` for the calls that follow
    their module's flag, ``ndims`` ``{module: rank of its first tensor input}``, ``forward_cpu_s`` the CPU seconds
    of the fastest forward that ran (a second one always runs: the first pays one-time costs; None if none ran): what
    the capture budget scales with (``capture_strategy.export_program``)."""

    sites: dict = field(default_factory=dict)
    ndims: dict = field(default_factory=dict)
    forward_cpu_s: "float | None" = None


def _bind(table, args, kwargs) -> dict:
    out = {}
    for i, (name, default) in enumerate(table):
        out[name] = args[i] if i < len(args) else kwargs.get(name, default)
    return out


def _rate(value) -> "float | None":
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 < value <= 1.0:
        return float(value)
    return None


class _Calls:
    """Global module hooks (which module is running, a count per call site reset at each top-level forward) and
    ``torch.nn.functional``'s ``dropout``/``scaled_dot_product_attention`` replaced by ``handler(name, key, scope,
    original, bound args, args, kwargs)``; everything restored on exit."""

    def __init__(self, handler, ndims=None):
        self.handler, self.ndims = handler, ndims
        self.stack, self.counts = [], {}

    def _pre(self, module, args):
        if not self.stack:
            self.counts.clear()
        self.stack.append(module)
        if self.ndims is not None and module not in self.ndims:
            tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if tensor is not None:
                self.ndims[module] = tensor.ndim

    def _post(self, module, args, output):
        if self.stack:
            self.stack.pop()

    def _wrap(self, name, original):
        table = _DROPOUT_ARGS if name == "dropout" else _SDPA_ARGS

        def call(*args, **kwargs):
            frame = sys._getframe(1)
            where = frame.f_code.co_filename
            if where.startswith(_TORCH_DIR) or not self.stack:
                return original(*args, **kwargs)  # torch's own modules: their mappers handle them
            site = (name, where, frame.f_lineno)
            count = self.counts.get(site, 0)
            self.counts[site] = count + 1
            return self.handler(name, site + (count,), self.stack[-1], original, _bind(table, args, kwargs), args,
                                kwargs)

        return call

    def __enter__(self):
        from torch.nn.modules import module as torch_module

        self.originals = {name: getattr(F, name) for name in _FUNCTIONS}
        self.hooks = [torch_module.register_module_forward_pre_hook(self._pre),
                      torch_module.register_module_forward_hook(self._post, always_call=True)]
        for name, original in self.originals.items():
            setattr(F, name, self._wrap(name, original))
        return self

    def __exit__(self, *exc):
        for name, original in self.originals.items():
            setattr(F, name, original)
        for hook in self.hooks:
            hook.remove()
        return False


def _training_rate(name, bound) -> "float | None":
    """The call's effective drop rate, or None when it does not drop (or cannot be reproduced)."""
    if name == "dropout":
        if bound["training"] is not True or bound["inplace"]:
            return None
        return _rate(bound["p"])
    return _rate(bound["dropout_p"])


def survey(model, inputs: tuple, kwargs: dict) -> Survey:
    """The two eager training forwards (module modes, buffers and torch's RNG as before on return). A forward
    that fails leaves no site marked (training mode then stays refused where it differs); the modules' ranks then
    come from an eval forward."""
    named = list(model.named_modules())
    modes = [(m, m.training) for _, m in named]
    buffers = BufferSnapshot(model)
    result = Survey()
    records: list = [{}, {}]

    def run(index, ndims=None):
        def handler(name, key, scope, original, bound, args, kw):
            records[index][key] = (scope, _training_rate(name, bound))
            return original(*args, **kw)

        with _Calls(handler, ndims), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            args, kw = example_copy(inputs, kwargs)
            start = time.process_time()
            model(*args, **kw)
            took = time.process_time() - start
            result.forward_cpu_s = took if result.forward_cpu_s is None else min(result.forward_cpu_s, took)

    def norm(module) -> bool:
        return isinstance(module, (torch.nn.modules.batchnorm._NormBase, torch.nn.SyncBatchNorm))

    ndims: dict = {}
    with torch.random.fork_rng(devices=[]):
        try:
            for _, m in named:
                m.training = not norm(m)
            run(0, ndims)
            run(0)  # the same forward again: timed warm (forward_cpu_s)
            active = {key: rate for key, (_, rate) in records[0].items() if rate is not None}
            if active:
                for key in active:
                    records[0][key][0].training = False
                run(1)
            result.sites = {key: rate for key, rate in active.items()
                            if key in records[1] and records[1][key][1] is None}
        except Exception:  # noqa: BLE001  (a training forward that fails: nothing marked)
            result.sites = {}
            for m, mode in modes:  # the ranks the modules are called with, from an eval forward
                m.training = mode
            try:
                run(0, ndims)
            except Exception:  # noqa: BLE001
                pass
        finally:
            for m, mode in modes:
                m.training = mode
            buffers.restore()
    paths = {m: path for path, m in named}
    result.ndims = {paths[m]: n for m, n in ndims.items() if m in paths}
    return result


@contextlib.contextmanager
def routed(sites: dict):
    """Within the block (the capture), the surveyed calls run as Porter's marker ops with their training rate."""
    from . import capture_markers

    def handler(name, key, scope, original, bound, args, kw):
        rate = sites.get(key)
        if rate is None:
            return original(*args, **kw)
        if name == "dropout":
            if bound["training"] or bound["inplace"]:
                return original(*args, **kw)  # not the eval form the survey saw
            return capture_markers.dropout(bound["input"], rate)
        if bound["dropout_p"] != 0.0:
            return original(*args, **kw)
        return capture_markers.sdpa_dropout(bound["query"], bound["key"], bound["value"], bound["attn_mask"],
                                            bool(bound["is_causal"]), bound["scale"], bool(bound["enable_gqa"]),
                                            rate)

    if not sites:
        yield
        return
    with _Calls(handler):
        yield


@contextlib.contextmanager
def neutral(sites: dict):
    """Within the block, the surveyed calls run in their eval form whatever their module's mode: what is left of
    a module's training difference is what the port does not reproduce (``capture_train.py``)."""

    def handler(name, key, scope, original, bound, args, kw):
        if key not in sites:
            return original(*args, **kw)
        if name == "dropout":
            return original(bound["input"], bound["p"], False, bound["inplace"])
        return original(bound["query"], bound["key"], bound["value"], attn_mask=bound["attn_mask"], dropout_p=0.0,
                        is_causal=bound["is_causal"], scale=bound["scale"], enable_gqa=bound["enable_gqa"])

    if not sites:
        yield
        return
    with _Calls(handler):
        yield
