"""MaxPool1d/2d/3d against torch: values, int64 indices and input gradients, all compared exactly.

Covers every argument (padding, dilation, ceil mode with the drop rule, return_indices), sizes that do not divide,
ties, NaN, -inf, all-padding windows, unbatched input, low-precision and integer dtypes, and every error case.
"""

import itertools

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import porter.layers as L
import porter.layers._window_max as window_max_module
import porter.layers.functional as PF
from tests.helpers import check_against_torch, torch_to_mx

NAN, INF = float("nan"), float("inf")


def check_max_pool(x, nd, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, grad=True):
    """Functional and module forms, with and without indices, against torch on the same data."""
    args = (kernel_size, stride, padding, dilation, ceil_mode)
    t_fn, p_fn = getattr(F, f"max_pool{nd}d"), getattr(PF, f"max_pool{nd}d")
    for ri in (False, True):
        check_against_torch(
            lambda a: t_fn(a, *args, return_indices=ri), lambda a: p_fn(a, *args, return_indices=ri), x,
            nd=nd, exact=True, grad=grad,
        )
    t_mod = getattr(torch.nn, f"MaxPool{nd}d")(kernel_size, stride, padding, dilation, True, ceil_mode)
    p_mod = getattr(L, f"MaxPool{nd}d")(kernel_size, stride, padding, dilation, True, ceil_mode)
    check_against_torch(t_mod, p_mod, x, nd=nd, exact=True, grad=grad)


# (spatial, kernel, stride, padding, dilation, ceil_mode); sizes chosen so most do not divide evenly
CASES_1D = [
    (10, 3, 2, 1, 1, False),
    (11, 3, 2, 1, 1, True),
    (5, 2, 2, 0, 1, True),  # partial last window kept
    (6, 2, 3, 0, 1, True),  # last window would start at L: dropped
    (2, 2, 3, 1, 1, True),  # last window would start in the right padding: dropped
    (9, 4, 3, 2, 2, True),
    (7, 3, None, 0, 1, False),
    (13, 5, 1, 2, 3, False),
    (4, 1, 2, 0, 1, True),
    (3, 3, 1, 1, 1, False),
    (8, 2, 1, 1, 4, True),
    (1, 1, 1, 0, 1, False),
]
CASES_2D = [
    ((9, 11), 3, 2, 1, 1, False),
    ((9, 11), (3, 2), (2, 3), (1, 0), (1, 2), True),
    ((7, 7), 2, None, 0, 1, True),
    ((8, 5), (2, 4), (3, 1), (1, 2), (2, 1), True),
    ((6, 6), 2, 3, 1, 1, True),
    ((5, 9), (1, 3), (2, 2), (0, 1), (1, 3), False),
    ((10, 10), 4, 3, 2, 2, False),
    ((3, 4), 3, 1, 1, 1, False),
]
CASES_3D = [
    ((3, 5, 7), (1, 2, 3), (1, 2, 2), (0, 1, 1), 1, True),  # H drops a window in ceil mode
    ((5, 6, 7), 3, 2, 1, 1, False),
    ((4, 5, 6), 2, None, 0, 1, True),
    ((6, 5, 7), (3, 2, 2), (2, 1, 3), (1, 1, 0), (2, 1, 2), True),
]


@pytest.mark.parametrize("case", CASES_1D, ids=str)
def test_max_pool1d(case):
    length, *args = case
    check_max_pool(torch.randn(2, 3, length), 1, *args)


@pytest.mark.parametrize("case", CASES_2D, ids=str)
def test_max_pool2d(case):
    spatial, *args = case
    check_max_pool(torch.randn(2, 3, *spatial), 2, *args)


@pytest.mark.parametrize("case", CASES_3D, ids=str)
def test_max_pool3d(case):
    spatial, *args = case
    check_max_pool(torch.randn(2, 2, *spatial), 3, *args)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_unbatched(nd):
    check_max_pool(torch.randn(3, *(7,) * nd), nd, 3, 2, 1, 1, True)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_batch_zero(nd):
    check_max_pool(torch.randn(0, 3, *(6,) * nd), nd, 2, 2, 1, 1, False)


