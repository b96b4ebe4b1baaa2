"""AdaptiveMaxPool1d/2d/3d against torch: values, int64 indices and input gradients, all compared exactly.

Sizes that do not divide evenly (overlapping windows of varying length), output larger than the input, ``None``
entries, zero output sizes, ties, NaN, unbatched input, low precision and every error case.
"""

import mlx.core as mx
import pytest
import torch
import torch.nn.functional as F

import porter.layers as L
import porter.layers.functional as PF
from tests.helpers import check_against_torch, torch_to_mx

NAN = float("nan")


def check_adaptive(x, nd, output_size, grad=True):
    t_fn, p_fn = getattr(F, f"adaptive_max_pool{nd}d"), getattr(PF, f"adaptive_max_pool{nd}d")
    for ri in (False, True):
        check_against_torch(
            lambda a: t_fn(a, output_size, ri), lambda a: p_fn(a, output_size, ri), x, nd=nd, exact=True, grad=grad
        )
    t_mod = getattr(torch.nn, f"AdaptiveMaxPool{nd}d")(output_size, True)
    p_mod = getattr(L, f"AdaptiveMaxPool{nd}d")(output_size, True)
    check_against_torch(t_mod, p_mod, x, nd=nd, exact=True, grad=grad)


CASES_1D = [(10, 4), (10, 5), (7, 3), (3, 5), (11, 1), (5, 5), (16, 6), (4, 0)]
CASES_2D = [
    ((10, 7), (4, 3)),
    ((10, 7), (3, None)),
    ((10, 7), (None, 4)),
    ((3, 2), (5, 4)),  # output larger than input: windows repeat elements
    ((8, 9), (4, 3)),  # divides evenly: the sliding-window fast path
    ((9, 9), 1),
    ((13, 6), 5),
    ((6, 6), (0, 3)),
]
CASES_3D = [((7, 5, 6), (3, 2, 4)), ((4, 6, 5), (2, None, 3)), ((3, 4, 5), 6), ((6, 6, 6), (2, 3, 1))]


@pytest.mark.parametrize("length,out", CASES_1D, ids=str)
def test_adaptive_max_pool1d(length, out):
    check_adaptive(torch.randn(2, 3, length), 1, out)


@pytest.mark.parametrize("spatial,out", CASES_2D, ids=str)
def test_adaptive_max_pool2d(spatial, out):
    check_adaptive(torch.randn(2, 3, *spatial), 2, out)


@pytest.mark.parametrize("spatial,out", CASES_3D, ids=str)
def test_adaptive_max_pool3d(spatial, out):
    check_adaptive(torch.randn(2, 2, *spatial), 3, out)


