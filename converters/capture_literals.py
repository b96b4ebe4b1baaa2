"""Tensors built from sizes while ``torch.export`` captures (imports torch; conversion only).

``torch.tensor(data)`` and ``torch.as_tensor(data)`` with symbolic sizes in ``data`` (HF Deformable DETR, RT-DETR,
Mask2Former, Grounding DINO: ``spatial_shapes = torch.as_tensor([(h, w) for each level])``) make torch.export
specialise those sizes: it reads each SymInt as a Python number to fill the tensor, so the capture pins every input
dim they came from to the example's size and the port refuses every other size. During a capture these two
functions are wrapped: data that is a scalar or a (nested) list/tuple holding at least one symbolic number, and
nothing but numbers, is built as ``aten.scalar_tensor`` per number and ``stack`` per list level: the same values,
dtype (torch's inference: bool < int64 < the default float dtype, or ``dtype=``) and shape, with the sizes kept
symbolic. Anything else (tensors in the list, ragged or empty lists, no symbolic number) goes to torch's own
function unchanged.

``torch.linspace(start, end, steps)`` takes ``steps`` as a plain int in its schema: a size-derived step count (DETR
reference points, ``meshgrid`` coordinate grids) pins that size the same way. With a symbolic ``steps``, ends that
are numbers (Python or symbolic) and a floating dtype it is built as torch's CPU kernel computes it:
``step = (end - start) / (steps - 1)`` in the dtype, ``start + step * i`` for the first ``steps // 2`` points and
``end - step * (steps - 1 - i)`` for the rest (one point: ``start``), with ``arange`` and ``where`` over the
symbolic count. Torch's functions are restored when the capture ends.
"""

from __future__ import annotations

import contextlib

import torch

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
_NUMBER = (bool, int, float) + _SYMBOLIC
_REAL = (int, float, torch.SymInt, torch.SymFloat)


def _leaves(data):
    """The numbers in ``data`` (a number or nested lists/tuples of them) and its shape, or None when ``data`` is
    anything else (a tensor, a ragged or empty list, another type)."""
    if isinstance(data, _NUMBER):
        return [data], ()
    if not isinstance(data, (list, tuple)) or not data:
        return None
    parts = [_leaves(d) for d in data]
    if any(p is None for p in parts) or len({p[1] for p in parts}) != 1:
        return None
    return [x for p in parts for x in p[0]], (len(data), *parts[0][1])


def _inferred_dtype(numbers):
    if any(isinstance(x, (float, torch.SymFloat)) for x in numbers):
        return torch.get_default_dtype()
    if all(isinstance(x, (bool, torch.SymBool)) for x in numbers):
        return torch.bool
    return torch.int64


def _stacked(data, dtype, device):
    if isinstance(data, _NUMBER):
        return torch.scalar_tensor(data, dtype=dtype, device=device)
    return torch.stack([_stacked(d, dtype, device) for d in data])


def _symbolic_first(original):
    def build(data, *args, **kwargs):
        found = _leaves(data)
        extra = set(kwargs) - {"dtype", "device"}
        if args or extra or found is None or not any(isinstance(x, _SYMBOLIC) for x in found[0]):
            return original(data, *args, **kwargs)
        dtype = kwargs.get("dtype") or _inferred_dtype(found[0])
        return _stacked(data, dtype, kwargs.get("device"))

    build.__wrapped__ = original
    return build


def _symbolic_linspace(original):
    def linspace(start, end, steps, *args, **kwargs):
        extra = set(kwargs) - {"dtype", "device", "requires_grad"}
        dtype = kwargs.get("dtype") or torch.get_default_dtype()
        if (args or extra or kwargs.get("requires_grad") or not isinstance(steps, torch.SymInt)
                or not all(isinstance(v, _REAL) and not isinstance(v, bool) for v in (start, end))
                or not dtype.is_floating_point):
            return original(start, end, steps, *args, **kwargs)
        device = kwargs.get("device")
        first = torch.scalar_tensor(start, dtype=dtype, device=device)
        last = torch.scalar_tensor(end, dtype=dtype, device=device)
        step = (last - first) / torch.sym_max(steps - 1, 1)
        index = torch.arange(steps, device=device)
        i = index.to(dtype)
        return torch.where(index < torch.sym_max(steps // 2, 1), first + step * i, last - step * (steps - 1 - i))

    linspace.__wrapped__ = original
    return linspace


_WRAPPERS = {"tensor": _symbolic_first, "as_tensor": _symbolic_first, "linspace": _symbolic_linspace}


@contextlib.contextmanager
def symbolic_tensor_literals():
    """Build ``torch.tensor`` / ``torch.as_tensor`` of symbolic sizes from ``scalar_tensor`` + ``stack``, and
    ``torch.linspace`` with a symbolic step count from ``arange``, for one capture (torch's functions restored
    afterwards)."""
    saved = {name: getattr(torch, name) for name in _WRAPPERS}
    for name, original in saved.items():
        setattr(torch, name, _WRAPPERS[name](original))
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(torch, name, original)
