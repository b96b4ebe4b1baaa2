"""Pools whose output size torch.export used to fix at the example (``converters/capture_pools.py``): ceil-mode
max/avg/LP pools (torch's shape rule branched on the input size, so a port refused sizes on the other side of the
branch), ``None`` adaptive max pool sizes and 1-d max pools (both read the size as a number). Converted at one size,
each port must give torch's numbers at every size torch runs, and refuse, by name, every size torch refuses."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

import porter
from porter.converters import capture_pools
from tests.converter_check import assert_matches, run_ported


def _refuses_like_torch(ported, model, x, rel):
    """Torch's numbers at ``x``, or, where torch raises, a refusal: the input checks name the input and its dims,
    below the sizes those cover (torch's 0/1 specialisation) the pooling layer says the output would be empty."""
    try:
        with torch.no_grad():
            model(x)
    except RuntimeError:
        with pytest.raises(ValueError, match=r"input '(x|input)'|too small|smaller than kernel"):
            run_ported(ported, (x,))
        return False
    assert_matches(ported, model, (x,), rel=rel)
    return True


class Wrap(nn.Module):
    def __init__(self, *layers):
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


# (pool, example shape, input rank): stride > kernel span - right padding is where torch's ceil-mode branch lowers
# the output size at some sizes and not at others; GoogLeNet's MaxPool2d(3, 2) and stride-1 pools never branch.
POOLS_2D = [
    (nn.MaxPool2d(2, 3, ceil_mode=True), "k2-s3"),
    (nn.MaxPool2d(1, 2, ceil_mode=True), "k1-s2"),
    (nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), "k3-s2-p1"),
    (nn.MaxPool2d(2, 4, padding=1, dilation=2, ceil_mode=True), "k2-s4-p1-d2"),
    (nn.MaxPool2d(3, 2, ceil_mode=True), "googlenet"),
    (nn.AvgPool2d(2, 3, padding=1, ceil_mode=True, count_include_pad=False), "avg-k2-s3-p1-exclude-pad"),
    (nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False), "avg-k3-s2-p1-exclude-pad"),
    (nn.AvgPool2d((2, 3), (3, 2), padding=(1, 0), ceil_mode=True), "avg-rect-include-pad"),
    (nn.AvgPool2d(2, 3, ceil_mode=True, divisor_override=3), "avg-divisor"),
    (nn.LPPool2d(2, 2, stride=3, ceil_mode=True), "lp"),
]
POOLS_1D = [
    (nn.MaxPool1d(2, 3, padding=1, ceil_mode=True), "max-k2-s3-p1"),
    (nn.MaxPool1d(3), "max-floor"),  # pinned by torch's C++ body before, ceil mode or not
    (nn.MaxPool1d(3, 2, dilation=2, ceil_mode=True), "max-dilated"),
    (nn.AvgPool1d(2, 3, padding=1, ceil_mode=True, count_include_pad=False), "avg"),
    (nn.LPPool1d(1, 2, stride=3, ceil_mode=True), "lp"),
]
POOLS_3D = [
    (nn.MaxPool3d(2, 3, padding=1, ceil_mode=True), "max"),
    (nn.AvgPool3d(2, (3, 3, 2), padding=1, ceil_mode=True, count_include_pad=False), "avg"),
]


@pytest.mark.parametrize("pool", [p for p, _ in POOLS_2D], ids=[i for _, i in POOLS_2D])
def test_ceil_mode_pool_2d_at_every_size(pool):
    model = Wrap(pool).eval()
    ported = porter.convert(model, (torch.randn(2, 3, 10, 13),), io_layout="torch")
    assert {(0, 2), (0, 3)} <= {(d["input"], d["axis"]) for d in ported.dynamic_dims}
    exact = 0.0 if isinstance(pool, nn.MaxPool2d) else 1e-5
    ran = [h for h in range(1, 20) if _refuses_like_torch(ported, model, torch.randn(1, 3, h, 25 - h), exact)]
    assert len(ran) >= 14  # odd and even sizes, windows added and not added by ceil mode


@pytest.mark.parametrize("pool", [p for p, _ in POOLS_1D], ids=[i for _, i in POOLS_1D])
def test_ceil_mode_pool_1d_at_every_length(pool):
    model = Wrap(pool).eval()
    ported = porter.convert(model, (torch.randn(2, 3, 11),), io_layout="torch")
    assert (0, 2) in {(d["input"], d["axis"]) for d in ported.dynamic_dims}
    exact = 0.0 if isinstance(pool, nn.MaxPool1d) else 1e-5
    ran = [n for n in range(1, 24) if _refuses_like_torch(ported, model, torch.randn(3, 3, n), exact)]
    assert len(ran) >= 17


