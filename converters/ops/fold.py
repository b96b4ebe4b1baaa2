"""``F.unfold`` / ``F.fold`` (ATen's im2col / col2im): sliding 2-d blocks of an (N, C, H, W) tensor as columns
(N, C * kh * kw, L) and their sum back into an image; and ``Tensor.unfold`` (sliding windows along one dim, as
``stft`` frames a signal).

Column ``c * kh * kw + i * kw + j`` holds input channel ``c`` at kernel tap ``(i, j)``; block ``l`` runs over the
output positions row-major. Both stay in torch's layout (the columns mix channels and taps), unbatched inputs
((C, H, W) / (C * kh * kw, L)) included.
"""

from __future__ import annotations

import mlx.core as mx

from .. import layout as L
from ..ir import Ref
from ..limits import check_elements
from ..registry import kernel, register
from ..spec import AXIS, GEOMETRY, SIZES, TENSOR, Int, Ints, Opt

PAIR = Ints(2, 2, 0, GEOMETRY)
POSITIVE_PAIR = Ints(2, 2, 1, GEOMETRY)


def _blocks(size, kernel_size, dilation, padding, stride, what):
    """Block count per spatial dim (torch's formula); a clear error where torch refuses."""
    counts = []
    for d in range(2):
        span = dilation[d] * (kernel_size[d] - 1) + 1
        n = (size[d] + 2 * padding[d] - span) // stride[d] + 1
        if n < 1:
            raise ValueError(f"{what}: the {kernel_size[0]}x{kernel_size[1]} kernel (dilation {tuple(dilation)}) "
                             f"does not fit the padded input of spatial size {tuple(size)} (padding "
                             f"{tuple(padding)}): no block")
        counts.append(n)
    return counts


def _rows(k, dilation, stride, count):
    """(k, count) padded-image positions that kernel tap i reads for block j, along one dim."""
    return (mx.arange(k) * dilation)[:, None] + (mx.arange(count) * stride)[None, :]


def _index(kernel_size, dilation, stride, counts):
    """Broadcast (kh, kw, oh, ow) row and column indices of every tap of every block: one gather / scatter, no
    Python loop over taps (a graph's kernel size cannot make the loader spin)."""
    rows = _rows(kernel_size[0], dilation[0], stride[0], counts[0])
    cols = _rows(kernel_size[1], dilation[1], stride[1], counts[1])
    return rows[:, None, :, None], cols[None, :, None, :]


@kernel("im2col", inputs=[TENSOR], attrs={"kernel_size": POSITIVE_PAIR, "dilation": POSITIVE_PAIR,
                                          "padding": PAIR, "stride": POSITIVE_PAIR})
def k_im2col(x, *, kernel_size, dilation, padding, stride):
    if x.ndim == 3:
        return k_im2col(x[None], kernel_size=kernel_size, dilation=dilation, padding=padding, stride=stride)[0]
    if x.ndim != 4:
        raise ValueError(f"unfold: expected a 3-d or 4-d input, got {x.ndim} dims")
    n, c, h, w = x.shape
    counts = _blocks((h, w), kernel_size, dilation, padding, stride, "unfold")
    taps = kernel_size[0] * kernel_size[1]
    check_elements([n, c, taps, counts[0], counts[1]], "unfold")
    xp = mx.pad(x, [(0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])])
    cols = xp[(slice(None), slice(None)) + _index(kernel_size, dilation, stride, counts)]  # (N, C, kh, kw, oh, ow)
    return cols.reshape(n, c * taps, counts[0] * counts[1])


@kernel("col2im", inputs=[TENSOR, Opt(SIZES)], attrs={
    "output_size": Opt(POSITIVE_PAIR), "kernel_size": POSITIVE_PAIR, "dilation": POSITIVE_PAIR, "padding": PAIR,
    "stride": POSITIVE_PAIR})
