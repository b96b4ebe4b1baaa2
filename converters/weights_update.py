"""Put a newer torch ``state_dict`` into an existing port: the way back from :meth:`PortedModel.torch_parameters`.

A user converts a model once, then keeps training it in torch (or downloads a newer checkpoint of the same
architecture). :func:`load_torch_state_dict` loads those weights into the port as torch's ``load_state_dict`` loads
them into the torch model: by ``state_dict`` name, each through the transform its op type recorded at conversion
(``graph["params"][name]["transform"]``, ``converters/transforms.py``: a conv weight ``(C_out, C_in/g, *k)``
becomes MLX's ``(C_out, *k, C_in/g)``, a conv-transpose weight is regrouped, a permuted parameter permuted), so a
loaded weight sits exactly where conversion would have put it. Torch-free: tensors are read by duck typing.

Rules (torch's where torch has one):

* ``strict=True``: every key the port holds must be given and no other; else nothing is loaded and one
  :class:`WeightsUpdateError` lists every missing and unexpected key. ``strict=False`` loads the keys that match
  and returns the rest (:class:`LoadResult`, torch's ``(missing_keys, unexpected_keys)``).
* Entries torch's ``state_dict`` never holds are neither expected nor loaded (given anyway, they are unexpected,
  as in torch): non-persistent buffers and lifted constants keep the port's values (the conversion records them
  with ``"state_dict": false``). A batch norm's ``num_batches_tracked`` left out of a checkpoint keeps its value
  and is not missing, as torch's ``_NormBase`` keeps it.
* A shape that differs from the converted one (a 10-class head for a 1000-class one) is an error naming the key
  and both shapes, with ``strict=False`` too (as in torch). Everything is checked before anything is assigned: an
  error leaves the port as it was.
* The port keeps its own dtypes: a float16 port stays float16 (bit for bit what converting the new weights with
  ``dtype="float16"`` gives), a float64 port float64, ``num_batches_tracked`` int64. For another dtype, change the port first
  (``ported.astype("float32").load_torch_state_dict(sd)``: the copy then takes the new weights at full precision).
* Tied weights (one tensor under two names, :attr:`PortedModel.tied_weights`): either name loads the shared
  array; both names with different values is an error.
* Quantized ports (after ``mlx.nn.quantize`` / ``porter.layers.quantize_model``) are refused: their packed
  weights are not torch tensors of any layout. Load into the float port, then quantize again.
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx
import numpy as np

from . import transforms
from .convert import _mlx_weight

__all__ = ["LoadResult", "WeightsUpdateError", "load_torch_state_dict"]

_SHOWN = 20  # keys listed in one message; the exception's attributes hold all of them


class LoadResult(NamedTuple):
    """What :func:`load_torch_state_dict` did not load (torch's ``_IncompatibleKeys``)."""

    missing_keys: list
    unexpected_keys: list


class WeightsUpdateError(ValueError):
    """Weights that cannot go into the port; nothing was changed.

    Attributes:
        missing_keys / unexpected_keys (list of str): with ``strict=True``, every key at fault.
    """

    def __init__(self, message: str, missing_keys=(), unexpected_keys=()):
        super().__init__(message)
        self.missing_keys = list(missing_keys)
        self.unexpected_keys = list(unexpected_keys)


def load_torch_state_dict(ported, state_dict, strict: bool = True) -> LoadResult:
    """Load torch ``state_dict`` (names -> torch tensors, numpy or mx arrays, in torch's layout) into ``ported``.

    See the module docstring for the rules. Returns :class:`LoadResult`; raises :class:`WeightsUpdateError` (a
    ``ValueError``) naming the key, with the port unchanged.
    """
    if not hasattr(state_dict, "items") or not hasattr(state_dict, "keys"):
        raise TypeError(f"load_torch_state_dict: 'state_dict' must be a mapping of name -> tensor but got "
                        f"{type(state_dict).__name__}")
    if not isinstance(strict, bool):
        raise TypeError(f"load_torch_state_dict: 'strict' must be a bool but got {type(strict).__name__}")
    _refuse_quantized(ported)
    records = ported.graph["params"]
    tied = ported.tied_weights  # alias -> the recorded name
    given: dict = {}  # recorded name -> [(key, value)]
    unexpected = []
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise WeightsUpdateError(f"load_torch_state_dict: a key of 'state_dict' is a {type(key).__name__} "
                                     f"({str(key)[:80]!r}), not a parameter name")
        name = key if key in records and records[key].get("state_dict", True) else tied.get(key)
        if name is None:
            unexpected.append(key)
        else:
            given.setdefault(name, []).append((key, value))
    missing = [key for name in records if name not in given and _expected(name, records[name])
               for key in [name] + sorted(a for a, n in tied.items() if n == name)]
    if strict and (missing or unexpected):
        raise WeightsUpdateError(_mismatch_message(missing, unexpected), missing, unexpected)

    staged = {name: _stage(ported, name, records[name], entries) for name, entries in given.items()}
    for name, array in staged.items():  # every check passed: assign
        path = ported._program.keys[name]
        _parent(ported, path)[path[-1]] = array
    return LoadResult(missing, unexpected)


def _expected(name: str, record: dict) -> bool:
    """Whether torch's ``state_dict`` holds ``name``: not for non-persistent buffers and lifted constants (recorded
    ``"state_dict": false``), nor a batch norm counter, which torch keeps when a checkpoint lacks it."""
    return record.get("state_dict", True) and name.rsplit(".", 1)[-1] != "num_batches_tracked"


def _mismatch_message(missing, unexpected) -> str:
    parts = []
    for what, keys in (("missing", missing), ("unexpected", unexpected)):
        if keys:
            shown = ", ".join(repr(k) for k in keys[:_SHOWN]) + (f", ... ({len(keys)} in all)"
                                                                 if len(keys) > _SHOWN else "")
            parts.append(f"{what} key(s): {shown}")
    return ("load_torch_state_dict: the state_dict does not match the port (nothing was loaded); "
            + "; ".join(parts) + ". Pass strict=False to load the keys that match.")


def _refuse_quantized(ported) -> None:
    from .layer_types import QUANTIZED_TYPES, record

    quantized = []
    for path, module in ported.named_modules():
        found = record(module) if not isinstance(module, list) else None
        if found is not None and found[0] in QUANTIZED_TYPES:
            quantized.append(path)
    if quantized:
        raise WeightsUpdateError(
            f"load_torch_state_dict: the port has quantized layers ({', '.join(sorted(quantized)[:5])}"
            f"{', ...' if len(quantized) > 5 else ''}), whose packed weights no torch tensor maps to; nothing was "
            "loaded. Load the weights into the float port (convert again, or porter.load the float artifact), "
            "then quantize it again (porter.layers.quantize_model).")


def _stage(ported, name: str, record: dict, entries: list) -> mx.array:
    """The new MLX array for ``name`` (checked: shape, the tied names' agreement, its place in the tree)."""
    values = [(key, _as_numpy(key, value)) for key, value in entries]
    want = tuple(record["torch_shape"])
    for key, value in values:
        if tuple(value.shape) != want:
            raise WeightsUpdateError(f"load_torch_state_dict: size mismatch for {key!r}: the state_dict has shape "
                                     f"{tuple(value.shape)} but the port holds {want} (nothing was loaded)")
    (first_key, first), *others = values
    for key, value in others:
        if not _same(first, value):
            raise WeightsUpdateError(f"load_torch_state_dict: {first_key!r} and {key!r} name one tied tensor in the "
                                     "port but the state_dict gives them different values (nothing was loaded)")
    current = _current(ported, name)
    forward, _ = transforms.get(record["transform"])
    array = _mlx_weight(forward(first, **record["attrs"]), str(first.dtype))  # the conversion's own copy
    if mx.issubdtype(array.dtype, mx.complexfloating) and not mx.issubdtype(current.dtype, mx.complexfloating):
        raise WeightsUpdateError(f"load_torch_state_dict: {first_key!r} is complex but the port holds it as "
                                 f"{current.dtype} (nothing was loaded)")
    if array.dtype != current.dtype:
        array = array.astype(current.dtype)  # the port keeps its dtype
    if array.shape != current.shape:
        if array.size != current.size:
            raise WeightsUpdateError(f"load_torch_state_dict: the port holds {name!r} as shape {current.shape}, "
                                     f"which {tuple(array.shape)} from the state_dict does not fill (the layer "
                                     "was changed since conversion?); nothing was loaded")
        array = array.reshape(current.shape)  # a 0-d weight held as (1,): same elements
    return array


def _current(ported, name: str) -> mx.array:
    """The array the port holds for ``name`` now; a layer replaced since conversion is refused by name."""
    path = ported._program.keys[name]
    try:
        parent = _parent(ported, path)
        array = parent[path[-1]]
    except (KeyError, IndexError, TypeError):
        array = None
    if not isinstance(array, mx.array):
        raise WeightsUpdateError(f"load_torch_state_dict: the port no longer holds an array for {name!r} where "
                                 "conversion put it (a layer was replaced?); nothing was loaded")
    return array


def _parent(ported, path: list):
    obj = ported
    for key in path[:-1]:
        obj = obj[key]
    return obj


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _as_numpy(key: str, value) -> np.ndarray:
    """A state_dict value as numpy, torch layout (a torch tensor without a copy where numpy can view it; 16-bit
    and narrower floats numpy lacks as float32, which holds them exactly)."""
    if isinstance(value, np.ndarray):
        array = value
    elif isinstance(value, (np.generic, bool, int, float)):
        array = np.asarray(value)
    elif isinstance(value, mx.array):
        array = np.array(value.astype(mx.float32) if value.dtype == mx.bfloat16 else value)
    elif type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach"):
        array = _torch_numpy(key, value)
    else:
        raise WeightsUpdateError(f"load_torch_state_dict: {key!r} is a {type(value).__name__}, not a tensor or "
                                 "array (nothing was loaded)")
    if array.dtype.kind not in "biufc":  # object, string, datetime arrays hold no weights
        raise WeightsUpdateError(f"load_torch_state_dict: {key!r} is an array of {array.dtype}, not numbers "
                                 "(nothing was loaded)")
    return array


def _torch_numpy(key: str, tensor) -> np.ndarray:
    t = tensor.detach()
    problem = ("a sparse tensor" if str(t.layout) != "torch.strided" else
               "a quantized tensor" if t.is_quantized else
               "a meta tensor (it holds no values)" if t.is_meta else None)
    if problem:
        raise WeightsUpdateError(f"load_torch_state_dict: {key!r} is {problem}; give dense tensors (nothing was "
                                 "loaded)")
    t = t.cpu()
    try:
        return t.numpy()
    except TypeError:  # bfloat16, float8: numpy has no such dtype
        if t.is_floating_point():
            return t.float().numpy()
        raise WeightsUpdateError(f"load_torch_state_dict: {key!r} has dtype {t.dtype}, which Porter cannot read "
                                 "(nothing was loaded)") from None

