"""The captured graph: a torch-free, JSON-serialisable intermediate representation.

Both frontends (``torch.export`` and TorchScript) produce a :class:`Graph`; the conversion pass reads only this, so
conversion, the runtime and save/load never need torch.

A value is referenced by name through :class:`Ref`. Node arguments are kept by their ATen schema name (``stride``,
``padding``, ...) with the schema defaults filled in; ``explicit`` lists the arguments the model actually passed, so
the conversion can check that no argument the model gave was left unhandled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Ref:
    """A reference to a graph value (a tensor, a symbolic int or a tuple of them) by name."""

    name: str


@dataclass
class ValueMeta:
    """What the example run says about a value.

    ``kind``: "tensor", "int", "float", "bool", "list" or "none". For tensors, ``shape`` holds an int for a size that
    is static and a string (the symbolic expression) for a dynamic one; ``dtype`` is a name like "float32".
    ``hint`` holds the example's concrete sizes. For "list", ``items`` holds the element metas.
    ``storage_order``: the capture showed the tensor's storage holding exactly its elements, at offset 0, with the
    dims in this order (outermost first; ``list(range(rank))`` when contiguous): what ``as_strided`` reads is then
    the tensor permuted to this order and flattened. None when not shown. Conversion-time evidence only, not
    written to graph.json.
    """

    kind: str
    shape: Optional[list] = None
    dtype: Optional[str] = None
    items: Optional[list] = None
    hint: Optional[list] = None
    storage_order: Optional[list] = None

    @property
    def rank(self) -> int:
        return len(self.shape) if self.shape is not None else 0

    def to_json(self) -> dict:
        out = {"kind": self.kind}
        if self.shape is not None:
            out["shape"] = list(self.shape)
        if self.dtype is not None:
            out["dtype"] = self.dtype
        if self.items is not None:
            out["items"] = [m.to_json() for m in self.items]
        if self.hint is not None:
            out["hint"] = list(self.hint)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "ValueMeta":
        items = [cls.from_json(m) for m in d["items"]] if "items" in d else None
        return cls(d["kind"], d.get("shape"), d.get("dtype"), items, d.get("hint"))


@dataclass
class Node:
    """One call in the captured graph.

    ``op``: the ATen overload name, e.g. "aten.conv2d.default", or "operator.add" for symbolic-int arithmetic.
    ``args``: argument name -> value (literals, :class:`Ref`, or lists of them), in schema order.
    ``explicit``: names of the arguments the model passed (the others hold schema defaults).
    ``module`` / ``module_type``: the innermost torch submodule the call ran in ("layer1.0.conv1", "Conv2d"); ""
    for the root. ``scopes``: every enclosing module call, outermost first, as (call id, path, type).
    """

    name: str
    op: str
    args: dict
    explicit: list
    meta: ValueMeta
    module: str = ""
    module_type: str = ""
    scopes: list = field(default_factory=list)

    def refs(self) -> list:
        """Names of every value this node reads."""
        return [r.name for r in _iter_refs(list(self.args.values()))]


@dataclass
class Graph:
    """A captured forward: inputs, nodes in execution order, outputs.

    ``params``: state_dict name -> read-only numpy view of the torch tensor's memory (torch layout; no copy;
    bfloat16 as its bits, ``uint16``) for every parameter, buffer and lifted constant the graph reads; ``param_values`` maps the graph value name that holds each of them to its state_dict name.
    ``trainable``: the state_dict names that are parameters (the rest are buffers/constants).
    ``not_in_state_dict``: names the graph reads that torch's ``state_dict()`` leaves out (non-persistent buffers,
    lifted constant tensors), so ``PortedModel.torch_parameters()`` leaves them out too.
    """

    inputs: list  # value names
    input_meta: list  # ValueMeta per input
    nodes: list
    outputs: list  # output values: Ref or literal
    params: dict
    param_values: dict
    trainable: set
    source_class: str = ""
    frontend: str = ""
    output_structure: str = "tuple"  # "single" when the model returns one tensor
    output_tree: Optional[dict] = None  # how the outputs nest (dicts, lists, named tuples): converters/output_tree.py
    # torch dtype name per parameter (bfloat16, which numpy cannot hold, arrives as its bits: uint16)
    param_dtypes: dict = field(default_factory=dict)
    not_in_state_dict: set = field(default_factory=set)
    batch_doubled: bool = False  # a batch-of-one example was captured at batch two
    # shape conditions the port checks on every call, and the dims it keeps symbolic (format: guards.py);
    # None: the frontend records none (every dim is then checked as static)
    input_checks: Optional[list] = None
    dynamic_dims: Optional[list] = None
    capture_note: Optional[str] = None  # why the capture fell back to fewer dynamic dims, if it did
    # lifted constant name -> the autograd op that computed it from parameters before the capture (a tensor the
    # model cached in a Python attribute, e.g. timm's attention_bias_cache): the port holds its value frozen
    frozen_constants: dict = field(default_factory=dict)
    capture_mode: object = None  # the dims the capture kept dynamic: "all", "batch", "static" or a list of dims
    # module path -> attributes read from the torch module itself (``momentum``), when the model was an nn.Module
    module_attrs: Optional[dict] = None
    # tied weights: state_dict name -> the name of the tensor it is (torch's ``named_parameters()`` keeps the first
    # name of a shared tensor; the graph reads only that one, so a port trains it as one array, as torch does)
    aliases: dict = field(default_factory=dict)
    # IR names of calls whose float32 result takes its dtype from the model's tensors (``x.to(h.dtype)``,
    # ``type_as``, ``zeros(dtype=q.dtype)``): a half port computes them in its dtype (capture_dtypes.py); and why
    # the probe could not tell, when it could not (every dtype then stays as recorded)
    dtype_follows: set = field(default_factory=set)
    dtype_note: Optional[str] = None
    # constants (param names) that are float32 whatever the model's dtype: a half port keeps them float32
    float32_constants: set = field(default_factory=set)
    # where each input came from, ("arg", i) or ("kw", key), and the non-tensor example arguments baked in
    # ([(location, value)]); None when the frontend does not know (capture_signature.py)
    input_locations: Optional[list] = None
    input_constants: list = field(default_factory=list)
    signature: Optional[dict] = None  # graph["signature"] (input_binding.py)

    def users(self) -> dict:
        uses: dict = {}
        for node in self.nodes:
            for name in node.refs():
                uses.setdefault(name, []).append(node)
        return uses


def _iter_refs(value):
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _iter_refs(item)


def iter_refs(value):
    """Every :class:`Ref` inside a (possibly nested) argument value."""
    return _iter_refs(value)


def dead_code_elimination(graph: Graph) -> None:
    """Drop nodes whose result nobody reads (export keeps e.g. an unused ``x.permute(...)``)."""
    live = {r.name for r in iter_refs(graph.outputs)}
    kept = []
    for node in reversed(graph.nodes):
        if node.name in live:
            kept.append(node)
            live.update(node.refs())
    graph.nodes = kept[::-1]
