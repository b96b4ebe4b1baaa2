"""Move arrays between torch layout and a ported model's I/O layout (``porter.compare``'s layout helpers).

A ported model describes each input/output as ``"NCHW->NHWC"`` (torch's layout on the left, the one the MLX model
uses on the right), ``"permute(0,2,3,1)"`` or ``"as-is"``. Used by bench and the "how to load it" hint; numpy only
(no torch). A layout that does not fit the array's rank (or no layout) leaves the array as it is.
"""

import numpy as np

from porter.compare import inverse_permutation, parse_layout


def _perm(layout, rank):
    try:
        return parse_layout(layout, rank) if layout else None
    except ValueError:
        return None


def torch_to_ported(array, layout):
    """A torch-layout numpy array -> the layout the ported model takes (``layout`` like "NCHW->NHWC")."""
    perm = _perm(layout, array.ndim)
    return array if perm is None else np.ascontiguousarray(np.transpose(array, perm))


def ported_to_torch(array, layout):
    """A ported model's output -> torch layout (the inverse of ``torch_to_ported``)."""
    perm = _perm(layout, array.ndim)
    return array if perm is None else np.ascontiguousarray(np.transpose(array, inverse_permutation(perm)))


def ported_shape(shape, layout):
    """The shape a ported model expects for a torch-layout input of ``shape``."""
    perm = _perm(layout, len(shape))
    return tuple(shape) if perm is None else tuple(shape[p] for p in perm)


def input_dtypes(ported) -> list:
    """The dtype name of each input recorded in the artifact (``"float32"`` where it records none)."""
    try:
        return [str(spec["meta"].get("dtype") or "float32") for spec in ported.graph["inputs"]]
    except (AttributeError, KeyError, TypeError):
        return []


def keyword_names(ported) -> dict:
    """``{input index: keyword}`` for the inputs a port takes by keyword (``porter.convert(...,
    example_kwargs=...)``, ``--input-shape name=...``); the others go positionally, in order."""
    try:
        return dict(ported.input_keywords)
    except AttributeError:  # not a PortedModel
        return {}


def recorded_input_shapes(ported, meta: dict) -> list:
    """The conversion example's shapes recorded in an artifact's metadata, as ``--input-shape`` text with each
    input's recorded dtype (``"2,9:int64"``), so a token model's ids stay integers, and a keyword input's name
    (``"token_type_ids=2,9:int64"``)."""
    dtypes, names = input_dtypes(ported), keyword_names(ported)
    shapes = []
    for i, shape in enumerate(meta.get("input_shapes") or []):
        dtype = dtypes[i] if i < len(dtypes) else "float32"
        shapes.append((f"{names[i]}=" if names.get(i) else "") + ",".join(map(str, shape)) + (f":{dtype}" if dtype in ("float16", "bfloat16", "float64", "int64",
                                                                              "int32", "bool") else ""))
    return shapes


def order_for_port(ported, shapes: list, option: str = "--input-shape") -> list:
    """``shapes`` (parsed ``--input-shape`` values; a keyword one named ``token_type_ids=`` or, inside a tuple
    argument, ``past_key_values[1][0]=``) in the port's input order, each checked against the input it feeds:
    every input the port takes given once, nothing it does not take, each of the rank recorded for it. All unnamed,
    one per input, they go in the port's input order, keyword inputs included.

    Raises:
        InputError: a missing, extra or wrong-rank entry, naming it.
    """
    from .errors import InputError

    names, graph_inputs = keyword_names(ported), ported.graph["inputs"]
    spelled = getattr(ported, "input_arguments", None) or [f"input {i}" for i in range(len(graph_inputs))]
    positional = [i for i in range(len(graph_inputs)) if i not in names]
    by_name = {name: i for i, name in names.items()}
    given_positional = [s for s in shapes if getattr(s, "name", None) is None]
    given_named = {s.name: s for s in shapes if getattr(s, "name", None) is not None}
    takes = ", ".join(spelled[i] if i in positional else f"{names[i]}=" for i in range(len(graph_inputs)))
    extra = [n for n in given_named if n not in by_name]
    if extra:
        raise InputError(f"{option} gives '{extra[0]}', which the converted model does not take (it takes {takes}).",
                         "Name each keyword input as the model's call does; a tuple argument's tensors by index, "
                         "e.g. past_key_values[0][1]=1,12,7,64.")
    if not given_named and names and len(given_positional) == len(graph_inputs):
        # every input unnamed, one per input: the port's own input order, keyword inputs too (what bench and
        # validate took before keyword names were matched; scripts written then keep working)
        given_named = {names[i]: s for i, s in zip(range(len(graph_inputs)), given_positional) if i in names}
        given_positional = [s for i, s in enumerate(given_positional) if i not in names]
    missing = [names[i] for i in sorted(names) if names[i] not in given_named]
    if missing:
        raise InputError(f"{option} does not give '{missing[0]}', an input of the converted model (it takes "
                         f"{takes}).", f"Add {option} {missing[0]}=SHAPE (torch layout).")
    if len(given_positional) != len(positional):
        raise InputError(f"{option} gives {len(given_positional)} positional input(s); the converted model takes "
                         f"{len(positional)} ({takes}).", "Give one unnamed --input-shape per positional input, "
                         "in order, and the others as name=SHAPE.")
    ordered = [None] * len(graph_inputs)
    for i, s in zip(positional, given_positional):
        ordered[i] = s
    for name, i in by_name.items():
        ordered[i] = given_named[name]
    for i, s in enumerate(ordered):
        recorded = graph_inputs[i].get("meta", {}).get("shape")
        if isinstance(recorded, list) and len(recorded) != len(s):
            label = f"'{names[i]}'" if i in names else f"input {i} ({spelled[i]})"
            raise InputError(f"{option} gives {label} the shape {','.join(map(str, s))}, of rank {len(s)}; the "
                             f"converted model takes a rank-{len(recorded)} tensor there.",
                             "Give the torch-layout shape the model was converted with, with other sizes if it "
                             "takes them.")
    return ordered
