"""AvgPool1d/2d/3d and avg_pool1d/2d/3d against torch: divisors in every padding/ceil/count_include_pad/override
combination, non-dividing sizes, unbatched input, fp16/bf16, int64, gradients and every error case."""

import itertools

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.error_helpers import check_error_against_torch
from tests.helpers import check_against_torch

from porter.layers import AvgPool1d, AvgPool2d, AvgPool3d
from porter.layers.functional import avg_pool1d, avg_pool2d, avg_pool3d

TORCH_FN = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
PORTER_FN = {1: avg_pool1d, 2: avg_pool2d, 3: avg_pool3d}
TORCH_CLS = {1: torch.nn.AvgPool1d, 2: torch.nn.AvgPool2d, 3: torch.nn.AvgPool3d}
PORTER_CLS = {1: AvgPool1d, 2: AvgPool2d, 3: AvgPool3d}

# (input shape in torch layout, kernel, stride, padding): sizes chosen so that ceil mode leaves partial windows,
# windows run past L + p, and strides do not divide the input
GEOMETRY = {
    1: [((2, 3, 9), 3, 2, 1), ((2, 3, 5), 2, 2, 0), ((2, 3, 4), 3, 2, 1), ((2, 3, 10), 4, 3, 2), ((2, 3, 6), 2, 3, 1),
        ((2, 3, 7), 1, 2, 0), ((3, 8), 3, None, 1), ((2, 3, 11), (5,), [3], (2,))],
    2: [((2, 3, 7, 9), 3, 2, 1), ((2, 3, 5, 5), 2, 2, 0), ((2, 3, 8, 7), (3, 2), (2, 3), (1, 0)),
        ((2, 3, 10, 6), 4, 3, 2), ((2, 3, 6, 6), 2, 3, 1), ((3, 7, 9), 3, None, 1), ((2, 3, 9, 4), (5, 1), 2, (2, 0)),
        ((1, 2, 2, 2), 3, 2, 1)],
    3: [((2, 3, 5, 6, 7), 3, 2, 1), ((2, 3, 4, 5, 4), 2, 2, 0), ((2, 3, 6, 5, 7), (3, 2, 4), (2, 1, 3), (1, 0, 2)),
        ((3, 5, 5, 6), 3, None, 1), ((2, 2, 7, 4, 5), (4, 1, 2), (3, 1, 2), (2, 0, 1))],
}

CASES = [
    pytest.param(nd, shape, k, s, p, ceil, cip, div, id=f"{nd}d-{shape}-k{k}-s{s}-p{p}-ceil{ceil}-cip{cip}-div{div}")
    for nd, geo in GEOMETRY.items()
    for (shape, k, s, p), ceil, cip, div in itertools.product(geo, (False, True), (True, False), (None, 3, -2))
    if not (nd == 1 and div is not None)
]


def _call_args(nd, k, s, p, ceil, cip, div):
    return (k, s, p, ceil, cip) if nd == 1 else (k, s, p, ceil, cip, div)


@pytest.mark.parametrize("nd, shape, k, s, p, ceil, cip, div", CASES)
def test_functional_matches_torch(nd, shape, k, s, p, ceil, cip, div):
    args = _call_args(nd, k, s, p, ceil, cip, div)
    x = torch.randn(shape)
    check_against_torch(lambda a: TORCH_FN[nd](a, *args), lambda a: PORTER_FN[nd](a, *args), x, nd=nd)


@pytest.mark.parametrize("nd, shape, k, s, p, ceil, cip, div", CASES[::7])
def test_module_matches_torch(nd, shape, k, s, p, ceil, cip, div):
    args = _call_args(nd, k, s, p, ceil, cip, div)
    tm, pm = TORCH_CLS[nd](*args), PORTER_CLS[nd](*args)
    check_against_torch(tm, pm, torch.randn(shape), nd=nd)


@pytest.mark.parametrize("nd, shape, k, s, p, ceil, cip, div", CASES[::3])
def test_int64_truncating_division(nd, shape, k, s, p, ceil, cip, div):
    args = _call_args(nd, k, s, p, ceil, cip, div)
    x = torch.randint(-50, 50, shape)
    check_against_torch(lambda a: TORCH_FN[nd](a, *args), lambda a: PORTER_FN[nd](a, *args), x, nd=nd, exact=True)


