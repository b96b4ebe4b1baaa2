"""Tensors built from input sizes during a torch.export capture (``converters/capture_literals.py``):
``torch.as_tensor`` / ``torch.tensor`` of sizes and ``torch.linspace`` over a size made torch.export pin those sizes
(HF Deformable DETR's ``spatial_shapes`` and reference points: every other image size was refused). They stay
symbolic now: converted at one size, the port runs and matches torch at others; torch's functions are untouched
outside a capture."""

from __future__ import annotations

import pytest
import torch

import porter
from tests.converter_check import Fn, check_converted


def _dynamic_axes(ported):
    return {(d["input"], d["axis"]) for d in ported.dynamic_dims}


def _spatial_shapes(x):  # Deformable DETR: (h, w) per level as a long tensor, then the (w, h) normaliser
    shapes = torch.as_tensor([x.shape[-2:], (x.shape[-2] // 2, x.shape[-1] // 2)], dtype=torch.long)
    normalizer = torch.stack([shapes[..., 1], shapes[..., 0]], -1)
    return x.mean((-2, -1))[..., None, None] / normalizer + shapes.prod(-1).cumsum(0)


@pytest.mark.parametrize("fn, second", [
    (_spatial_shapes, (1, 3, 9, 13)),
    (lambda x: x * torch.tensor(x.shape[-1]), (1, 3, 9, 13)),  # 0-d, int64 inferred
    (lambda x: x + torch.tensor([x.shape[-1], 0.5]).sum(), (2, 3, 7, 5)),  # a float: the default dtype
    (lambda x: x * torch.as_tensor([[x.shape[-2]], [x.shape[-1]]], dtype=torch.float32).sum(), (3, 3, 5, 6)),
], ids=["spatial-shapes", "scalar", "mixed-float", "nested-dtype"])
def test_tensors_of_sizes_keep_the_sizes_dynamic(fn, second):
    ported = check_converted(Fn(fn), torch.randn(2, 3, 8, 10), torch.randn(*second))
    assert {(0, 2), (0, 3)} <= _dynamic_axes(ported)


@pytest.mark.parametrize("fn", [
    lambda x: x + torch.linspace(0.5, x.shape[-1] - 0.5, x.shape[-1]),  # symbolic end (DETR's reference points)
    lambda x: x * torch.linspace(-1, 1, x.shape[-1], dtype=torch.float32),  # a coordinate grid
    lambda x: x + torch.linspace(3.0, -2.0, x.shape[-1] - 1)[None].expand(x.shape[-2], -1).sum(-1, keepdim=True),
], ids=["reference-points", "grid", "descending"])
@pytest.mark.parametrize("width", [2, 3, 8, 17, 40])
def test_linspace_over_a_size(fn, width):
    """``steps`` from a size: torch's values at every width (one point, ``steps - 1 = 1``, odd and even counts,
    longer than a vector), converted once at width 6."""
    model = Fn(fn)
    ported = check_converted(model, torch.randn(2, 4, 6), torch.randn(1, 3, width))
    assert (0, 2) in _dynamic_axes(ported)


def test_literal_tensors_without_sizes_are_torch_own():
    """Constants, a list holding a tensor, a float64 linspace of a constant count: torch's own functions, the same
    values as before (and no symbolic wrapper left behind after the capture)."""
    originals = (torch.tensor, torch.as_tensor, torch.linspace)

    def fn(x):
        a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        b = torch.as_tensor([x.shape[0] * 0 + 1.5])
        c = torch.linspace(0, 1, 4, dtype=torch.float64).float()
        return x[..., :2] @ a + b + c.sum()

    check_converted(Fn(fn), torch.randn(2, 5, 2), torch.randn(3, 4, 2))
    assert (torch.tensor, torch.as_tensor, torch.linspace) == originals


def test_torch_functions_restored_after_a_failed_capture():
    originals = (torch.tensor, torch.as_tensor, torch.linspace)

    def fn(x):
        torch.as_tensor([x.shape[-1]])
        return x[x > 0]  # a data-dependent shape: the capture fails

    with pytest.raises(Exception):
        porter.convert(Fn(fn), (torch.randn(2, 5),))
    assert (torch.tensor, torch.as_tensor, torch.linspace) == originals
