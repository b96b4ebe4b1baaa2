"""Seeded random fuzzer core for Porter's pooling layers against torch (the oracle), native kernels and pure-MLX path.

Every pooling family (max 1d/2d/3d with padding/dilation/ceil/indices, avg with ceil/count_include_pad/
divisor_override, adaptive max/avg, LP, fractional 2d/3d, max unpool with duplicate indices), forward and backward,
on random shapes (C in 1, 15, 16, 17, 32, 48, 272 and small ones; tiny and uneven spatial sizes; N = 1; unbatched;
a few inputs large enough for the thread pool), dtypes (float32/16, bfloat16, float64, int where torch allows),
data with NaN/inf/ties, and non-contiguous MLX views (channels-first transposed, strided, sliced channels,
broadcast batch). Each config runs on each backend asked for; torch runs on the same values in the same process.

The core lives here, beside the tests: tests/layers/test_fuzz.py runs a seeded slice in the suite, and
scripts/fuzz_pooling.py (a thin wrapper around :func:`main`) runs the long fuzz by hand. Usage::

    .venv/bin/python scripts/fuzz_pooling.py --configs 3000 --seed 0 [--backend native|mlx|both] [--threads N]

Exit status 1 when any config mismatched torch (each is printed with its seed and a one-line repro config).

Under AddressSanitizer + UndefinedBehaviorSanitizer (gcc): build the kernels by hand into a scratch folder with the
arguments ``build()`` (layers/_native_build.py) uses plus sanitizer flags, lay it out like ``kernel_dir()`` (same tag),
then run Python with the sanitizer runtimes preloaded::

    TAG=$(.venv/bin/python -c "from porter.layers import _native_build as n; print(n.build_tag())")
    SP=.venv/lib/python3.11/site-packages; B=/tmp/porter-asan; mkdir -p $B/kernels/$TAG
    cmake -S layers/csrc -B $B/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$PWD/.venv/bin/python \\
        -DMLX_ROOT=$PWD/$SP/mlx -Dnanobind_ROOT=$PWD/$SP/nanobind/cmake \\
        "-DPORTER_ARCH_FLAGS=-march=native;-O1;-g;-fno-omit-frame-pointer;-fsanitize=address,undefined,float-cast-overflow" \\
        -DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined
    cmake --build $B/build && cp $B/build/_porter_kernels*.so $B/kernels/$TAG/
    PORTER_KERNEL_DIR=$B/kernels ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \\
        LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \\
        PORTER_NUM_THREADS=3 .venv/bin/python scripts/fuzz_pooling.py --configs 3000 2>&1 | tee $B/fuzz.log
    grep -c "runtime error\\|AddressSanitizer" $B/fuzz.log   # UBSan reports do not stop the run: grep for them

(``PORTER_ARCH_FLAGS`` is a CMake list: semicolons. ``-O1`` comes after the CMakeLists' ``-O3`` and wins.)
The fuzzer sets MLX's buffer cache to 0 so every freed buffer goes back to malloc, where ASan can see it.

Torch's max-pool backward writes out of bounds for a window made only of padding (dilation > 1, docs/SEMANTICS.md §3.5): its
index points past the plane. That, not MLX or Porter, is the "double free or corruption" seen once in an earlier
throwaway fuzz of dilation-2 max pooling; torch alone reproduces it (glibc aborts within the first iterations)::

    import torch, torch.nn.functional as F
    for _ in range(20000):  # L=2, k=2, p=1, d=3: the only window's taps are -1 and 2; torch's index is 6 of 4
        x = torch.randn(1, 64, 2, 2, requires_grad=True)
        F.max_pool2d(x, 2, 1, 1, 3).sum().backward()

So the fuzzer never runs torch's backward on such configs (Porter's forward is still compared).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

import porter.layers.functional as PF
from porter.layers import _native
from porter.layers._utils import pool_output_size

import mlx.core as mx  # noqa: E402  (porter first: it picks MLX's BLAS)

CHANNELS = [1, 1, 2, 3, 15, 16, 17, 32, 48, 272]
FLOATS = [torch.float32] * 4 + [torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int64, torch.int32, torch.uint8, torch.int8, torch.int16]
MX = {torch.float32: mx.float32, torch.float16: mx.float16, torch.bfloat16: mx.bfloat16, torch.float64: mx.float64,
      torch.int64: mx.int64, torch.int32: mx.int32, torch.uint8: mx.uint8, torch.int8: mx.int8, torch.int16: mx.int16}
FAMILIES = ["max", "max", "avg", "avg", "adaptive_max", "adaptive_avg", "lp", "fractional", "unpool"]
VIEWS = ["contiguous", "contiguous", "channels_first", "strided", "channel_slice", "broadcast"]


class Case:
    """One random configuration: everything needed to rebuild the call, printable as a repro."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def __repr__(self):
        skip = {"rng", "torch_fn", "porter_fn", "extra_t", "extra_m", "x"}
        return "Case(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k not in skip) + ")"