def test_worked_examples_from_semantics():
    ones = torch.ones(1, 1, 4)
    check_against_torch(lambda a: F.avg_pool1d(a, 3, 2, 1, True, True), lambda a: avg_pool1d(a, 3, 2, 1, True, True),
                        ones, nd=1, exact=True)
    check_against_torch(lambda a: F.avg_pool1d(a, 3, 2, 1, True, False),
                        lambda a: avg_pool1d(a, 3, 2, 1, True, False), ones, nd=1, exact=True)
    ones2 = torch.ones(1, 1, 1, 5)
    check_against_torch(lambda a: F.avg_pool2d(a, (1, 2), 2, 0, True, True, 4),
                        lambda a: avg_pool2d(a, (1, 2), 2, 0, True, True, 4), ones2, nd=2, exact=True)
    neg = torch.tensor([[[[-1, -2], [-2, -2]]]])
    check_against_torch(lambda a: F.avg_pool2d(a, 2), lambda a: avg_pool2d(a, 2), neg, nd=2, exact=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("nd, shape, k, s, p, ceil, cip, div", CASES[::5])
def test_low_precision(nd, shape, k, s, p, ceil, cip, div, dtype):
    args = _call_args(nd, k, s, p, ceil, cip, div)
    x = torch.randn(shape).to(dtype)
    if nd == 3:
        # torch's CPU avg_pool3d has no fp16/bf16 kernel: the oracle is the float32 result rounded once
        def torch_fn(a):
            return F.avg_pool3d(a.float(), *args).to(dtype)
    else:
        def torch_fn(a):
            return TORCH_FN[nd](a, *args)
    check_against_torch(torch_fn, lambda a: PORTER_FN[nd](a, *args), x, nd=nd)


def test_low_precision_rounds_once():
    # fp16 accumulates in float32: a window of many values that would lose bits in fp16 partial sums
    x = (torch.rand(1, 4, 64, 64) * 100).half()
    check_against_torch(lambda a: F.avg_pool2d(a, 8), lambda a: avg_pool2d(a, 8), x, nd=2, atol=0, rtol=1e-3,
                        grad=False)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_zero_batch(nd):
    x = torch.randn((0, 2) + (5,) * nd)
    check_against_torch(lambda a: TORCH_FN[nd](a, 2), lambda a: PORTER_FN[nd](a, 2), x, nd=nd)


# ---------------------------------------------------------------------------------------------------- errors
def _error(nd, shape, *args, match=None, **kwargs):
    x = torch.randn(shape)
    xm = mx.zeros(tuple(shape[:1]) + tuple(shape[2:]) + tuple(shape[1:2])) if len(shape) == nd + 2 else \
        mx.zeros(tuple(shape[1:]) + tuple(shape[:1]))
    check_error_against_torch(lambda: TORCH_FN[nd](x, *args, **kwargs), lambda: PORTER_FN[nd](xm, *args, **kwargs),
                              match=match, layer=f"avg_pool{nd}d")


ERRORS_2D = [
    ((3, 0, 0), {}, None),  # stride zero
    ((0,), {}, None),  # kernel zero, stride omitted: torch says "stride should not be zero"
    ((0, 1), {}, None),
    ((-1, 1), {}, None),
    ((-2, 1), {}, None),  # C division quirk: the half-kernel check fires first
    ((3, -1), {}, None),
    ((3, 1, -1), {}, None),
    ((3, 1, 2), {}, None),
    (((3, 1), 1, (0, 1)), {}, None),
    (((3, 3), 1, (2, 3)), {}, None),
    (((3, 3), (1, 0), (0, 3)), {}, None),
    (((3, 0), 1, 0), {}, None),
    (((3, 3), (1, -1), 0), {}, None),
    ((3, 1, 1), {"divisor_override": 0}, None),
    ((3, 0, 2), {"divisor_override": 0}, None),  # the divisor check runs before the per-axis checks
    (((3, 3, 3),), {}, None),
    ((3, (1, 1, 1)), {}, None),
    ((3, 1, (1, 1, 1)), {}, None),
    ((3,), {"divisor_override": 2.0}, "argument 'divisor_override' must be int, not float"),
    ((3,), {"divisor_override": True}, "argument 'divisor_override' must be int, not bool"),
    ((3.0,), {}, "must be tuple of ints, not float"),
    ((3, 1, 0, 1), {}, "must be bool, not int"),
    ((3, 1, 0, False, 1), {}, "argument 'count_include_pad'"),
]


@pytest.mark.parametrize("args, kwargs, match", ERRORS_2D)
def test_argument_errors_2d(args, kwargs, match):
    _error(2, (1, 2, 5, 5), *args, match=match, **kwargs)


def test_output_too_small():
    _error(2, (1, 2, 1, 1), 3, 1, 0)
    _error(2, (1, 2, 2, 9), (3, 3), 1, 0)
    _error(1, (1, 2, 1), 3, 1, 0)  # torch shows 1d as C x 1 x L
    _error(3, (1, 1, 2, 2, 2), (1, 3, 3), 1, 1)


def test_avg_pool3d_input_smaller_than_kernel_even_with_padding():
    _error(3, (1, 1, 2, 4, 4), 3, 1, 1)
    _error(3, (1, 1, 2, 5, 5), (2, 9, 3), 1, 1)
    # 2d allows it when padding makes the output non-empty
    x = torch.randn(1, 1, 2, 4)
    check_against_torch(lambda a: F.avg_pool2d(a, 3, 1, 1), lambda a: avg_pool2d(a, 3, 1, 1), x, nd=2)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_argument_errors_1d_3d(nd):
    shape = (1, 2) + (6,) * nd
    _error(nd, shape, 3, 0)
    _error(nd, shape, 3, 1, 2)
    _error(nd, shape, 3, 1, -1)
    _error(nd, shape, 0, 1)
    if nd == 1:
        _error(nd, shape, (3, 3))
        _error(nd, shape, 3, (1, 1))
        _error(nd, shape, 3, 1, ())
    if nd == 3:
        _error(nd, shape, 3, 1, 1, divisor_override=0)
        _error(nd, shape, (3, 3))
        _error(nd, shape, 3, (1, 1))
        _error(nd, shape, 3, 1, (1, 1))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_wrong_rank_and_empty_input(nd):
    for rank in (nd, nd + 3):
        with pytest.raises(ValueError, match=rf"\[avg_pool{nd}d\] expected 'input' of rank"):
            PORTER_FN[nd](mx.zeros((4,) * rank), 2)
    with pytest.raises(ValueError, match="non-batch dimensions must be non-empty"):
        PORTER_FN[nd](mx.zeros((1,) + (4,) * nd + (0,)), 2)
    with pytest.raises(ValueError, match="non-batch dimensions must be non-empty"):
        PORTER_FN[nd](mx.zeros((1, 0) + (4,) * (nd - 1) + (2,)), 2)


def test_integer_dtypes_other_than_int64_raise():
    check_error_against_torch(lambda: F.avg_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.int32), 2),
                              lambda: avg_pool2d(mx.ones((1, 4, 4, 1), dtype=mx.int32), 2),
                              match="not implemented for", porter_type=TypeError)


def test_module_validates_at_construction():
    with pytest.raises(ValueError, match=r"\[AvgPool2d\] 'padding': pad should be at most half"):
        AvgPool2d(3, 1, 2)
    with pytest.raises(ValueError, match=r"\[AvgPool3d\] 'divisor_override': divisor must be not zero"):
        AvgPool3d(3, divisor_override=0)
    with pytest.raises(TypeError):
        AvgPool1d(3, divisor_override=2)  # torch's AvgPool1d has no divisor_override either


def test_float64_stays_float64():
    x = torch.randn(2, 3, 7, 9, dtype=torch.float64)
    xm = mx.array(np.moveaxis(x.numpy(), 1, -1), dtype=mx.float64)
    for args in ((3, 2, 1, True, False), (3, 2, 1, False, True, -2)):
        out = avg_pool2d(xm, *args)
        assert out.dtype == mx.float64
        np.testing.assert_allclose(np.moveaxis(np.array(out), -1, 1), F.avg_pool2d(x, *args).numpy(), rtol=1e-12)
