"""``torch.combinations`` while ``torch.export`` captures (imports torch; conversion only).

Torch computes ``combinations`` as a composite that selects with a mask (``masked_select``), so on the capture's
fake tensors its size is data-dependent and the export fails ("pending unbacked symbols"), although the size depends
only on the input's length. During a capture the op gets a Python kernel for ``CompositeImplicitAutograd`` that
states it by its length alone (the rows of :func:`itertools.combinations` as an index), so export records one
``aten.combinations`` call: folded at conversion when its input is a constant (``capture_fold.py``), refused by name
otherwise. Torch's kernel is back when the capture ends; the folded value is computed by torch's own kernel.
"""

from __future__ import annotations

import contextlib
import itertools

import torch

_KEY = torch._C.DispatchKey.CompositeImplicitAutograd


def _by_length(input, r: int = 2, with_replacement: bool = False):
    """``torch.combinations`` of a 1-d ``input`` as an index by its length (torch's values and shapes)."""
    if input.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")  # torch's check
    if r <= 0:
        return input.new_empty((0,))
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = list(pick(range(int(input.size(0))), r))
    if not rows:
        return input.new_empty((0, r))
    return input[torch.tensor(rows, dtype=torch.long)]


@contextlib.contextmanager
def combinations_by_length():
    """Give ``aten.combinations`` the kernel :func:`_by_length` for one capture (torch's restored afterwards)."""
    op = torch.ops.aten.combinations.default
    saved = op.py_kernels.get(_KEY)
    op.py_kernels[_KEY] = _by_length
    op._dispatch_cache.clear()
    try:
        yield
    finally:
        if saved is None:
            op.py_kernels.pop(_KEY, None)
        else:
            op.py_kernels[_KEY] = saved
        op._dispatch_cache.clear()
