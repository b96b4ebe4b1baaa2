"""Gradients of a strided 3-d conv (one group, dilation 1) without full-resolution work or a 3-d im2col at once.

Used by ``layers/_conv_engine.py``'s strided conv (MLX's forward) for 5-d inputs: channels-last ``x``
``(N, D, H, W, C_in)``, ``weight`` ``(C_out, kD, kH, kW, C_in)``, cotangent ``g`` ``(N, Do, Ho, Wo, C_out)``.

* input gradient by stride phases: input position ``i`` (padded coordinate ``i + lo = q*s + r``) receives
  ``sum_m g[q - m] * w[r + m*s]``, so each phase ``r`` (``prod(s)`` of them) is a stride-1 conv of ``g`` with the
  sub-kernel ``w[r::s]`` (flipped, channels swapped): every tap is used once, the multiply-adds of the forward, no
  zero-stuffed cotangent; the phases are interleaved by one reshape.
* weight gradient as ``g^T @ cols`` GEMMs over chunks of examples and output frames, ``cols`` the chunk's im2col
  (at most :data:`COLS_BYTES` at a time, accumulated with ``mx.addmm``): the memory stays bounded at any batch size.

Measured (mlx 0.32 CPU, 1 thread, batch 1, 3x3x3 stride 2, against MLX's vjp of the space-to-depth conv): 64->128 on
16x56x56 input gradient 46 -> 41 ms, weight gradient 54 -> 28 ms; 256->512 on 4x14x14 81 -> 16 / 15 -> 5 ms.
The engine uses the phases only when every dim is strided (see ``STRIDED_GRADS_3D`` there).
"""

from __future__ import annotations

import itertools

import mlx.core as mx

# im2col bytes of one chunk of the weight gradient (output frames of some examples; at least one frame of one
# example). MLX's eval loop allocates a few tasks ahead of the compute, so about three chunks are live at once: 64 MiB
# chunks put R3D-18's stem gradient 200 MiB above its cotangent at batch 2 (~0.9 GiB at batch 8)
COLS_BYTES = 16 << 20


def input_grad(g, weight, x_shape, stride, lo):
    """The input gradient of ``y = conv3d(x, weight, stride, padding lo / hi)`` for the cotangent ``g``."""
    n, c_in = x_shape[0], x_shape[-1]
    spatial, kernel, out = x_shape[1:4], weight.shape[1:4], g.shape[1:4]
    q = [-(-(size + a) // s) for size, a, s in zip(spatial, lo, stride)]  # phase length, padded coordinates
    phases = []
    for r in itertools.product(*(range(s) for s in stride)):
        sub = weight[(slice(None),) + tuple(slice(ri, None, s) for ri, s in zip(r, stride))]
        if any(m == 0 for m in sub.shape[1:4]):
            phases.append(mx.zeros((n, *q, c_in), dtype=g.dtype))
            continue
        m = sub.shape[1:4]
        gs = g[(slice(None),) + tuple(slice(0, min(o, qq)) for o, qq in zip(out, q))]
        flipped = sub[:, ::-1, ::-1, ::-1, :].transpose(4, 1, 2, 3, 0)  # (C_in, m..., C_out)
        pad_lo = [mm - 1 for mm in m]
        pad_hi = [qq - min(o, qq) for o, qq in zip(out, q)]
        phases.append(mx.conv_general(gs, flipped, padding=(pad_lo, pad_hi)))
    # (s0, s1, s2, N, Q0, Q1, Q2, C) -> (N, Q0, s0, Q1, s1, Q2, s2, C) -> padded input coordinates
    y = mx.stack(phases).reshape(*stride, n, *q, c_in)
    y = y.transpose(3, 4, 0, 5, 1, 6, 2, 7).reshape(n, *(qq * s for qq, s in zip(q, stride)), c_in)
    return y[(slice(None),) + tuple(slice(a, a + size) for a, size in zip(lo, spatial))]


def weight_grad(x, g, w_shape, stride, lo):
    """The weight gradient of ``y = conv3d(x, weight, stride, padding lo / hi)`` for the cotangent ``g``."""
    n, spatial, c_in = x.shape[0], x.shape[1:4], x.shape[-1]
    c_out, kernel = w_shape[0], w_shape[1:4]
    out = g.shape[1:4]
    need = [(o - 1) * s + k for o, s, k in zip(out, stride, kernel)]  # padded extent the conv reads
    pad = [(a, max(nd - size - a, 0)) for a, nd, size in zip(lo, need, spatial)]
    xp = mx.pad(x, [(0, 0)] + pad + [(0, 0)])
    taps = list(itertools.product(*(range(k) for k in kernel)))
    frame_bytes = out[1] * out[2] * len(taps) * c_in * x.dtype.size  # one output frame of one example
    frames = max(1, min(out[0], COLS_BYTES // max(frame_bytes, 1)))
    samples = max(1, min(n, COLS_BYTES // max(frame_bytes * frames, 1))) if frames == out[0] else 1
    gw = None
    for n0 in range(0, n, samples):
        n1 = min(n, n0 + samples)
        for o0 in range(0, out[0], frames):
            o1 = min(out[0], o0 + frames)
            cols = [xp[n0:n1, a + o0 * stride[0]: a + (o1 - 1) * stride[0] + 1: stride[0],
                       b: b + (out[1] - 1) * stride[1] + 1: stride[1],
                       c: c + (out[2] - 1) * stride[2] + 1: stride[2]] for a, b, c in taps]
            cols = mx.concatenate(cols, axis=-1).reshape(-1, len(taps) * c_in)
            gc = g[n0:n1, o0:o1].reshape(-1, c_out).T
            gw = gc @ cols if gw is None else mx.addmm(gw, gc, cols)
    return gw.reshape(c_out, *kernel, c_in)
