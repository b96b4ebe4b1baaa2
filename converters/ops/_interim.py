"""TEMPORARY stand-ins for Porter layers that have not landed on main yet.

Used only through ``_layers.fn(name)`` when ``porter.layers.functional`` lacks ``name``. Same signatures as the
real functions (torch's argument names and order, channels-last input, MLX-layout conv weights), batched input
only, no argument validation, no exotic cases (tie/NaN rules of max pooling are not reproduced). Delete each one
once the real layer is on main.
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np


def _tuple(v, n):
    if isinstance(v, (list, tuple)):
        return tuple(v) * n if len(v) == 1 else tuple(v)
    return (v,) * n


def _conv(nd):
    def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        k = weight.shape[1:-1]
        d = _tuple(dilation, nd)
        if padding == "valid":
            lo = hi = (0,) * nd
        elif padding == "same":
            total = [d[i] * (k[i] - 1) for i in range(nd)]
            lo = tuple(t // 2 for t in total)
            hi = tuple(t - t // 2 for t in total)
        else:
            lo = hi = _tuple(padding, nd)
        y = mx.conv_general(input, weight, stride=list(_tuple(stride, nd)), padding=(list(lo), list(hi)),
                            kernel_dilation=list(d), groups=groups)
        return y if bias is None else y + bias

    return conv


def _conv_transpose(nd):
    def conv_transpose(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
        k = weight.shape[1:-1]
        s, p, op, d = (_tuple(v, nd) for v in (stride, padding, output_padding, dilation))
        lo = [d[i] * (k[i] - 1) - p[i] for i in range(nd)]
        hi = [d[i] * (k[i] - 1) - p[i] + op[i] for i in range(nd)]
        y = mx.conv_general(input, weight, stride=1, padding=([max(v, 0) for v in lo], [max(v, 0) for v in hi]),
                            kernel_dilation=list(d), input_dilation=list(s), groups=groups, flip=True)
        index = [slice(None)]
        for i in range(nd):
            start, stop = max(-lo[i], 0), y.shape[1 + i] - max(-hi[i], 0)
            index.append(slice(start, stop))
        y = y[tuple(index)]
        return y if bias is None else y + bias

    return conv_transpose


def _out_size(L, k, s, p, d, ceil):
    num = L + 2 * p - d * (k - 1) - 1
    out = (num + (s - 1 if ceil else 0)) // s + 1
    if ceil and (out - 1) * s >= L + p:
        out -= 1
    return out


def _taps(x, nd, k, s, p, d, ceil, fill):
    """Yield (tap offsets, strided view, valid mask) for every kernel tap over a padded input."""
    spatial = x.shape[1:-1]
    outs = [_out_size(spatial[i], k[i], s[i], p[i], d[i], ceil) for i in range(nd)]
    # pad enough on the right for ceil-mode windows
    hi = [max(0, (outs[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - spatial[i] - p[i]) for i in range(nd)]
    xp = mx.pad(x, [(0, 0)] + [(p[i], hi[i]) for i in range(nd)] + [(0, 0)], constant_values=fill)
    for tap in itertools.product(*[range(kk) for kk in k]):
        index = [slice(None)]
        for i in range(nd):
            start = tap[i] * d[i]
            index.append(slice(start, start + (outs[i] - 1) * s[i] + 1, s[i]))
        yield tap, xp[tuple(index)], outs


def _max_pool(nd):
    def max_pool(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        k = _tuple(kernel_size, nd)
        s = _tuple(stride if stride not in (None, []) else kernel_size, nd)
        p, d = _tuple(padding, nd), _tuple(dilation, nd)
        spatial = input.shape[1:-1]
        best = best_idx = None
        for tap, view, outs in _taps(input, nd, k, s, p, d, ceil_mode, -float("inf")):
            if not return_indices:
                best = view if best is None else mx.maximum(best, view)
                continue
            flat = mx.zeros(tuple(outs), dtype=mx.int64)
            for i in range(nd):
                pos = mx.arange(outs[i]) * s[i] - p[i] + tap[i] * d[i]
                shape = [1] * nd
                shape[i] = outs[i]
                stride_i = int(np.prod(spatial[i + 1:])) if i + 1 < nd else 1
                flat = flat + (pos.reshape(shape) * stride_i).astype(mx.int64)
            flat = mx.broadcast_to(flat[None, ..., None], view.shape)
            if best is None:
                best, best_idx = view, flat
            else:
                better = view > best
                best = mx.where(better, view, best)
                best_idx = mx.where(better, flat, best_idx)
        return (best, best_idx) if return_indices else best

    return max_pool


def _avg_pool(nd):
    def avg_pool(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        k = _tuple(kernel_size, nd)
        s = _tuple(stride if stride not in (None, []) else kernel_size, nd)
        p = _tuple(padding, nd)
        if ceil_mode or not count_include_pad or divisor_override:
            raise NotImplementedError("interim avg_pool: only ceil_mode=False, count_include_pad=True")
        total = None
        for _, view, _ in _taps(input, nd, k, s, p, (1,) * nd, False, 0.0):
            total = view if total is None else total + view
        return total / float(np.prod(k))

    return avg_pool


def _windows(L, O):
    starts = [(o * L) // O for o in range(O)]
    ends = [((o + 1) * L + O - 1) // O for o in range(O)]
    return starts, ends


def _adaptive_avg(nd):
    def adaptive_avg_pool(input, output_size):
        sizes = _tuple(output_size, nd)
        x = input
        for i in range(nd):
            L = x.shape[1 + i]
            O = L if sizes[i] is None else sizes[i]
            starts, ends = _windows(L, O)
            c = mx.cumsum(x, axis=1 + i)
            zero_shape = list(c.shape)
            zero_shape[1 + i] = 1
            c = mx.concatenate([mx.zeros(zero_shape, dtype=c.dtype), c], axis=1 + i)
            hi = mx.take(c, mx.array(ends), axis=1 + i)
            lo = mx.take(c, mx.array(starts), axis=1 + i)
            shape = [1] * x.ndim
            shape[1 + i] = O
            x = (hi - lo) / mx.array(np.array(ends) - np.array(starts), dtype=x.dtype).reshape(shape)
        return x

    return adaptive_avg_pool


def _adaptive_max(nd):
    def adaptive_max_pool(input, output_size, return_indices=False):
        if return_indices:
            raise NotImplementedError("interim adaptive_max_pool: return_indices")
        sizes = _tuple(output_size, nd)
        x = input
        for i in range(nd):
            L = x.shape[1 + i]
            O = L if sizes[i] is None else sizes[i]
            starts, ends = _windows(L, O)
            width = max(e - s for s, e in zip(starts, ends))
            best = None
            for j in range(width):
                idx = np.minimum(np.array(starts) + j, np.array(ends) - 1)
                v = mx.take(x, mx.array(idx), axis=1 + i)
                best = v if best is None else mx.maximum(best, v)
            x = best
        return x

    return adaptive_max_pool


def _max_unpool(nd):
    def max_unpool(input, indices, kernel_size, stride=None, padding=0, output_size=None):
        k = _tuple(kernel_size, nd)
        s = _tuple(stride if stride not in (None, []) else kernel_size, nd)
        p = _tuple(padding, nd)
        spatial = input.shape[1:-1]
        if output_size is None:
            out = [(spatial[i] - 1) * s[i] + k[i] - 2 * p[i] for i in range(nd)]
        else:
            out = list(output_size)[-nd:]
        n, c = input.shape[0], input.shape[-1]
        plane = int(np.prod(out))
        # channels-last planes: flat target = (n * plane + idx) * c + channel
        idx = indices.astype(mx.int64)
        base = (mx.arange(n).reshape((n,) + (1,) * (nd + 1)) * plane + idx) * c + mx.arange(c)
        flat = mx.zeros((n * plane * c,), dtype=input.dtype)
        flat = flat.at[base.reshape(-1)].add(input.reshape(-1))
        return flat.reshape((n, *out, c))

    return max_unpool


def pad(input, pad, mode="constant", value=None, *, channels_last=True):
    if mode != "constant":
        raise NotImplementedError(f"interim pad: mode {mode!r}")
    widths = [(0, 0)] * input.ndim
    last = input.ndim - (2 if channels_last else 1)
    for i in range(len(pad) // 2):
        widths[last - i] = (pad[2 * i], pad[2 * i + 1])
    return mx.pad(input, widths, constant_values=0.0 if value is None else value)


for _nd in (1, 2, 3):
    globals()[f"conv{_nd}d"] = _conv(_nd)
    globals()[f"conv_transpose{_nd}d"] = _conv_transpose(_nd)
    globals()[f"max_pool{_nd}d"] = _max_pool(_nd)
    globals()[f"avg_pool{_nd}d"] = _avg_pool(_nd)
    globals()[f"adaptive_avg_pool{_nd}d"] = _adaptive_avg(_nd)
    globals()[f"adaptive_max_pool{_nd}d"] = _adaptive_max(_nd)
    globals()[f"max_unpool{_nd}d"] = _max_unpool(_nd)
