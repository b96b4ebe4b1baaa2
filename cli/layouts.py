"""Move arrays between torch layout and a ported model's I/O layout.

A ported model describes each input/output as ``"NCHW->NHWC"`` (torch's layout on the left, the one the MLX model
uses on the right) or ``"as-is"``. Used by bench and the "how to load it" hint; numpy only (no torch).
"""

import numpy as np


def _perm(layout):
    if not layout or "->" not in layout:
        return None
    src, dst = (part.strip() for part in layout.split("->"))
    if sorted(src) != sorted(dst) or src == dst:
        return None
    return src, dst


def torch_to_ported(array, layout):
    """A torch-layout numpy array -> the layout the ported model takes (``layout`` like "NCHW->NHWC")."""
    perm = _perm(layout)
    if perm is None or array.ndim != len(perm[0]):
        return array
    src, dst = perm
    return np.ascontiguousarray(np.transpose(array, [src.index(c) for c in dst]))


def ported_to_torch(array, layout):
    """A ported model's output -> torch layout (the inverse of ``torch_to_ported``)."""
    perm = _perm(layout)
    if perm is None or array.ndim != len(perm[1]):
        return array
    src, dst = perm
    return np.ascontiguousarray(np.transpose(array, [dst.index(c) for c in src]))


def ported_shape(shape, layout):
    """The shape a ported model expects for a torch-layout input of ``shape``."""
    perm = _perm(layout)
    if perm is None or len(shape) != len(perm[0]):
        return tuple(shape)
    src, dst = perm
    return tuple(shape[src.index(c)] for c in dst)
