"""Channel shuffle along the last axis, torch's ``channel_shuffle`` (ShuffleNet) on channels-last maps.

Torch's formulation, ``x.view(N, G, C/G, ...).transpose(1, 2).reshape(N, C, ...)``, is in MLX a reshape, a swap of
the last two axes and a reshape whose copy walks the strides one element at a time (0.47 ms for (8, 28, 28, 116)
float32 on one AMD Zen 3 thread; torch 0.25). The native kernel (``layers/csrc/shuffle_kernels.h``) copies each
row with the group count known at compile time for 2-4 groups (0.12 ms). Other devices, export mode, and builds
without the kernels take the MLX formulation, with the same values.
"""

from __future__ import annotations

import mlx.core as mx

from . import _native

# The native shuffle when this is on (read on every call; benchmarks/model_switch.py flips it for A/B runs).
# Measured (1 thread, CPU time, AMD Zen 3): (8, 28, 28, 116) float32 in 2 groups 0.47 ms -> 0.12 (torch 0.25).
NATIVE = True
# results with fewer elements than this keep the MLX formulation (nothing to gain over one graph node)
NATIVE_MIN_ELEMENTS = 1 << 12


def channel_shuffle(x: mx.array, groups: int) -> mx.array:
    """Shuffle the last axis: its ``C`` entries read as ``groups`` groups of ``C / groups``, channel
    ``g * (C / groups) + i`` moves to ``i * groups + g`` (torch's ``F.channel_shuffle`` / ``nn.ChannelShuffle``).

    Args:
        x (mx.array): ``(*, C)``, any dtype, at least one dim.
        groups (int): a positive divisor of ``C``.

    Shape: ``(*, C)`` -> ``(*, C)`` (channels-last feature maps ``(N, H, W, C)``). Differentiable (the gradient is
    the inverse shuffle, ``C / groups`` groups); ``mx.vmap`` maps it.

    Example:
        >>> x = mx.arange(6).reshape(1, 1, 1, 6)
        >>> channel_shuffle(x, 2).reshape(-1).tolist()
        [0, 3, 1, 4, 2, 5]
    """
    if not isinstance(x, mx.array) or x.ndim == 0:
        raise ValueError("[channel_shuffle] 'x' must be an mx.array with at least one dim (the channels, last).")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"[channel_shuffle] 'groups' must be a positive int but got {groups!r}.")
    c = x.shape[-1]
    if c % groups:
        raise ValueError(f"[channel_shuffle] 'groups' ({groups}) must divide the {c} channels of the last axis.")
    if groups == 1 or groups == c:
        return x if groups == 1 else _mlx_shuffle(x, groups)
    if NATIVE and x.size >= NATIVE_MIN_ELEMENTS and x.dtype.size in (1, 2, 4, 8) and _native.active("channel shuffle"):
        return _native.channel_shuffle(x, groups)
    return _mlx_shuffle(x, groups)


def _mlx_shuffle(x: mx.array, groups: int) -> mx.array:
    lead, c = x.shape[:-1], x.shape[-1]
    return x.reshape(*lead, groups, c // groups).swapaxes(-1, -2).reshape(*lead, c)