def test_max_pool_1d_indices_at_every_length():
    """``return_indices``: the window's index into the length, as torch gives it, and the unpool that reads it."""
    class PoolUnpool(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.MaxPool1d(2, 3, padding=1, ceil_mode=True, return_indices=True)

        def forward(self, x):
            out, indices = self.pool(x)
            return out, indices

    model = PoolUnpool().eval()
    ported = porter.convert(model, (torch.randn(2, 3, 11),), io_layout="torch")
    for n in (2, 5, 6, 7, 12, 13, 20):
        assert_matches(ported, model, (torch.randn(1, 3, n),), rel=0.0)


@pytest.mark.parametrize("pool", [p for p, _ in POOLS_3D], ids=[i for _, i in POOLS_3D])
def test_ceil_mode_pool_3d_at_every_size(pool):
    model = Wrap(pool).eval()
    ported = porter.convert(model, (torch.randn(2, 2, 5, 8, 7),), io_layout="torch")
    exact = 0.0 if isinstance(pool, nn.MaxPool3d) else 1e-5
    sizes = [(d, h, w) for d, h, w in itertools.product((1, 2, 4, 5), (3, 7, 8), (6, 9))]
    ran = [s for s in sizes if _refuses_like_torch(ported, model, torch.randn(1, 2, *s), exact)]
    assert len(ran) >= 18


def ceil_stem():
    """An Inception/GoogLeNet-shaped stem: strided conv, ceil-mode max pools (one with stride > kernel), a
    count_include_pad=False average pool, then global pooling (torchvision's shapes, small widths)."""
    return nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                         nn.Conv2d(8, 8, 3, padding=1), nn.MaxPool2d(2, 3, ceil_mode=True),
                         nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), nn.Conv2d(8, 4, 1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten())


def test_ceil_mode_stem_at_many_sizes():
    """Converted at 64x64; a dozen other sizes, odd ones among them, and the smallest torch runs (a size below it is
    refused by the port as by torch)."""
    torch.manual_seed(0)
    model = ceil_stem().eval()
    ported = porter.convert(model, (torch.randn(1, 3, 64, 64),), io_layout="torch")
    sizes = [(65, 65), (63, 66), (224, 225), (57, 71), (33, 32), (40, 41), (29, 30), (97, 99), (96, 98),
             (61, 47), (31, 31), (28, 29)]
    for h, w in sizes:
        assert _refuses_like_torch(ported, model, torch.randn(2, 3, h, w), 1e-4), (h, w)
    ran = [h for h in range(1, 30) if _refuses_like_torch(ported, model, torch.randn(1, 3, h, h), 1e-4)]
    assert ran and ran == list(range(ran[0], 30)) and ran[0] > 1  # torch's smallest size runs, smaller are refused


@pytest.mark.parametrize("pool, shape, sizes", [
    (nn.AdaptiveMaxPool2d((None, 3)), (2, 3, 9, 10), [(1, 4), (5, 3), (12, 7), (8, 20)]),
    (nn.AdaptiveMaxPool2d((4, None)), (2, 3, 9, 10), [(4, 1), (5, 3), (13, 7), (9, 20)]),
    (nn.AdaptiveMaxPool2d((None, 2)), (3, 9, 10), [(1, 4), (5, 3), (11, 7)]),  # no batch dim
    (nn.AdaptiveMaxPool3d((None, 2, None)), (2, 3, 4, 7, 5), [(1, 2, 3), (6, 9, 1), (3, 5, 8)]),
    (nn.AdaptiveMaxPool3d((None, None, 3)), (2, 3, 4, 7, 5), [(1, 2, 3), (6, 9, 11)]),
    (nn.AdaptiveMaxPool2d((None, None)), (2, 3, 9, 10), [(1, 4), (5, 3)]),
], ids=["none-k", "k-none", "unbatched", "3d-middle", "3d-two-none", "all-none"])
def test_adaptive_max_pool_none_size_stays_symbolic(pool, shape, sizes):
    """``None`` is the input's size: those dims are no longer pinned to the example's."""
    model = Wrap(pool).eval()
    ported = porter.convert(model, (torch.randn(*shape),), io_layout="torch")
    for size in sizes:
        assert_matches(ported, model, (torch.randn(*shape[:-len(size)], *size),), rel=0.0)