def test_not_the_stride_shortcut():
    # L=10, O=4: torch's windows [0,3),[2,5),[5,8),[7,10) -> [2,4,7,9] on arange(10); stride 2 kernel 4 would differ
    out = PF.adaptive_max_pool1d(mx.arange(10, dtype=mx.float32).reshape(1, 10, 1), 4)
    assert out.reshape(-1).tolist() == [2.0, 4.0, 7.0, 9.0]


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_unbatched_and_empty_batch(nd):
    check_adaptive(torch.randn(3, *(7,) * nd), nd, 3)
    check_adaptive(torch.randn(0, 3, *(7,) * nd), nd, 3)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_ties_nan_inf(nd):
    gen = torch.Generator().manual_seed(nd)
    x = torch.randint(0, 3, (2, 3, *(7,) * nd), generator=gen).float()
    check_adaptive(x, nd, 3)  # ties, overlapping windows: gradients accumulate
    check_adaptive(x, nd, 9)  # output larger than input
    r = torch.rand(x.shape, generator=gen)
    x[r < 0.15] = NAN
    x[r > 0.9] = -float("inf")
    check_adaptive(x, nd, 3)
    check_adaptive(torch.full((1, 2, *(5,) * nd), -float("inf")), nd, 3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_low_precision(nd, dtype):
    check_adaptive(torch.randn(2, 3, *(7,) * nd).to(dtype), nd, 3)


def test_large_input_fused_paths():
    # evenly dividing sizes use fused sliding windows on large inputs, uneven ones fused gathers
    check_adaptive(torch.randn(2, 64, 42, 42), 2, 21)
    check_adaptive(torch.randn(2, 64, 42, 42), 2, (7, 6))
    gen = torch.Generator().manual_seed(5)
    x = torch.randint(0, 4, (4, 64, 50, 50), generator=gen).float()
    x[torch.rand(x.shape, generator=gen) < 0.02] = NAN
    check_adaptive(x, 2, (17, 19))  # output 4*64*17*19 elements: above the fusing threshold


# ---------------------------------------------------------------------------------------------------- errors
def test_errors_match_torch():
    x4 = torch.randn(2, 3, 5, 7)
    xm = torch_to_mx(x4, True)
    cases = [
        (lambda: F.adaptive_max_pool2d(x4, (-1, 4)), lambda: PF.adaptive_max_pool2d(xm, (-1, 4)),
         RuntimeError, ValueError, r"Trying to create tensor with negative dimension -1: \[2, 3, -1, 4\]"),
        (lambda: F.adaptive_max_pool2d(x4, (1, 2, 3)), lambda: PF.adaptive_max_pool2d(xm, (1, 2, 3)),
         RuntimeError, ValueError, r"adaptive_max_pool2d\(\): internal error: output_size.size\(\) must be 2"),
        (lambda: F.adaptive_max_pool2d(x4, (2.0, 3)), lambda: PF.adaptive_max_pool2d(xm, (2.0, 3)),
         TypeError, TypeError, r"argument 'output_size' .*must be tuple of ints, but found element of type float"),
        (lambda: F.adaptive_max_pool1d(torch.randn(2, 3, 5), (2, 3)),
         lambda: PF.adaptive_max_pool1d(mx.zeros((2, 5, 3)), (2, 3)),
         RuntimeError, ValueError, r"adaptive_max_pool1d\(\) argument 'output_size' should contain one int \(got 2\)"),
        (lambda: F.adaptive_max_pool1d(torch.randn(2, 3, 5), None),
         lambda: PF.adaptive_max_pool1d(mx.zeros((2, 5, 3)), None),
         TypeError, TypeError, r"argument 'output_size' .*must be tuple of ints, not NoneType"),
        (lambda: F.adaptive_max_pool2d(torch.randn(1, 2, 3, 4, 5), 2),
         lambda: PF.adaptive_max_pool2d(mx.zeros((1, 2, 3, 4, 5)), 2),
         RuntimeError, ValueError, r"adaptive_max_pool2d\(\): Expected 3D or 4D tensor, but got"),
        (lambda: F.adaptive_max_pool3d(torch.randn(5, 5, 5), 2), lambda: PF.adaptive_max_pool3d(mx.zeros((5, 5, 5)), 2),
         RuntimeError, ValueError, r"adaptive_max_pool3d\(\): Expected 4D or 5D tensor, but got"),
        (lambda: F.adaptive_max_pool2d(torch.randn(2, 0, 5, 7), 2),
         lambda: PF.adaptive_max_pool2d(mx.zeros((2, 5, 7, 0)), 2),
         RuntimeError, ValueError, r"adaptive_max_pool2d\(\): Expected input to have non-zero size for non-batch"),
        (lambda: F.adaptive_max_pool1d(torch.randn(2, 3, 0), 2), lambda: PF.adaptive_max_pool1d(mx.zeros((2, 0, 3)), 2),
         RuntimeError, ValueError, r"adaptive_max_pool1d\(\): Expected input to have non-zero size for non-batch"),
        (lambda: F.adaptive_max_pool2d(torch.randint(0, 3, (2, 3, 5, 7)), 2),
         lambda: PF.adaptive_max_pool2d(mx.zeros((2, 5, 7, 3), dtype=mx.int64), 2),
         NotImplementedError, TypeError, r"\"adaptive_max_pool2d\" not implemented for"),
    ]
    for t_call, p_call, t_exc, p_exc, message in cases:
        with pytest.raises(t_exc, match=message):
            t_call()
        with pytest.raises(p_exc, match=message):
            p_call()


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_module_errors(nd):
    cls = getattr(L, f"AdaptiveMaxPool{nd}d")
    with pytest.raises(TypeError, match=rf"\[AdaptiveMaxPool{nd}d\]"):
        cls(None)  # a bare None is an error in every dimension (torch: TypeError too)
    with pytest.raises(TypeError):
        getattr(torch.nn, f"AdaptiveMaxPool{nd}d")(None)(torch.randn(2, 3, *(5,) * nd))
    with pytest.raises(TypeError, match=rf"\[AdaptiveMaxPool{nd}d\]"):
        cls(2.5)
    with pytest.raises(ValueError, match=r"Expected"):
        cls(2)(mx.zeros((5,) * (nd + 3)))