# ---------------------------------------------------------------------------------------------------- ties, NaN, inf
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_ties_constant_input(nd):
    # every tap ties: torch takes the first, and gives the whole gradient to it (mx.max would split it)
    check_max_pool(torch.ones(2, 2, *(6,) * nd), nd, 3, 1, 1, 1, True)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_ties_integer_valued(nd):
    x = torch.randint(0, 3, (2, 3, *(7,) * nd)).float()
    check_max_pool(x, nd, 3, 2, 1, 1, True)
    check_max_pool(x, nd, 2, 1, 0, 2, False)  # overlapping windows: gradients accumulate at shared maxima


def test_overlap_gradient_example():
    # docs/SEMANTICS.md §3.3: k=3, s=1 on [1,3,3,0,3] -> indices [1,1,2], grad [0,2,1,0,0]
    x = torch.tensor([[[1.0, 3, 3, 0, 3]]])
    check_max_pool(x, 1, 3, 1)
    xm = torch_to_mx(x, True)
    grad = mx.grad(lambda a: PF.max_pool1d(a, 3, 1).sum())(xm)
    assert np.array(grad).reshape(-1).tolist() == [0, 2, 1, 0, 0]


def test_nan_last_index():
    x = torch.tensor([[[NAN, 1, NAN, 2]]])
    check_max_pool(x, 1, 4)
    _, idx = PF.max_pool1d(torch_to_mx(x, True), 4, return_indices=True)
    assert idx.item() == 2


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_nan_multiple_per_window(nd):
    gen = torch.Generator().manual_seed(nd)
    x = torch.randint(0, 3, (2, 2, *(6,) * nd), generator=gen).float()
    x[torch.rand(x.shape, generator=gen) < 0.2] = NAN
    check_max_pool(x, nd, 3, 1, 1, 1, True)
    check_max_pool(x, nd, 2, 2, 1, 2, True)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_inf_values(nd):
    gen = torch.Generator().manual_seed(10 + nd)
    x = torch.randn(2, 2, *(6,) * nd, generator=gen)
    r = torch.rand(x.shape, generator=gen)
    x[r < 0.3] = -INF
    x[r > 0.9] = INF
    check_max_pool(x, nd, 3, 2, 1, 1, True)


@pytest.mark.parametrize("kernel, stride, padding", [(3, 2, 1), (5, 3, 2)])
def test_gradient_ties_nan_fused_size(kernel, stride, padding):
    # above the fusing size, where the forward runs fused and the backward re-derives torch's index from a window
    # view (tap scores in uint8 for 9 taps, uint16 for 25): ties, NaN and -inf windows must still route exactly
    gen = torch.Generator().manual_seed(kernel)
    x = torch.randint(-1, 2, (2, 16, 96, 96), generator=gen).float()
    r = torch.rand(x.shape, generator=gen)
    x[r < 0.02] = NAN
    x[r > 0.97] = -INF
    check_max_pool(x, 2, kernel, stride, padding, 1, True)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_all_negative_inf_with_padding(nd):
    # the max equals the padding value: torch reports the window's first real tap, and sends the gradient there
    check_max_pool(torch.full((1, 2, *(5,) * nd), -INF), nd, 3, 2, 1, 1, True)


def test_negative_input_never_zero():
    # a zero-padding bug would report 0 on the border
    out = PF.max_pool2d(-mx.ones((1, 4, 4, 1)) - 1, 3, 1, 1)
    assert float(out.max()) == -2.0


