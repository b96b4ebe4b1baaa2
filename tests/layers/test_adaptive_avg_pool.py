"""AdaptiveAvgPool1d/2d/3d and adaptive_avg_pool1d/2d/3d against torch: overlapping non-dividing windows,
output larger than input, None entries, 0 sizes, unbatched, fp16/bf16, gradients and errors."""

import mlx.core as mx
import pytest
import torch
import torch.nn.functional as F
from tests.error_helpers import check_error_against_torch
from tests.helpers import check_against_torch

from porter.layers import AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d
from porter.layers.functional import adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d

TORCH_FN = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
PORTER_FN = {1: adaptive_avg_pool1d, 2: adaptive_avg_pool2d, 3: adaptive_avg_pool3d}
TORCH_CLS = {1: torch.nn.AdaptiveAvgPool1d, 2: torch.nn.AdaptiveAvgPool2d, 3: torch.nn.AdaptiveAvgPool3d}
PORTER_CLS = {1: AdaptiveAvgPool1d, 2: AdaptiveAvgPool2d, 3: AdaptiveAvgPool3d}

CASES = [
    # 1d: dividing, overlapping (10 -> 4), output > input, identity, global, 0, unbatched, tuple form
    (1, (2, 3, 12), 4), (1, (2, 3, 10), 4), (1, (2, 3, 3), 5), (1, (2, 3, 7), 7), (1, (2, 3, 9), 1),
    (1, (2, 3, 9), 0), (1, (3, 10), 3), (1, (2, 3, 13), (5,)), (1, (2, 3, 7), [3]),
    # 2d
    (2, (2, 3, 8, 8), (1, 1)), (2, (2, 3, 10, 7), (4, 3)), (2, (2, 3, 3, 5), (5, 7)), (2, (2, 3, 14, 14), 7),
    (2, (2, 3, 5, 7), (3, None)), (2, (2, 3, 5, 7), (None, 4)), (2, (2, 3, 5, 7), (None, None)),
    (2, (3, 10, 7), (4, 3)), (2, (3, 5, 7), (3, None)), (2, (2, 3, 9, 6), (0, 3)),
    (2, (2, 3, 6, 9), (4, 9)),
    # 3d
    (3, (2, 3, 5, 6, 7), (2, 3, 4)), (3, (2, 3, 4, 4, 4), 1), (3, (2, 3, 3, 5, 4), (4, None, 6)),
    (3, (3, 5, 6, 7), (2, None, 1)), (3, (2, 3, 6, 6, 6), (3, 2, 0)), (3, (2, 3, 5, 5, 5), (5, 5, 5)),
]
IDS = [f"{nd}d-{shape}-{o}" for nd, shape, o in CASES]


@pytest.mark.parametrize("nd, shape, out", CASES, ids=IDS)
def test_functional_matches_torch(nd, shape, out):
    check_against_torch(lambda a: TORCH_FN[nd](a, out), lambda a: PORTER_FN[nd](a, out), torch.randn(shape), nd=nd)


@pytest.mark.parametrize("nd, shape, out", CASES, ids=IDS)
def test_module_matches_torch(nd, shape, out):
    check_against_torch(TORCH_CLS[nd](out), PORTER_CLS[nd](out), torch.randn(shape), nd=nd)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("nd, shape, out", CASES, ids=IDS)
def test_low_precision(nd, shape, out, dtype):
    # torch's 3d fp16/bf16 kernel accumulates at low precision: a bf16 tolerance covers it
    tol = {} if nd < 3 else dict(atol=2e-2, rtol=2e-2, grad_atol=2e-2, grad_rtol=2e-2)
    check_against_torch(lambda a: TORCH_FN[nd](a, out), lambda a: PORTER_FN[nd](a, out), torch.randn(shape).to(dtype),
                        nd=nd, **tol)


def test_overlapping_windows_are_not_the_stride_shortcut():
    x = torch.arange(10.0).reshape(1, 1, 10)
    check_against_torch(lambda a: F.adaptive_avg_pool1d(a, 4), lambda a: adaptive_avg_pool1d(a, 4), x, nd=1)
    assert adaptive_avg_pool1d(mx.arange(10.0).reshape(1, 10, 1), 4)[0, :, 0].tolist() == [1.0, 3.0, 6.0, 8.0]


