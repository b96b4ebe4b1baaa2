"""Which random training-mode computations of an ``nn.Module`` the capture marks, and the marking itself (imports
torch; conversion only).

:func:`find` runs the eager survey (``capture_dropout_sites.py``: functional dropout and attention dropout that
follow their module's flag, and the rank each module is called with), checks the stochastic depth candidates
(``capture_droppath.py``) and timm's drop blocks (``capture_dropblock.py``) and the batch norm subclasses with a
forward of their own (``capture_batch_norms.py``: those that train as torch's batch norm map to the port's layer);
:func:`routed` wraps the capture so that those calls are recorded as Porter's marker ops (``capture_markers.py``).
TorchScript modules and programs are not marked (their code cannot be rerouted): their training differences stay
refused.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch


@dataclass
class TrainMarks:
    """``drop_paths``: ``{module path: capture_droppath.DropPath}``; ``drop_blocks``: ``{module path:
    capture_dropblock.DropBlock}``; ``sites``: ``{call key: training rate}``;
    ``batch_norms``: ``{module path: {"torch_type", "count_batches"}}`` (batch norm subclasses that train as their
    torch base class, ``capture_batch_norms.find``);
    ``batch_norm_reasons``: ``{module path: what differs}`` (the other subclasses); ``forward_cpu_s``: the survey's
    warm eager forward in CPU seconds (the capture budget's scale). Only the first three are routed."""

    drop_paths: dict = field(default_factory=dict)
    drop_blocks: dict = field(default_factory=dict)
    sites: dict = field(default_factory=dict)
    batch_norms: dict = field(default_factory=dict)
    batch_norm_reasons: dict = field(default_factory=dict)
    forward_cpu_s: "float | None" = None

    def __bool__(self) -> bool:
        return bool(self.drop_paths or self.drop_blocks or self.sites)


def find(model, inputs: tuple, kwargs: dict) -> TrainMarks:
    """The marks for ``model`` (in eval mode) on the example; empty for a TorchScript module or a program."""
    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return TrainMarks()
    from . import capture_batch_norms, capture_dropblock, capture_droppath, capture_dropout_sites
    from .layer_map import mapped_torch_types

    survey = capture_dropout_sites.survey(model, inputs, kwargs)
    norms, reasons = capture_batch_norms.find(model, survey.ndims, mapped_torch_types())
    return TrainMarks(capture_droppath.find(model, survey.ndims), capture_dropblock.find(model, survey.ndims),
                      survey.sites, norms, reasons, survey.forward_cpu_s)


@contextlib.contextmanager
def routed(model, marks: "TrainMarks | None"):
    """Within the block, the marked modules and calls run as marker ops (restored on exit, even on errors)."""
    if not marks:
        yield
        return
    from . import capture_dropblock, capture_droppath, capture_dropout_sites

    with capture_droppath.routed(model, marks.drop_paths), capture_dropblock.routed(model, marks.drop_blocks), \
            capture_dropout_sites.routed(marks.sites):
        yield


def neutral(marks: "TrainMarks | None"):
    """A context in which the marked functional calls run in their eval form (the training-mode probe's)."""
    from . import capture_dropout_sites

    return capture_dropout_sites.neutral(marks.sites if marks else {})
