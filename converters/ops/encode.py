"""``F.one_hot``: int64 class indices ``(*)`` -> int64 ``(*, num_classes)``.

The class count must be given (``num_classes=-1`` sizes the output from the data, which a capture cannot fix).
Like torch, an index outside ``[0, num_classes)`` is an error, checked on the host before the output is built
(inside an exported ``.mlxfn`` function, which cannot stop to check, such an index gives an all-zero row).
"""

from __future__ import annotations

import mlx.core as mx

from ..ir import Ref
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import TENSOR, Int
from ._layers import export_note, exporting


@kernel("one_hot", inputs=[TENSOR], attrs={"classes": Int(1, 1 << 24)})
def k_one_hot(index, *, classes):
    check_elements([*index.shape, classes], "one_hot")  # a hostile class count cannot make the loader allocate
    if index.size and not exporting():
        lo, hi = mx.min(index), mx.max(index)
        mx.eval(lo, hi)
        if lo.item() < 0 or hi.item() >= classes:
            bad = lo.item() if lo.item() < 0 else hi.item()
            raise IndexError(f"one_hot: class value {bad} is outside [0, {classes})")
    elif index.size:
        export_note("one_hot's host-side class range check -> out-of-range classes give all-zero rows")
    return (index[..., None] == mx.arange(classes, dtype=index.dtype)).astype(mx.int64)


@register("aten.one_hot.default")
def convert_one_hot(ctx, call):
    x, classes = call.arg("self"), call.arg("num_classes")
    if isinstance(classes, Ref) or classes < 1:
        call.fail("num_classes", "give the class count (num_classes=-1 sizes the output from the data)")
    perm = ctx.perm(x)
    ctx.emit("one_hot", [ctx.tensor(x)], {"classes": classes}, perm=tuple(perm) + (len(perm),))