def test_adaptive_max_pool_none_size_with_indices_stays_pinned():
    """With ``return_indices`` torch's function runs as it is: the ``None`` dim stays the example's, refused by name
    at another size (not a wrong result)."""
    model = Wrap(nn.AdaptiveMaxPool2d((None, 3), return_indices=True)).eval()
    model.layers = model.layers[0]
    ported = porter.convert(model, (torch.randn(2, 3, 9, 10),), io_layout="torch")
    assert_matches(ported, model, (torch.randn(1, 3, 9, 14),), rel=0.0)
    with pytest.raises(ValueError, match=r"input 'x'.* dim 2"):
        run_ported(ported, (torch.randn(1, 3, 8, 10),))


def test_ceil_mode_size_is_torch_formula():
    """The branch-free size equals torch's own shape rule (its branch included) at every size 0..80, for every
    kernel, stride, dilation and padding torch allows in this range."""
    import torch._meta_registrations as meta

    for kernel, stride, dilation in itertools.product(range(1, 6), range(1, 7), range(1, 4)):
        span = dilation * (kernel - 1) + 1
        for pad_l, pad_r in itertools.product(range(span // 2 + 1), repeat=2):
            for size in range(81):
                expected = meta.pooling_output_shape_pad_lr(size, kernel, pad_l, pad_r, stride, dilation, True)
                got = capture_pools.ceil_mode_size(size, kernel, pad_l, pad_r, stride, dilation)
                assert got == expected, (size, kernel, pad_l, pad_r, stride, dilation)


def test_torch_is_itself_after_the_capture():
    import torch._meta_registrations as meta
    import torch.nn.functional as F

    before = (meta.pooling_output_shape_pad_lr, F.adaptive_max_pool2d, F.adaptive_max_pool3d,
              dict(torch.ops.aten.max_pool1d.default.py_kernels))
    with capture_pools.symbolic_pool_sizes():
        assert meta.pooling_output_shape_pad_lr is not before[0] and F.adaptive_max_pool2d is not before[1]
    assert (meta.pooling_output_shape_pad_lr, F.adaptive_max_pool2d, F.adaptive_max_pool3d,
            dict(torch.ops.aten.max_pool1d.default.py_kernels)) == before
    x = torch.randn(2, 3, 7, 9)
    assert torch.equal(F.adaptive_max_pool2d(x, (None, 3)), nn.AdaptiveMaxPool2d((None, 3))(x))


@pytest.mark.parametrize("pool", [nn.MaxPool2d(2, 3, ceil_mode=True), nn.MaxPool1d(2, 3, padding=1, ceil_mode=True),
                                  nn.AvgPool2d(2, 3, padding=1, ceil_mode=True, count_include_pad=False),
                                  nn.AdaptiveMaxPool2d((None, 3)), nn.AdaptiveMaxPool3d((2, None, 2))],
                         ids=["max2d", "max1d", "avg2d", "adaptive-none-k", "adaptive-3d"])
def test_input_gradient_at_a_second_size(pool):
    """The rewritten captures carry torch's gradient too, at a size other than the example's."""
    import mlx.core as mx
    import numpy as np

    model = Wrap(pool).eval()
    example = {1: (2, 3, 11), 2: (2, 3, 10, 13), 3: (2, 2, 5, 6, 7)}
    rank = {nn.MaxPool1d: 1, nn.AdaptiveMaxPool3d: 3}.get(type(pool), 2)
    ported = porter.convert(model, (torch.randn(*example[rank]),), io_layout="torch")
    x = torch.randn(*{1: (3, 3, 14), 2: (1, 3, 15, 8), 3: (1, 2, 4, 9, 6)}[rank], requires_grad=True)
    weight = torch.randn(model(x).shape)
    (model(x) * weight).sum().backward()
    grad = mx.grad(lambda v: (ported(v) * mx.array(weight.numpy())).sum())(mx.array(x.detach().numpy()))
    np.testing.assert_allclose(np.array(grad), x.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [None, (None, 3, 2), (None, -1)], ids=["none", "three", "negative"])
def test_bad_adaptive_sizes_get_torch_error_in_a_capture(size):
    """Sizes torch refuses are refused in a capture too, with torch's error type (nothing becomes a silent identity)."""
    x = torch.randn(2, 3, 7, 9)
    with pytest.raises(Exception) as expected:
        nn.functional.adaptive_max_pool2d(x, size)
    with pytest.raises(type(expected.value)):
        porter.convert(Wrap(nn.AdaptiveMaxPool2d(size)).eval(), (x,), io_layout="torch", dynamic="all")
