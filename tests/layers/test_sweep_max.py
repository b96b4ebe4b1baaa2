"""Property-based sweeps: hundreds of random legal configurations per max-type pool, forward, indices and backward,
against torch on the same data (exact). Data mixes ties, NaN and -inf; dtypes include float16/bfloat16.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import porter.layers.functional as PF
from tests.helpers import check_against_torch, torch_to_mx

pytestmark = pytest.mark.slow  # subprocesses or long sweeps: `pytest -m "not slow"` skips them

SWEEP = settings(max_examples=250, deadline=None, derandomize=True, database=None)
DTYPES = [torch.float32] * 4 + [torch.float16, torch.bfloat16]


def _data(draw, shape, dtype):
    """Random values with deliberate ties, NaNs and infinities."""
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    kind = draw(st.sampled_from(["normal", "ties", "nan", "inf"]))
    x = torch.randint(0, 3, shape, generator=gen).float() if kind == "ties" else torch.randn(shape, generator=gen)
    if kind in ("nan", "inf"):
        r = torch.rand(shape, generator=gen)
        x[r < 0.2] = float("nan") if kind == "nan" else -float("inf")
        if kind == "inf":
            x[r > 0.9] = float("inf")
    return x.to(dtype)


def _shape(draw, nd, spatial):
    batch = draw(st.sampled_from([None, 0, 1, 2]))
    channels = draw(st.integers(1, 3))
    return ((channels,) if batch is None else (batch, channels)) + tuple(spatial)


@SWEEP
@given(st.data())
def test_sweep_max_pool(data):
    draw = data.draw
    nd = draw(st.integers(1, 3))
    kernel, stride, padding, dilation, spatial = [], [], [], [], []
    for _ in range(nd):
        k, s, d = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.sampled_from([1, 1, 1, 2, 3]))
        p = draw(st.integers(0, k // 2))
        need = max(1, d * (k - 1) + 1 - 2 * p)
        kernel.append(k), stride.append(s), dilation.append(d), padding.append(p)
        spatial.append(draw(st.integers(need, need + 6)))
    ceil = draw(st.booleans())
    ri = draw(st.booleans())
    dtype = draw(st.sampled_from(DTYPES))
    x = _data(draw, _shape(draw, nd, spatial), dtype)
    args = (kernel, stride, padding, dilation, ceil)
    # torch's own backward writes out of bounds for windows made only of padding (docs/SEMANTICS.md §3.5): no grad there
    all_padding = any(_has_empty_window(*a, ceil) for a in zip(spatial, kernel, stride, padding, dilation))
    check_against_torch(
        lambda a: getattr(F, f"max_pool{nd}d")(a, *args, return_indices=ri),
        lambda a: getattr(PF, f"max_pool{nd}d")(a, *args, return_indices=ri),
        x, nd=nd, exact=True, grad=not all_padding,
    )


def _has_empty_window(length, k, s, p, d, ceil):
    from porter.layers._utils import pool_output_size

    out = pool_output_size(length, k, s, p, d, ceil)
    return any(all(not 0 <= o * s - p + j * d < length for j in range(k)) for o in range(out))


@SWEEP
@given(st.data())
def test_sweep_adaptive_max_pool(data):
    draw = data.draw
    nd = draw(st.integers(1, 3))
    spatial = [draw(st.integers(1, 12)) for _ in range(nd)]
    out = [draw(st.integers(0, 14)) for _ in range(nd)]
    if nd > 1:
        out = [None if draw(st.integers(0, 5)) == 0 else o for o in out]
    out = out[0] if nd == 1 else tuple(out)
    ri = draw(st.booleans())
    x = _data(draw, _shape(draw, nd, spatial), draw(st.sampled_from(DTYPES)))
    check_against_torch(
        lambda a: getattr(F, f"adaptive_max_pool{nd}d")(a, out, ri),
        lambda a: getattr(PF, f"adaptive_max_pool{nd}d")(a, out, ri),
        x, nd=nd, exact=True,
    )


@SWEEP
@given(st.data())
def test_sweep_fractional_max_pool(data):
    draw = data.draw
    nd = draw(st.integers(2, 3))
    kernel, spatial, out = [], [], []
    for _ in range(nd):
        k = draw(st.integers(1, 3))
        length = draw(st.integers(k + 1, 14))
        kernel.append(k), spatial.append(length)
        # 2d allows O + k - 1 <= L, 3d needs O + k - 1 < L
        out.append(draw(st.integers(0, length - k + 1 if nd == 2 else length - k)))
    ri = draw(st.booleans())
    dtype = draw(st.sampled_from(DTYPES))
    x = _data(draw, _shape(draw, nd, spatial), dtype)
    n = x.shape[0] if x.ndim == nd + 2 else 1
    seed = draw(st.integers(0, 2**31 - 1))
    samples = torch.rand(n, x.shape[-nd - 1], nd, generator=torch.Generator().manual_seed(seed)).to(dtype)
    s_m = torch_to_mx(samples, True, channels_last=False)
    check_against_torch(
        lambda a: getattr(F, f"fractional_max_pool{nd}d")(a, kernel, out, None, ri, _random_samples=samples),
        lambda a: getattr(PF, f"fractional_max_pool{nd}d")(a, kernel, out, None, ri, random_samples=s_m),
        x, nd=nd, exact=True,
    )
