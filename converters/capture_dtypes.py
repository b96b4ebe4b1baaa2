"""Which captured calls take their floating dtype from the model's tensors (imports torch; conversion only).

A float32 capture records ``mask.to(hidden.dtype)``, ``t.type_as(inv_freq)``, ``torch.zeros(..., dtype=q.dtype)``
and ``torch.where(causal, scores, mask_value)`` with a float32 result, exactly as it records ``x.float()`` or
``.to(torch.float32)``: torch.export sees the dtype as a value, not where it came from. A half port must tell them
apart: torch's ``model.half()`` computes the first kind in float16 (its finfo extremes, overflow and rounding) and
keeps the second in float32 (an upcast softmax, RMSNorm's statistics).

:func:`dtype_followers` exports the model once more with its float32 parameters, buffers and inputs in float64 (fake
tensors: no copy of the weights; static shapes, the capture's example sizes): a call whose result is float32 in the
capture and float64 in this probe takes its dtype from the model's tensors; a call that stays float32 was written
float32. The calls are paired as the longest runs of the same ops in the same order (a dynamic capture keeps a few calls
a static one leaves out, such as a full-range slice). The conversion marks the first kind (``graph.json``'s
``dtype_follows``) and a half port computes them in its dtype (``converters/precision.py``); a constant folded from
calls of the second kind (a timestep embedding's frequencies, ``torch.arange(..., dtype=torch.float32)``) stays float32
in a half port (``graph.json``'s ``float32_constants``), where every other parameter, buffer and constant takes the half
dtype. When a call other than a view is left unpaired (a branch on a dtype) or the probe cannot run, nothing is marked
and every dtype stays as captured: the rule for TorchScript and ``ExportedProgram`` inputs too (no model to probe).
"""

from __future__ import annotations

import copy
import difflib
import warnings
from dataclasses import dataclass
from typing import Optional

import torch

__all__ = ["DtypeFlow", "dtype_followers"]


@dataclass(frozen=True)
class DtypeFlow:
    """What the probe tells: ``follow``, the call nodes whose float32 result follows the model's floating dtype;
    ``literal``, the call nodes and lifted constants (their names) that are float32 whatever the model's dtype
    (``torch.arange(..., dtype=torch.float32).exp()``: a folded constant a half port keeps in float32, as torch's
    half model computes it); ``note``, why the probe could not tell, when it could not (both sets empty)."""

    follow: frozenset = frozenset()
    literal: frozenset = frozenset()
    note: Optional[str] = None


_FROM, _TO = torch.float32, torch.float64
ENABLED = True  # switch: False leaves every captured dtype as recorded (read at conversion)


