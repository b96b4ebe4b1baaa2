"""Export mode: while it is on, every layer and converter kernel builds only ops MLX can serialize.

``mx.export_function`` (an ``.mlxfn`` file for C++, Swift or another Python) serializes a traced graph primitive by
primitive, and refuses what it cannot write: Porter's native CPU kernels (custom primitives of ``layers/csrc``),
``mx.custom_function`` wrappers (primitive ``CustomTransforms``: Porter's hand-written VJPs) and ``mx.contiguous``.
Each place that would build one consults :func:`active` and, while exporting, builds the pure-MLX ops computing the
same forward values instead, and says so with :func:`note` (what was replaced, by what). Outside export mode the
check is one dict lookup on paths that already branch, so the normal path is unchanged.

    >>> with export_mode() as mode:
    ...     mx.export_function("model.mlxfn", model, x)
    >>> mode.replacements       # {"native Winograd 3x3 conv -> MLX conv_general": 8, ...}
"""

from __future__ import annotations

import mlx.core as mx

_state = {"on": False, "notes": None}


def active() -> bool:
    """Whether export mode is on (layers then build only serializable MLX ops)."""
    return _state["on"]


def note(replacement: str) -> None:
    """Record one replacement made while exporting (``"what -> by what"``); counted per distinct text."""
    notes = _state["notes"]
    if notes is not None:
        notes[replacement] = notes.get(replacement, 0) + 1


def contiguous(x: mx.array) -> mx.array:
    """``mx.contiguous(x)`` (a row-contiguous copy where ``x`` is a strided view); while exporting, where MLX cannot
    serialize that primitive, ``mx.where(True, x, x)``: the same values bit for bit (NaN and -0.0 included), and an
    elementwise op writes a strided input into a fresh row-contiguous array."""
    if not _state["on"]:
        return mx.contiguous(x)
    note("mx.contiguous -> an elementwise copy (mx.where)")
    return mx.where(mx.array(True), x, x)


class export_mode:
    """Context manager: layers and converter kernels build serializable pure-MLX ops while the block runs.

    Inside the block, native kernels, custom-VJP wrappers and ``mx.contiguous`` are replaced by plain MLX ops with
    the same forward values (gradients are not exported). :attr:`replacements` maps each replacement made, as
    ``"what -> by what"``, to how many times it was made. Export modes do not nest (the inner one would hide the
    outer one's notes): entering one inside another raises ``RuntimeError``.
    """

    def __init__(self):
        self.replacements: dict = {}
        self._entered = False

    def __enter__(self):
        if _state["on"]:
            raise RuntimeError("[export_mode] export modes do not nest: one is already active")
        self._entered = True
        self.replacements = {}
        _state.update(on=True, notes=self.replacements)
        return self

    def __exit__(self, *exc):
        if self._entered:
            _state.update(on=False, notes=None)
            self._entered = False
        return False
