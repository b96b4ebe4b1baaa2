"""``torch.combinations`` while ``torch.export`` captures (imports torch; conversion only).

Torch computes ``combinations`` as a composite that selects with a mask (``masked_select``), so on the capture's
fake tensors its size is data-dependent and the export fails ("pending unbacked symbols"), although the size depends
only on the input's length. During a capture the op gets a Python kernel for ``CompositeImplicitAutograd`` that
states it by its length alone (the rows of :func:`itertools.combinations` as an index), so export records one
``aten.combinations`` call: folded at conversion when its input is a constant (``capture_fold.py``), refused by name
otherwise. Torch's kernel is back when the capture ends; the folded value is computed by torch's own kernel.
"""

from __future__ import annotations

import itertools

import torch

from .capture_kernels import composite_kernels


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


def combinations_by_length():
    """Give ``aten.combinations`` the kernel :func:`_by_length` for one capture (torch's restored afterwards)."""
    return composite_kernels({torch.ops.aten.combinations.default: _by_length})