def _pick(rng, items):
    return items[int(rng.integers(0, len(items)))]


def _channels(rng, big: bool) -> int:
    return _pick(rng, CHANNELS) if not big else _pick(rng, [16, 32, 48, 64, 272, 272])


def _geometry(rng, nd, *, dilation: bool, padding: bool, ceil: bool, big: bool, fit: bool):
    """Per-dim (L, k, s, p, d); mostly legal (a non-empty output), sometimes not (torch's errors must match)."""
    dims = []
    for _ in range(nd):
        k, s = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        d = _pick(rng, [1, 1, 1, 2, 3]) if dilation else 1
        p = int(rng.integers(0, k // 2 + 1)) if padding else 0
        if padding and rng.integers(0, 25) == 0:
            p = k // 2 + 1  # illegal: padding > kernel / 2
        need = max(1, d * (k - 1) + 1 - 2 * p, k if fit else 1)
        length = int(rng.integers(need, need + 7)) if not big else int(rng.integers(24, 40))
        if rng.integers(0, 30) == 0:
            length = int(rng.integers(1, need + 1))  # maybe too small
        dims.append((length, k, s, p, d))
    return dims


def _values(rng, shape, dtype, kind):
    gen = torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
    if not dtype.is_floating_point:
        low = 0 if dtype == torch.uint8 else -50
        return torch.randint(low, 50, shape, generator=gen).to(dtype)
    x = torch.randint(0, 3, shape, generator=gen).float() if kind == "ties" else torch.randn(shape, generator=gen)
    if kind in ("nan", "inf"):
        r = torch.rand(shape, generator=gen)
        x[r < 0.15] = float("nan") if kind == "nan" else -float("inf")
        x[r > 0.9] = float("inf")
    return x.to(dtype)


def _shape(case, nd, spatial, big):
    c = _channels(case.rng, big)
    case.batched = bool(case.rng.integers(0, 5))
    n = int(case.rng.integers(1, 4)) if not big else int(case.rng.integers(1, 3))
    return ((n, c) if case.batched else (c,)) + tuple(spatial)


# ---------------------------------------------------------------------------------------------------- families
def make_case(seed: int, big_every: int = 20) -> Case:
    case = Case(seed)
    rng = case.rng
    case.family = fam = _pick(rng, FAMILIES)
    big = rng.integers(0, big_every) == 0  # enough work for the thread pool (>= 1M element-steps) with C >= 64
    case.big = bool(big)
    case.nd = nd = int(rng.integers(2, 4)) if fam == "fractional" else int(rng.integers(1, 4))
    if big and nd == 3:
        case.nd = nd = 2
    kind = _pick(rng, ["normal", "ties", "nan", "inf"])
    dtype = _pick(rng, FLOATS)
    if fam in ("max", "avg", "adaptive_max", "adaptive_avg", "lp", "unpool") and rng.integers(0, 8) == 0:
        dtype = _pick(rng, INTS)
    case.grad = True

    if fam in ("max", "avg", "lp"):
        case.ceil = bool(rng.integers(0, 2))
        dims = _geometry(rng, nd, dilation=fam == "max", padding=fam != "lp", ceil=case.ceil, big=big, fit=False)
        spatial, k, s, p, d = (list(v) for v in zip(*dims))
        case.shape = _shape(case, nd, spatial, big)
        case.kernel, case.stride, case.padding, case.dilation = k, s, p, d
        if rng.integers(0, 5) == 0:
            case.stride = None
        if fam == "max":
            case.indices = bool(rng.integers(0, 2))
            tf, pf = getattr(F, f"max_pool{nd}d"), getattr(PF, f"max_pool{nd}d")
            args = (k, case.stride, p, d, case.ceil, case.indices)
            # torch's backward writes out of bounds for windows made only of padding (docs/SEMANTICS.md §3.5): no grad there
            case.grad = not any(_all_padding(*dim, case.ceil) for dim in dims)
        elif fam == "avg":
            case.count_include_pad = bool(rng.integers(0, 2))
            args = (k, case.stride, p, case.ceil, case.count_include_pad)
            if nd > 1 and rng.integers(0, 3) == 0:
                case.divisor_override = int(_pick(rng, [1, 2, 3, 5, 7, -1]))
                args = args + (case.divisor_override,)
            tf, pf = getattr(F, f"avg_pool{nd}d"), getattr(PF, f"avg_pool{nd}d")
        else:
            case.norm_type = float(_pick(rng, [1, 2, 2, 3, 1.5, 0.5, math.inf]))
            if case.norm_type == int(case.norm_type) if math.isfinite(case.norm_type) else False:
                case.norm_type = int(case.norm_type) if rng.integers(0, 2) else case.norm_type
            kind = "lp_zero" if rng.integers(0, 3) == 0 else "normal"
            kernel = k[0] if nd == 1 else k
            stride = case.stride if case.stride is None or nd > 1 else case.stride[0]
            args = (case.norm_type, kernel, stride, case.ceil)
            tf, pf = getattr(F, f"lp_pool{nd}d"), getattr(PF, f"lp_pool{nd}d")
        case.torch_fn = lambda a, *e: tf(a, *args)
        case.porter_fn = lambda a, *e: pf(a, *args)
    elif fam in ("adaptive_max", "adaptive_avg"):
        spatial = [int(rng.integers(1, 13)) if not big else int(rng.integers(20, 40)) for _ in range(nd)]
        out = [_pick(rng, [1, 1, 2, 3, int(rng.integers(1, 15)), n, max(1, n - 1), n + 1]) for n in spatial]
        if nd > 1 and rng.integers(0, 5) == 0:
            out[int(rng.integers(0, nd))] = None
        case.output_size = out = out[0] if nd == 1 else tuple(out)
        case.shape = _shape(case, nd, spatial, big)
        if fam == "adaptive_max":
            case.indices = bool(rng.integers(0, 2))
            tf, pf = getattr(F, f"adaptive_max_pool{nd}d"), getattr(PF, f"adaptive_max_pool{nd}d")
            case.torch_fn = lambda a, *e: tf(a, out, case.indices)
            case.porter_fn = lambda a, *e: pf(a, out, case.indices)
        else:
            tf, pf = getattr(F, f"adaptive_avg_pool{nd}d"), getattr(PF, f"adaptive_avg_pool{nd}d")
            case.torch_fn = lambda a, *e: tf(a, out)
            case.porter_fn = lambda a, *e: pf(a, out)
    elif fam == "fractional":
        k, spatial, out = [], [], []
        for _ in range(nd):
            ki = int(rng.integers(1, 4))
            length = int(rng.integers(ki + 1, 15)) if not big else int(rng.integers(24, 40))
            k.append(ki), spatial.append(length)
            out.append(int(rng.integers(1, (length - ki + 1 if nd == 2 else length - ki) + 1)))
        case.kernel, case.output_size = k, out
        case.shape = _shape(case, nd, spatial, big)
        case.indices = bool(rng.integers(0, 2))
        n = case.shape[0] if case.batched else 1
        gen = torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
        samples = torch.rand(n, case.shape[-nd - 1], nd, generator=gen, dtype=torch.float64)
        special = rng.integers(0, 3)
        if special:  # 0 and the largest value below 1 in the dtype, where rounding bites
            below_one = 1 - (torch.finfo(dtype).eps / 2 if dtype != torch.bfloat16 else 2.0**-8)
            r = torch.rand(samples.shape, generator=gen)
            samples[r < 0.3] = 0.0
            samples[r > 0.7] = below_one
        samples = samples.to(dtype)
        case.samples_special = int(special)
        s_m = _to_mx(_np(samples), MX[dtype])
        tf, pf = getattr(F, f"fractional_max_pool{nd}d"), getattr(PF, f"fractional_max_pool{nd}d")
        case.torch_fn = lambda a, *e: tf(a, k, out, None, case.indices, _random_samples=samples)
        case.porter_fn = lambda a, *e: pf(a, k, out, None, case.indices, random_samples=s_m)
    else:  # unpool: random indices with duplicates, or a max pool's own
        dims = _geometry(rng, nd, dilation=False, padding=True, ceil=False, big=big, fit=True)
        spatial, k, s, p, _ = (list(v) for v in zip(*dims))
        pooled = [pool_output_size(n, ki, si, pi, 1, False) for n, ki, si, pi in zip(spatial, k, s, p)]
        if min(pooled) < 1:
            pooled = [max(1, o) for o in pooled]
        default = [(o - 1) * si - 2 * pi + ki for o, ki, si, pi in zip(pooled, k, s, p)]
        case.kernel, case.stride, case.padding = k, s, p
        case.shape = _shape(case, nd, pooled, big)
        size = None
        if rng.integers(0, 3) == 0:  # explicit size inside torch's range [default, default + stride)
            size = [dflt + int(rng.integers(0, si)) for dflt, si in zip(default, s)]
        case.output_size = size
        if min(size or default) < 1:
            size = [max(1, v) for v in default]
            case.output_size = size
        plane = math.prod(size or default)
        gen = torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
        if plane <= 0:
            idx = torch.zeros(case.shape, dtype=torch.int64)
        else:
            high = plane if rng.integers(0, 3) else min(plane, 3)  # many duplicates
            idx = torch.randint(0, high, case.shape, generator=gen)
        if rng.integers(0, 25) == 0 and idx.numel():
            idx.view(-1)[0] = plane  # out of range: must raise
        case.index_desc = f"randint(0, {plane}) seed-derived"
        case.extra_t = (idx,)
        tf, pf = getattr(F, f"max_unpool{nd}d"), getattr(PF, f"max_unpool{nd}d")
        case.torch_fn = lambda a, i: tf(a, i, k, s, p, size)
        case.porter_fn = lambda a, i: pf(a, i, k, s, p, size)
        kind = _pick(rng, ["normal", "ties", "nan", "inf"])
    case.dtype = dtype
    case.kind = kind
    case.view = _pick(rng, VIEWS)
    case.x = _values(rng, case.shape, dtype, "normal" if kind == "lp_zero" else kind)
    if kind == "lp_zero":
        case.x[..., : int(rng.integers(1, 3))] = 0
    if fam == "lp" and math.isfinite(case.norm_type) and case.norm_type != int(case.norm_type) and dtype.is_floating_point:
        case.x = case.x.abs()
    if case.view == "broadcast" and case.batched:
        case.x = case.x[:1].expand(case.x.shape).contiguous()
    case.g_seed = int(rng.integers(0, 2**31))
    return case


def _all_padding(length, k, s, p, d, ceil):
    out = pool_output_size(length, k, s, p, d, ceil)
    return any(all(not 0 <= o * s - p + j * d < length for j in range(k)) for o in range(max(out, 0)))


# ---------------------------------------------------------------------------------------------------- layout
def _np(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _to_mx(a: np.ndarray, dtype) -> mx.array:
    a = np.ascontiguousarray(a)
    return mx.array(a).astype(dtype) if dtype == mx.bfloat16 else mx.array(a, dtype=dtype)


def to_porter(case: Case, x: torch.Tensor) -> mx.array:
    """The input as Porter's channels-last array, laid out in memory as case.view says (same values)."""
    a = np.moveaxis(_np(x), 1 if case.batched else 0, -1)
    dt = MX[x.dtype]
    view = case.view
    if view == "channels_first":  # a transposed view: channel stride = plane size
        return mx.moveaxis(_to_mx(np.moveaxis(a, -1, 0), dt), 0, -1)
    if view == "strided":  # every other row of a taller array
        ax = 1 if case.batched else 0
        big = np.repeat(a, 2, axis=ax)
        return _to_mx(big, dt)[(slice(None),) * ax + (slice(None, None, 2),)]
    if view == "channel_slice":  # channels 1, 3, 5, ... of a wider array
        big = np.repeat(a, 2, axis=-1)
        return _to_mx(np.concatenate([big[..., :1], big], axis=-1), dt)[..., 1::2]
    if view == "broadcast" and case.batched:
        return mx.broadcast_to(_to_mx(a[:1], dt), a.shape)
    return _to_mx(a, dt)


def from_porter(case: Case, a: mx.array, channels_last: bool) -> np.ndarray:
    if a.dtype == mx.bfloat16:
        a = a.astype(mx.float32)
    out = np.array(a)
    return np.moveaxis(out, -1, 1 if case.batched else 0) if channels_last else out


# ---------------------------------------------------------------------------------------------------- compare
def _tolerance(case: Case, grad: bool) -> tuple:
    dt = case.dtype
    exact = case.family in ("max", "adaptive_max", "fractional", "unpool") or (
        not dt.is_floating_point and case.family == "avg")
    if exact and not grad:
        return 0.0, 0.0
    if dt == torch.float16:  # torch's fp16 backward of the average pools accumulates in fp16
        tol = 2e-3 if case.family not in ("adaptive_avg", "lp", "avg") or (case.nd < 3 and not grad) else 2e-2
    elif dt == torch.bfloat16:
        # likewise in bf16 (8-bit mantissa): a dozen overlapping windows' shares summed in bf16 drift by ~0.05
        tol = 1e-1 if grad and case.family in ("adaptive_avg", "lp", "avg") else 2e-2
    elif dt == torch.float64:
        tol = 1e-9
    else:
        tol = 1e-5
    if case.family == "lp":
        # the root's derivative (a ** (1/p - 1)) amplifies the last-bit differences of a window sum near 0 (mixed-sign
        # x ** 3 cancelling): the pure-MLX path sums separably, one dim at a time, not in torch's order
        tol = max(tol * 10, 5e-3 if grad else 1e-4)
    return tol, tol


def _close(actual, expected, atol, rtol, what):
    if actual.shape != expected.shape:
        return f"{what}: shape {actual.shape} != torch {expected.shape}"
    if actual.dtype.kind == "f" or expected.dtype.kind == "f":
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        with np.errstate(invalid="ignore"):
            same = (a == e) | (np.isnan(a) & np.isnan(e)) | (np.abs(a - e) <= atol + rtol * np.abs(e))
    else:
        same = actual == expected
    if not np.all(same):
        bad = np.argwhere(~same)[:3]
        return (f"{what}: {int((~same).sum())}/{same.size} differ, first at {bad.tolist()}: porter "
                f"{[actual[tuple(b)] for b in bad]} torch {[expected[tuple(b)] for b in bad]}")
    return None


def _extension(case: Case, torch_error: Exception) -> bool:
    """Where Porter computes on purpose what torch's CPU kernels lack: fp16/bf16 avg_pool3d and lp_pool3d (their
    own tests compare with torch's float32 result rounded once)."""
    return (isinstance(torch_error, NotImplementedError) and case.family in ("avg", "lp") and case.nd == 3
            and case.dtype in (torch.float16, torch.bfloat16))


def _first_output(case: Case, a: mx.array, extra_m: tuple) -> mx.array:
    o = case.porter_fn(a, *extra_m)
    return o[0] if isinstance(o, tuple) else o


def run_case(case: Case, backend: str) -> list:
    """Problems of this case on this backend (empty: parity with torch)."""
    problems = []
    floating = case.dtype.is_floating_point
    xt = case.x.detach().clone().requires_grad_(floating and case.grad)
    extra_t = getattr(case, "extra_t", ())
    try:
        out_t = case.torch_fn(xt, *extra_t)
        torch_error = None
    except Exception as exc:  # torch's error: Porter must raise too
        torch_error = exc
    xm = to_porter(case, case.x)
    extra_m = tuple(_to_mx(np.moveaxis(e.numpy(), 1 if case.batched else 0, -1), mx.int64) for e in extra_t)
    with _native.use_native(backend == "native"):
        try:
            out_m = case.porter_fn(xm, *extra_m)
            out_m = out_m if isinstance(out_m, tuple) else (out_m,)
            mx.eval(out_m)
        except (ValueError, TypeError, IndexError) as exc:
            if torch_error is None:
                return [f"porter raised {type(exc).__name__}: {exc}; torch did not"]
            return []
        except Exception as exc:
            return [f"porter raised {type(exc).__name__} (not ValueError/TypeError): {exc}"]
        if torch_error is not None and _extension(case, torch_error):
            return []
        if torch_error is not None:
            return [f"torch raised {type(torch_error).__name__}: {str(torch_error)[:120]}; porter did not"]
        tup_t = out_t if isinstance(out_t, tuple) else (out_t,)
        if len(tup_t) != len(out_m):
            return [f"torch gave {len(tup_t)} outputs, porter {len(out_m)}"]
        atol, rtol = _tolerance(case, False)
        for i, (a_t, a_m) in enumerate(zip(tup_t, out_m)):
            want = MX.get(a_t.dtype)
            if a_m.dtype != want:
                problems.append(f"output[{i}]: dtype {a_m.dtype} != torch {a_t.dtype}")
                continue
            is_int = not a_t.dtype.is_floating_point
            p = _close(from_porter(case, a_m, a_t.ndim == case.x.ndim), _np(a_t), 0 if is_int else atol,
                       0 if is_int else rtol, f"output[{i}]")
            if p:
                problems.append(p)
        if case.family == "lp" and case.dtype in (torch.float16, torch.bfloat16) and case.norm_type < 1:
            # torch's fp16/bf16 LP backward rounds at every stage, and x ** (p - 1) with p < 1 is huge near 0: its
            # gradient there is rounding noise (tests/layers/test_lp_pool.py checks low precision on its own terms)
            return problems
        if not problems and floating and not case.grad and tup_t[0].numel():
            # no torch oracle (its backward writes out of bounds here): Porter's backward must still run (under the
            # sanitizers) and be finite, and it sends each window's gradient to one real tap or nowhere
            g = mx.ones(out_m[0].shape, dtype=out_m[0].dtype)
            _, (grad_m,) = mx.vjp(lambda a: [_first_output(case, a, extra_m)], [xm], [g])
            total = float(mx.sum(grad_m.astype(mx.float32)).item())
            if not (math.isfinite(total) and 0 <= total <= out_m[0].size):
                problems.append(f"input gradient (all-padding windows): sum {total} outside [0, {out_m[0].size}]")
        if problems or not (floating and case.grad) or tup_t[0].numel() == 0:
            return problems
        g_np = np.random.default_rng(case.g_seed).standard_normal(tuple(tup_t[0].shape)).astype(np.float32)
        g_t = torch.from_numpy(g_np).to(tup_t[0].dtype)
        tup_t[0].backward(g_t)
        g_m = _to_mx(np.moveaxis(_np(g_t), 1 if case.batched else 0, -1), out_m[0].dtype)

        try:
            _, (grad_m,) = mx.vjp(lambda a: [_first_output(case, a, extra_m)], [xm], [g_m])
            mx.eval(grad_m)
        except Exception as exc:
            return [f"porter backward raised {type(exc).__name__}: {exc}"]
        atol, rtol = _tolerance(case, True)
        p = _close(from_porter(case, grad_m, True).astype(np.float64), _np(xt.grad).astype(np.float64),
                   max(atol, 1e-6 if case.dtype != torch.float64 else 1e-12), max(rtol, 1e-6 if case.dtype != torch.float64 else 1e-12),
                   "input gradient")
        if p:
            problems.append(p)
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0, help="first config seed (config i uses seed + i)")
    ap.add_argument("--backend", choices=["native", "mlx", "both"], default="both")
    ap.add_argument("--threads", type=int, default=0, help="native kernel threads (0: PORTER_NUM_THREADS / CPUs)")
    ap.add_argument("--family", default=None, help="only this family (max, avg, adaptive_max, ...)")
    ap.add_argument("--big-every", type=int, default=20, help="1 in this many configs is large (thread pool)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # torch's unpool keeps the last duplicate only on one thread (docs/SEMANTICS.md §8.2)
    mx.set_cache_limit(0)  # freed buffers go back to malloc at once (ASan sees use-after-free)
    if args.threads:
        _native.set_num_threads(args.threads)
    backends = ["native", "mlx"] if args.backend == "both" else [args.backend]
    if "native" in backends and not _native.available():
        print(f"native kernels not available: {_native.status()['reason']}", file=sys.stderr)
        return 2
    failures, ran, start = 0, 0, time.time()
    seed = args.seed
    while ran < args.configs:
        case = make_case(seed, args.big_every)
        seed += 1
        if args.family and case.family != args.family:
            continue
        ran += 1
        for backend in backends:
            if args.verbose:
                print(f"seed {case.seed} {backend} {case}", flush=True)
            try:
                problems = run_case(case, backend)
            except Exception:
                problems = ["fuzzer error: " + traceback.format_exc(limit=3)]
            if problems:
                failures += 1
                print(f"FAIL seed={case.seed} backend={backend} (rerun: --seed {case.seed} --configs 1 --big-every "
                      f"{args.big_every} --backend {backend}) {case}\n  " + "\n  ".join(problems), flush=True)
    threads = _native.kernels().num_threads() if _native.available() else None
    print(f"{ran} configs x {backends} (threads={threads}), {failures} failures, {time.time() - start:.1f} s")
    return 1 if failures else 0