class _Widened:
    """Float64 stand-ins for a model's float32 tensors, as fake tensors (shapes and dtypes, no memory: the probe
    reads only dtypes, and a real float64 copy would hold twice the model's weights)."""

    def __init__(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        self.mode = FakeTensorMode(shape_env=ShapeEnv())

    def tensor(self, t):
        if not isinstance(t, torch.Tensor):
            return t
        if t.dtype != _FROM:
            return self.mode.from_tensor(t, static_shapes=True)
        with self.mode:
            wide = torch.empty(t.shape, dtype=_TO)
        return torch.nn.Parameter(wide, t.requires_grad) if isinstance(t, torch.nn.Parameter) else wide

    def model(self, model):
        """A deep copy of ``model`` whose parameters and buffers are stand-ins (tied tensors stay tied)."""
        memo = {}
        for t in list(model.parameters()) + list(model.buffers()):
            memo.setdefault(id(t), self.tensor(t))
        return copy.deepcopy(model, memo)

    def inputs(self, value):
        return torch.utils._pytree.tree_map(self.tensor, value)


def _tensor_calls(gm) -> list:
    """The calls with a tensor result, in order, of ``gm`` and its region bodies (``no_grad``/``autocast``
    blocks: submodules), which both programs share; size arithmetic and assertions (a dynamic capture's only) are
    left out."""
    calls = []
    for _, module in gm.named_modules():
        if isinstance(module, torch.fx.GraphModule):
            calls += [n for n in module.graph.nodes
                      if n.op == "call_function" and isinstance(n.meta.get("val"), torch.Tensor)]
    return calls


def dtype_followers(model, inputs: tuple, kwargs: dict, ep) -> DtypeFlow:
    """The :class:`DtypeFlow` of ``ep``, the float32 capture of ``model`` on ``inputs``/``kwargs`` (the examples it
    was captured at); empty, with a note, when the probe cannot tell (every dtype then stays as recorded)."""
    from .capture_strategy import CaptureTimeout, _export, budget_seconds

    if not ENABLED:
        return DtypeFlow(note="the dtype probe is switched off (capture_dtypes.ENABLED)")
    tensors = list(model.parameters()) + list(model.buffers()) + torch.utils._pytree.tree_leaves((inputs, kwargs))
    if not any(isinstance(t, torch.Tensor) and t.dtype == _FROM for t in tensors):
        return DtypeFlow(note="no float32 parameter, buffer or input")
    if not _sets_a_dtype(ep):
        return DtypeFlow()  # every floating result follows its floating inputs: a half port's own dtype flow
    try:
        stand_ins = _Widened()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the capture itself has said what torch.export had to say
            wide = _export(stand_ins.model(model), stand_ins.inputs(tuple(inputs)), "static", budget_seconds(),
                           stand_ins.inputs(dict(kwargs)))
    except CaptureTimeout:
        return DtypeFlow(note="the float64 probe ran past the capture budget")
    except Exception as e:  # noqa: BLE001  (whatever stops the probe leaves the capture's dtypes as recorded)
        return DtypeFlow(note=f"the float64 probe failed ({type(e).__name__}: {str(e).strip()[:200]})")
    from .capture_decompose import decompose_unsupported

    wide = decompose_unsupported(wide)
    ours, theirs = _tensor_calls(ep.graph_module), _tensor_calls(wide.graph_module)
    pairs = _aligned(ours, theirs)
    paired = {id(n) for pair in pairs for n in pair}
    if any(id(n) not in paired and not _shape_only(n.target) for n in ours + theirs):
        return DtypeFlow(note="the float64 probe made other calls than the capture (a branch on a dtype?)")
    kept = [name for name, t in ep.constants.items() if isinstance(t, torch.Tensor) and t.dtype == _FROM
            and getattr(wide.constants.get(name), "dtype", None) == _FROM]
    return DtypeFlow(frozenset(a for a, b in pairs if a.meta["val"].dtype == _FROM and b.meta["val"].dtype == _TO),
                     frozenset([a for a, b in pairs if a.meta["val"].dtype == b.meta["val"].dtype == _FROM] + kept))


def _sets_a_dtype(ep) -> bool:
    """Whether some call of ``ep`` may choose its floating result's dtype itself (the only calls the probe can tell
    apart): a cast (``to``, ``_to_copy``, ``type_as``...), a call with a dtype argument, a floating result with no
    floating tensor argument (a creation, an integer tensor promoted to the default dtype), or a lifted float32
    constant. Without any, every floating result takes its dtype from floating inputs, in a half port as in torch's
    half model, and the probe (a second export) would mark nothing a half port does not already do."""
    if any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in ep.constants.values()):
        return True
    for node in _tensor_calls(ep.graph_module):
        if "dtype" in node.kwargs or any(isinstance(a, torch.dtype) for a in node.args):
            return True
        name = str(node.target)
        if name.startswith(("aten.to.", "aten._to_copy", "aten.type_as", "aten._autocast")):
            return True
        if node.meta["val"].is_floating_point() and not any(
                isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)
                and a.meta["val"].is_floating_point()
                for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs))):
            return True
    return False


def _shape_only(target) -> bool:
    """A view (slice, unsqueeze, reshape...), which sets no dtype: the only calls one program may have alone."""
    from .capture_regions import _is_view

    return _is_view(target) and not str(target).startswith("aten.to.")


def _aligned(ours: list, theirs: list) -> list:
    """The calls of the two programs paired: the runs of the same ops in the same order (a static probe leaves out
    some calls a dynamic capture keeps, a full-range ``x[:, None]`` slice), each pair of the same rank."""
    def key(node):
        return str(node.target), node.meta["val"].dim()

    matcher = difflib.SequenceMatcher(None, [key(n) for n in ours], [key(n) for n in theirs], autojunk=False)
    return [(ours[block.a + k], theirs[block.b + k]) for block in matcher.get_matching_blocks()
            for k in range(block.size)]
