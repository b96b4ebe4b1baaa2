"""Constant folding at capture: a call whose inputs are all constants is run once in torch and stored as a constant
(imports torch; conversion only).

A forward often builds tensors that do not depend on its inputs: a window for an STFT front end
(``torch.hamming_window(400)``), the pair indices of a DLRM-style interaction (``torch.tril_indices(n, n)``), a
relative-position table from ``meshgrid``/``arange`` written in place. Their values are fixed when the model is
converted, so each such call is evaluated here with torch, on the CPU, in its own dtype (the folded value IS
torch's), and the port reads the result as a stored constant: every op benefits, including ops Porter has no
converter for.

What counts as a constant: literals, tensors torch.export lifts as constants (``torch.tensor([...])`` in the
forward, plain tensor attributes), non-persistent buffers, and results of folded calls. Never parameters or
persistent buffers (a user changes them with ``porter update`` / ``load_torch_state_dict``), never a value computed
from an input or from a dynamic size. Never folded: random ops (torch's ``nondeterministic_seeded`` tag: ``rand``,
``dropout``...), ops with side effects (asserts, profiler records), writes into a parameter or buffer (state the
next call reads: refused as before), and any value over :data:`LIMIT_BYTES` (the call then stays in the graph and
is converted, or refused, as any other). Folded constants are saved as ``"state_dict": false`` entries, like lifted
constants: ``torch_parameters()`` and ``porter update`` leave them out.

Boolean-mask indexing ``x[:, mask]`` with a constant mask becomes indexing by the mask's positions
(``mask.nonzero()``, stored as constants): the same values and gradients, with a shape known at conversion.

The frontends call this module: ``capture_fold_export.py`` (the torch.export walk) and ``capture_script.py``.
"""

from __future__ import annotations

import torch

from .ir import Ref, ValueMeta

# the switch: False records every call as before (no folding, no mask positions), in both frontends
ENABLED = True
LIMIT_BYTES = 64 << 20  # a folded value larger than this stays a graph call
PREFIX = "_folded_"  # the state_dict-style name of a folded constant: _folded_<node>

# dtypes a folded constant can be stored in (graph.json params / safetensors, as other constants)
STORABLE = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                      torch.bfloat16, torch.float32, torch.float64})
# random ops torch does not tag (the tag covers rand, dropout, bernoulli...): never folded
_RANDOM = frozenset({"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "normal", "bernoulli",
                     "multinomial", "uniform", "exponential", "poisson", "randperm", "native_dropout", "dropout",
                     "feature_dropout", "alpha_dropout", "feature_alpha_dropout", "rrelu", "rrelu_with_noise",
                     "cauchy", "geometric", "log_normal", "random"})
# uninitialised memory: folded as zeros (torch's values are whatever the allocator had; zeros are one of them)
_EMPTY = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "empty_permuted"})
# ops whose ``indices`` may hold a constant boolean mask (``x[:, mask]``, ``y[:, mask] = v``)
MASK_OPS = frozenset({"aten.index.Tensor", "aten.index_put.default", "aten.index_put_.default"})
# ops that read their first argument's dtype, device and (``*_like``) sizes only, never its values: with those known
# at conversion (static sizes) they fold whatever the argument is (torchvision's Swin: ``x.new_zeros((H, W))``)
NEW_LIKE = frozenset({"new_zeros", "new_ones", "new_full", "new_empty", "new_empty_strided"})
SIZED_LIKE = frozenset({"zeros_like", "ones_like", "full_like", "empty_like"})


def op_base(target) -> str:
    return target._schema.name.split("::")[-1] if isinstance(target, torch._ops.OpOverload) else ""


def writes_first_only(schema) -> bool:
    """Whether ``schema`` writes its first argument and nothing else (``add_``, ``copy_``, ``fill_``)."""
    writes = [a.alias_info is not None and a.alias_info.is_write for a in schema.arguments]
    return bool(writes) and writes[0] and not any(writes[1:])


def foldable(target, kwargs: dict) -> bool:
    """Whether a call of ``target`` may be folded when its inputs are constants: deterministic, without side
    effects, writing (if at all) only into its first argument, and on the CPU."""
    import operator

    from torch.fx.node import _side_effectful_functions

    if target in _side_effectful_functions:
        return False
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    if isinstance(target, torch._ops.OpOverload):
        base = op_base(target).rstrip("_")
        if torch.Tag.nondeterministic_seeded in target.tags or base in _RANDOM or base.startswith("_assert"):
            return False
        if base.startswith("sym_constrain") or target.namespace not in ("aten", "prims"):
            return False
        return not target._schema.is_mutable or writes_first_only(target._schema)
    return getattr(target, "__module__", None) in ("_operator", "operator", "math") and target is not operator.setitem


def stand_in(example: "torch.Tensor") -> "torch.Tensor":
    """A real tensor with ``example``'s sizes, strides and dtype (its values never read)."""
    return torch.empty_strided([int(s) for s in example.shape], [int(s) for s in example.stride()],
                               dtype=example.dtype)