def k_col2im(cols, sizes=None, *, output_size=None, kernel_size, dilation, padding, stride):
    """``F.fold``; the output size is the ``output_size`` attribute, or the ``sizes`` input where it is computed
    from the input's shape (``F.fold(cols, x.shape[-2:], ...)``), checked here as torch checks the argument."""
    if (sizes is None) == (output_size is None):
        raise ValueError("fold: exactly one of the output size input and the 'output_size' attribute is needed")
    if sizes is not None:
        if len(sizes) != 2 or not all(isinstance(v, int) and 1 <= v <= GEOMETRY for v in sizes):
            raise ValueError(f"fold: output_size must be two sizes in [1, {GEOMETRY}], got {list(sizes)}")
        output_size = [int(v) for v in sizes]
    if cols.ndim == 2:
        return k_col2im(cols[None], output_size=output_size, kernel_size=kernel_size, dilation=dilation,
                        padding=padding, stride=stride)[0]
    if cols.ndim != 3:
        raise ValueError(f"fold: expected a 2-d or 3-d input, got {cols.ndim} dims")
    n, ck, length = cols.shape
    taps = kernel_size[0] * kernel_size[1]
    counts = _blocks(output_size, kernel_size, dilation, padding, stride, "fold")
    if ck % taps:
        raise ValueError(f"fold: input's dim 1 ({ck}) is not divisible by the kernel's {taps} taps")
    if length != counts[0] * counts[1]:
        raise ValueError(f"fold: input has {length} blocks, but output_size {tuple(output_size)} with this kernel, "
                         f"dilation, padding and stride gives {counts[0] * counts[1]}")
    c = ck // taps
    size = (output_size[0] + 2 * padding[0], output_size[1] + 2 * padding[1])
    check_elements([n, c, size[0], size[1]], "fold")
    cols = cols.reshape(n, c, kernel_size[0], kernel_size[1], counts[0], counts[1])
    out = mx.zeros((n, c) + size, dtype=cols.dtype)
    out = out.at[(slice(None), slice(None)) + _index(kernel_size, dilation, stride, counts)].add(cols)
    return out[:, :, padding[0]:padding[0] + output_size[0], padding[1]:padding[1] + output_size[1]]


def _pair(value):
    return [int(v) for v in value] if len(value) == 2 else [int(value[0])] * 2


@register("aten.im2col.default")
def convert_im2col(ctx, call):
    x = call.arg("self")
    ident = L.identity(ctx.meta(x).rank)
    attrs = {name: _pair(call.arg(name)) for name in ("kernel_size", "dilation", "padding", "stride")}
    ctx.emit("im2col", [ctx.tensor(x, ident)], attrs, perm=L.identity(call.meta.rank))


@register("aten.col2im.default")
def convert_col2im(ctx, call):
    x = call.arg("self")
    ident = L.identity(ctx.meta(x).rank)
    attrs = {name: _pair(call.arg(name)) for name in ("kernel_size", "dilation", "padding", "stride")}
    output_size = list(call.arg("output_size"))
    if any(isinstance(v, Ref) for v in output_size):  # computed from an input's shape: read at run time
        sizes = ctx.value(output_size if len(output_size) == 2 else output_size * 2)
        ctx.emit("col2im", [ctx.tensor(x, ident), sizes], attrs, perm=L.identity(call.meta.rank))
        return
    attrs["output_size"] = _pair(output_size)
    ctx.emit("col2im", [ctx.tensor(x, ident)], attrs, perm=L.identity(call.meta.rank))


@kernel("windows", inputs=[TENSOR], attrs={"axis": AXIS, "size": Int(0, 1 << 31), "step": Int(1, 1 << 31)})
def k_windows(x, *, axis, size, step):
    """``Tensor.unfold(dim, size, step)`` in torch's layout: ``dim`` becomes the window count and each window's
    ``size`` entries form a new last dim."""
    length = x.shape[axis] if x.ndim else 1
    if size > length:
        raise ValueError(f"unfold: window size {size} exceeds the dim's size {length}")
    if x.ndim == 0:
        return x.reshape(1)
    count = (length - size) // step + 1
    check_elements([*x.shape[:axis], count, *x.shape[axis + 1:], size], "unfold")
    index = mx.arange(count)[:, None] * step + mx.arange(size)[None, :]
    out = mx.take(x, index.reshape(-1), axis=axis)
    out = out.reshape(*x.shape[:axis], count, size, *x.shape[axis + 1:])
    return mx.moveaxis(out, axis + 1, -1)


@register("aten.unfold.default")
def convert_windows(ctx, call):
    x = call.arg("self")
    rank = ctx.meta(x).rank
    size, step = call.arg("size"), call.arg("step")
    for name, v in (("size", size), ("step", step)):
        if not isinstance(v, int):
            call.fail(name, "a symbolic window size or step is not supported")
    ctx.emit("windows", [ctx.tensor(x, L.identity(rank))],
             {"axis": call.arg("dimension") % max(rank, 1), "size": size, "step": step},
             perm=L.identity(max(rank, 0) + 1))
