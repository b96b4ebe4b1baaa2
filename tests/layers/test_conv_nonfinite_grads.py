"""An inf or NaN in a conv's cotangent at an output whose window reads zero padding, against torch run in each test
(layers/_conv_nonfinite.py): the NaN/inf pattern of the input and weight gradients over every conv path the engine
dispatches to (1-d/2-d/3-d; stride 1 and 2; dilation; one group, two groups, depthwise; float32/float16/bfloat16;
transposed convs; sizes that take Winograd and the im2col weight gradient), and the finite values beside them.

Torch multiplies the padding into the weight gradient (inf * 0 = NaN) everywhere but in its oneDNN path (float32
1-d/2-d undilated, one group or depthwise) and in transposed convs. The cases marked ``xfail(strict=True)`` are the
known differences the module docstring names: Porter's strategies that store the padding's zeros still give NaN
where torch's oneDNN path and its transposed convs give inf or a finite value. Native variant only: without the
kernels (PORTER_NATIVE=0) strided convs take the space-to-depth input gradient, whose zero-padded kernel gives NaN in
the input gradient too (the same known difference)."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import porter.layers.functional as PF
from porter.layers import _conv_nonfinite
from porter.layers.conv_weights import mlx_conv_transpose_weight_to_torch, torch_conv_transpose_weight_to_mlx

pytestmark = pytest.mark.native_only

TORCH = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
TORCH_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
PORTER = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}
PORTER_T = {1: PF.conv_transpose1d, 2: PF.conv_transpose2d, 3: PF.conv_transpose3d}
DTYPES = {"float32": (torch.float32, mx.float32), "float16": (torch.float16, mx.float16),
          "bfloat16": (torch.bfloat16, mx.bfloat16)}


def _grads(nd, dtype, cin, cout, k, stride, dilation, groups, size, where, transpose=False, padding=1):
    """(torch's, Porter's) input and weight gradients, channels-last, as float32 numpy, for a cotangent with an inf
    at the first output (``corner``) or a -inf at the last one (``last``) or a NaN at the first (``nan``)."""
    td, md = DTYPES[dtype]
    torch.manual_seed(0)
    x = torch.randn(2, cin, *([size] * nd)).to(td).requires_grad_(True)
    if transpose:
        w = (torch.randn(cin, cout // groups, *([k] * nd)) * 0.3).to(td).requires_grad_(True)
        y = TORCH_T[nd](x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    else:
        w = (torch.randn(cout, cin // groups, *([k] * nd)) * 0.3).to(td).requires_grad_(True)
        y = TORCH[nd](x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    cot = torch.randn(y.shape).to(td)
    if where == "corner":
        cot[(0, 1) + (0,) * nd] = float("inf")
    elif where == "last":
        cot[(1, 0) + tuple(s - 1 for s in y.shape[2:])] = float("-inf")
    else:
        cot[(0, 0) + (0,) * nd] = float("nan")
    tx, tw = torch.autograd.grad(y, (x, w), cot)

    def cl(t):
        return mx.array(t.detach().float().movedim(1, -1).contiguous().numpy()).astype(md)

    if transpose:
        wm = mx.array(np.ascontiguousarray(torch_conv_transpose_weight_to_mlx(w.detach().float().numpy(), groups)))
        fn = lambda a, b: PORTER_T[nd](a, b, stride=stride, padding=padding, dilation=dilation, groups=groups)  # noqa
    else:
        wm = mx.array(w.detach().float().movedim(1, -1).contiguous().numpy())
        fn = lambda a, b: PORTER[nd](a, b, stride=stride, padding=padding, dilation=dilation, groups=groups)  # noqa
    _, (px, pw) = mx.vjp(fn, [cl(x), wm.astype(md)], [cl(cot)])
    px, pw = np.array(px.astype(mx.float32)), np.array(pw.astype(mx.float32))
    if transpose:
        pw = np.moveaxis(mlx_conv_transpose_weight_to_torch(pw, groups), 1, -1)
    return (tx.float().movedim(1, -1).numpy(), tw.float().movedim(1, -1).numpy()), (px, pw)


def _cpu_has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


# Torch's oneDNN picks its conv kernels by instruction set: on AVX-512 CPUs some (bfloat16 convs, some 3-d ones,
# measured on an AMD EPYC with avx512_bf16) skip all or part of the padding products that AVX2 CPUs' kernels form
# (the machine Porter's rule was measured on reproduces torch's pattern exactly).
TORCH_KERNELS_VARY = _cpu_has_avx512()


def _same_or_cpu_dependent_skip(ours, theirs, dtype):
    """A weight gradient where Porter's rule says torch multiplies the padding: torch's pattern exactly, or, where
    this CPU's torch kernels skip padding products (``TORCH_KERNELS_VARY``) and the patterns differ, Porter's extra
    NaN is the known difference: torch's NaN all kept, torch's infs kept wherever Porter has no NaN, the finite
    values equal."""
    skips = TORCH_KERNELS_VARY and not np.array_equal(np.isnan(ours), np.isnan(theirs))
    if not skips:
        _same_pattern(ours, theirs, dtype)
        return
    nan = np.isnan(ours)
    assert not (np.isnan(theirs) & ~nan).any()
    for test in (np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(ours), test(theirs) & ~nan, err_msg=test.__name__)
    both = np.isfinite(ours) & np.isfinite(theirs)
    assert both.mean() > 0.5
    tol = {"float32": 1e-3, "float16": 3e-2, "bfloat16": 1e-1}[dtype]
    np.testing.assert_allclose(ours[both], theirs[both], rtol=tol, atol=tol * max(1.0, np.abs(theirs[both]).max()))


def _same_pattern(ours, theirs, dtype):
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(ours), test(theirs), err_msg=test.__name__)
    finite = np.isfinite(theirs)
    tol = {"float32": 1e-3, "float16": 3e-2, "bfloat16": 1e-1}[dtype]
    np.testing.assert_allclose(ours[finite], theirs[finite], rtol=tol, atol=tol * max(1.0, np.abs(theirs[finite]).max()))


# (nd, cin, cout, k, stride, dilation, groups, size): groups "dw" = depthwise
PRODUCTS = [  # convs whose weight gradient torch computes with the padding's products (NaN at the border)
    (1, 4, 6, 3, 1, 1, 2, 9), (1, 20, 24, 3, 2, 1, 2, 9), (1, 4, 6, 3, 1, 2, 1, 9),
    (2, 4, 6, 3, 1, 1, 2, 7), (2, 20, 24, 3, 2, 1, 2, 9), (2, 8, 8, 3, 1, 2, 1, 9), (2, 8, 8, 3, 1, 2, "dw", 9),
    (3, 4, 6, 3, 1, 1, 1, 7), (3, 4, 6, 3, 2, 1, 1, 7), (3, 4, 6, 3, 1, 1, 2, 7), (3, 20, 24, 3, 2, 1, 2, 7),
    (3, 4, 4, 3, 1, 1, "dw", 7), (3, 20, 20, 3, 2, 1, "dw", 7), (3, 16, 16, 3, 1, 1, 1, 14),  # 3-d Winograd
    (3, 4, 6, 3, 1, 2, 1, 7),
]


def _case(nd, cin, cout, k, stride, dilation, groups, size):
    if groups == "dw":
        groups, cout = cin, cin
    return nd, cin, cout, k, stride, dilation, groups, size


@pytest.mark.parametrize("where", ["corner", "last", "nan"])
@pytest.mark.parametrize("case", PRODUCTS)
def test_float32_weight_gradient_has_torchs_nan_where_torch_multiplies_padding(case, where):
    nd, cin, cout, k, stride, dilation, groups, size = _case(*case)
    assert _conv_nonfinite.multiplies_padding(mx.float32, nd, (dilation,) * nd, groups, cin)
    (tx, tw), (px, pw) = _grads(nd, "float32", cin, cout, k, stride, dilation, groups, size, where)
    _same_or_cpu_dependent_skip(pw, tw, "float32")
    _same_pattern(px, tx, "float32")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", [(1, 4, 6, 3, 1, 1, 1, 9), (2, 4, 6, 3, 1, 1, 1, 7), (2, 20, 24, 3, 2, 1, 1, 9),
                                  (2, 6, 6, 3, 1, 1, "dw", 7), (2, 4, 6, 3, 1, 1, 2, 7), (3, 4, 6, 3, 2, 1, 1, 7)])
def test_half_precision_weight_gradient_has_torchs_nan(case, dtype):
    nd, cin, cout, k, stride, dilation, groups, size = _case(*case)
    (tx, tw), (px, pw) = _grads(nd, dtype, cin, cout, k, stride, dilation, groups, size, "corner")
    _same_or_cpu_dependent_skip(pw, tw, dtype)
    _same_pattern(px, tx, dtype)


@pytest.mark.parametrize("case", [(2, 6, 6, 3, 1, 1, "dw", 7), (2, 6, 6, 3, 2, 1, "dw", 9), (1, 6, 6, 3, 1, 1, "dw", 9)])
def test_float32_depthwise_keeps_torchs_inf_without_nan(case):
    """Torch's oneDNN depthwise path and Porter's native depthwise kernel both skip the padding."""
    nd, cin, cout, k, stride, dilation, groups, size = _case(*case)
    assert not _conv_nonfinite.multiplies_padding(mx.float32, nd, (dilation,) * nd, groups, cin)
    (tx, tw), (px, pw) = _grads(nd, "float32", cin, cout, k, stride, dilation, groups, size, "corner")
    assert np.isinf(tw).any() and not np.isnan(tw).any()
    _same_pattern(pw, tw, "float32")
    _same_pattern(px, tx, "float32")


@pytest.mark.parametrize("case, transpose", [((2, 32, 32, 3, 1, 1, 1, 24), False), ((3, 4, 6, 3, 2, 1, 1, 7), True)])
def test_paths_that_skip_the_padding_keep_torchs_inf(case, transpose):
    """The 2-d Winograd weight gradient (redone as a direct sum without padding taps) and the strided 3-d transposed
    conv's weight gradient give torch's inf without NaN."""
    nd, cin, cout, k, stride, dilation, groups, size = _case(*case)
    (tx, tw), (px, pw) = _grads(nd, "float32", cin, cout, k, stride, dilation, groups, size, "corner", transpose)
    assert np.isinf(tw).any() and not np.isnan(tw).any()
    _same_pattern(px, tx, "float32")
    _same_pattern(pw, tw, "float32")


def test_padding_taps_mark_the_reads_outside_the_input():
    (rows,) = _conv_nonfinite.padding_taps((5,), (3,), (3,), (2,), (1,), (1,))
    # output o, tap t reads 2*o + t - 1: o=0 t=0 -> -1; o=2 t=2 -> 5 (outside [0, 5))
    np.testing.assert_array_equal(rows, [[True, False, False], [False, False, False], [False, False, True]])


def test_no_padding_adds_no_vjp():
    x, w = mx.ones((1, 6, 6, 2)), mx.ones((3, 3, 3, 2))
    y = PF.conv2d(x, w, groups=1)
    assert _conv_nonfinite._marker((6, 6), (4, 4), (3, 3), (1, 1), (0, 0), (1, 1)) is None
    assert y.shape == (1, 4, 4, 3)


KNOWN = [  # (case, transposed): Porter NaN where torch gives inf / a finite value (see the module docstring)
    ((1, 4, 6, 3, 1, 1, 1, 9), False), ((2, 4, 6, 3, 1, 1, 1, 7), False), ((2, 20, 24, 3, 2, 1, 1, 9), False),
    ((2, 4, 6, 3, 1, 1, 1, 7), True), ((3, 4, 6, 3, 1, 1, 1, 7), True),
]


@pytest.mark.xfail(strict=True, reason="Porter's zero-storing strategies give NaN where torch skips the padding")
@pytest.mark.parametrize("case, transpose", KNOWN)
def test_known_difference_where_torch_skips_the_padding(case, transpose):
    nd, cin, cout, k, stride, dilation, groups, size = _case(*case)
    (tx, tw), (px, pw) = _grads(nd, "float32", cin, cout, k, stride, dilation, groups, size, "corner", transpose)
    _same_pattern(px, tx, "float32")
    _same_pattern(pw, tw, "float32")
