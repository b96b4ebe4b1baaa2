"""Axis attributes of graph.json's nodes checked against the rank of the arrays they index. Torch-free.

The schema bounds an ``axis``/``axes`` attribute by MLX's largest rank only: it cannot know the rank of the value a
node reads. A crafted ``graph.json`` could name axis 5 of a 3-d value; MLX refuses some such axes with its own words,
and some were wrapped silently (``blocked_sum`` took ``axes % ndim``: a sum over axis 5 of a 3-d array summed
axis 2 and the port returned a wrong answer). So the runtime checks every axis attribute before the kernel runs
(:func:`check`), with torch's rule (``-r <= axis < r``, a 0-d value taking -1 and 0; ``stack``/``unsqueeze`` index
their output, one rank more), and raises :class:`NodeAxisError` naming the node and the field. ``porter.load``
builds the graph at the example's sizes (``graph_budget.check_example``), where the rank of every value is known,
and turns this error into an ``ArtifactError`` naming graph.json, the node and the field.
"""

from __future__ import annotations

import mlx.core as mx

from . import spec as S

# kernels whose axis indexes their output, one dim more than their input
_OUTPUT_AXIS = frozenset({"stack", "unsqueeze"})
# axis attributes whose spec bounds them otherwise (non-negative, by a geometry bound): the training kernels'
_MORE_AXES = {"drop_block": ("axes",), "stochastic_depth": ("axis",)}


class NodeAxisError(ValueError):
    """A node's axis attribute out of range for the rank of the value it reads.

    Attributes:
        index (int): the node's position in ``graph["nodes"]``.
        field (str): ``attrs.axis`` or ``attrs.axes[i]``.
    """

    def __init__(self, index: int, where: str, field: str, problem: str):
        self.index, self.where, self.field, self.problem = index, where, field, problem
        super().__init__(f"graph.json: {where}, field {field!r}: {problem}")


def node_place(index: int, node: dict) -> str:
    """``node 12 (kernel 'gather', module 'layer1')``: how an error names the ``index``-th node."""
    module = f", module {node['module']!r}" if node.get("module") else ""
    return f"node {index} (kernel {node['kernel']!r}{module})"


def axis_fields(graph: dict) -> dict:
    """``{node index: [attribute name, ...]}``: the nodes of ``graph`` with an axis attribute (one the kernel's spec
    declares as ``spec.AXIS``/``spec.AXES``, possibly optional, and those of :data:`_MORE_AXES`)."""
    from .registry import get_kernel_spec

    found = {}
    for index, node in enumerate(graph["nodes"]):
        kernel_spec = get_kernel_spec(node["kernel"])
        if kernel_spec is None:
            continue
        names = [name for name, item in kernel_spec.attrs.items()
                 if (item.spec if isinstance(item, S.Opt) else item) in (S.AXIS, S.AXES)
                 or name in _MORE_AXES.get(node["kernel"], ())]
        if names:
            found[index] = names
    return found


def _rank(args) -> int | None:
    """The largest rank among the arrays in ``args`` (lists of arrays included: ``concat``/``stack``)."""
    ranks = [a.ndim for a in args if isinstance(a, mx.array)]
    ranks += [b.ndim for a in args if isinstance(a, (list, tuple)) for b in a if isinstance(b, mx.array)]
    return max(ranks) if ranks else None


def check(index: int, node: dict, names: list, args: list) -> None:
    """Raise :class:`NodeAxisError` when an axis attribute ``names`` of ``node`` (the ``index``-th) is out of range
    for the rank of the arrays in ``args``."""
    rank = _rank(args)
    if rank is None:
        return
    size = rank + 1 if node["kernel"] in _OUTPUT_AXIS else max(rank, 1)
    for name in names:
        value = node["attrs"].get(name)
        if value is None:
            continue
        values, fields = ([value], [f"attrs.{name}"]) if isinstance(value, int) else (
            value, [f"attrs.{name}[{i}]" for i in range(len(value))])
        for axis, field in zip(values, fields):
            if not -size <= axis < size:
                raise NodeAxisError(index, node_place(index, node), field, f"axis {axis} is out of range for a "
                                    f"{rank}-d value (expected {-size} to {size - 1})")
