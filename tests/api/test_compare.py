"""porter.compare: the bar, its NaN/inf rules and the layout helpers every comparison goes through.

The bar's rules are checked on hand-built arrays (each case states the error it plants); the layout helpers against
torch's own ``permute`` (the oracle for what a layout means) on ranks 0-5.
"""

import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.compare import (ATOL, REPRODUCES_RTOL, RTOL, assert_close, compare, inverse_permutation, leaves,
                            mlx_to_numpy, parse_layout, port_inputs, port_outputs, to_port_layout, to_torch_layout,
                            within_bar)


def test_the_bar_values_are_the_projects():
    assert (RTOL, ATOL, REPRODUCES_RTOL) == (1e-4, 1e-4, 1e-2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_relative_bar_is_inclusive_at_its_edge(dtype):
    e = np.array([4.0, -2.0, 0.5], dtype)
    scale = 4.0
    ok = e.astype(np.float64) + np.array([0.0, 0.0, 1e-4 * scale])  # error exactly rtol * max|e|
    assert compare(ok, e, 1e-4, 0.0)["ok"]
    bad = e.astype(np.float64) + np.array([0.0, 0.0, 1.01e-4 * scale])
    row = compare(bad, e, 1e-4, 0.0)
    assert not row["ok"] and row["scale"] == scale
    assert row["max_rel"] == pytest.approx(1.01e-4)


def test_atol_is_a_floor_for_all_zero_tensors():
    e = np.zeros(5, np.float32)
    a = np.full(5, 5e-5, np.float32)
    assert compare(a, e, 1e-4, 1e-4)["ok"]
    assert not compare(a, e, 1e-4, 0.0)["ok"]  # no floor: an all-zero tensor must be matched exactly
    assert compare(a, e, 1e-4, 0.0)["max_rel"] == float("inf")


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_integer_and_bool_tensors_compare_exactly(dtype):
    e = np.array([0, 1, 1, 0, 1], dtype)
    assert compare(e.copy(), e, 1.0, 1.0)["ok"]  # huge tolerances do not matter ...
    a = e.copy()
    a[2] = 0
    row = compare(a, e, 1.0, 1.0)  # ... one flipped element fails
    assert not row["ok"] and row["exact"]


def test_nan_and_inf_rules():
    e = np.array([1.0, np.nan, np.inf, -np.inf, 2.0])
    assert compare(e.copy(), e, 0.0, 0.0)["ok"]  # NaN where torch has NaN, torch's infinities: agreement
    for i, value in [(1, 0.0), (0, np.nan), (2, -np.inf), (2, 1e30), (4, np.inf), (3, np.nan)]:
        a = e.copy()
        a[i] = value
        row = compare(a, e, 1.0, 1.0)
        assert not row["ok"] and row["max_abs"] == float("inf"), (i, value)
    # the scale is over finite values: an inf in torch's output does not loosen the bar for the rest
    a = e.copy()
    a[0] = 1.0 + 3e-4
    assert compare(a, e, 1e-4, 0.0)["scale"] == 2.0 and not compare(a, e, 1e-4, 0.0)["ok"]


def test_shape_mismatch_is_a_failure_not_a_broadcast():
    row = compare(np.zeros((1, 3)), np.zeros(3), 1.0, 1.0)
    assert not row["ok"] and row["note"] == "shape differs" and row["porter_shape"] == [1, 3]


def test_assert_close_names_the_reason():
    e = np.array([1.0, np.nan, np.inf, 2.0])
    assert_close(e.copy(), e, what="out")
    with pytest.raises(AssertionError, match="out: NaN positions differ"):
        assert_close(np.array([1.0, 0.0, np.inf, 2.0]), e, what="out")
    with pytest.raises(AssertionError, match="out: infinities differ"):
        assert_close(np.array([1.0, np.nan, -np.inf, 2.0]), e, what="out")
    with pytest.raises(AssertionError, match=r"out: max abs err 0\.1 > 0\.0002"):
        assert_close(np.array([1.0, np.nan, np.inf, 2.1]), e, what="out")
    with pytest.raises(AssertionError, match=r"shape \(2,\) != torch \(4,\)"):
        assert_close(np.zeros(2), e)
    assert within_bar(np.array([2.0]), np.array([2.0001]), 1e-4) and not within_bar(np.array([2.0]),
                                                                                     np.array([2.001]), 1e-4)


LAYOUTS = [("as-is", 0), ("as-is", 2), ("NCL->NLC", 3), ("NCHW->NHWC", 4), ("NCDHW->NDHWC", 5),
           ("permute(2,0,1)", 3), ("CHW->HWC", 3)]


@pytest.mark.parametrize("layout, rank", LAYOUTS)
def test_layouts_match_torch_permute_and_round_trip(layout, rank):
    shape = (2, 3, 4, 5, 6)[:rank]
    t = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
    perm = parse_layout(layout, rank)
    ported = to_port_layout(t.numpy(), layout)
    np.testing.assert_array_equal(ported, t.permute(perm).numpy())  # torch says what the layout means
    assert ported.flags.c_contiguous and ported.ndim == rank  # a 0-d array stays 0-d
    np.testing.assert_array_equal(to_torch_layout(ported, layout), t.numpy())
    assert tuple(np.transpose(np.empty(shape), perm).transpose(inverse_permutation(perm)).shape) == shape


def test_leaves_keeps_arrays_in_order_and_drops_the_rest():
    a, b, c = torch.zeros(1), mx.zeros(2), np.zeros(3)
    assert [x.shape[0] for x in leaves({"out": (a, None, 3), "aux": [b, {"x": c}]})] == [1, 2, 3]


class _Port:
    """The PortedModel contract port_inputs/port_outputs rely on: input_layouts and output_layouts."""

    input_layouts = ["NCHW->NHWC", "as-is"]
    output_layouts = ["NCHW->NHWC", "as-is"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_port_inputs_keep_dtype_and_values(dtype):
    x = torch.randn(2, 3, 4, 5).to(dtype)
    ids = torch.tensor([[3, 1, 4]])
    (mx_x, mx_ids), perms = port_inputs(_Port(), (x, ids))
    assert perms == [(0, 2, 3, 1), (0, 1)]
    assert str(mx_x.dtype).endswith(str(dtype).replace("torch.", "")) and mx_ids.dtype == mx.int64
    np.testing.assert_array_equal(mlx_to_numpy(mx_x), x.float().permute(0, 2, 3, 1).numpy()
                                  if dtype != torch.float64 else x.permute(0, 2, 3, 1).numpy())
    if dtype == torch.float64:
        assert mx_x.dtype == mx.float64  # not read as float32 (mx.array's default for numpy float64)


def test_port_outputs_undo_layouts_and_widen_16_bit():
    y = mx.arange(24, dtype=mx.float16).reshape(1, 2, 3, 4)  # NHWC
    scalar = mx.array(7.0)
    outs = port_outputs(_Port(), (y, scalar))
    assert outs[0].shape == (1, 4, 2, 3) and outs[0].dtype == np.float32 and outs[1].shape == ()
    np.testing.assert_array_equal(outs[0], np.transpose(np.array(y.astype(mx.float32)), (0, 3, 1, 2)))
    assert port_outputs(_Port(), (y, scalar), widen=False)[0].dtype == np.float16


def test_import_is_torch_free():
    code = "import sys, porter.compare; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
