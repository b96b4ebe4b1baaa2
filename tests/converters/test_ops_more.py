"""Trigonometric and special elementwise ops, copysign/signbit/fmax/fmin, diagonal, cummax/cummin, median and
nanmedian, searchsorted/bucketize, cdist/dist and addmv through the converter, against torch on the same data at two
sizes: NaN, infinities, signed zeros, ties and huge magnitudes on purpose. Exact ops compare exactly."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from porter.compare import assert_close
from tests.converter_check import check_converted, run_ported

torch.manual_seed(0)


class Elementwise(nn.Module):
    def forward(self, x, y):
        unit = x.clamp(-1, 1)
        return (torch.tan(x), torch.asin(unit), torch.acos(unit), torch.atan(x), torch.sinh(x), torch.cosh(x),
                torch.asinh(x), torch.acosh(x.abs() + 1), torch.atanh(unit * 0.99), torch.erfc(x), torch.exp2(x),
                torch.copysign(x, y), torch.copysign(x, -1.0), torch.signbit(y), torch.fmax(x, y),
                torch.fmin(x, y),
                # the in-place forms
                x.clone().tan_(), unit.clone().asin_(), unit.clone().acos_(), x.clone().atan_(), x.clone().sinh_(),
                x.clone().cosh_(), x.clone().asinh_(), (x.abs() + 1).acosh_(), (unit * 0.99).atanh_(),
                x.clone().erfc_(), x.clone().exp2_(), x.clone().copysign_(y), x.clone().copysign_(-2.0))


def _elementwise_inputs(*shape):
    x, y = torch.randn(*shape) * 3, torch.randn(*shape)
    x.reshape(-1)[:6] = torch.tensor([5.0, 9.0, -6.0, float("nan"), 0.0, -0.0])  # erfc's tail: 1.5e-12, 4e-37
    y.reshape(-1)[:6] = torch.tensor([-0.0, 0.0, float("nan"), 1.0, float("nan"), -0.0])  # signed zeros, NaN
    return x, y


def test_elementwise_match_torch_at_two_sizes():
    check_converted(Elementwise().eval(), _elementwise_inputs(2, 3, 5), _elementwise_inputs(3, 1, 4))


def test_erfc_keeps_its_relative_accuracy_in_the_tail():
    class Erfc(nn.Module):
        def forward(self, x):
            return torch.erfc(x)

    x = torch.linspace(-6, 9, 301)
    ported = porter.convert(Erfc().eval(), x, io_layout="torch")
    (got,) = run_ported(ported, (x,))
    want = torch.erfc(x.double()).numpy()
    # relative everywhere, down to erfc(9) = 4e-37 (float32's rounding of -x^2 alone is 4e-6 relative there)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=0)


class Diagonals(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x):
        y = self.conv(x)
        return (torch.diagonal(y, 0, 2, 3), torch.diagonal(y, 1, -1, -2), torch.diagonal(y, -1, 0, 1),
                torch.diag(y[0, 0]), torch.trace(y[0, 0]), torch.diag_embed(y[:, 0, 0]))


def test_diagonal_matches_torch_at_two_sizes():
    check_converted(Diagonals().eval(), torch.randn(2, 3, 4, 5), torch.randn(2, 3, 5, 6))  # the capture pins N; H - 1 < W


class CumExtremes(nn.Module):
    def forward(self, x, n):
        return torch.cummax(x, 1), torch.cummin(x, -1), torch.cummax(n, 0), torch.cummin(n > 0, 1)


def _cum_inputs(rows, cols):
    x = torch.randint(-2, 3, (rows, cols, 3)).float()  # many ties
    x[0, 1, 0] = float("nan")
    x[0, 3 % cols, 0] = float("nan")
    return x, torch.randint(-3, 4, (rows, cols))


def test_cummax_cummin_match_torch_exactly():
    model = CumExtremes().eval()
    inputs = _cum_inputs(2, 5)
    ported = porter.convert(model, inputs, io_layout="torch")
    for inp in (inputs, _cum_inputs(3, 7)):
        got = run_ported(ported, inp)
        want = [t.numpy() for t in torch.utils._pytree.tree_leaves(model(*inp))]
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype, f"output {i}"
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


class Medians(nn.Module):
    def forward(self, x):
        return torch.median(x, 1), torch.nanmedian(x, -1, keepdim=True), torch.median(x), torch.nanmedian(x)


class MedianValues(Medians):
    """The values only (torch's indices among ties are its kernel's choice): what a comparison can hold exactly."""

    def forward(self, x):
        (v, _), (nv, _), m, nm = super().forward(x)
        return v, nv, m, nm


def _median_inputs(rows, cols):
    x = torch.randint(-3, 4, (rows, cols, 4)).float()
    x[0, 0, :] = float("nan")  # all NaN along the last dim
    x[1 % rows, 2, 1] = float("nan")
    return x


def test_median_values_match_torch_and_indices_point_at_them():
    model = Medians().eval()
    ported = porter.convert(model, _median_inputs(2, 5), io_layout="torch")
    for x in (_median_inputs(2, 5), _median_inputs(3, 6), torch.randn(2, 4, 3)):
        got = run_ported(ported, (x,))
        want = [t.numpy() for t in torch.utils._pytree.tree_leaves(model(x))]
        values = {0: (1, False), 2: (-1, True)}  # output -> (dim, keepdim) of its (values, indices) pair
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, f"output {i}"
            if i in (1, 3):  # indices: torch's choice among ties is its kernel's; they must name the value
                dim, keep = values[i - 1]
                picked = np.take_along_axis(x.numpy(), g if keep else np.expand_dims(g, dim), axis=dim)
                np.testing.assert_array_equal(picked.reshape(got[i - 1].shape), got[i - 1])
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


class Searches(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bounds", torch.tensor([-1.0, 0.0, 0.0, 1.0, 2.5]))

    def forward(self, v, rows):
        return (torch.bucketize(v, self.bounds), torch.bucketize(v, self.bounds, right=True, out_int32=True),
                torch.searchsorted(self.bounds, v), torch.searchsorted(self.bounds, v, side="right"),
                torch.searchsorted(rows, v[:, :3].contiguous()))


def _search_inputs(n):
    v = torch.randint(-4, 7, (n, 6)).float() / 2  # hits the boundaries exactly
    v[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0])
    return v, torch.sort(torch.randn(n, 5), dim=1).values


def test_searchsorted_and_bucketize_match_torch_exactly():
    model = Searches().eval()
    ported = porter.convert(model, _search_inputs(3), io_layout="torch")
    for inputs in (_search_inputs(3), _search_inputs(5)):
        got = run_ported(ported, inputs)
        for i, (g, w) in enumerate(zip(got, model(*inputs))):
            assert g.dtype == w.numpy().dtype, f"output {i}"
            np.testing.assert_array_equal(g, w.numpy(), err_msg=f"output {i}")


def test_searchsorted_refuses_a_sorter_by_name():
    class Sorted(nn.Module):
        def forward(self, seq, v):
            return torch.searchsorted(seq, v, sorter=torch.argsort(seq))

    with pytest.raises(Exception, match="sorter"):
        porter.convert(Sorted().eval(), (torch.randn(5), torch.randn(3)))


class Distances(nn.Module):
    def forward(self, a, b, m, v):
        return (torch.cdist(a, b), torch.cdist(a, b, p=1.0), torch.cdist(a, b, p=float("inf")),
                torch.cdist(a, b, p=0.0), torch.dist(a, a.flip(1)), torch.dist(a, b[:, :1], p=3.0),
                torch.addmv(v, m, m[0], beta=0.5, alpha=2.0))


def _distance_inputs(n, p, r):
    return torch.randn(n, p, 4), torch.randn(n, r, 4), torch.randn(6, 6), torch.randn(6)


def test_distances_match_torch_at_two_sizes():
    # torch's cdist picks its matmul path by size (> 25 rows): the capture pins that side of it
    check_converted(Distances().eval(), _distance_inputs(2, 30, 27), _distance_inputs(1, 28, 31))


def test_gradients_of_the_new_ops():
    from tests.converters.test_ops_math import _assert_input_grads

    class Smooth(nn.Module):
        def forward(self, x, y):
            return (torch.asinh(x), torch.atan(x), torch.erfc(x), torch.exp2(x), torch.fmax(x, y),
                    torch.cdist(x, y), torch.cummax(x, 1).values, torch.median(x, 1).values)

    x, y = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    model = Smooth().eval()
    ported = porter.convert(model, (x, y), io_layout="torch")
    _assert_input_grads(ported, model, (x, y))


class Bags(nn.Module):
    """Every EmbeddingBag form: sum with per-sample weights, mean with a padding index, max, include_last_offset,
    and the 2-d (fixed-length bags) input."""

    def __init__(self):
        super().__init__()
        self.sum = nn.EmbeddingBag(12, 4, mode="sum")
        self.mean = nn.EmbeddingBag(12, 4, mode="mean", padding_idx=3)
        self.max = nn.EmbeddingBag(12, 4, mode="max")
        self.last = nn.EmbeddingBag(12, 4, mode="sum", include_last_offset=True)

    def forward(self, idx, offsets, weights, grid):
        return (self.sum(idx, offsets, per_sample_weights=weights), self.mean(idx, offsets), self.max(idx, offsets),
                self.last(idx, torch.cat([offsets, offsets.new_tensor([idx.shape[0]])])), self.mean(grid))


def _bag_inputs(n, offsets, rows):
    idx = torch.randint(0, 12, (n,))
    idx[1] = 3  # the padding index, skipped by the mean
    return idx, torch.tensor(offsets), torch.randn(n), torch.randint(0, 12, (rows, 3))


def test_embedding_bag_matches_torch_with_empty_bags_at_two_sizes():
    model = Bags().eval()
    # torch ties the per-sample weights to the indices by a check the port keeps static: n stays 7
    check_converted(model, _bag_inputs(7, [0, 2, 2, 5], 2), _bag_inputs(7, [0, 0, 4, 4, 6, 7], 4))
    ported = porter.convert(model, _bag_inputs(7, [0, 2, 2, 5], 2), io_layout="torch")
    from tests.converters.test_ops_math import _assert_input_grads

    _assert_input_grads(ported, model, _bag_inputs(7, [0, 3, 3, 6], 2))  # to the per-sample weights


@pytest.mark.parametrize("offsets, n, match", [([1, 2], 5, "offsets\\[0\\] must be 0"),
                                              ([0, 3, 2], 5, "non-decreasing"),
                                              ([0, 7], 5, "past the end")])
def test_embedding_bag_refuses_bad_offsets_as_torch_does(offsets, n, match):
    model = nn.EmbeddingBag(12, 4).eval()
    ported = porter.convert(model, (torch.randint(0, 12, (5,)), torch.tensor([0, 2])), io_layout="torch")
    idx, off = torch.randint(0, 12, (n,)), torch.tensor(offsets)
    if match != "non-decreasing":  # torch's CPU kernel does not check the order itself
        with pytest.raises(Exception):
            model(idx, off)
    with pytest.raises(ValueError, match=match):
        ported(mx.array(idx.numpy()), mx.array(off.numpy()))
    with pytest.raises(ValueError, match="out of range"):
        ported(mx.array(np.array([0, 12, 1, 2, 3])), mx.array(np.array([0, 2])))


def test_text_classifier_with_embedding_bag_runs_at_other_lengths_and_bag_counts():
    # the PyTorch text-classification tutorial's model: a flat token stream and per-text offsets
    class TextClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.EmbeddingBag(30, 8)
            self.fc = nn.Linear(8, 4)

        def forward(self, text, offsets):
            return self.fc(self.embedding(text, offsets))

    model = TextClassifier().eval()
    check_converted(model, (torch.randint(0, 30, (10,)), torch.tensor([0, 4, 7])),
                    (torch.randint(0, 30, (17,)), torch.tensor([0, 1, 1, 9, 12])))
