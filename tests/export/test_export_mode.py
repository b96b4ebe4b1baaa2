"""porter.layers.export_mode: layers build serializable ops with the same values as the normal path (torch checked
where the op is torch's), record what they replaced, and leave the normal path as it was."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
import torch

import porter
import porter.layers as L
import porter.layers.functional as F
from porter.layers import _native, export_mode, exporting

from tests.export.mlxfn_check import assert_close


def _export_roundtrip(fn, tmp_path, *args):
    """``fn`` exported in export mode and imported back, run on ``args``; the replacements made."""
    path = str(tmp_path / "f.mlxfn")
    with export_mode() as mode:
        mx.export_function(path, fn, *args)
    return mx.import_function(path)(*args), mode.replacements


def test_modes_do_not_nest_and_end_with_the_block():
    with export_mode() as mode:
        assert exporting()
        with pytest.raises(RuntimeError, match="do not nest"):
            with export_mode():
                pass
        assert exporting()  # the failed inner one did not end the outer one
    assert not exporting() and mode.replacements == {}


def test_native_kernels_are_reported_and_back_after(tmp_path):
    if not _native.available():
        pytest.skip("the native kernels are not built here: nothing to replace (porter build-kernels)")
    x = mx.random.normal((2, 9, 7, 32))
    pool = L.MaxPool2d(3, stride=2, padding=1)
    (out,), replaced = _export_roundtrip(lambda a: pool(a), tmp_path, x)
    assert replaced.get("native max pool (window max) -> pure-MLX ops") == 1
    assert np.array_equal(np.array(out), np.array(pool(x)))  # exact op, both paths
    assert _native.active("test")


@pytest.mark.parametrize("view", ["transposed", "strided", "sliced"])
def test_contiguous_copy_is_bitwise_and_row_contiguous(view, tmp_path):
    base = mx.array(np.array([[0.0, -0.0, np.nan, 1.5], [-np.inf, 2.0, -3.0, np.inf]] * 6, dtype=np.float32))
    views = {"transposed": lambda a: a.T, "strided": lambda a: a[::2, ::3], "sliced": lambda a: a[1:, 1:]}
    with export_mode() as mode:
        got = F.contiguous(views[view](base))
    expected = np.array(views[view](base))
    assert np.array_equal(np.array(got), expected, equal_nan=True)
    assert np.array_equal(np.signbit(np.array(got)), np.signbit(expected))  # -0.0 stays -0.0
    assert mode.replacements == {"mx.contiguous -> an elementwise copy (mx.where)": 1}
    # what the max pool needs it for: an as_strided window view of a strided input, exported
    x = mx.random.normal((2, 4, 9, 10)).transpose(0, 3, 2, 1)[:, 1:, :, :]  # (N, H, W, C) strided view
    pool = L.MaxPool2d(2, stride=1)
    (out,), _ = _export_roundtrip(lambda a: pool(a.transpose(0, 2, 1, 3)), tmp_path, x)
    with _native.use_native(False):
        assert np.array_equal(np.array(out), np.array(pool(x.transpose(0, 2, 1, 3))))


def test_unpool_export_matches_torch_with_duplicates(tmp_path):
    """The export scatter keeps torch's last writer on duplicate indices (overlapping pool windows)."""
    xt = torch.randn(2, 3, 9, 8)
    values, index = torch.nn.functional.max_pool2d(xt, 3, stride=1, return_indices=True)  # many duplicates
    expected = torch.nn.functional.max_unpool2d(values, index, 3, stride=1, output_size=(9, 8))
    v = mx.array(values.permute(0, 2, 3, 1).numpy())
    i = mx.array(index.permute(0, 2, 3, 1).numpy())
    (out,), replaced = _export_roundtrip(lambda a, b: F.max_unpool2d(a, b, 3, stride=1, output_size=(9, 8)),
                                         tmp_path, v, i)
    assert any("max unpool's index check" in k for k in replaced)
    np.testing.assert_array_equal(np.array(out).transpose(0, 3, 1, 2), expected.numpy())