def is_check(target) -> bool:
    """An assertion export inserts (``_assert_tensor_metadata``, ``_assert_scalar``, ``sym_constrain_range``): on
    constants it holds on every call, so it is run once at conversion and dropped."""
    base = op_base(target)
    return base.startswith("_assert") or base.startswith("sym_constrain_range")


def evaluate(target, args, kwargs):
    """``target(*args, **kwargs)`` on real values, as torch computes it (no autograd); ``empty`` gives zeros."""
    with torch.no_grad():
        out = target(*args, **kwargs)
    if op_base(target) in _EMPTY and isinstance(out, torch.Tensor):
        out.zero_()
    return out


def nbytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(nbytes(v) for v in value)
    return 0


def storable(value) -> bool:
    """Whether ``value`` can be handed to the graph: tensors of :data:`STORABLE` dtypes (lists of them), numbers,
    bools, None, dtypes."""
    if isinstance(value, torch.Tensor):
        return value.dtype in STORABLE and value.layout == torch.strided and not value.is_quantized
    if isinstance(value, (list, tuple)):
        return all(storable(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.layout,
                                               torch.memory_format))


def mask_positions(mask: "torch.Tensor") -> list:
    """The integer index tensors equivalent to indexing by the boolean ``mask`` (one per mask dim, int64)."""
    return list(mask.nonzero().unbind(1))


def is_mask(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.bool and value.dim() >= 1


def keeps_mask(op: str, indices: list, values_numel) -> bool:
    """Whether a constant mask stays a mask: ``y[mask] = scalar`` (one index, one value) converts as a ``where``
    over the mask, the same values without a scatter; every other mask indexing becomes positions."""
    return op != "aten.index.Tensor" and len(indices) == 1 and values_numel == 1


class ConstantStore:
    """Turns folded values into graph constants: a tensor becomes a ``"state_dict": false`` parameter named
    ``_folded_<key>`` (a snapshot: a later in-place fold into the same tensor gives a new constant), numbers and
    dtypes become literals, lists become lists. Writes into the capture's ``params``/``param_values``/
    ``param_dtypes``/``not_in_state_dict`` and, when given, ``metas`` (value name -> :class:`ValueMeta`)."""

    def __init__(self, params: dict, param_values: dict, param_dtypes: dict, not_in_state_dict: set,
                 metas: "dict | None" = None):
        self.params, self.param_values, self.param_dtypes = params, param_values, param_dtypes
        self.not_in_state_dict, self.metas = not_in_state_dict, metas
        self._snapshots: dict = {}  # (key, torch version counter) -> Ref
        self.names: set = set()  # the torch names this store added
        self.literal_keys: set = set()  # keys of values float32 whatever the model's dtype (capture_dtypes.py)
        self.float32_constants: set = set()  # the float32 constants stored from them

    def value(self, value, key: str):
        """The graph form of a folded ``value`` computed by node ``key``."""
        from .capture_export import _dtype_name, literal

        if isinstance(value, torch.Tensor):
            return self.tensor(value, key)
        if isinstance(value, (list, tuple)):
            return [self.value(v, f"{key}_{i}") for i, v in enumerate(value)]
        if isinstance(value, torch.dtype):
            return _dtype_name(value)
        return literal(value, None)

    def tensor(self, t: "torch.Tensor", key: str) -> Ref:
        from .capture_export import _dtype_name, host_view

        if not storable(t):
            raise NotImplementedError(f"the constant {key!r} computed in the forward has dtype {t.dtype}, which a "
                                      "port cannot store")
        version = (key, t._version)
        if version in self._snapshots:
            return self._snapshots[version]
        base = PREFIX + "".join(c if c.isalnum() or c == "_" else "_" for c in key)
        name, n = base, 1
        while name in self.params or f"c{name}" in self.param_values or (self.metas and f"c{name}" in self.metas):
            name, n = f"{base}_v{n}", n + 1
        snapshot = t.detach().clone(memory_format=torch.contiguous_format)
        self.params[name] = host_view(snapshot)
        if key in self.literal_keys and t.dtype == torch.float32:
            self.float32_constants.add(name)
        self.param_dtypes[name] = _dtype_name(t.dtype)
        self.not_in_state_dict.add(name)
        self.param_values[f"c{name}"] = name
        self.names.add(name)
        if self.metas is not None:
            shape = list(snapshot.shape)
            self.metas[f"c{name}"] = ValueMeta("tensor", shape, _dtype_name(t.dtype), hint=list(shape))
        ref = self._snapshots[version] = Ref(f"c{name}")
        return ref

    def prune(self, read: set) -> None:
        """Drop the constants this store added that no graph value reads (``read``: value names read)."""
        for value_name, name in list(self.param_values.items()):
            if name in self.names and value_name not in read:
                del self.param_values[value_name]
                self.params.pop(name, None)
                self.param_dtypes.pop(name, None)
                self.not_in_state_dict.discard(name)
                if self.metas is not None:
                    self.metas.pop(value_name, None)
