"""Seeded random sweeps against torch: hundreds of random legal configurations per op (avg, adaptive avg, LP,
max unpool), forward and backward. Each seed draws one configuration; a failure names the seed and the config."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.helpers import check_against_torch

from porter.layers._utils import pool_output_size
from porter.layers.functional import (
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d, avg_pool1d, avg_pool2d, avg_pool3d, lp_pool1d,
    lp_pool2d, lp_pool3d, max_unpool1d, max_unpool2d, max_unpool3d,
)

pytestmark = pytest.mark.slow  # subprocesses or long sweeps: `pytest -m "not slow"` skips them

N_CONFIGS = 250
AVG = {1: (F.avg_pool1d, avg_pool1d), 2: (F.avg_pool2d, avg_pool2d), 3: (F.avg_pool3d, avg_pool3d)}
ADAPTIVE = {1: (F.adaptive_avg_pool1d, adaptive_avg_pool1d), 2: (F.adaptive_avg_pool2d, adaptive_avg_pool2d),
            3: (F.adaptive_avg_pool3d, adaptive_avg_pool3d)}
LP = {1: (F.lp_pool1d, lp_pool1d), 2: (F.lp_pool2d, lp_pool2d), 3: (F.lp_pool3d, lp_pool3d)}
UNPOOL = {1: (F.max_pool1d, F.max_unpool1d, max_unpool1d), 2: (F.max_pool2d, F.max_unpool2d, max_unpool2d),
          3: (F.max_pool3d, F.max_unpool3d, max_unpool3d)}


def _window_geometry(rng, nd, *, padding=True, need_kernel_fit=False, ceil_mode=False):
    """Random per-axis (L, k, s, p) with a non-empty output."""
    dims = []
    for _ in range(nd):
        while True:
            k = int(rng.integers(1, 6))
            s = int(rng.integers(1, 5))
            p = int(rng.integers(0, k // 2 + 1)) if padding else 0
            low = k if need_kernel_fit else 1
            length = int(rng.integers(low, 13 if nd < 3 else 9))
            if pool_output_size(length, k, s, p, 1, ceil_mode) >= 1:
                dims.append((length, k, s, p))
                break
    return dims


def _shape(rng, nd, spatial):
    batched = bool(rng.integers(0, 4))  # mostly batched, sometimes unbatched
    c = int(rng.integers(1, 4))
    return ((int(rng.integers(1, 3)), c) if batched else (c,)) + tuple(spatial)


def _maybe_tuple(rng, values):
    return values[0] if len(set(values)) == 1 and rng.integers(0, 2) else tuple(values)


@pytest.mark.parametrize("seed", range(N_CONFIGS))
def test_avg_pool_sweep(seed):
    rng = np.random.default_rng(1000 + seed)
    nd = int(rng.integers(1, 4))
    ceil = bool(rng.integers(0, 2))
    dims = _window_geometry(rng, nd, need_kernel_fit=nd == 3, ceil_mode=ceil)
    lengths, k, s, p = (list(v) for v in zip(*dims))
    # stride=None (= kernel) where that still gives a non-empty output
    default_ok = all(pool_output_size(n, ki, ki, pi, 1, ceil) >= 1 for n, ki, pi in zip(lengths, k, p))
    stride = None if default_ok and rng.integers(0, 4) == 0 else _maybe_tuple(rng, s)
    args = [_maybe_tuple(rng, k), stride, _maybe_tuple(rng, p), ceil, bool(rng.integers(0, 2))]
    if nd > 1 and rng.integers(0, 3) == 0:
        args.append(int(rng.choice([-3, -1, 1, 2, 5])))
    kind = rng.choice(["f32", "f32", "f32", "f16", "bf16", "i64"] if nd < 3 else ["f32", "i64"])
    x = torch.randn(_shape(rng, nd, lengths))
    x = {"f32": x, "f16": x.half(), "bf16": x.bfloat16(), "i64": (x * 20).long()}[kind]
    torch_fn, porter_fn = AVG[nd]
    check_against_torch(lambda a: torch_fn(a, *args), lambda a: porter_fn(a, *args), x, nd=nd, exact=kind == "i64",
                        seed=seed)


@pytest.mark.parametrize("seed", range(N_CONFIGS))
def test_adaptive_avg_pool_sweep(seed):
    rng = np.random.default_rng(2000 + seed)
    nd = int(rng.integers(1, 4))
    lengths = [int(rng.integers(1, 16 if nd < 3 else 9)) for _ in range(nd)]
    out = [int(rng.integers(0, 2 * n + 2)) if rng.integers(0, 8) else 0 for n in lengths]
    out = [max(o, 1) if rng.integers(0, 6) else o for o in out]
    if nd > 1:
        out = [None if rng.integers(0, 5) == 0 else o for o in out]
    size = out[0] if nd == 1 and rng.integers(0, 2) else tuple(out)
    dtype = rng.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16])
    # torch's 3d fp16/bf16 kernels (forward and backward) accumulate at low precision
    tol = dict(atol=2e-2, rtol=2e-2, grad_atol=2e-2, grad_rtol=2e-2) if nd == 3 and dtype != torch.float32 else {}
    torch_fn, porter_fn = ADAPTIVE[nd]
    x = torch.randn(_shape(rng, nd, lengths)).to(dtype)
    check_against_torch(lambda a: torch_fn(a, size), lambda a: porter_fn(a, size), x, nd=nd, seed=seed, **tol)


@pytest.mark.parametrize("seed", range(N_CONFIGS))
def test_lp_pool_sweep(seed):
    rng = np.random.default_rng(3000 + seed)
    nd = int(rng.integers(1, 4))
    ceil = bool(rng.integers(0, 2))
    dims = _window_geometry(rng, nd, padding=False, need_kernel_fit=nd == 3, ceil_mode=ceil)
    lengths, k, s, _ = (list(v) for v in zip(*dims))
    p = rng.choice([1, 2, 3, 4, 1.5, 2.5, 2.0, 0.5, np.inf, -np.inf])
    p = float(p) if isinstance(p, np.floating) else int(p)
    kernel = k[0] if nd == 1 else _maybe_tuple(rng, k)
    stride = s[0] if nd == 1 else _maybe_tuple(rng, s)
    x = torch.randn(_shape(rng, nd, lengths))
    if np.isfinite(p) and p != int(p):
        x = x.abs()  # x ** 1.5 of a negative is NaN in both; the NaN cases have their own tests
    if rng.integers(0, 3) == 0:
        x[..., : int(rng.integers(1, 3))] = 0  # all-zero windows: the gradient must be 0 there, not NaN
    torch_fn, porter_fn = LP[nd]
    check_against_torch(lambda a: torch_fn(a, p, kernel, stride, ceil), lambda a: porter_fn(a, p, kernel, stride, ceil),
                        x, nd=nd, atol=1e-5, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-3, seed=seed)


@pytest.mark.parametrize("seed", range(N_CONFIGS))
def test_max_unpool_sweep(seed):
    rng = np.random.default_rng(4000 + seed)
    nd = int(rng.integers(1, 4))
    dims = _window_geometry(rng, nd)
    lengths, k, s, p = (list(v) for v in zip(*dims))
    pool, torch_unpool, porter_unpool = UNPOOL[nd]
    x = torch.randn(_shape(rng, nd, lengths))
    if rng.integers(0, 2):
        x = x.round()  # ties: torch's first-max indices, duplicated across overlapping windows
    y, idx = pool(x, k, s, p, return_indices=True)
    size = tuple(lengths)  # the original size is always inside torch's valid range
    dtype = rng.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16])
    check_against_torch(lambda a, i: torch_unpool(a, i, k, s, p, size), lambda a, i: porter_unpool(a, i, k, s, p, size),
                        y.to(dtype).detach(), nd=nd, exact=True, extra_inputs=(idx,), seed=seed)