@pytest.mark.parametrize("nd,spatial,idx", [(1, (2,), 2), (2, (2, 2), 6)])
def test_all_padding_window(nd, spatial, idx):
    # docs/SEMANTICS.md §3.5: L=2, k=2, d=3, p=1 -> taps at -1 and 2, both padding: value -inf, torch's index overshoots
    x = torch.randn(1, 2, *spatial)
    check_max_pool(x, nd, 2, 1, 1, 3, False, grad=False)  # torch's own backward would write out of bounds
    xm = torch_to_mx(x, True)
    values, indices = getattr(PF, f"max_pool{nd}d")(xm, 2, 1, 1, 3, return_indices=True)
    assert np.all(np.array(values) == -INF) and np.all(np.array(indices) == idx)
    grad = mx.grad(lambda a: getattr(PF, f"max_pool{nd}d")(a, 2, 1, 1, 3).sum())(xm)
    assert np.all(np.array(grad) == 0)  # no real element in the window: no gradient anywhere


# ---------------------------------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_low_precision(nd, dtype):
    x = torch.randn(2, 3, *(7,) * nd).to(dtype)
    check_max_pool(x, nd, 3, 2, 1, 1, True)
    check_max_pool(torch.randint(0, 3, x.shape).to(dtype), nd, 2, 1, 1, 2, False)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
@pytest.mark.parametrize("nd", [2, 3])
def test_integer_dtypes(nd, dtype):
    info = torch.iinfo(dtype)
    x = torch.randint(max(info.min, -100), min(info.max, 100), (2, 3, *(7,) * nd)).to(dtype)
    x.view(-1)[::5] = info.min  # the dtype's minimum ties with the padding value
    check_max_pool(x, nd, 3, 2, 1, 1, True, grad=False)


def test_integer_max_pool1d_needs_indices():
    x = torch.randint(-5, 5, (2, 3, 9))
    check_against_torch(
        lambda a: F.max_pool1d(a, 3, 2, 1, return_indices=True), lambda a: PF.max_pool1d(a, 3, 2, 1, return_indices=True),
        x, nd=1, exact=True,
    )
    with pytest.raises(RuntimeError, match="max_pool1d_impl"):
        F.max_pool1d(x, 3)
    with pytest.raises(TypeError, match=r"\[max_pool1d\] \"max_pool1d_impl\" not implemented for 'Long'"):
        PF.max_pool1d(torch_to_mx(x, True), 3)


# ---------------------------------------------------------------------------------------------------- fused path
@pytest.mark.parametrize("nd,shape,args", [
    (2, (4, 64, 40, 40), (3, 2, 1, 1, False)),
    (2, (2, 32, 33, 35), ((2, 3), (2, 2), (1, 1), (2, 1), True)),
    (3, (2, 16, 17, 18, 19), (3, 2, 1, 1, True)),
    (1, (16, 64, 200), (4, 3, 2, 2, True)),
    (2, (4, 64, 41, 40), (2, None, 0, 1, True)),  # ceil mode pads the last window: the scatter backward
    (2, (4, 64, 41, 39), (2, None, 0, 1, False)),  # tiling windows (floor leftovers): the masked-broadcast backward
    (3, (2, 16, 10, 12, 13), ((2, 3, 2), None, 0, 1, False)),
    (3, (2, 16, 9, 10, 11), ((2, 3, 2), None, 0, 1, False)),
])
def test_fused_kernel_matches(nd, shape, args):
    # large inputs run through mx.compile: same exact results, ties and NaN included
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 4, shape, generator=gen).float()
    x[torch.rand(shape, generator=gen) < 0.01] = NAN
    x[torch.rand(shape, generator=gen) < 0.05] = -INF
    check_max_pool(x, nd, *args)


@pytest.mark.parametrize("fused", [False, True])
def test_integer_index_arithmetic(monkeypatch, fused):
    # planes of 2**24 elements or more compute indices in int32 (float32 would round): force that path here
    monkeypatch.setattr(window_max_module, "FLOAT_INDEX_LIMIT", 0)
    monkeypatch.setattr(window_max_module, "_COMPILED", {})
    shape = (4, 64, 40, 40) if fused else (2, 3, 9, 11)
    x = torch.randint(0, 3, shape).float()
    x[torch.rand(shape) < 0.05] = NAN
    check_max_pool(x, 2, 3, 2, 1, 1, True)
    check_against_torch(
        lambda a: F.adaptive_max_pool2d(a, (4, 3), True), lambda a: PF.adaptive_max_pool2d(a, (4, 3), True),
        x, nd=2, exact=True,
    )


