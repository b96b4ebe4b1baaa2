"""Porter's native CPU kernels: loading the ``_porter_kernels`` MLX extension and calling its kernels.

MLX's CPU backend runs a pooling layer as a chain of generic ops (strided slices, maximum, where, scatter), each a
full pass over memory, single-threaded, with a fixed cost per op that dominates small inputs. The kernels in
``layers/csrc`` do each pooling layer in one multi-threaded, channel-vectorized pass (window max/sum, fractional
max, plane scatter/gather), as MLX primitives; depthwise convolutions (a tap sum of strided slices in pure MLX) get
one pass per output too, with both gradients. They are C++ built against the installed MLX, on the user's machine,
once: ``porter build-kernels``; where a build lives and how it is made is ``layers/_native_build.py``.

This module finds the build for this MLX/CPU/source tree (``_native_build.kernel_dir``), loads it on first use, says
whether the layers take the native path (:func:`active`, :func:`use_native`, :func:`status`) and wraps each kernel in
a thin function that states its layout.

When they are used: the module is built and loads, ``PORTER_NATIVE`` is not ``0``, and the default device is the
CPU (the kernels have no GPU code: on Apple GPUs and CUDA the layers keep their pure-MLX path). Otherwise every layer
falls back to pure MLX ops, with identical results; :func:`status` (``porter doctor``) says which and why.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from pathlib import Path
from typing import Optional

import mlx.core as mx

from . import _export, _native_build

ENV_ENABLE = "PORTER_NATIVE"

_state = {"module": None, "error": None, "loaded": False, "enabled": True, "warned": False}


# ---------------------------------------------------------------------------------------------------- load
def _env_enabled() -> bool:
    return os.environ.get(ENV_ENABLE, "1").strip().lower() not in ("0", "off", "false", "no", "none")


def kernels():
    """The loaded extension module, or ``None`` (not built, disabled, or failed to load: see :func:`status`)."""
    if not _state["loaded"]:
        _state["loaded"] = True
        if not _env_enabled():
            _state["error"] = f"disabled by {ENV_ENABLE}={os.environ.get(ENV_ENABLE)}"
            return None
        path = _native_build.module_file(_native_build.kernel_dir())
        if path is None:
            _state["error"] = "not built for this MLX/CPU: run `porter build-kernels`"
            return None
        try:
            spec = importlib.util.spec_from_file_location(_native_build.MODULE, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            _state["module"] = module
        except Exception as exc:  # a broken build must not break the layers: they fall back
            _state["error"] = f"failed to load {path}: {exc}"
    return _state["module"]


def available() -> bool:
    return kernels() is not None


def active(kernel: str = "") -> bool:
    """Whether the layers take the native path now: kernels loaded, enabled, the default device is the CPU, and
    not exporting (``layers/_export.py``: a native primitive cannot be serialized; ``kernel`` names the kernel the
    caller would run, for the export's list of replacements)."""
    if not _state["enabled"] or mx.default_device() != mx.cpu:
        return False
    module = kernels()
    if module is None and not _state["warned"] and _env_enabled():
        _state["warned"] = True
        warnings.warn(
            f"Porter's native CPU kernels are not available ({_state['error']}); pooling and depthwise conv layers "
            "run on slower pure-MLX ops. Build them with `porter build-kernels`, or set PORTER_NATIVE=0 to silence "
            "this.",
            RuntimeWarning,
            stacklevel=3,
        )
    if module is not None and _export._state["on"]:  # one dict lookup on the normal path
        _export.note(f"native {kernel or 'kernel'} -> pure-MLX ops")
        return False
    return module is not None


class use_native:
    """Switch the native kernels on (``True``) or off (``False``) for every layer, from the next call on.

    A plain call switches for good (``use_native(False)``); as a context manager the previous setting comes back
    when the block ends (``with use_native(False): ...``). Nothing is cached across the switch: every layer decides
    per call.
    """

    def __init__(self, enabled: bool):
        if not isinstance(enabled, bool):
            raise TypeError(f"[use_native] 'enabled' must be a bool, got {enabled!r}")
        self._previous = _state["enabled"]
        _state["enabled"] = enabled

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state["enabled"] = self._previous
        return False


def status() -> dict:
    module = kernels()
    info = {
        "available": module is not None,
        "enabled": _state["enabled"] and _env_enabled(),
        "directory": str(_native_build.kernel_dir()),
        "reason": None if module is not None else _state["error"],
    }
    if module is not None:
        info["threads"] = module.num_threads()
        info["winograd_cache"] = winograd_cache_info()
    return info


def build(force: bool = False, verbose: bool = False) -> Path:
    """:func:`_native_build.build`, then forget this process's cached load result, so that the next
    :func:`kernels` call loads the fresh build (``porter build-kernels`` calls the build module directly)."""
    path = _native_build.build(force=force, verbose=verbose)
    _state.update(module=None, error=None, loaded=False)
    return path


def set_num_threads(n: int) -> None:
    """Threads the native kernels use (default: ``PORTER_NUM_THREADS`` or the CPUs this process may use)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"[porter.set_num_threads] 'n' must be a positive int, got {n!r}")
    module = kernels()
    if module is not None:
        module.set_num_threads(n)


# ---------------------------------------------------------------------------------------------------- ops
# Each op is one MLX primitive that carries its own VJP (layers/csrc/<family>_ops.cpp): torch's gradients, and a layer
# stays a single graph node.


def window_max(x: mx.array, first: tuple, end: tuple, step: tuple, with_indices: bool):
    """Max over per-dim window tables on batched channels-last ``x`` (see ``csrc/windows.h``); torch's values,
    int64 indices when asked, and torch's gradient (all of it to the chosen tap)."""
    out = kernels().window_max(x, first, end, step, with_indices)
    return (out[0], out[1]) if with_indices else out[0]


def fractional_max(x: mx.array, samples: mx.array, kernel: tuple, out: tuple, columns: tuple, with_indices: bool):
    """Fractional max pool of batched channels-last ``x`` from torch's ``(N, C, nd)`` samples (``columns[d]``: the
    sample column of spatial dim ``d``); the window starts are computed in the kernel, in the input dtype."""
    values, index = kernels().fractional_max(x, samples, kernel, out, columns)
    return (values, index) if with_indices else values


def window_sum(x: mx.array, first: tuple, end: tuple, divisor: tuple, override: int = 0, sequential: bool = False,
               power: float = 1.0):
    """Average over per-dim windows ``[first, end)`` on batched channels-last float ``x``: the window sum divided by
    ``override`` if nonzero, else by the product of the per-dim ``divisor`` entries (or by each in turn with
    ``sequential``, as torch's adaptive average does). ``power`` != 1 averages ``x ** power`` instead (LP pooling;
    float32/float64), with torch's pow gradient."""
    return kernels().window_sum(x, first, end, divisor, int(override), bool(sequential), float(power))


def depthwise_conv(x: mx.array, weight: mx.array, stride: tuple, lo: tuple, hi: tuple, dilation: tuple) -> mx.array:
    """Depthwise conv of batched channels-last ``x`` ``(N, *spatial, C)`` with ``weight`` ``(C*m, *kernel, 1)``
    (output channel ``c*m + j`` reads input channel ``c``): zero padding ``lo``/``hi`` per dim, stride, dilation.
    Gradients for ``x`` and ``weight``; float16/bfloat16 accumulate in float32."""
    return kernels().depthwise_conv(x, weight, list(stride), list(lo), list(hi), list(dilation))


def grouped_conv(x: mx.array, weight: mx.array, stride: tuple, lo: tuple, hi: tuple, dilation: tuple,
                 groups: int) -> mx.array:
    """Grouped conv of batched channels-last float32/float64 ``x`` ``(N, *spatial, C_in)`` with ``weight``
    ``(C_out, *kernel, C_in/groups)``: one direct pass per output row (``csrc/grouped_conv_kernels.h``), zero padding
    ``lo``/``hi`` never materialized; input and weight gradients are native passes too (and each other's adjoints,
    so second derivatives work)."""
    return kernels().grouped_conv(x, weight, list(stride), list(lo), list(hi), list(dilation), int(groups))


def unpool(values: mx.array, index: mx.array, plane: tuple):
    """``out[n, index, c] = values`` per plane (the last writer in scan order wins), ``(N, *plane, C)``; also the
    count of out-of-range indices (skipped) as an int64 scalar, which the caller must check."""
    out, bad = kernels().plane_scatter(values, index, plane, True)
    return out, bad


def channel_affine(x: mx.array, alpha: mx.array, beta: mx.array, relu: bool = False,
                   activation: str = "none") -> mx.array:
    """``x * alpha + beta`` over the last (channel) axis in one multi-threaded pass (eval batch norm), then
    ``activation`` (``"relu"``, ``"relu6"`` or an :func:`activation` kind; ``relu=True`` is ``"relu"``) of the value
    rounded to x's dtype, as torch applies it to the stored output; alpha/beta are taken as float32, the result has x's dtype.
    Differentiable in all three (torch's activation backward)."""
    return kernels().channel_affine(x, alpha, beta, "relu" if relu else activation)


def channel_affine_residual(x: mx.array, alpha: mx.array, beta: mx.array, res: mx.array,
                            activation: str = "none") -> mx.array:
    """``x * alpha + beta + res`` over the last (channel) axis in one multi-threaded pass (eval batch norm, then a
    residual add), then ``activation`` (``"none"`` or ``"relu"``); 16-bit values rounded to x's dtype after the
    affine and after the sum, as torch stores them. ``res`` has x's shape and dtype; alpha/beta are taken as float32.
    Differentiable in all four (torch's relu backward on the output)."""
    return kernels().channel_affine_residual(x, alpha, beta, res, activation)


def relu(x: mx.array) -> mx.array:
    """``max(x, 0)`` in one multi-threaded pass (NaN stays NaN); gradient ``y <= 0 ? 0 : g`` on the output ``y``
    (torch's threshold_backward: a NaN output passes it), a native pass too."""
    return kernels().relu(x)


def hardtanh(x: mx.array, lo: float, hi: float) -> mx.array:
    """``x`` clamped to ``[lo, hi]`` (NaN stays NaN) in one multi-threaded pass, computed in float32 (float64 for
    float64); gradient ``(lo < x < hi) ? g : 0`` (torch's: 0 at the bounds and for NaN), a native pass too."""
    return kernels().hardtanh(x, lo, hi)


def activation(x: mx.array, kind: str) -> mx.array:
    """``kind`` (``exp``, ``sigmoid``, ``silu``, ``tanh``, ``gelu``, ``gelu_tanh``, ``hardswish``,
    ``hardsigmoid``) elementwise in one vectorized,
    multi-threaded pass (``csrc/activation_kernels.h``), computed in float32 (float64 for float64) and rounded once;
    torch's gradient formulas, also a native pass; second derivatives through MLX ops."""
    return kernels().activation(x, kind)


def bilinear2d(x: mx.array, h_i0: list, h_i1: list, h_l1: list, w_i0: list, w_i1: list, w_l1: list) -> mx.array:
    """Bilinear resampling of channels-last ``(N, H, W, C)`` to ``(N, len(h_i0), len(w_i0), C)`` in one
    multi-threaded pass (``csrc/resample_kernels.h``): per axis, output ``o`` reads ``i0[o]`` with weight
    ``1 - l1[o]`` and ``i1[o]`` with ``l1[o]`` (torch's tables, ``layers/resample.py::linear_taps``), the width taps
    inside; 16-bit computed in float32. Its gradient (and that one's) is a native pass too; vmap folds into the batch."""
    return kernels().bilinear2d(x, h_i0, h_i1, h_l1, w_i0, w_i1, w_l1)


def softmax(x: mx.array, axis: int, rows: bool = True) -> mx.array:
    """Softmax along any ``axis`` in one multi-threaded pass per row block (float32 accumulation for 16-bit types),
    with torch's gradient ``y * (g - sum(g * y))`` as a native pass too. Over the last axis, float32/16-bit rows take
    the vector rows kernel (``csrc/softmax_kernels.h``) unless ``rows`` is False (the any-axis kernel: a benchmark
    switch, ``activation.SOFTMAX_ROWS``)."""
    return kernels().softmax(x, int(axis), bool(rows))


def l2_normalize(x: mx.array, eps: float) -> mx.array:
    """``x / max(||x||_2, eps)`` over the last axis of a float32/float16/bfloat16 array in one multi-threaded pass
    (``csrc/normalize_kernels.h``, 16-bit computed in float32 with torch's roundings); its gradient (torch's autograd
    formula) is a native pass too, second derivatives through MLX ops; vmap folds into the rows."""
    return kernels().l2_normalize(x, float(eps))


def lp_root(a: mx.array, scale: float, inv_p: float) -> mx.array:
    """LP pooling's last stage ``(a * scale) ** inv_p`` in one multi-threaded pass (float32/float64), with torch's
    gradient (0 where ``a == 0``)."""
    return kernels().lp_root(a, float(scale), float(inv_p))


def dequantize(w: mx.array, scales: mx.array, biases: mx.array, group_size: int, bits: int) -> mx.array:
    """``mx.dequantize`` of an affine-quantized float32 matrix (bits 4 or 8) in one multi-threaded pass, MLX's
    numbers bit for bit (``csrc/quantize_kernels.h``); ``(rows, K * bits / 32)`` uint32 -> ``(rows, K)``. Gradients
    to ``scales`` and ``biases`` as ``mx.dequantize``'s (quantized layers freeze them; unfrozen, they train)."""
    return kernels().dequantize_affine(w, scales, biases, int(group_size), int(bits))


def winograd_conv3x3(x: mx.array, weight: mx.array, lo: tuple, hi: tuple) -> mx.array:
    """Stride-1, undilated 3x3 conv of batched channels-last float32 ``x`` ``(N, H, W, C_in)`` with ``weight``
    ``(C_out, 3, 3, C_in)`` and zero padding ``lo``/``hi`` (rows, columns), as Winograd F(2x2, 3x3): an input
    transform, 16 GEMMs (``mx.matmul``) and an output transform, 2.25x fewer multiply-adds than a direct conv
    (``csrc/winograd_kernels.h``). The weight's transform ``(16, C_in, C_out)`` is cached while the weight array
    lives (not under ``mx.grad``/``mx.compile`` tracing; ``PORTER_WINOGRAD_CACHE_MB``, :func:`winograd_cache_info`).
    The input gradient runs as Winograd too (padding <= 2); the weight gradient in the Winograd domain from
    :data:`WINOGRAD_WEIGHT_GRAD_MIN_TILES` output tiles on (``V^T @ dM`` and the weight transform's adjoint, the
    3-d passes with one frame), else MLX's conv's; vmap is MLX's conv's (jvp: conv's bilinear rule), through
    ``mx.custom_function``. A call with more than :data:`WINOGRAD_CACHE_MAX_TILES` output tiles transforms the
    weight for itself and caches nothing (issue 15: peak memory)."""
    keep = _winograd_tiles(x.shape, lo, hi) <= WINOGRAD_CACHE_MAX_TILES
    u = mx.stop_gradient(kernels().winograd_weight(weight, cache=keep))  # the VJP differentiates `weight` directly
    return _winograd_op(tuple(lo), tuple(hi))(x, weight, u)


# The cached transform of a 3x3 weight holds 16/9 its bytes for as long as the weight lives, and what it saves is
# the transform's time, a share of the conv that falls as 1/tiles (the GEMMs grow with the tiles, the transform does
# not). So only calls with at most this many output tiles (N * ceil(Ho/2) * ceil(Wo/2)) cache it: batch 1 up to a
# 16x16 output, batch 4 at 7x7. Measured (1 thread, CPU ms, cached -> transformed per call): 1024->1024 at 1x7x7
# (16 tiles) 18 -> 93, 8x7x7 (128) 70 -> 135; 512->512 at 8x14x14 (392) 50 -> 59; 256->256 at 8x28x28 (1568)
# 70 -> 66. wide_resnet50_2 at batch 8 held 234 MB of transforms (its MLX peak 632 -> 422 MB without them, peak RSS
# 788 -> 599 MB against torch's 688) for 3.3% of its forward's CPU time. A transform cached by a small call is
# still only used by small calls (a large one asks for no cache, so it looks none up).
WINOGRAD_CACHE_MAX_TILES = 64


def _winograd_tiles(shape: tuple, lo: tuple, hi: tuple) -> int:
    """Output tiles (2x2) of a stride-1 3x3 conv of an input of ``shape`` ``(N, H, W, C)`` with padding ``lo``/``hi``."""
    n, h, w = shape[0], shape[1], shape[2]
    return n * ((h + lo[0] + hi[0] - 1) // 2) * ((w + lo[1] + hi[1] - 1) // 2)


def winograd_depth_taps(weight: mx.array):
    """For a 3-d conv run as 2-d convs per depth tap: ``conv(x, tap_weight, u_tap)`` for each depth tap ``j`` of the
    float32 weight ``(C_out, kD, 3, 3, C_in)``, with the taps' Winograd transforms computed in one call and cached by
    the 5-d weight (as :func:`winograd_conv3x3` caches a 2-d weight; a tap sliced per call is a new array each time).
    ``conv(x, tap_weight, u_tap, lo, hi)`` is :func:`winograd_conv3x3` given the transform; the VJP differentiates
    ``tap_weight`` (a slice of the weight), so gradients reach the 5-d weight."""
    u = mx.stop_gradient(kernels().winograd_weight_taps(weight))
    return [u[j] for j in range(weight.shape[1])]


def winograd_conv3x3_with(x: mx.array, weight: mx.array, u: mx.array, lo: tuple, hi: tuple) -> mx.array:
    """:func:`winograd_conv3x3` with the weight's transform ``u`` given (see :func:`winograd_depth_taps`)."""
    return _winograd_op(tuple(lo), tuple(hi))(x, weight, u)


def _with_conv_rules(op, conv):
    """``op`` (an ``mx.custom_function`` of ``(x, weight, u)`` computing ``conv(x, weight)``; ``u`` the cached
    transformed weight) with its jvp and vmap: those of the bilinear ``conv`` (MLX's conv has no jvp)."""

    @op.jvp
    def op_jvp(primals, tangents):
        (x, weight, _), (tx, tw) = primals, tangents[:2]
        return conv(tx, weight) + conv(x, tw)

    @op.vmap
    def op_vmap(inputs, axes):
        x, weight, _ = inputs
        return mx.vmap(conv, in_axes=tuple(axes[:2]))(x, weight), 0

    return op


# A Winograd conv's weight gradient runs in the Winograd domain from this many output tiles (N * ceil(Ho/2) *
# ceil(Wo/2)) on, MLX's conv gradient below: measured (1 thread, CPU ms, batch 8) 64@56 16.6 -> 10.2, 128@28
# 12.8 -> 7.3, 256@14 9.8 -> 7.2, but 512@7 (128 tiles) 9.4 -> 17.0 (the 16 GEMMs have K = tiles).
WINOGRAD_WEIGHT_GRAD_MIN_TILES = 256
# A 2-d Winograd forward whose transformed input and products (16 * tiles * (C_in + C_out) floats: 4x the input and
# 4x the output) take at least WINOGRAD_FUSED_MIN_BYTES runs as the 3-d fused pass with one frame
# (csrc/conv3d_fused_kernels.h: a block of tiles transformed, its GEMMs, its output transform while in cache), when
# this is on and the padding is at most 2. MLX allocates an op's output when it schedules the op, dozens of ops ahead
# of the one computing, so those temporaries added to the forward's peak: VGG-11-BN at batch 8 peaked above torch.
# Each block of rows re-reads the whole transformed weight, so it also needs WINOGRAD_FUSED_ROWS_PER_CHANNEL tiles
# per channel of the wider side. Measured (2 threads, wall ms, unfused -> fused, batch 8 unless noted): 112x112
# 64->128 (294 MB of temporaries) 136 -> 81; 56x56 64->64 20 -> 13, 128->128 54 -> 43; 28x28 128->128 13.5 -> 9.7,
# 256->256 41.5 -> 40; 1x224x224 64->64 48 -> 24; excluded by the tiles rule: 14x14 512->512 35.5 -> 39.8, 7x7
# 1024->1024 42 -> 73. (1 thread, CPU ms: 256 -> 156, 26 -> 19, 18 -> 16, 56 -> 39; 14x14 256->256 20.5 -> 23.)
WINOGRAD_FUSED_2D = True
WINOGRAD_FUSED_MIN_BYTES = 16 << 20
WINOGRAD_FUSED_ROWS_PER_CHANNEL = 4


def _winograd_fused_2d(shape: tuple, c_out: int, lo: tuple, hi: tuple) -> bool:
    """Whether a 2-d Winograd forward of an input of ``shape`` ``(N, H, W, C_in)`` runs fused (see above)."""
    if not WINOGRAD_FUSED_2D or max(lo + hi) > 2:
        return False
    c_in, tiles = shape[3], _winograd_tiles(shape, lo, hi)
    return (16 * tiles * (c_in + c_out) * 4 >= WINOGRAD_FUSED_MIN_BYTES and tiles >= WINOGRAD3D_FUSED_MIN_ROWS
            and tiles >= WINOGRAD_FUSED_ROWS_PER_CHANNEL * max(c_in, c_out) and _fused_blas())


@functools.lru_cache(maxsize=None)
def _winograd_op(lo: tuple, hi: tuple):
    module = kernels()

    def conv(x, weight):
        return mx.conv_general(x, weight, padding=(list(lo), list(hi)))

    @mx.custom_function
    def op(x, weight, u):
        n, h, w, _ = x.shape
        ho, wo = h + lo[0] + hi[0] - 2, w + lo[1] + hi[1] - 2
        if _winograd_fused_2d(x.shape, weight.shape[0], lo, hi):
            y = module.winograd3d_fused(x[:, None], u[None], weight[:, None], 0, lo[0], lo[1], 1, ho, wo,
                                        WINOGRAD3D_FUSED_BLOCK, padding_products=False)  # torch's 2-d redo
            return y.reshape(n, ho, wo, weight.shape[0])
        v = module.winograd_input(x, lo[0], lo[1], ho, wo)
        return module.winograd_output(v @ u, x, weight, lo[0], lo[1], ho, wo)

    def mlx_weight_grad(x, weight, cotangent):
        return mx.vjp(lambda w: conv(x, w), [weight], [cotangent])[1][0]

    @mx.custom_function
    def winograd_weight_grad(x, weight, cotangent):
        # in the Winograd domain (the 3-d passes with one frame): dU[p] = V[p]^T @ dM[p], then dw = G^T dU G; MLX's
        # weight gradient transposes the input and cotangent and copies im2col columns, single-threaded
        ho, wo = cotangent.shape[1:3]
        x5, g5 = x[:, None], cotangent[:, None]
        v = module.winograd_input(x, lo[0], lo[1], ho, wo)
        dm = module.winograd3d_output_adjoint(g5, x5, 1, 0, lo[0], lo[1])
        du = (v.swapaxes(1, 2) @ dm)[None]
        # a non-finite result is redone as a direct sum whose padding taps add nothing, as torch's 2-d kernels:
        # an inf in the cotangent at a border output stays inf there (torch's 3-d im2col, and MLX, give NaN)
        return module.winograd3d_weight_adjoint(du, x5, g5, 0, lo[0], lo[1],
                                                padding_products=False).reshape(weight.shape)

    @winograd_weight_grad.vjp
    def winograd_weight_grad_vjp(primals, cotangent, output):
        # the passes have no VJP of their own: a second derivative (a gradient penalty, a Hessian-vector product)
        # differentiates MLX's weight gradient instead, the same bilinear map of (x, cotangent)
        x, weight, g = primals
        _, (dx, dg) = mx.vjp(lambda x, g: mlx_weight_grad(x, weight, g), [x, g], [cotangent])
        return dx, mx.zeros_like(weight), dg

    def weight_grad(x, weight, cotangent):
        n, ho, wo = cotangent.shape[:3]
        if n * ((ho + 1) // 2) * ((wo + 1) // 2) < WINOGRAD_WEIGHT_GRAD_MIN_TILES:
            return mlx_weight_grad(x, weight, cotangent)
        return winograd_weight_grad(x, weight, cotangent)

    @op.vjp
    def op_vjp(primals, cotangent, output):
        x, weight, u = primals
        if max(lo + hi) <= 2:
            # the input gradient is itself a stride-1 3x3 conv: of the cotangent, with the kernel flipped and its
            # channels swapped, padded 2 - lo / 2 - hi; so it runs as Winograd too (the weight gradient is MLX's)
            flipped = flip_conv_weight(weight)  # contiguous, one threaded pass (MLX's copy of the view is slow)
            gx = winograd_conv3x3(cotangent, flipped, tuple(2 - p for p in lo), tuple(2 - p for p in hi))
            return gx, weight_grad(x, weight, cotangent), mx.zeros_like(u)
        _, (gx, gw) = mx.vjp(conv, [x, weight], [cotangent])
        return gx, gw, mx.zeros_like(u)

    return _with_conv_rules(op, conv)


def winograd_cache_info() -> dict:
    """The Winograd weight cache: ``entries``, ``bytes`` held and the ``limit`` in bytes."""
    entries, held, limit = kernels().winograd_cache_info()
    return {"entries": entries, "bytes": held, "limit": limit}


def set_winograd_cache_limit(limit: Optional[int]) -> None:
    """Bytes of transformed Winograd weights kept (least recently used go first; 0 turns the cache off); ``None``
    restores the default: ``PORTER_WINOGRAD_CACHE_MB`` megabytes, else 512 MB."""
    if limit is None:
        env = os.environ.get("PORTER_WINOGRAD_CACHE_MB", "").strip()
        limit = max(0, int(env)) << 20 if env else 512 << 20
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"set_winograd_cache_limit: limit must be an int number of bytes or None, got {limit!r}")
    if limit < 0:
        raise ValueError(f"set_winograd_cache_limit: limit must be >= 0 bytes, got {limit}")
    kernels().winograd_cache_set_limit(limit)


def clear_winograd_cache() -> None:
    """Drop every cached Winograd weight transform (they are also dropped when their weight array is freed)."""
    kernels().winograd_cache_clear()


# ---------------------------------------------------------------------------------------------------- conv3d (issue 15)
def winograd_conv3d(x: mx.array, weight: mx.array, lo: tuple, hi: tuple) -> mx.array:
    """Stride-1, undilated ``(kD, 3, 3)`` conv of batched channels-last float32 ``x`` ``(N, D, H, W, C_in)`` with
    ``weight`` ``(C_out, kD, 3, 3, C_in)`` and zero padding ``lo``/``hi`` (frames, rows, columns; each at most the
    kernel's size - 1), as Winograd F(2x2, 3x3) per depth tap (``csrc/conv3d_kernels.h``): every frame is transformed
    once, the taps are summed inside the GEMMs (``mx.addmm`` over contiguous blocks of the transformed input), one
    output transform. Memory: the transformed input and output (4x the input and output), never one output per tap;
    large batches run in chunks of examples (:data:`WINOGRAD3D_CHUNK_BYTES` of transformed input each).
    The taps' weight transforms ``(kD, 16, C_in, C_out)`` are cached by the 5-d weight (as :func:`winograd_conv3x3`).
    Gradients (``mx.custom_function``): the input gradient is the same conv of the cotangent with the kernel flipped,
    the weight gradient a GEMM in the Winograd domain (``V^T @ dM`` per tap) and the weight transform's adjoint;
    jvp is the conv's bilinear rule, vmap MLX's conv."""
    u = mx.stop_gradient(kernels().winograd3d_weight(weight))  # the custom VJP differentiates `weight` directly
    return _winograd3d_op(tuple(lo), tuple(hi))(x, weight, u)


# Flipping a 3x3 kernel (rows or columns) swaps rows 0 and 3 of G (G J = P G), so the flipped kernel's transform is
# the transform's positions permuted: (a, b) -> (3 - a if a in (0, 3) else a, same for b).
_FLIP16 = [4 * (3 - a if a in (0, 3) else a) + (3 - b if b in (0, 3) else b) for a in range(4) for b in range(4)]


# Output rows per GEMM of conv3d_columns: a block's columns take about this many bytes (one scratch per thread), and
# at least CONV3D_COLUMNS_MIN_ROWS rows, so that a wide weight (R3D's 256->512: 7 MB) is re-read for enough rows
# (75 rows per 2 MB block: 120 ms against MLX's 82 at batch 8)
CONV3D_COLUMNS_BLOCK_BYTES = 8 << 20
CONV3D_COLUMNS_MIN_ROWS = 256


def conv3d_columns_available() -> bool:
    """Whether :func:`conv3d_columns` can run (kernels loaded, the BLAS MLX calls found)."""
    return active("3-d conv columns") and _fused_blas()


def conv3d_columns(x: mx.array, weight: mx.array, stride: tuple, lo: tuple, out: tuple) -> mx.array:
    """A one-group, undilated 3-d conv (float32, channels-last ``x`` ``(N, D, H, W, C_in)``, ``weight`` ``(C_out, kD,
    kH, kW, C_in)``, padding ``lo`` before, output size ``out``) as im2col + GEMM over blocks of output rows
    (``csrc/conv3d_columns_kernels.h``): the columns of one block at a time, never of the whole batch. Forward only
    (no VJP); call :func:`conv3d_columns_available` first."""
    k = weight.shape[1] * weight.shape[2] * weight.shape[3] * weight.shape[4]
    block = max(CONV3D_COLUMNS_MIN_ROWS, CONV3D_COLUMNS_BLOCK_BYTES // (4 * k))
    return kernels().conv3d_columns(x, weight, [int(v) for v in stride], [int(v) for v in lo], int(out[0]),
                                    int(out[1]), int(out[2]), int(block))


# bytes of transformed input one forward chunk of examples may hold (see _winograd3d_op)
WINOGRAD3D_CHUNK_BYTES = 96 << 20
# The forward runs as one cache-blocked native pass (csrc/conv3d_fused_kernels.h: a block of tiles transformed, its
# GEMMs, its output transform, no whole-input temporaries) when this is on, the BLAS MLX calls can be found, and the
# conv has at least WINOGRAD3D_FUSED_MIN_ROWS (example, tile) rows per frame (fewer: each frame's GEMMs would re-read
# the whole transformed weight for a few rows; the unfused GEMMs read it once). WINOGRAD3D_FUSED_BLOCK rows per GEMM.
# Measured (1 thread, CPU ms, batch 8, alone): 3x3x3 64@16x56x56 360 -> 190 (850 -> 250 when the temporaries are
# fresh allocations, as inside a model), 128@8x28x28 204 -> 100, 1x3x3 144@16x56x56 1707 -> 436 (docs/BENCHMARKS.md).
WINOGRAD3D_FUSED = True
WINOGRAD3D_FUSED_MIN_ROWS = 64
WINOGRAD3D_FUSED_BLOCK = 128


# The weight gradient's Winograd-domain GEMMs run blocked too (csrc/conv3d_fused_kernels.h, wino3d_fused_du) when this
# is on, the forward would be fused, and the transformed input (16 * frames * rows * C_in) is larger than two copies
# of the transformed weight gradient (each thread sums into its own copy; with few rows and wide channels, as R3D's
# 512@2x7, the whole-input GEMMs are the smaller and faster).
WINOGRAD3D_FUSED_GRAD = True


def _fused_weight_grad(kd: int, dout: int, step: int, c_in: int, c_out: int) -> bool:
    return (WINOGRAD3D_FUSED_GRAD and WINOGRAD3D_FUSED and step >= WINOGRAD3D_FUSED_MIN_ROWS
            and (dout + kd - 1) * step > 2 * kd * c_out and _fused_blas())


def _mlx_sgemm():
    """``(address, library)``: the ``cblas_sgemm`` MLX calls (read from libmlx's GOT, so the optimized BLAS Porter
    bound, or MLX's own) and a ctypes handle on the library holding it; ``(0, None)`` where either cannot be found."""
    import ctypes

    from porter import _bind

    mlx_lib = _bind.loaded_path("libmlx.so")
    slots = _bind.slot_values(mlx_lib, "cblas_sgemm") if mlx_lib else []
    where = _bind.library_of(slots[0]) if slots else None
    if not where:
        return 0, None
    return slots[0], ctypes.CDLL(where, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)


def mlx_blas_symbol(name: str):
    """The ctypes function ``name`` (tried under each of ``porter._blas.SYMBOL_PREFIXES``) in the library serving the
    ``cblas_sgemm`` MLX calls, or None where that library, or the symbol in it, cannot be found."""
    from porter import _blas

    lib = _mlx_sgemm()[1]
    if lib is None:
        return None
    return next((getattr(lib, p + name) for p in _blas.SYMBOL_PREFIXES if hasattr(lib, p + name)), None)


def _fused_blas() -> bool:
    """Hands the fused 3-d Winograd pass the ``cblas_sgemm`` MLX calls and OpenBLAS's thread-count setters where that
    library has them (``mlx_blas_symbol``); False if the GEMM cannot be found (the unfused path runs then)."""
    if "blas" not in _state:
        _state["blas"] = False
        try:
            import ctypes

            def address(name):
                found = mlx_blas_symbol(name)
                return (ctypes.cast(found, ctypes.c_void_p).value or 0) if found is not None else 0

            sgemm = _mlx_sgemm()[0]
            if sgemm:
                # the passes use the process-wide pair (set once around a pass, csrc/conv3d_fused_kernels.h's
                # BlasSerialScope); the "local" setter only where a library lacks the pair
                kernels().winograd3d_set_blas(sgemm, address("openblas_set_num_threads_local"),
                                              address("openblas_set_num_threads"),
                                              address("openblas_get_num_threads"))
                _state["blas"] = True
        except (OSError, ImportError, ValueError):
            pass
    return _state["blas"]


def _winograd3d_gemms(v, u, rows: int, step: int):
    """``M[p] = sum_j V[p, j*step : j*step + rows] @ U[j][p]``: tap j's rows are one contiguous block of ``v``."""
    m = None
    for j in range(u.shape[0]):
        vj = v[:, j * step: j * step + rows]
        m = vj @ u[j] if m is None else mx.addmm(m, vj, u[j])
    return m


@functools.lru_cache(maxsize=None)
def _winograd3d_op(lo: tuple, hi: tuple):
    module = kernels()

    def conv(x, weight):
        return mx.conv_general(x, weight, padding=(list(lo), list(hi)))

    def geometry(x, weight):
        n, d, h, w, _ = x.shape
        kd = weight.shape[1]
        dout, ho, wo = d + lo[0] + hi[0] - kd + 1, h + lo[1] + hi[1] - 2, w + lo[2] + hi[2] - 2
        return kd, dout, ho, wo, n * ((ho + 1) // 2) * ((wo + 1) // 2)

    def forward(x, weight, u):
        kd, dout, ho, wo, step = geometry(x, weight)
        if WINOGRAD3D_FUSED and step >= WINOGRAD3D_FUSED_MIN_ROWS and _fused_blas():
            return module.winograd3d_fused(x, u, weight, lo[0], lo[1], lo[2], dout, ho, wo, WINOGRAD3D_FUSED_BLOCK)
        v = module.winograd3d_input(x, kd, lo[0], lo[1], lo[2], dout, ho, wo)
        m = _winograd3d_gemms(v, u, dout * step, step)
        return module.winograd3d_output(m, x, weight, lo[0], lo[1], lo[2], dout, ho, wo)

    @mx.custom_function
    def op(x, weight, u):
        # examples in chunks whose transformed input stays under WINOGRAD3D_CHUNK_BYTES, each chunk made to wait for
        # the previous one's output (mx.depends): one chunk's temporaries alive at a time, and in the buffer cache
        kd, dout, ho, wo, step = geometry(x, weight)
        per_example = 16 * (dout + kd - 1) * (step // x.shape[0]) * x.shape[-1] * 4
        chunk = max(1, WINOGRAD3D_CHUNK_BYTES // max(per_example, 1))
        if chunk >= x.shape[0] or (WINOGRAD3D_FUSED and step >= WINOGRAD3D_FUSED_MIN_ROWS and _fused_blas()):
            return forward(x, weight, u)
        ys = []
        for i in range(0, x.shape[0], chunk):
            xc = x[i:i + chunk]
            if ys:
                (xc,) = mx.depends([xc], [ys[-1]])
            ys.append(forward(xc, weight, u))
        return mx.concatenate(ys)

    @op.vjp
    def op_vjp(primals, cotangent, output):
        x, weight, u = primals
        kd, dout, ho, wo, step = geometry(x, weight)
        # input gradient: the same conv of the cotangent, kernel flipped and channels swapped, padded k-1-lo/k-1-hi
        flipped = weight[:, ::-1, ::-1, ::-1, :].transpose(4, 1, 2, 3, 0)
        k = (kd, 3, 3)
        u_flipped = mx.take(u[::-1], mx.array(_FLIP16), axis=1).swapaxes(2, 3)
        gx = _winograd3d_op(tuple(a - 1 - p for a, p in zip(k, lo)), tuple(a - 1 - p for a, p in zip(k, hi)))(
            cotangent, flipped, u_flipped)
        # weight gradient in the Winograd domain: dU[j][p] = V[p, tap j's rows]^T @ dM[p], then G^T dU G
        if _fused_weight_grad(kd, dout, step, x.shape[-1], weight.shape[0]):
            # blocked: no transformed input or output gradient as a whole (see WINOGRAD3D_FUSED_GRAD)
            du = module.winograd3d_fused_du(x, cotangent, kd, lo[0], lo[1], lo[2], WINOGRAD3D_FUSED_BLOCK)
        else:
            v = module.winograd3d_input(x, kd, lo[0], lo[1], lo[2], dout, ho, wo)
            dm = module.winograd3d_output_adjoint(cotangent, x, kd, lo[0], lo[1], lo[2])
            rows = dout * step
            du = mx.stack([v[:, j * step: j * step + rows].swapaxes(1, 2) @ dm for j in range(kd)])
        gw = module.winograd3d_weight_adjoint(du, x, cotangent, lo[0], lo[1], lo[2])
        return gx, gw, mx.zeros_like(u)

    return _with_conv_rules(op, conv)
# ---------------------------------------------------------------------------------------------------- weight flip
def flip_conv_weight(weight: mx.array, groups: int = 1) -> mx.array:
    """The kernel of a stride-1 conv's input gradient, contiguous: ``weight`` ``(C_out, *kernel, C_in/groups)`` ->
    ``(C_in, *kernel, C_out/groups)``, every spatial dim reversed and the channels swapped within each group (what
    ``weight[:, ::-1, ::-1, :].transpose(3, 1, 2, 0)`` gives for one group), any dtype, in one multi-threaded pass
    (``csrc/weight_flip_kernels.h``; MLX's copy of that view is single-threaded and cache-hostile: 6.7 ms for a
    512x3x3x512 float32 weight). Differentiable (its VJP is the same flip), ``mx.vmap`` maps it."""
    if weight.ndim < 3:
        raise ValueError(f"flip_conv_weight: weight must be (C_out, *kernel, C_in/groups), got shape {weight.shape}")
    if not isinstance(groups, int) or groups < 1 or weight.shape[0] % groups:
        raise ValueError(f"flip_conv_weight: groups must be a positive int dividing C_out={weight.shape[0]}, "
                         f"got {groups!r}")
    return kernels().flip_conv_weight(weight, groups)


# ---------------------------------------------------------------------------------------------------- col2im / im2col
def col2im(cols: mx.array, out_size: tuple, geometry: tuple) -> mx.array:
    """Columns -> image, the scatter-add after a transposed conv's GEMM: ``cols`` ``(N, H, W, kH, kW, C)`` ->
    ``(N, *out_size, C)``, tap ``(a, b)`` of input pixel ``(i, j)`` added at ``(s_h*i + step_h*a + off_h,
    s_w*j + step_w*b + off_w)``, dropped outside; ``geometry`` = ``(s_h, step_h, off_h, s_w, step_w, off_w)``
    (``csrc/col2im_kernels.h``: every output pixel summed once, multi-threaded). Float dtypes; differentiable (the
    VJP is :func:`im2col`), ``mx.vmap`` maps it."""
    return kernels().col2im(cols, int(out_size[0]), int(out_size[1]), [int(v) for v in geometry])


def im2col(image: mx.array, in_size: tuple, kernel: tuple, geometry: tuple) -> mx.array:
    """Image -> columns, :func:`col2im`'s adjoint: ``image`` ``(N, Ho, Wo, C)`` -> ``(N, *in_size, *kernel, C)``,
    zeros where a tap lands outside the image (same ``geometry``)."""
    return kernels().im2col(image, int(in_size[0]), int(in_size[1]), int(kernel[0]), int(kernel[1]),
                            [int(v) for v in geometry])


# ---------------------------------------------------------------------------------------------------- concat
def concat(arrays, axis: int) -> mx.array:
    """``mx.concatenate(arrays, axis)`` as one multi-threaded copy of whole rows (``csrc/concat_kernels.h``); the
    arrays share rank and dtype and match in every dim but ``axis`` (else ``ValueError``). Differentiable (the VJP
    slices), ``mx.vmap`` maps it."""
    return kernels().concat(list(arrays), int(axis))


# ---------------------------------------------------------------------------------------------------- shuffle
def channel_shuffle(x: mx.array, groups: int) -> mx.array:
    """The last axis of ``x`` ``(*, C)`` read as ``groups`` groups of ``C / groups`` and written as ``C / groups``
    groups of ``groups`` (``csrc/shuffle_kernels.h``; any dtype of 1-8 bytes). Differentiable, ``mx.vmap`` maps it."""
    return kernels().channel_shuffle(x, int(groups))
