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