@pytest.mark.pure_mlx
def test_fused_kernel_is_used():
    before = len(window_max_module._COMPILED)
    mx.eval(PF.max_pool2d(mx.zeros((1, 300, 300, 4)), 3, 2, 1, 1, True))
    assert len(window_max_module._COMPILED) > before


# ---------------------------------------------------------------------------------------------------- modules
def test_module_arguments_are_torchs():
    pool = L.MaxPool2d(3, 2, 1, 1, True, True)  # kernel, stride, padding, dilation, return_indices, ceil_mode
    assert (pool.kernel_size, pool.stride, pool.padding, pool.dilation) == ((3, 3), (2, 2), (1, 1), (1, 1))
    assert pool.return_indices and pool.ceil_mode
    assert L.MaxPool1d(4).stride == (4,)
    out = pool(mx.zeros((1, 8, 8, 2)))
    assert isinstance(out, tuple) and out[1].dtype == mx.int64


# ---------------------------------------------------------------------------------------------------- errors
# (nd, torch-layout input shape, args (kernel, stride, padding, dilation, ceil), return_indices, message regex)
ERRORS = [
    (2, (1, 2, 6, 6), (3, 0, 1, 1, False), False, r"stride should not be zero"),
    (2, (1, 2, 6, 6), (0, None, 0, 1, False), False, r"stride should not be zero"),  # torch's kernel 0 quirk
    (2, (1, 2, 6, 6), (3, 1, -1, 1, False), False, r"pad must be non-negative, but got pad: -1"),
    (2, (1, 2, 6, 6), (3, 1, 2, 1, False), False,
     r"pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 and dilation=1"),
    (2, (1, 2, 6, 6), (0, 1, 0, 1, False), False, r"kernel size should be greater than zero, but got kH: 0 kW: 0"),
    (2, (1, 2, 6, 6), (2, -1, 0, 1, False), False, r"stride should be greater than zero, but got dH: -1 dW: -1"),
    (2, (1, 2, 6, 6), (2, 1, 0, 0, False), False,
     r"dilation should be greater than zero, but got dilationH: 0 dilationW: 0"),
    (2, (1, 2, 9, 9), (3, 1, 2, 2, False), False,
     r"pad should be smaller than or equal to half of kernel size, but got padW = 2, padH = 2, kW = 3, kH = 3"),
    (2, (2, 2, 2), (3, 1, 0, 1, False), False,
     r"Given input size: \(2x2x2\)\. Calculated output size: \(2x0x0\)\. Output size is too small"),
    (3, (1, 2, 9, 9, 9), (3, 1, 2, 2, False), False,
     r"pad should be smaller than or equal to half of kernel size, but got kT: 3 kW: 3 kH: 3 padT: 2 padW: 2 "
     r"padH: 2"),
    (3, (1, 2, 2, 2, 2), (3, 1, 0, 1, False), False,
     r"Given input size: \(2x2x2x2\)\. Calculated output size: \(2x0x0x0\)\. Output size is too small"),
    (1, (1, 2, 6), (3, 0, 1, 1, False), True, r"stride should not be zero"),  # with indices: the 2d-style checks
    (1, (1, 2, 6), (0, 1, 0, 1, False), True, r"kernel size should be greater than zero, but got kH: 1 kW: 0"),
    (1, (1, 2, 6), (2, -1, 0, 1, False), True, r"stride should be greater than zero, but got dH: 1 dW: -1"),
    (1, (1, 2, 6), (2, 1, 0, 0, False), True,
     r"dilation should be greater than zero, but got dilationH: 1 dilationW: 0"),
    (1, (1, 2, 6), (3, 1, 2, 2, False), True,
     r"pad should be smaller than or equal to half of kernel size, but got padW = 2, padH = 0, kW = 3, kH = 1"),
    (1, (1, 2, 6), (0, 1, 0, 1, False), False, r"max_pool1d\(\) kernel_size must be greater than zero, but got 0"),
    (1, (1, 2, 6), (2, 0, 0, 1, False), False, r"max_pool1d\(\) stride must be greater than zero, but got 0"),
    (1, (1, 2, 6), (2, 1, -1, 1, False), False, r"max_pool1d\(\) padding must be non-negative, but got -1"),
    (1, (1, 2, 6), (3, 1, 2, 1, False), False,
     r"max_pool1d\(\) padding should be at most half of kernel size, but got padding=2 and kernel_size=3"),
    (1, (1, 2, 6), (2, 1, 0, 0, False), False, r"max_pool1d\(\) dilation must be greater than zero, but got 0"),
    (1, (1, 2, 2), (3, 1, 0, 1, False), False, r"max_pool1d\(\) Invalid computed output size: 0"),
    (1, (1, 2, 2), (3, 1, 0, 1, False), True,
     r"Given input size: \(2x1x2\)\. Calculated output size: \(2x1x0\)\. Output size is too small"),
]


