"""Which 1-d inputs a port may also take as 0-d tensors (imports torch; conversion only). Read by ``runtime.py``.

A capture follows one rank per input: a model called with a 1-d timestep ``(B,)`` is captured for rank 1, and its
code for a 0-d timestep (diffusers' ``UNet2DModel``: ``if t.ndim == 0: t = t[None]``, then broadcast to the
batch) is not in the graph. Where the graph ties the input's length to a size (an input check
``t.size(0) == E``, ``E`` an int or other inputs' dims), the 0-d call is the 1-d one with the value repeated
``E`` times exactly when torch says so: at conversion the model runs on the example with that input as its first
element, 0-d, and as that element repeated; only if both give the same outputs (exactly) is the input recorded,
``graph["inputs"][i]["scalar_size"] = E``, and the port then repeats a 0-d value to ``E`` elements before its
checks run. Any other 0-d call stays refused by rank.
"""

from __future__ import annotations

import torch

from .capture import example_tensors, with_tensors
from .guards import dims_of


def _tie(checks: list, index: int):
    """The expression an ``eq`` check ties ``input.size(0)`` to (not reading the input itself), or None."""
    me = {"dim": [index, 0]}
    for c in checks:
        if c["cmp"] != "eq":
            continue
        for a, b in ((c["lhs"], c["rhs"]), (c["rhs"], c["lhs"])):
            if a == me and [index, 0] not in dims_of(b) and all(d[0] != index for d in dims_of(b)):
                return b
    return None


def _same(a, b) -> bool:
    la, lb = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def scalar_sizes(model, inputs: tuple, graph: dict, kwargs=None) -> dict:
    """``{input index: E}`` for the 1-d inputs the port may take 0-d (see the module docstring); ``kwargs``: the
    keyword example inputs (graph inputs after the positional ones, as torch.export flattens them)."""
    out = {}
    kwargs = kwargs or {}
    checks = graph.get("input_checks") or []
    flat = tuple(example_tensors(inputs, kwargs))

    def run(values):
        args, kw = with_tensors(inputs, kwargs, list(values))
        return model(*args, **kw)

    for i, (spec, x) in enumerate(zip(graph["inputs"], flat)):
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.numel() < 1 or spec["perm"] != [0]:
            continue
        tie = _tie(checks, i)
        if tie is None:
            continue
        first = x[0].clone()
        as_scalar = flat[:i] + (first,) + flat[i + 1:]
        repeated = flat[:i] + (first.expand(x.shape[0]).clone(),) + flat[i + 1:]
        try:
            with torch.no_grad():
                same = _same(run(as_scalar), run(repeated))
        except Exception:  # noqa: BLE001  (the model refuses a 0-d value: so does the port)
            continue
        if same:
            out[i] = tie
    return out
