"""Constant folding in the TorchScript interpreter (what folds and why: ``capture_fold.py``; imports torch).

The interpreter runs every call on real values, so folding is decided call by call: a call folds when its op may
fold and every value it reads is a literal or a constant (a ``_ts_constant``, a tensor attribute, a non-persistent
buffer, or a folded value). The folded value is stored at once (a snapshot); a later folded write into it, or into a
tensor sharing its memory (a view), stores new snapshots of every such value, so later readers see the write as in
torch. A graph call writing into a constant: into a constant's own memory only (``c.add_(x)``, the write recorded as
before), never into a view of another folded value (refused: the write would be lost) nor into a buffer or
``_ts_constant`` (refused as state, as before).
"""

from __future__ import annotations

import torch

from . import capture_fold as F
from .ir import Ref


def _storage(t) -> "int | None":
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return None
    try:
        return t.untyped_storage().data_ptr() or None  # empty tensors share address 0: no memory to alias
    except (RuntimeError, NotImplementedError):
        return None


class ScriptFolder:
    """The folding of one TorchScript capture; ``store`` makes the graph constants."""

    def __init__(self, store: F.ConstantStore):
        self.store = store
        self.sources: dict = {}  # value name of a constant read from the module -> its torch name
        self.source_storages: dict = {}  # storage address of a source's tensor (the interpreter's copy) -> its name
        self.keys: dict = {}  # value name of a folded snapshot -> the key it was folded under
        self.count = 0

    def add_source(self, ref: Ref, torch_name: str, tensor) -> None:
        """``ref`` reads a constant of the module (``tensor``: the interpreter's copy of it)."""
        self.sources[ref.name] = torch_name
        if _storage(tensor) is not None:
            self.source_storages[_storage(tensor)] = torch_name

    def constant(self, ir) -> bool:
        if isinstance(ir, Ref):
            return ir.name in self.sources or ir.name in self.keys
        if isinstance(ir, (list, tuple)):
            return all(self.constant(i) for i in ir)
        if isinstance(ir, dict):
            return all(self.constant(i) for i in ir.values())
        return True

    def fold(self, op, kwargs: dict, ins: list, concrete, outs: list, env: dict, name: str) -> bool:
        """Bind ``outs`` to the stored value of the call when it folds; False (nothing done) otherwise."""
        # x.new_zeros(sizes) reads x's dtype and device only (zeros_like(x) reads its sizes too, which TorchScript
        # reads at run time: not folded)
        read = ins[1:] if F.op_base(op) in F.NEW_LIKE else ins
        if not (F.foldable(op, kwargs) and all(self.constant(ir) for ir, _ in read)):
            return False
        if F.nbytes(concrete) > F.LIMIT_BYTES or not F.storable(concrete):
            return False
        writes = F.writes_first_only(op._schema) if op._schema.is_mutable else False
        if writes and (not ins or _storage(ins[0][1]) in self.source_storages):
            return False  # a write into a module's constant: state, refused by the caller
        self.count += 1
        key = f"{name}{self.count}"
        values = list(concrete) if len(outs) > 1 else [concrete]
        for out, value in zip(outs, values):
            env[out] = (self._store(value, key), value)
        if writes:
            self.rebind(ins[0][1], env)
        return True

    def _store(self, value, key: str):
        ir = self.store.value(value, key)
        for ref in (ir if isinstance(ir, list) else [ir]):
            if isinstance(ref, Ref):
                self.keys[ref.name] = key
        return ir

    def rebind(self, written, env: dict) -> None:
        """After a folded write into ``written``: every folded value sharing its memory stored anew."""
        storage = _storage(written)
        for k, (ir, value) in list(env.items()):
            if isinstance(ir, Ref) and ir.name in self.keys and _storage(value) == storage:
                env[k] = (self._store(value, self.keys[ir.name]), value)

    def check_write(self, first, env: dict) -> None:
        """A graph call writes in place into ``first`` (its first input, (ir, value)): refuse a write into the
        memory of a module constant or of another folded value (a view the write would not reach)."""
        ir, value = first
        storage = _storage(value)
        if storage is not None and storage in self.source_storages:
            from .capture_export import _state_message

            raise NotImplementedError(_state_message(self.source_storages[storage]))
        if not (isinstance(ir, Ref) and ir.name in self.keys):
            return
        if any(isinstance(i, Ref) and i.name in self.keys and v is not value and _storage(v) == storage
               for i, v in env.values()):
            raise NotImplementedError(
                "the forward writes a value computed from its input into a view of a tensor built from constants "
                f"({ir.name!r}); Porter folds such tensors at conversion and cannot write through the view: build "
                "the tensor out of place (torch.cat, torch.where)")
        del self.keys[ir.name]  # written by the graph from here on: no longer a constant

    def masks(self, indices_ir: list, indices: list) -> list:
        """``indices`` of ``x[..., mask, ...]`` with every constant boolean mask as its positions."""
        out = []
        for ir, value in zip(indices_ir, indices):
            if isinstance(ir, Ref) and self.constant(ir) and F.is_mask(value):
                out.extend(self._store(p, f"mask{self.count}_{d}") for d, p in enumerate(F.mask_positions(value)))
                self.count += 1
            else:
                out.append(ir)
        return out

    def prune(self, read: set, param_values: dict) -> None:
        """Drop the folded values and the ``_ts_constant``/``_ts_attr`` constants no graph call reads any more
        (``read``: the value names read; every reader of such a constant may have been folded)."""
        self.store.prune(read)
        for value_name, name in self.sources.items():
            if value_name not in read and name.startswith(("_ts_constant", "_ts_attr")) \
                    and param_values.get(value_name) == name:
                del param_values[value_name]
                self.store.params.pop(name, None)
                self.store.param_dtypes.pop(name, None)