@pytest.mark.parametrize("nd,shape,args,ri,message", ERRORS, ids=lambda v: str(v)[:40])
def test_errors_match_torch(nd, shape, args, ri, message):
    x = torch.randn(*shape)
    with pytest.raises((RuntimeError, ValueError), match=message):
        getattr(F, f"max_pool{nd}d")(x, *args, return_indices=ri)
    layer = f"max_pool{nd}d"
    with pytest.raises(ValueError, match=rf"\[{layer}\] " + message):
        getattr(PF, layer)(torch_to_mx(x, x.ndim == nd + 2), *args, return_indices=ri)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_module_validates_at_construction(nd):
    cls = getattr(L, f"MaxPool{nd}d")
    with pytest.raises(ValueError, match=rf"\[MaxPool{nd}d\] .*(stride|kernel)"):
        cls(0)
    with pytest.raises(ValueError, match=rf"\[MaxPool{nd}d\] .*pad"):
        cls(3, 1, 2)
    with pytest.raises(TypeError, match=rf"\[MaxPool{nd}d\] 'kernel_size'"):
        cls(2.0)
    with pytest.raises(ValueError, match=rf"\[MaxPool{nd}d\] 'stride'"):
        cls(2, (1,) * (nd + 1))  # a tuple of the wrong length is an error, never truncated


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_input_errors(nd):
    fn = getattr(PF, f"max_pool{nd}d")
    with pytest.raises(ValueError, match=r"Expected|expected"):
        fn(mx.zeros((4,) * (nd + 3)), 2)
    with pytest.raises(ValueError, match=r"Expected|expected"):
        fn(mx.zeros((4,) * nd), 2)
    with pytest.raises(ValueError, match=r"optional 0 dim batch size"):
        fn(mx.zeros((1,) + (4,) * nd + (0,)), 2, return_indices=True)
    with pytest.raises(TypeError, match=r"not implemented"):
        fn(mx.zeros((1,) + (4,) * nd + (2,), dtype=mx.bool_), 2, return_indices=True)
    # torch agrees that these are errors
    for shape in [(4,) * (nd + 3), (4,) * nd, (1, 0) + (4,) * nd]:
        with pytest.raises(RuntimeError):
            getattr(F, f"max_pool{nd}d")(torch.zeros(shape), 2, return_indices=True)


def test_tuple_length_and_types():
    x = mx.zeros((1, 6, 6, 2))
    with pytest.raises(ValueError, match=r"\[max_pool2d\] 'kernel_size' must either be a single int, or a tuple of two"):
        PF.max_pool2d(x, (2, 2, 2))
    with pytest.raises(RuntimeError, match="kernel_size must either be a single int, or a tuple of two ints"):
        F.max_pool2d(torch.zeros(1, 2, 6, 6), (2, 2, 2))
    with pytest.raises(TypeError, match=r"\[max_pool2d\] 'kernel_size'"):
        PF.max_pool2d(x, 2.5)
    with pytest.raises(TypeError):
        F.max_pool2d(torch.zeros(1, 2, 6, 6), 2.5)
    assert PF.max_pool2d(x, (2,), []).shape == (1, 3, 3, 2)  # length-1 tuples broadcast; [] stride = kernel


