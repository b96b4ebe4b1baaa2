"""Torch's NaN rule for a conv's weight gradient where a non-finite cotangent meets the zero padding.

The weight gradient of tap ``t`` sums ``cotangent[o] * x_padded[o * s + t * d - lo]`` over outputs ``o``. Where that
read lands in the padding, the product is ``cotangent[o] * 0``: zero for a finite cotangent, NaN for an inf or NaN
one. Torch's CPU kernels differ (measured with torch 2.13, 1 and 2 threads, batch 2 and 16):

* its oneDNN path (float32, 1-d/2-d, undilated, one group or depthwise) never forms the padding products: an inf
  there reaches only the taps that read the input;
* every other conv (3-d, float16/bfloat16/float64, dilated, grouped other than depthwise) gathers im2col columns
  with the zeros stored, so those taps' weight gradients are NaN for every input channel;
* transposed convs gather the cotangent instead (no padding products in any dtype).

Porter's strategies (MLX's conv VJP, the native grouped and depthwise kernels, the 3-d Winograd weight gradient...)
each follow one rule or the other; :func:`multiplies_padding` says which one torch follows, and
:func:`with_padding_products` makes the weight gradient follow it where torch multiplies the padding: NaN at
``(C_out, tap)`` wherever a non-finite cotangent sits at an output whose tap reads padding. The convs where torch does
not (oneDNN's) still get NaN there from the strategies that store zeros (MLX's conv VJP, the im2col weight gradient):
a known difference (docs/ARCHITECTURE.md).

Layouts as in ``_conv_engine``: ``y`` ``(N, *out, C_out)``, ``weight`` ``(C_out, *kernel, C_in/groups)``.
"""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

from . import _export

# Whether conv weight gradients get NaN where torch's im2col kernels multiply a non-finite cotangent by the padding
# (read on every call). Its cost is one pass over the cotangent's edge outputs per padded conv in a backward pass.
TORCH_PADDING_NAN = True


def multiplies_padding(dtype, nd: int, dilation: tuple, groups: int, c_in: int) -> bool:
    """Whether torch's CPU conv backward multiplies the zero padding into the weight gradient (see the module
    docstring): every conv but float32 1-d/2-d undilated ones with one group or depthwise."""
    onednn = dtype == mx.float32 and nd <= 2 and all(d == 1 for d in dilation) and groups in (1, c_in)
    return not onednn


def padding_taps(spatial: tuple, out: tuple, kernel: tuple, stride: tuple, lo: tuple, dilation: tuple) -> list:
    """Per spatial dim, a ``(k, out)`` bool matrix: tap ``t`` of output ``o`` reads padding (outside ``[0, size)``)."""
    masks = []
    for size, o, k, s, a, d in zip(spatial, out, kernel, stride, lo, dilation):
        pos = np.arange(o)[None, :] * s + np.arange(k)[:, None] * d - a
        masks.append((pos < 0) | (pos >= size))
    return masks


def with_padding_products(y, weight, spatial, stride, lo, dilation) -> mx.array:
    """``y`` itself; its VJP adds NaN to ``weight``'s gradient where torch's im2col kernels multiply a non-finite
    cotangent by the padding (see the module docstring), zero elsewhere. ``y`` unchanged when no tap reads padding or
    while exporting (a custom VJP cannot be serialized)."""
    if not TORCH_PADDING_NAN or _export.active():
        return y
    mark = _marker(tuple(spatial), tuple(y.shape[1:-1]), tuple(weight.shape[1:-1]), tuple(stride), tuple(lo),
                   tuple(dilation))
    return y if mark is None else mark(y, weight)


def _runs(index) -> list:
    """Sorted indices -> ``[(start, stop), ...]`` of their contiguous runs."""
    runs = []
    for i in index.tolist():
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


@functools.lru_cache(maxsize=256)
def _marker(spatial, out, kernel, stride, lo, dilation):
    """The identity with the NaN-adding VJP for one conv geometry; None where no tap ever reads padding."""
    masks = padding_taps(spatial, out, kernel, stride, lo, dilation)
    if not any(m.any() for m in masks):
        return None
    nd = len(kernel)
    # per dim: the runs of outputs some tap reads padding at (a few at each edge), and which taps read padding there
    bands = [(_runs(np.nonzero(m.any(axis=0))[0]), m) for m in masks]

    @mx.custom_function
    def mark(y, weight):
        return y

    @mark.vjp
    def mark_vjp(primals, cotangent, output):
        y, weight = primals
        flag = None
        for i, (runs, mask) in enumerate(bands):
            if not runs:
                continue
            others = [a for a in range(nd + 1) if a != 1 + i]
            bad = []  # per run of edge outputs: (run length, C_out), NaN where a cotangent there is not finite
            for a, b in runs:
                slab = cotangent[(slice(None),) * (1 + i) + (slice(a, b),)]
                bad.append(mx.sum(slab * 0, axis=others))  # inf * 0 and NaN * 0 are NaN: 4x faster than isfinite
            bad = mx.isnan(bad[0] if len(bad) == 1 else mx.concatenate(bad))
            taps = np.concatenate([mask[:, a:b] for a, b in runs], axis=1)
            hits = mx.array(taps.astype(np.float32)) @ bad.astype(mx.float32) > 0  # (k_i, C_out)
            shape = [weight.shape[0]] + [kernel[i] if j == i else 1 for j in range(nd)] + [1]
            hits = hits.T.reshape(shape)
            flag = hits if flag is None else flag | hits
        nan = mx.array(float("nan"), dtype=weight.dtype)
        gw = mx.broadcast_to(mx.where(flag, nan, mx.array(0, dtype=weight.dtype)), weight.shape)
        return cotangent, gw

    return mark
