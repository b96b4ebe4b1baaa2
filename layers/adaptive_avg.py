"""Adaptive average pooling (AdaptiveAvgPool1d/2d/3d and adaptive_avg_pool1d/2d/3d), exact to torch, channels-last.

Torch's windows are ``[o*L // O, ceil((o+1)*L / O))`` per axis (docs/SEMANTICS.md §5.1): they overlap and vary in
length when ``O`` does not divide ``L``, so the "stride = L // O" shortcut is wrong. This file checks the arguments and
the input in torch's order; the box sums, native or pure MLX, are ``layers/_window_sum.py``'s
(:func:`~porter.layers._window_sum.adaptive_average`).
"""

from __future__ import annotations

import numbers

import mlx.core as mx
import mlx.nn as nn

from . import _window_sum
from ._utils import ShapeOnly, as_batched, check_rank, plan_cache


def check_output_size(output_size, nd: int, layer: str) -> tuple:
    """Normalise ``output_size`` to an ``nd``-tuple (``None`` entries kept for 2d/3d), with torch's errors."""
    fn = f"adaptive_avg_pool{nd}d"
    if output_size is None:
        raise TypeError(f"[{layer}] 'output_size' must be an int or a tuple of ints, not None")
    if isinstance(output_size, (list, tuple)):
        items = tuple(output_size)
        if nd == 1 and len(items) != 1:
            raise ValueError(f"[{layer}] {fn}() argument 'output_size' should contain one int (got {len(items)})")
        if len(items) != nd:
            raise ValueError(f"[{layer}] {fn}: output_size must be {nd} (got {items!r})")
    else:
        items = (output_size,) * nd
    for item in items:
        if item is None and nd > 1:
            continue
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise TypeError(
                f"[{layer}] {fn}(): argument 'output_size' must be tuple of ints, but found element of type "
                f"{type(item).__name__} (got {output_size!r})"
            )
    items = tuple(None if i is None else int(i) for i in items)
    if any(i is not None and i < 0 for i in items):
        # torch runs 1d as 2d with output (1, O) and prints the set its own way
        shown = (1,) + items if nd == 1 else items
        text = ", ".join(str(i) for i in shown[:2]) + "".join(f",{i}" for i in shown[2:])
        raise ValueError(
            f"[{layer}] 'output_size': adaptive_avg_pool{max(nd, 2)}d: elements of output_size must be greater than "
            f"or equal to 0 but received {{{text}}}"
        )
    return items


@plan_cache
def _plan(nd: int, output_size, shape: tuple, dtype, layer: str) -> tuple:
    """Torch's checks of the arguments and of the input's shape and dtype; returns ``(batched, out, empty)``."""
    sizes = check_output_size(output_size, nd, layer)
    x = ShapeOnly(shape, dtype)
    batched = check_rank(x, nd, layer)
    full = shape if batched else (1,) + tuple(shape)
    spatial = tuple(full[1 : 1 + nd])
    # torch's 3d kernel also rejects zero channels; its 1d/2d kernels accept them
    empty = [f"spatial dimension {axis}" for axis, n in enumerate(spatial) if n == 0]
    if nd == 3 and full[-1] == 0:
        empty.insert(0, "the channel dimension")
    if empty:
        torch_shape = list(shape[:-1 - nd]) + [shape[-1]] + list(spatial)
        raise ValueError(
            f"[{layer}] 'input': adaptive_avg_pool{max(nd, 2)}d(): Expected input to have non-zero size for "
            f"non-batch dimensions, but input has sizes {torch_shape} (torch layout) with {empty[0]} being empty"
        )
    if not mx.issubdtype(dtype, mx.floating):
        raise TypeError(f"[{layer}] 'input': \"{layer}\" not implemented for '{dtype}' (floating input only)")
    out = tuple(n if o is None else o for o, n in zip(sizes, spatial))
    return batched, out, any(o == 0 for o in out) or x.size == 0


def adaptive_avg_pool(x: mx.array, nd: int, output_size, *, layer: str = None) -> mx.array:
    """Generic N-d adaptive average pool on ``(N, *spatial, C)`` or ``(*spatial, C)`` input (torch semantics)."""
    layer = layer or f"adaptive_avg_pool{nd}d"
    if not isinstance(x, mx.array):
        check_output_size(output_size, nd, layer)
        as_batched(x, nd, layer)  # raises for a non-array
    batched, out, empty = _plan(nd, output_size, tuple(x.shape), x.dtype, layer)
    xb = x if batched else x[None]
    if empty:
        result = mx.zeros((xb.shape[0],) + out + (xb.shape[-1],), dtype=xb.dtype)
        return result if batched else result[0]
    result = _window_sum.adaptive_average(xb, out)
    return result if batched else result[0]


def adaptive_avg_pool1d(x, output_size):
    """Adaptive average pool on ``(N, L, C)`` or ``(L, C)``; torch's ``adaptive_avg_pool1d``."""
    return adaptive_avg_pool(x, 1, output_size, layer="adaptive_avg_pool1d")


def adaptive_avg_pool2d(x, output_size):
    """Adaptive average pool on ``(N, H, W, C)`` or ``(H, W, C)``; ``None`` in ``output_size`` keeps that axis."""
    return adaptive_avg_pool(x, 2, output_size, layer="adaptive_avg_pool2d")


def adaptive_avg_pool3d(x, output_size):
    """Adaptive average pool on ``(N, D, H, W, C)`` or ``(D, H, W, C)``; ``None`` keeps that axis."""
    return adaptive_avg_pool(x, 3, output_size, layer="adaptive_avg_pool3d")


class _AdaptiveAvgPoolNd(nn.Module):
    nd = 0

    def __init__(self, output_size):
        super().__init__()
        check_output_size(output_size, self.nd, type(self).__name__)
        self.output_size = output_size

    def __call__(self, x: mx.array) -> mx.array:
        return adaptive_avg_pool(x, self.nd, self.output_size, layer=type(self).__name__)

    def _extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """Torch's ``nn.AdaptiveAvgPool1d`` on channels-last input.

    Args:
        output_size (int or tuple): output length ``L_out`` (0 gives an empty output).

    Shape: input ``(N, L, C)`` or ``(L, C)``; output ``(N, L_out, C)`` or ``(L_out, C)``.

    Example:
        >>> AdaptiveAvgPool1d(4)(mx.arange(10.0).reshape(1, 10, 1))[0, :, 0]
        array([1, 3, 6, 8], dtype=float32)
    """

    nd = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """Torch's ``nn.AdaptiveAvgPool2d`` on channels-last input.

    Args:
        output_size (int or tuple): ``(H_out, W_out)``; an entry of ``None`` keeps the input's size on that axis.

    Shape: input ``(N, H, W, C)`` or ``(H, W, C)``; output ``(N, H_out, W_out, C)`` or ``(H_out, W_out, C)``.

    Example:
        >>> AdaptiveAvgPool2d((1, 1))(mx.ones((8, 7, 7, 512))).shape
        (8, 1, 1, 512)
    """

    nd = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """Torch's ``nn.AdaptiveAvgPool3d`` on channels-last input.

    Args:
        output_size (int or tuple): ``(D_out, H_out, W_out)``; ``None`` entries keep the input's size.

    Shape: input ``(N, D, H, W, C)`` or ``(D, H, W, C)``; output ``(N, D_out, H_out, W_out, C)``.

    Example:
        >>> AdaptiveAvgPool3d((2, None, 1))(mx.ones((1, 4, 5, 6, 3))).shape
        (1, 2, 5, 1, 3)
    """

    nd = 3