def test_output_size_formula_exhaustive():
    # every small legal 1d config, with indices, through the 2d-style path: shapes and values
    gen = torch.Generator().manual_seed(3)
    for length, k, s, d, ceil in itertools.product(range(1, 7), range(1, 4), range(1, 4), (1, 2), (False, True)):
        for p in range(k // 2 + 1):
            if (length + 2 * p - d * (k - 1) - 1) < 0:
                continue
            x = torch.randn(1, 1, length, generator=gen)
            check_against_torch(
                lambda a: F.max_pool1d(a, k, s, p, d, ceil, True), lambda a: PF.max_pool1d(a, k, s, p, d, ceil, True),
                x, nd=1, exact=True, grad=False,
            )


@pytest.mark.pure_mlx
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_tiling_backward_is_a_masked_broadcast(nd, monkeypatch):
    # kernel == stride without padding: the backward places the gradient by block mask, no scatter; ties (first
    # maximum), NaN (last NaN) and floor-mode leftovers (zero gradient) must still match torch exactly
    import porter.layers._blocks as blocks

    calls = []
    real = blocks.place
    monkeypatch.setattr(blocks, "place", lambda *a: calls.append(1) or real(*a))
    shape = (2, 3) + (7,) * nd
    gen = torch.Generator().manual_seed(3)
    x = torch.randint(0, 3, shape, generator=gen).float()
    x[torch.rand(shape, generator=gen) < 0.1] = NAN
    check_max_pool(x, nd, 2)
    assert calls


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("op", ["max_pool", "adaptive_max_pool"])
def test_strided_channel_view_input(nd, op):
    # every other channel of a wider array: not row-contiguous (MLX's as_strided, used by the pure path's window
    # view, raised "AsStrided must be used with row contiguous arrays only" on such views)
    def view(a):
        return mx.repeat(a, 2, axis=-1)[..., ::2]

    if op == "max_pool":
        torch_fn = lambda a: getattr(F, f"max_pool{nd}d")(a, 2, 1, 1, return_indices=True)  # noqa: E731
        porter_fn = lambda a: getattr(PF, f"max_pool{nd}d")(view(a), 2, 1, 1, return_indices=True)  # noqa: E731
    else:
        torch_fn = lambda a: getattr(F, f"adaptive_max_pool{nd}d")(a, 3)  # noqa: E731
        porter_fn = lambda a: getattr(PF, f"adaptive_max_pool{nd}d")(view(a), 3)  # noqa: E731
    x = torch.randint(0, 3, (2, 3) + (6,) * nd).float()  # ties
    check_against_torch(torch_fn, porter_fn, x, nd=nd, exact=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8])
@pytest.mark.parametrize(
    "nd, kernel, stride, padding, dilation",
    [(1, 1, 2, 0, 2), (2, (2, 1), (4, 1), 0, (3, 1)), (3, (1, 4, 1), (3, 4, 2), (0, 2, 0), (2, 1, 2))],
)
def test_integer_dilated_single_tap_indices(dtype, nd, kernel, stride, padding, dilation):
    # an integer input has no NaN pass, so a dim with one tap left its index table unbroadcast (wrong shape, or
    # a broadcast error in the next dim) on the pure-MLX path with dilation
    x = torch.randint(-3, 3, (2, 3) + (7,) * nd).to(dtype)
    args = (kernel, stride, padding, dilation)
    check_against_torch(lambda a: getattr(F, f"max_pool{nd}d")(a, *args, return_indices=True),
                        lambda a: getattr(PF, f"max_pool{nd}d")(a, *args, return_indices=True), x, nd=nd, exact=True)