def test_unpool_export_drops_out_of_range_indices(tmp_path):
    v = mx.array(np.arange(1, 9, dtype=np.float32).reshape(1, 2, 2, 2))
    i = mx.array(np.array([[[[0, 1], [99, 2]], [[-5, 3], [8, 8]]]], dtype=np.int64))
    fn = lambda a, b: F.max_unpool2d(a, b, 2, output_size=(3, 3))  # noqa: E731
    with pytest.raises(ValueError, match="invalid max index"):
        fn(v, i)  # the normal path raises as torch does
    (out,), _ = _export_roundtrip(fn, tmp_path, v, i)
    out = np.array(out)[0]
    expected = np.zeros((3, 3, 2), dtype=np.float32)
    expected.reshape(9, 2)[0, 0], expected.reshape(9, 2)[1, 1] = 1, 2  # positions (0,0),(0,1) of plane 0/1
    expected.reshape(9, 2)[2, 1], expected.reshape(9, 2)[3, 1] = 4, 6
    expected.reshape(9, 2)[8, 0], expected.reshape(9, 2)[8, 1] = 7, 8
    np.testing.assert_array_equal(out, expected)


def test_custom_vjp_layers_export_their_forward(tmp_path):
    """Strided conv, depthwise conv and LP pool carry custom VJPs (mx.custom_function): exported as their forward,
    checked against torch."""
    torch.manual_seed(0)
    xt = torch.randn(2, 6, 11, 10)
    conv = torch.nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6)
    strided = torch.nn.Conv2d(6, 4, 3, stride=2)
    lp = torch.nn.LPPool2d(3, 2, stride=2)
    ours = [L.Conv2d(6, 6, 3, stride=2, padding=1, groups=6), L.Conv2d(6, 4, 3, stride=2), L.LPPool2d(3, 2, stride=2)]
    for layer, ref in zip(ours[:2], (conv, strided)):
        layer.weight = mx.array(ref.weight.detach().permute(0, 2, 3, 1).numpy())
        layer.bias = mx.array(ref.bias.detach().numpy())
    x = mx.array(xt.permute(0, 2, 3, 1).numpy())

    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = ours

        def __call__(self, a):
            return tuple(m(a) for m in self.layers)

    # the weights are strided views (mx.array of permuted numpy): MLX's export would write them scrambled;
    # porter.export_function writes row-contiguous copies (and checks the file against the model)
    with _native.use_native(False):  # the pure-MLX path is where the custom functions live
        report = porter.export_function(Three(), tmp_path / "three.mlxfn", [x])
    outs, replaced = mx.import_function(report.path)(x), report.replacements
    assert "depthwise conv's custom VJP (mx.custom_function) -> its tap sum" in replaced
    assert "strided conv's custom VJP (mx.custom_function) -> MLX conv_general" in replaced
    assert "LP pool's pow with torch's VJP (mx.custom_function) -> its forward ops" in replaced
    with torch.no_grad():
        expected = [conv(xt), strided(xt), lp(xt)]
    for got, e in zip(outs, expected):  # LP pool of norm 3: NaN where a window's cube sum is negative, as torch
        assert_close(np.array(got), e.permute(0, 2, 3, 1).numpy(), rel=1e-5)


def test_strided_parameters_are_written_in_place(tmp_path):
    """MLX 0.32 writes a constant's buffer as if row-contiguous; a parameter that is a strided view must still come
    back from the file in the right places (and the model keeps its own arrays afterwards)."""

    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = mx.array(np.arange(12, dtype=np.float32).reshape(3, 4).T)  # keeps numpy's strides
            self.b = mx.arange(6, dtype=mx.float32).reshape(3, 2)[:, 1]  # a strided view once evaluated

        def __call__(self, x):
            return x @ self.w + self.b

    model = Affine()
    mx.eval(model.parameters())
    before = model.w
    x = mx.random.normal((2, 4))
    path = str(tmp_path / "raw.mlxfn")
    mx.export_function(path, model, x)
    raw = mx.import_function(path)(x)[0]
    assert not np.allclose(np.array(raw), np.array(model(x)))  # MLX's own export is wrong here
    report = porter.export_function(model, tmp_path / "affine.mlxfn", [x])
    np.testing.assert_array_equal(np.array(mx.import_function(report.path)(x)[0]), np.array(model(x)))
    assert model.w is before
