"""The nesting of a model's outputs (dicts, lists, tuples, named tuples, ``None``), so a port returns what the torch
model returns: ``out["logits"]`` for a dict, ``out.a`` for a named tuple. Torch-free except :func:`from_spec`.

A port computes a flat list of outputs (graph.json ``outputs``); ``output_tree`` records how to nest them. JSON
nodes:

* ``{"leaf": i}``: flat output ``i`` (each used exactly once, in order);
* ``{"tuple": [node, ...]}``, ``{"list": [node, ...]}``;
* ``{"dict": [[key, node], ...]}``: keys are strings or integers, in torch's order (an ``OrderedDict`` or a
  transformers ``ModelOutput`` becomes a plain dict);
* ``{"namedtuple": [field, ...], "items": [node, ...]}``: rebuilt as a named tuple class ``Output`` with those
  fields (Python identifiers; the user's own class is never imported);
* ``{"none": true}``: a ``None`` the model returns in that place.

No tree is recorded for a single output or a flat tuple (``output_structure`` says which); a structure Porter
cannot express (a custom pytree class without keys) keeps the flat tuple and says so in the conversion's notes.
"""

from __future__ import annotations

import collections
import keyword

MAX_NODES = 1 << 16
MAX_DEPTH = 32


class OutputTreeError(ValueError):
    """A recorded ``output_tree`` that is not one of the node kinds above, or does not use every output once."""


def from_spec(spec, depth: int = 0):
    """The JSON tree of torch's output ``TreeSpec`` (``ep.call_spec.out_spec``), or ``None`` when it is one leaf, a
    flat tuple of leaves, or a structure the format cannot hold."""
    counter = [0]

    def walk(node, level):
        if level > MAX_DEPTH:
            raise OutputTreeError("nested too deep")
        if node.is_leaf():
            counter[0] += 1
            return {"leaf": counter[0] - 1}
        kind, context = node.type, node.context
        children = [walk(node.child(i), level + 1) for i in range(node.num_children)]
        if kind is type(None):
            return {"none": True}
        if kind in (tuple, list):
            return {kind.__name__: children}
        if isinstance(context, type) and hasattr(context, "_fields"):  # a named tuple: context is its class
            return {"namedtuple": list(context._fields), "items": children}
        if isinstance(context, (list, tuple)) and len(context) == len(children) and all(
                isinstance(k, (str, int)) and not isinstance(k, bool) for k in context):
            return {"dict": [[k, c] for k, c in zip(context, children)]}  # dict, OrderedDict, ModelOutput
        raise OutputTreeError(f"the output type {getattr(kind, '__name__', kind)!r} has no keys Porter can record")

    tree = walk(spec, depth)
    if "leaf" in tree or ("tuple" in tree and all("leaf" in c for c in tree["tuple"])):
        return None
    return tree


def check(tree, count: int) -> None:
    """``tree`` is a well-formed output tree over ``count`` flat outputs, each used exactly once, in order.

    Raises:
        OutputTreeError: naming what is wrong.
    """
    seen = []
    nodes = [0]

    def walk(node, level):
        nodes[0] += 1
        if nodes[0] > MAX_NODES or level > MAX_DEPTH:
            raise OutputTreeError(f"more than {MAX_NODES} nodes or deeper than {MAX_DEPTH} levels")
        if not isinstance(node, dict) or len(node) not in (1, 2):
            raise OutputTreeError("a node must be an object with one kind")
        if set(node) == {"leaf"}:
            if not isinstance(node["leaf"], int) or isinstance(node["leaf"], bool):
                raise OutputTreeError("'leaf' must be an integer")
            seen.append(node["leaf"])
        elif set(node) == {"none"}:
            if node["none"] is not True:
                raise OutputTreeError("'none' must be true")
        elif set(node) in ({"tuple"}, {"list"}):
            items = next(iter(node.values()))
            if not isinstance(items, list):
                raise OutputTreeError("'tuple'/'list' must hold a list of nodes")
            for item in items:
                walk(item, level + 1)
        elif set(node) == {"dict"}:
            if not isinstance(node["dict"], list):
                raise OutputTreeError("'dict' must hold a list of [key, node] pairs")
            keys = []
            for pair in node["dict"]:
                if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (str, int))
                        and not isinstance(pair[0], bool) and (not isinstance(pair[0], str) or len(pair[0]) <= 256)):
                    raise OutputTreeError("a 'dict' entry must be [key (a string of at most 256 characters or an "
                                          "integer), node]")
                keys.append(pair[0])
                walk(pair[1], level + 1)
            if len(set(keys)) != len(keys):
                raise OutputTreeError("a 'dict' repeats a key")
        elif set(node) == {"namedtuple", "items"}:
            fields, items = node["namedtuple"], node["items"]
            if not (isinstance(fields, list) and isinstance(items, list) and len(fields) == len(items)
                    and all(isinstance(f, str) and f.isidentifier() and not keyword.iskeyword(f)
                            and not f.startswith("_") and len(f) <= 256 for f in fields)
                    and len(set(fields)) == len(fields)):
                raise OutputTreeError("'namedtuple' must list distinct identifier field names, one per item")
            for item in items:
                walk(item, level + 1)
        else:
            raise OutputTreeError(f"unknown node kind {sorted(node)[:2]!r}")

    walk(tree, 0)
    if seen != list(range(count)):
        raise OutputTreeError(f"must use each of the {count} outputs once, in order")


def build(tree, flat: tuple):
    """Nest the flat outputs ``flat`` as ``tree`` says (``tree`` already checked)."""
    if "leaf" in tree:
        return flat[tree["leaf"]]
    if "none" in tree:
        return None
    if "tuple" in tree:
        return tuple(build(c, flat) for c in tree["tuple"])
    if "list" in tree:
        return [build(c, flat) for c in tree["list"]]
    if "dict" in tree:
        return {k: build(c, flat) for k, c in tree["dict"]}
    return _named(tuple(tree["namedtuple"]))(*(build(c, flat) for c in tree["items"]))


def leaves(out, layouts=None) -> list:
    """A port's (nested) output flattened as torch's ``tree_leaves`` flattens the model's: dicts by insertion,
    lists and tuples in order, ``None`` no leaf. With ``layouts`` (one per graph output: ``ported.output_layouts``),
    ``[(array, layout), ...]``: the nesting visits the graph outputs in order, so they pair up before ``None`` drops."""
    def walk(node):
        if isinstance(node, dict):
            return [leaf for v in node.values() for leaf in walk(v)]
        if isinstance(node, (list, tuple)):
            return [leaf for v in node for leaf in walk(v)]
        return [node]

    flat = walk(out)
    if layouts is None:
        return [v for v in flat if v is not None]
    layouts = list(layouts) + [None] * (len(flat) - len(layouts))
    return [(v, lay) for v, lay in zip(flat, layouts) if v is not None]


_NAMED: dict = {}


def _named(fields: tuple):
    if fields not in _NAMED:
        _NAMED[fields] = collections.namedtuple("Output", fields)
    return _NAMED[fields]