def test_large_sizes_use_exact_integer_windows():
    # the legacy float formula gives different starts here (docs/SEMANTICS.md §5.1)
    x = torch.randn(1, 1, 16411)
    check_against_torch(lambda a: F.adaptive_avg_pool1d(a, 5003), lambda a: adaptive_avg_pool1d(a, 5003), x, nd=1,
                        atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_zero_batch_and_zero_channels(nd):
    check_against_torch(lambda a: TORCH_FN[nd](a, 2), lambda a: PORTER_FN[nd](a, 2), torch.randn((0, 3) + (5,) * nd),
                        nd=nd)
    shape = (2, 0) + (5,) * nd
    if nd < 3:
        check_against_torch(lambda a: TORCH_FN[nd](a, 2), lambda a: PORTER_FN[nd](a, 2), torch.randn(shape), nd=nd)
    else:  # torch's 3d kernel rejects zero channels, its 1d/2d kernels do not
        check_error_against_torch(lambda: F.adaptive_avg_pool3d(torch.randn(shape), 2),
                                  lambda: adaptive_avg_pool3d(_mx_like(shape, 3), 2),
                                  match="Expected input to have non-zero size for non-batch dimensions")


# ---------------------------------------------------------------------------------------------------- errors
def _mx_like(shape, nd):
    return mx.zeros((shape[0],) + tuple(shape[2:]) + (shape[1],)) if len(shape) == nd + 2 else \
        mx.zeros(tuple(shape[1:]) + (shape[0],))


@pytest.mark.parametrize("nd, out, match", [
    (1, (2, 2), None), (1, -1, None), (1, 2.0, "must be tuple of ints"), (2, (2, -1), None), (2, (-2, -1), None),
    (2, (2.5, 1), "must be tuple of ints, but found element of type float"), (3, (2, 1, -1), None), (2, [6], None),
])
def test_output_size_errors(nd, out, match):
    shape = (2, 3) + (4,) * nd
    check_error_against_torch(lambda: TORCH_FN[nd](torch.randn(shape), out),
                              lambda: PORTER_FN[nd](_mx_like(shape, nd), out), match=match,
                              layer=f"adaptive_avg_pool{nd}d")


@pytest.mark.parametrize("nd, out", [(2, (2, 2, 2)), (3, (2, 1))])
def test_output_size_wrong_length(nd, out):
    shape = (2, 3) + (4,) * nd
    # torch's Python wrapper first demands a deeper input for long tuples; give it one so its length check runs
    x = torch.randn((1,) * max(0, len(out) + 2 - len(shape)) + shape)
    check_error_against_torch(lambda: TORCH_FN[nd](x, out), lambda: PORTER_FN[nd](_mx_like(shape, nd), out),
                              match=f"output_size must be {nd}", layer=f"adaptive_avg_pool{nd}d")


@pytest.mark.parametrize("nd", [2, 3])
def test_bare_none_is_a_type_error(nd):
    with pytest.raises(TypeError):
        TORCH_FN[nd](torch.randn((2,) + (3,) * nd), None)
    with pytest.raises(TypeError, match=rf"\[AdaptiveAvgPool{nd}d\] 'output_size'"):
        PORTER_CLS[nd](None)


def test_1d_rejects_none():
    with pytest.raises(TypeError):
        F.adaptive_avg_pool1d(torch.randn(2, 3, 3), (None,))
    with pytest.raises(TypeError, match=r"\[AdaptiveAvgPool1d\] .*'output_size'"):
        AdaptiveAvgPool1d((None,))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_empty_spatial_dim(nd):
    shape = (1, 2, 0) + (3,) * (nd - 1)
    check_error_against_torch(lambda: TORCH_FN[nd](torch.randn(shape), 2),
                              lambda: PORTER_FN[nd](_mx_like(shape, nd), 2),
                              match="Expected input to have non-zero size for non-batch dimensions")


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_rank_and_dtype_errors(nd):
    with pytest.raises(ValueError, match=rf"\[adaptive_avg_pool{nd}d\] expected 'input' of rank"):
        PORTER_FN[nd](mx.zeros((3,) * nd), 2)
    check_error_against_torch(lambda: TORCH_FN[nd](torch.ones((1, 2) + (4,) * nd, dtype=torch.int64), 2),
                              lambda: PORTER_FN[nd](mx.ones((1,) + (4,) * nd + (2,), dtype=mx.int64), 2),
                              match="not implemented for", porter_type=TypeError)


@pytest.mark.parametrize("nd, shape, out", CASES, ids=IDS)
def test_non_finite_inputs_stay_in_their_windows(nd, shape, out):
    # an inf or NaN reaches only the windows that hold it (a window-matrix product once spread NaN to every window)
    x = torch.randn(shape)
    flat = x.view(-1)
    flat[::7] = float("inf")
    flat[3::11] = -float("inf")
    flat[5::13] = float("nan")
    check_against_torch(lambda a: TORCH_FN[nd](a, out), lambda a: PORTER_FN[nd](a, out), x, nd=nd)


def test_float64_stays_float64():
    import numpy as np

    x = torch.randn(2, 3, 10, 7, dtype=torch.float64)
    out = adaptive_avg_pool2d(mx.array(np.moveaxis(x.numpy(), 1, -1), dtype=mx.float64), (4, 3))
    assert out.dtype == mx.float64
    np.testing.assert_allclose(np.moveaxis(np.array(out), -1, 1), F.adaptive_avg_pool2d(x, (4, 3)).numpy(), rtol=1e-12)
