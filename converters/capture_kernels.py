"""Python kernels for composite ATen ops during one ``torch.export`` capture (imports torch; conversion only).

A composite op (``CompositeImplicitAutograd``: torch runs its C++ body, which calls other ops) is traced through
that body. Where the body reads a size as a plain number (``torch.combinations``'s mask, ``max_pool1d``'s output
length), the capture specialises it; giving the op a Python kernel for that key for the length of the capture
replaces the body. Torch's kernels are back when the capture ends.
"""

from __future__ import annotations

import contextlib

import torch

_KEY = torch._C.DispatchKey.CompositeImplicitAutograd


@contextlib.contextmanager
def composite_kernels(kernels: dict):
    """``{op overload: python function}`` as the ops' ``CompositeImplicitAutograd`` kernels for one capture."""
    saved = {op: op.py_kernels.get(_KEY) for op in kernels}
    for op, kernel in kernels.items():
        op.py_kernels[_KEY] = kernel
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, kernel in saved.items():
            if kernel is None:
                op.py_kernels.pop(_KEY, None)
            else:
                op.py_kernels[_KEY] = kernel
            op._dispatch_cache.clear()
