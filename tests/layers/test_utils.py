"""Shared argument helpers: the output-size rule against torch, and the int-or-tuple normaliser."""

import itertools

import pytest
import torch

from porter.layers._utils import ntuple, pool_output_size


@pytest.fixture(autouse=True)
def backend():
    """Pure-Python helpers, no layer runs: one run (overrides tests/layers/conftest.py's two)."""
    return "mlx"


def _torch_out(L, k, s, p, d, ceil):
    try:
        out = torch.nn.functional.max_pool1d(torch.zeros(1, 1, L), k, s, p, d, ceil, return_indices=True)[0]
    except RuntimeError:
        return 0  # torch refuses: output too small
    return out.shape[-1]


def test_pool_output_size_matches_torch():
    checked = 0
    for L, k, s, p, d, ceil in itertools.product(range(1, 12), range(1, 5), range(1, 5), range(3), (1, 2), (0, 1)):
        if p > k // 2:
            continue
        assert max(pool_output_size(L, k, s, p, d, bool(ceil)), 0) == _torch_out(L, k, s, p, d, bool(ceil)), (
            L, k, s, p, d, ceil)
        checked += 1
    assert checked > 1000


def test_ntuple():
    assert ntuple(3, 2, "kernel_size", "MaxPool2d") == (3, 3)
    assert ntuple((3,), 3, "kernel_size", "MaxPool3d") == (3, 3, 3)
    assert ntuple([1, 2], 2, "stride", "MaxPool2d") == (1, 2)
    assert ntuple((None, 4), 2, "output_size", "AdaptiveAvgPool2d", allow_none=True) == (None, 4)
    with pytest.raises(ValueError, match=r"\[MaxPool2d\] 'kernel_size' .* two ints"):
        ntuple((1, 2, 3), 2, "kernel_size", "MaxPool2d")
    with pytest.raises(TypeError, match=r"\[MaxPool2d\] 'stride'"):
        ntuple(2.0, 2, "stride", "MaxPool2d")
    with pytest.raises(TypeError, match=r"'padding'"):
        ntuple((1, True), 2, "padding", "MaxPool2d")
    with pytest.raises(TypeError, match="output_size"):
        ntuple((None, 4), 2, "output_size", "AdaptiveAvgPool2d")
