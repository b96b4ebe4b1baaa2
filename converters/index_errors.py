"""Index arrays a kernel refuses, and the graph node and field they came through. Torch-free.

The index kernels (``gather``, ``scatter``, ``index_select``, ``embedding``, ``index``, ``index_put``, ...) check
their index array with ``ops.misc.checked_indices``: an integer dtype torch takes, every entry in range (MLX's
gathers and scatters check neither). A bad array raises :class:`IndexTypeError` or :class:`IndexRangeError`; the
runtime turns either into :class:`NodeIndexError` naming the node and the input it came through (every index kernel
takes its index array as ``inputs[1]``; an ``Embedding`` layer's ``call_module`` node as ``inputs[0]``), and
``porter.load`` (``graph_budget.check_example``, at the example's sizes) refuses the artifact when that input is a
recorded array or a value computed from recorded arrays alone: nothing a caller passes can make it right, and the
example's sizes are sizes torch ran the model at.
"""

from __future__ import annotations


class IndexTypeError(TypeError):
    """An index array of a dtype torch refuses for that op (a float, a bool, a narrow integer)."""


class IndexRangeError(IndexError):
    """An index array with an entry outside ``[-size, size)``."""


class NodeIndexError(TypeError, ValueError):
    """A node's index array refused (a ``TypeError`` for its dtype as torch raises, a ``ValueError`` as every
    other kernel failure during a call).

    Attributes:
        index (int): the node's position in ``graph["nodes"]``.
        where (str): ``node 12 (kernel 'gather')``.
        field (str): the input the array came through (``inputs[1]``).
        problem (str): what is wrong with it.
    """

    def __init__(self, index: int, where: str, field: str, problem: str, running: str):
        self.index, self.where, self.field, self.problem = index, where, field, problem
        super().__init__(f"{problem} (while running {running}, node {index}, field {field!r})")


def index_input(node: dict) -> int:
    """The position in ``node["inputs"]`` of the index array a kernel checks."""
    return 0 if node["kernel"] == "call_module" else 1


def at_node(error: Exception, index: int, node: dict) -> NodeIndexError:
    """``error`` (from ``checked_indices``) as raised by the ``index``-th node."""
    from .axis_checks import node_place

    module = f" in module {node['module']!r}" if node.get("module") else ""
    return NodeIndexError(index, node_place(index, node), f"inputs[{index_input(node)}]", str(error),
                          f"{node.get('op') or node['kernel']}{module}")


def from_arrays(program, index: int) -> bool:
    """Whether the index arrays node ``index`` of ``program`` (a runtime ``_Program``) checks are recorded arrays
    or values computed from recorded arrays alone (``static_values``): the same at every call. ``index`` and
    ``index_put`` take a list of them (``None`` for a whole dim)."""
    node = program.graph["nodes"][index]
    spec = node["inputs"][index_input(node)]
    nodes = program.graph["nodes"]
    static = {name for i in program.static.nodes for name in nodes[i]["outputs"]}

    def constant(item) -> bool:
        return isinstance(item, dict) and (set(item) == {"param"} or (set(item) == {"ref"} and item["ref"] in static))

    items = [item for item in spec if item is not None] if isinstance(spec, list) else [spec]
    return bool(items) and all(constant(item) for item in items)
