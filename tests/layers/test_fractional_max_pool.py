"""FractionalMaxPool2d/3d against torch with the same random samples: values, indices and gradients, exactly.

The samples travel in torch's ``(N, C, 2|3)`` format (2d order [W, H], 3d order [T, H, W]); the interval sequence is
computed in the input dtype, so float16/bfloat16 are checked on many planes.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import porter.layers as L
import porter.layers.functional as PF
from tests.helpers import check_against_torch, torch_to_mx

NAN = float("nan")


def samples_for(x, nd, extra_batch=0, gen=None):
    n = x.shape[0] if x.ndim == nd + 2 else 1
    return torch.rand(n + extra_batch, x.shape[-nd - 1], nd, generator=gen).to(x.dtype)


def check_fractional(x, nd, kernel_size, output_size=None, output_ratio=None, samples=None, grad=True):
    samples = samples_for(x, nd) if samples is None else samples
    s_m = torch_to_mx(samples, True, channels_last=False)
    t_fn, p_fn = getattr(F, f"fractional_max_pool{nd}d"), getattr(PF, f"fractional_max_pool{nd}d")
    for ri in (False, True):
        check_against_torch(
            lambda a: t_fn(a, kernel_size, output_size, output_ratio, ri, _random_samples=samples),
            lambda a: p_fn(a, kernel_size, output_size, output_ratio, ri, random_samples=s_m),
            x, nd=nd, exact=True, grad=grad,
        )
    ratio = output_ratio if output_ratio is None or isinstance(output_ratio, tuple) else (output_ratio,) * nd
    t_mod = getattr(torch.nn, f"FractionalMaxPool{nd}d")(kernel_size, output_size, ratio, True, _random_samples=samples)
    p_mod = getattr(L, f"FractionalMaxPool{nd}d")(kernel_size, output_size, ratio, True)
    check_against_torch(t_mod, lambda a: p_mod(a, random_samples=s_m), x, nd=nd, exact=True, grad=grad)


CASES_2D = [
    ((10, 9), 2, (4, 5), None),
    ((10, 9), (3, 2), (8, 8), None),  # O + k - 1 == L is legal in 2d
    ((10, 9), 2, (1, 1), None),  # a single window sits at the end
    ((25, 31), 3, (11, 17), None),
    ((9, 10), 2, None, (0.5, 0.35)),
    ((12, 12), (2, 3), 6, None),
    ((7, 7), 1, (7, 7), None),
]
CASES_3D = [
    ((10, 9, 8), 2, (4, 5, 3), None),
    ((9, 7, 8), (3, 2, 2), (5, 5, 6), None),
    ((8, 8, 8), 2, None, 0.5),
    ((6, 7, 8), 1, (1, 2, 7), None),
]


@pytest.mark.parametrize("spatial,k,out,ratio", CASES_2D, ids=str)
def test_fractional_max_pool2d(spatial, k, out, ratio):
    check_fractional(torch.randn(2, 3, *spatial), 2, k, out, ratio)


@pytest.mark.parametrize("spatial,k,out,ratio", CASES_3D, ids=str)
def test_fractional_max_pool3d(spatial, k, out, ratio):
    check_fractional(torch.randn(2, 2, *spatial), 3, k, out, ratio)


@pytest.mark.parametrize("nd", [2, 3])
def test_unbatched_extra_samples_and_empty(nd):
    check_fractional(torch.randn(3, *(9,) * nd), nd, 2, (4,) * nd)
    x = torch.randn(2, 3, *(9,) * nd)
    check_fractional(x, nd, 2, (4,) * nd, samples=samples_for(x, nd, extra_batch=3))  # only rows 0..N-1 are used
    check_fractional(x, nd, 2, (0,) + (4,) * (nd - 1))
    check_fractional(torch.randn(0, 3, *(9,) * nd), nd, 2, (4,) * nd)


@pytest.mark.parametrize("u", [0.0, 0.5, 0.999999, 1.0])
def test_edge_samples(u):
    # docs/SEMANTICS.md §6.3: L=10, O=4, k=2 -> u=0: [0,2,5,8]; u=0.999999: [0,3,5,8]; u=1.0: [0,3,6,8]
    x = torch.randn(1, 2, 10, 10)
    samples = torch.tensor([[[u, 1 - u], [u, u]]])
    check_fractional(x, 2, 2, (4, 4), samples=samples)


def test_sample_order():
    # 2d: samples[..., 0] drives W and [..., 1] drives H; 3d: T, H, W
    x = torch.arange(100.0).reshape(1, 1, 10, 10)
    s = torch.tensor([[[0.9, 0.1]]])
    check_fractional(x, 2, 2, (4, 4), samples=s)
    check_fractional(x, 2, 2, (4, 4), samples=s.flip(-1))
    x3 = torch.arange(512.0).reshape(1, 1, 8, 8, 8)
    for perm in ([0.9, 0.1, 0.5], [0.1, 0.5, 0.9]):
        check_fractional(x3, 3, 2, (3, 3, 3), samples=torch.tensor([[perm]]))


@pytest.mark.parametrize("nd", [2, 3])
def test_ties_nan_inf(nd):
    gen = torch.Generator().manual_seed(nd)
    x = torch.randint(0, 3, (2, 3, *(9,) * nd), generator=gen).float()
    check_fractional(x, nd, 3, (5,) * nd)  # ties; overlapping windows accumulate gradients
    r = torch.rand(x.shape, generator=gen)
    x[r < 0.15] = NAN
    x[r > 0.9] = -float("inf")
    check_fractional(x, nd, 3, (5,) * nd)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("nd", [2, 3])
def test_interval_rounding_many_planes(nd, dtype):
    # the start sequence is computed in the input dtype with a rounding after every operation: many planes and
    # sizes where alpha is not exact would expose any fp32 (or fp64) emulation
    spatial = (61, 53) if nd == 2 else (23, 19, 29)
    out = (23, 31) if nd == 2 else (9, 11, 13)
    x = torch.randn(16, 32, *spatial).to(dtype)
    check_fractional(x, nd, 2, out, grad=False)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_gradients(dtype):
    check_fractional(torch.randn(2, 3, 11, 12).to(dtype), 2, 3, (5, 6))


def test_default_samples_come_from_mlx_random():
    x = mx.random.normal((2, 10, 9, 3))
    mx.random.seed(7)
    out = PF.fractional_max_pool2d(x, 2, (4, 5))
    mx.random.seed(7)
    samples = mx.random.uniform(shape=(2, 3, 2), dtype=x.dtype)
    assert mx.array_equal(out, PF.fractional_max_pool2d(x, 2, (4, 5), random_samples=samples)).item()
    module = L.FractionalMaxPool2d(2, output_ratio=0.5)
    assert module(x).shape == (2, 5, 4, 3)


def test_module_samples_argument():
    x = torch.randn(2, 3, 10, 9)
    s = samples_for(x, 2)
    t_mod = torch.nn.FractionalMaxPool2d(2, (4, 5), _random_samples=s)
    p_mod = L.FractionalMaxPool2d(2, (4, 5), _random_samples=torch_to_mx(s, True, channels_last=False))
    check_against_torch(t_mod, p_mod, x, nd=2, exact=True)


def test_kernel_zero_gives_empty_windows():
    x = torch.randn(2, 3, 10, 9)
    s = samples_for(x, 2)
    s_m = torch_to_mx(s, True, channels_last=False)
    check_against_torch(
        lambda a: F.fractional_max_pool2d(a, 0, (4, 5), return_indices=True, _random_samples=s),
        lambda a: PF.fractional_max_pool2d(a, 0, (4, 5), return_indices=True, random_samples=s_m),
        x, nd=2, exact=True, grad=False,
    )


# ---------------------------------------------------------------------------------------------------- errors
def _pair(x, nd, **kw):
    xm = torch_to_mx(x, x.ndim == nd + 2)
    samples = kw.pop("samples", None)
    t_kw = dict(kw, _random_samples=samples)
    p_kw = dict(kw, random_samples=None if samples is None else torch_to_mx(samples, True, channels_last=False))
    return (lambda: getattr(F, f"fractional_max_pool{nd}d")(x, **t_kw),
            lambda: getattr(PF, f"fractional_max_pool{nd}d")(xm, **p_kw))


X2, X3 = torch.randn(2, 3, 10, 9), torch.randn(2, 3, 10, 9, 8)
S2, S3 = torch.rand(2, 3, 2), torch.rand(2, 3, 3)
ERRORS = [
    (X2, 2, dict(kernel_size=2), ValueError,
     r"fractional_max_pool2d requires specifying either an output_size or an output_ratio"),
    (X2, 2, dict(kernel_size=2, output_ratio=0.5, samples=S2), TypeError, r"object of type 'float' has no len\(\)"),
    (X2, 2, dict(kernel_size=2, output_size=(10, 5), samples=S2), RuntimeError,
     r"fractional_max_pool2d\(\): pool height 2 too large relative to input height 10"),
    (X2, 2, dict(kernel_size=2, output_size=(9, 9), samples=S2), RuntimeError,
     r"fractional_max_pool2d\(\): pool width 2 too large relative to input width 9"),
    (X2, 2, dict(kernel_size=(2, 3, 4), output_size=(4, 4), samples=S2), RuntimeError,
     r"fractional_max_pool2d: kernel_size must either be a single Int or tuple of Ints"),
    (X2, 2, dict(kernel_size=2, output_size=(4, 4, 4), samples=S2), RuntimeError,
     r"fractional_max_pool2d: output_size must either be a single Int or tuple of Ints"),
    (X2, 2, dict(kernel_size=2, output_size=(4, 4), samples=S2.half()), RuntimeError,
     r"Expect _random_samples to have the same dtype as input"),
    (X2, 2, dict(kernel_size=2, output_size=(4, 4), samples=S2[0]), RuntimeError,
     r"Expect _random_samples to have 3 dimensions, got 2"),
    (X2, 2, dict(kernel_size=2, output_size=(4, 4), samples=S2[:1]), RuntimeError,
     r"Expect _random_samples.size\(0\) no less then input batch size."),
    (X2, 2, dict(kernel_size=2, output_size=(4, 4), samples=S2[:, :2]), RuntimeError,
     r"Expect _random_samples.size\(1\) equals to input channel size."),
    (X2, 2, dict(kernel_size=2, output_size=(4, 4), samples=S3), RuntimeError,
     r"Expect _random_samples.size\(2\) equals to 2; got 3."),
    (X2, 2, dict(kernel_size=2, output_size=(-1, 4), samples=S2), RuntimeError,
     r"Trying to create tensor with negative dimension -1: \[2, 3, -1, 4\]"),
    (torch.randn(1, 2, 3, 4, 5), 2, dict(kernel_size=2, output_size=(2, 2), samples=S2), RuntimeError,
     r"fractional_max_pool2d\(\): Expected 3D or 4D tensor, but got"),
    (torch.randn(2, 0, 5, 5), 2, dict(kernel_size=2, output_size=(2, 2), samples=S2), RuntimeError,
     r"fractional_max_pool2d\(\): Expected input to have non-zero size for non-batch dimensions"),
    (X3, 3, dict(kernel_size=2, output_size=(9, 8, 7), samples=S3), RuntimeError,
     r"fractional_max_pool3d_out\(\): pool time 2 too large relative to input time 10"),
    (X3, 3, dict(kernel_size=2, output_size=(8, 8, 7), samples=S3), RuntimeError,
     r"fractional_max_pool3d_out\(\): pool width 2 too large relative to input width 8"),
    (X3, 3, dict(kernel_size=2, output_size=(8, 8, 6), samples=S3), RuntimeError,
     r"fractional_max_pool3d_out\(\): pool height 2 too large relative to input height 9"),
    (X3, 3, dict(kernel_size=2, output_size=(4, 5, 3), samples=S2), RuntimeError,
     r"Expect _random_samples.size\(2\) equals to 3; got 2."),
    (torch.randn(5, 5, 5), 3, dict(kernel_size=2, output_size=2, samples=S3), RuntimeError,
     r"fractional_max_pool3d_out\(\): Expected 4D or 5D tensor, but got"),
]


@pytest.mark.parametrize("x,nd,kw,t_exc,message", ERRORS, ids=lambda v: str(v)[:30] if isinstance(v, str) else None)
def test_errors_match_torch(x, nd, kw, t_exc, message):
    t_call, p_call = _pair(x, nd, **kw)
    with pytest.raises(t_exc, match=message):
        t_call()
    p_exc = TypeError if t_exc is TypeError else ValueError
    with pytest.raises(p_exc, match=rf"\[fractional_max_pool{nd}d\] .*" + message):
        p_call()


@pytest.mark.parametrize("nd", [2, 3])
def test_module_errors(nd):
    name = f"FractionalMaxPool{nd}d"
    t_cls, p_cls = getattr(torch.nn, name), getattr(L, name)
    cases = [
        (dict(kernel_size=2), rf"{name} requires specifying either an output size, or a pooling ratio"),
        (dict(kernel_size=2, output_size=3, output_ratio=0.5), r"only one of output_size and output_ratio may be"),
        (dict(kernel_size=2, output_ratio=1.0), r"output_ratio must be between 0 and 1 \(got 1.0\)"),
        (dict(kernel_size=2, output_ratio=(0.5,) * (nd - 1) + (0.0,)), r"output_ratio must be between 0 and 1"),
    ]
    if nd == 3:
        cases.append((dict(kernel_size=0, output_size=2), r"kernel_size must be greater than 0, but got 0"))
    for kw, message in cases:
        with pytest.raises(ValueError, match=message):
            t_cls(**kw)
        with pytest.raises(ValueError, match=rf"\[{name}\] " + message):
            p_cls(**kw)
    with pytest.raises(TypeError, match=r"not implemented"):
        p_cls(2, 2)(mx.zeros((1,) + (6,) * nd + (2,), dtype=mx.int32))
    assert np.array(p_cls(2, 2)(mx.zeros((1,) + (6,) * nd + (2,)))).shape == (1,) + (2,) * nd + (2,)


@pytest.mark.parametrize("u", [float("nan"), 1e30, -1e30, 1e9, -5.0, 3.0])
def test_samples_outside_unit_interval_stay_in_bounds(u):
    # torch reads out of bounds for such samples (no oracle); Porter keeps every window inside the input, and the
    # native kernel converts NaN / out-of-int-range positions like the pure-MLX path (it was undefined behaviour)
    from porter.layers import _native

    x = mx.array(np.random.default_rng(0).standard_normal((2, 9, 11, 3)).astype(np.float32))
    samples = mx.full((2, 3, 2), u)
    values, index = PF.fractional_max_pool2d(x, 2, (4, 5), return_indices=True, random_samples=samples)
    with _native.use_native(False):
        want_v, want_i = PF.fractional_max_pool2d(x, 2, (4, 5), return_indices=True, random_samples=samples)
    assert mx.array_equal(index, want_i).item() and mx.array_equal(values, want_v).item()
    assert 0 <= mx.min(index).item() and mx.max(index).item() < 9 * 11


@pytest.mark.parametrize("nd", [2, 3])
def test_window_size_errors_come_before_sample_errors_as_in_torch(nd):
    # torch's meta function checks the window sizes before its kernel checks the samples
    shape = (1, 2, 4, 5, 5)[: nd + 2]
    x = torch.randn(*shape)
    bad_samples = torch.rand(1, 3, nd)  # wrong channel count
    t_fn = getattr(F, f"fractional_max_pool{nd}d")
    p_fn = getattr(PF, f"fractional_max_pool{nd}d")
    kernel, out = (4, 3) if nd == 2 else (4, 3)
    with pytest.raises(RuntimeError, match="too large relative to input") as torch_error:
        t_fn(x, kernel, output_size=out, _random_samples=bad_samples)
    with pytest.raises(ValueError, match="too large relative to input"):
        p_fn(mx.array(x.movedim(1, -1).numpy()), kernel, output_size=out, random_samples=mx.array(bad_samples.numpy()))
    assert "too large" in str(torch_error.value)
