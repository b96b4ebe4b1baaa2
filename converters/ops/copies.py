"""The ``*_copy`` forms of view ops (``view_copy``, ``permute_copy``, ...: what functionalized and edge-dialect
programs record instead of views), ``unsafe_*`` forms of splits and aliases (``matrix_H``), converted as the op they copy: MLX arrays are
immutable, so a copy and a view give the same values. Imported last: every family has registered by then."""

from __future__ import annotations

from ..registry import register_same

SAME = {
    "aten.view_copy.default": "aten.view.default",
    "aten._reshape_copy.default": "aten.reshape.default",
    "aten.permute_copy.default": "aten.permute.default",
    "aten.transpose_copy.int": "aten.transpose.int",
    "aten.t_copy.default": "aten.t.default",
    "aten.expand_copy.default": "aten.expand.default",
    "aten.narrow_copy.default": "aten.narrow.default",
    "aten.squeeze_copy.dim": "aten.squeeze.dim",
    "aten.squeeze_copy.dims": "aten.squeeze.dims",
    "aten.squeeze_copy.default": "aten.squeeze.default",
    "aten.unsqueeze_copy.default": "aten.unsqueeze.default",
    "aten.select_copy.int": "aten.select.int",
    "aten.slice_copy.Tensor": "aten.slice.Tensor",
    "aten.diagonal_copy.default": "aten.diagonal.default",
    "aten.unfold_copy.default": "aten.unfold.default",
    "aten.alias_copy.default": "aten.alias.default",
    "aten.detach_copy.default": "aten.detach.default",
    "aten.split_copy.Tensor": "aten.split.Tensor",
    "aten.split_with_sizes_copy.default": "aten.split_with_sizes.default",
    "aten.unbind_copy.int": "aten.unbind.int",
    "aten.unsafe_split.Tensor": "aten.split.Tensor",
    "aten.unsafe_split_with_sizes.default": "aten.split_with_sizes.default",
    "aten.matrix_H.default": "aten.mH.default",  # an alias, not a copy
}

MISSING = sorted(op for op, as_op in SAME.items() if not register_same(op, as_op))
