"""ATen overloads the capture records only in some spellings (the ``.Scalar`` forms, in-place twins, the
``.default`` upsample/pad kernels behind ``F.interpolate``/``F.pad``, TorchScript's ``to``/``t``), called directly
through ``torch.ops.aten`` so each converter is exercised on purpose; torch runs the same data at two sizes.
"""

import math

import mlx.core as mx
import pytest
import torch
import torch.nn as nn

import porter
from tests.converter_check import assert_matches, check_converted

aten = torch.ops.aten


def _inplace(op, *args):
    """``op`` applied in place to a copy (so the input stays as torch's eager forward sees it)."""
    return lambda x: op(x.clone(), *args)


# name -> function of one float input x of shape (N, C, H, W) returning a tensor
UNARY_INPLACE = {
    "abs_": _inplace(aten.abs_.default), "cos_": _inplace(aten.cos_.default), "sin_": _inplace(aten.sin_.default),
    "erf_": _inplace(aten.erf_.default), "exp_": _inplace(aten.exp_.default),
    "gelu_": _inplace(aten.gelu_.default), "elu_": _inplace(aten.elu_.default),
    "hardsigmoid_": _inplace(aten.hardsigmoid_.default), "leaky_relu_": _inplace(aten.leaky_relu_.default, 0.2),
    "mish_": _inplace(aten.mish_.default), "neg_": _inplace(aten.neg_.default),
    "reciprocal_": _inplace(aten.reciprocal_.default), "sigmoid_": _inplace(aten.sigmoid_.default),
    "sign_": _inplace(aten.sign_.default), "tanh_": _inplace(aten.tanh_.default),
    "square_": _inplace(aten.square_.default),
    "log_": lambda x: aten.log_.default(x.abs() + 0.5), "sqrt_": lambda x: aten.sqrt_.default(x.abs()),
    "rsqrt_": lambda x: aten.rsqrt_.default(x.abs() + 0.5),
    "clamp_": _inplace(aten.clamp_.default, -0.5, 0.7), "clamp_min_": _inplace(aten.clamp_min_.default, -0.3),
    "clamp_max_": _inplace(aten.clamp_max_.default, 0.3),
    "clamp_min": lambda x: aten.clamp_min.default(x, -0.2), "clamp_max": lambda x: aten.clamp_max.default(x, 0.2),
    "relu6": lambda x: aten.relu6.default(x * 4), "erf": lambda x: aten.erf.default(x),
    "exp": lambda x: aten.exp.default(x), "sqrt": lambda x: aten.sqrt.default(x.abs()),
    "square": lambda x: aten.square.default(x),
}
BINARY_FORMS = {
    "add.Scalar": lambda x: aten.add.Scalar(x, 1.5, alpha=2), "add_.Scalar": _inplace(aten.add_.Scalar, 0.5),
    "sub.Scalar": lambda x: aten.sub.Scalar(x, 0.25), "sub_.Scalar": _inplace(aten.sub_.Scalar, 2),
    "sub_.Tensor": lambda x: aten.sub_.Tensor(x.clone(), x * 0.5, alpha=3),
    "mul_.Scalar": _inplace(aten.mul_.Scalar, -1.5),
    "div.Scalar": lambda x: aten.div.Scalar(x, 4), "div_.Scalar": _inplace(aten.div_.Scalar, -3.0),
    "div.Tensor_mode": lambda x: aten.div.Tensor_mode(x * 7, x + 3, rounding_mode="floor"),
    "div.Scalar_mode": lambda x: aten.div.Scalar_mode(x * 7, 2, rounding_mode="trunc"),
    "div_.Tensor": lambda x: aten.div_.Tensor(x.clone(), x.abs() + 1),
    "div_.Tensor_mode": lambda x: aten.div_.Tensor_mode(x * 5, x.abs() + 1, rounding_mode="trunc"),
    "div_.Scalar_mode": lambda x: aten.div_.Scalar_mode(x * 5, -2, rounding_mode="floor"),
    "floor_divide_": lambda x: aten.floor_divide_.Tensor(x * 9, x.abs() + 2),
    "pow.Tensor_Tensor": lambda x: aten.pow.Tensor_Tensor(x.abs() + 0.5, x),
    "pow_.Scalar": lambda x: aten.pow_.Scalar(x.clone(), 3),
    "pow_.Tensor": lambda x: aten.pow_.Tensor(x.abs() + 0.5, x * 0.5),
    "rsub.Tensor": lambda x: aten.rsub.Tensor(x, x * 3, alpha=0.5),
    "minimum": lambda x: aten.minimum.default(x, -x), "atan2": lambda x: aten.atan2.default(x, x.flip(-1)),
    "masked_fill.Tensor": lambda x: aten.masked_fill.Tensor(x, x > 0, torch.tensor(-2.0)),
    "masked_fill_.Scalar": lambda x: aten.masked_fill_.Scalar(x.clone(), x < 0, 3.0),
    "masked_fill_.Tensor": lambda x: aten.masked_fill_.Tensor(x.clone(), x < -0.5, torch.tensor(9.0)),
}
COMPARE = {
    f"{op}.{form}": (lambda op, form: lambda x: getattr(getattr(aten, op), form)(x, x.flip(-1) if form == "Tensor"
                                                                                 else 0.25).float())(op, form)
    for op in ("eq", "ne", "lt", "le", "gt", "ge") for form in ("Tensor", "Scalar")
}
COMPARE.update({
    "logical_and": lambda x: aten.logical_and.default(x > 0, x < 0.5).float(),
    "logical_or": lambda x: aten.logical_or.default(x > 1, x < -1).float(),
})
REDUCE = {
    "all.default": lambda x: aten.all.default(x > -3).float(), "all.dim": lambda x: aten.all.dim(x > -1, 1).float(),
    "all.dims": lambda x: aten.all.dims(x > -1.5, [1, 3]).float(),
    "any.default": lambda x: aten.any.default(x > 2).float(),
    "any.dims": lambda x: aten.any.dims(x > 1, [2, 3], True).float(), "amin": lambda x: aten.amin.default(x, [1, 2]),
    "argmax": lambda x: aten.argmax.default(x, 2).float(), "argmin": lambda x: aten.argmin.default(x, -1, True).float(),
    "argmax_flat": lambda x: aten.argmax.default(x).float(), "mean.default": lambda x: aten.mean.default(x),
    "sum.default": lambda x: aten.sum.default(x), "min.dim": lambda x: aten.min.dim(x, 1)[0],
    "std.correction": lambda x: aten.std.correction(x, [2, 3], correction=0, keepdim=True),
    "std.default": lambda x: aten.std.default(x), "std.dim": lambda x: aten.std.dim(x, [1], True),
    "var.correction": lambda x: aten.var.correction(x, [1, 3], correction=2),
    "var.default": lambda x: aten.var.default(x, False), "var.dim": lambda x: aten.var.dim(x, [2], False, True),
    "_log_softmax": lambda x: aten._log_softmax.default(x, 1, False),
}
SHAPE = {
    "_unsafe_view": lambda x: aten._unsafe_view.default(x * 1, [x.shape[0], -1]),
    "concat": lambda x: aten.concat.default([x, x * 2], 1),
    "split.sizes": lambda x: aten.split.sizes(x, [2, 1], 1)[0],
    "squeeze.default": lambda x: aten.squeeze.default(x[:, :1]),
    "swapaxes": lambda x: aten.swapaxes.default(x, 1, 3), "t": lambda x: aten.t.default(x[0, 0]),
    "numpy_T": lambda x: aten.numpy_T.default(x[0, 0]), "repeat": lambda x: aten.repeat.default(x, [1, 2, 1, 3]),
    "copy": lambda x: aten.copy.default(torch.zeros_like(x), x[:, :1] * 2),
    "fill.Scalar": lambda x: aten.fill.Scalar(x, 1.5), "fill.Tensor": lambda x: aten.fill.Tensor(x, x[0, 0, 0, 0]),
    "zero": lambda x: aten.zero.default(x),
    "index_put": lambda x: aten.index_put.default(x, [x > 0.5], torch.tensor(0.)),
    "to.other": lambda x: aten.to.other(x, torch.zeros(1, dtype=torch.float16)).float(),
    "to.dtype_layout": lambda x: aten.to.dtype_layout(x, dtype=torch.float16).float(),
    "to.device": lambda x: aten.to.device(x, torch.device("cpu"), torch.float16).float(),
    "empty_like": lambda x: aten.empty_like.default(x).zero_() + x,
    "new_ones": lambda x: aten.new_ones.default(x, [2, 3]), "new_full": lambda x: aten.new_full.default(x, [3], 2.5),
    "new_empty": lambda x: aten.new_empty.default(x, [2]).fill_(1.0), "ones_like": lambda x: aten.ones_like.default(x),
    "empty.memory_format": lambda x: aten.empty.memory_format([2, 2]).fill_(3.0),
    "scalar_tensor": lambda x: aten.scalar_tensor.default(4.5) * x,
    "mm": lambda x: aten.mm.default(x[0, 0], x[0, 1].t()), "baddbmm": lambda x: aten.baddbmm.default(
        x[0][..., :1], x[0], x[1].transpose(1, 2), beta=0.5, alpha=2.0),
    "dropouts": lambda x: aten.alpha_dropout.default(x, 0.5, False) + aten.feature_dropout.default(x, 0.5, False)
    + aten.feature_alpha_dropout.default(x, 0.5, False),
}
RESAMPLE = {
    "upsample_nearest2d.default": lambda x: aten.upsample_nearest2d.default(x, [7, 9]),
    "upsample_bilinear2d.default": lambda x: aten.upsample_bilinear2d.default(x, [7, 9], True),
    "upsample_nearest1d": lambda x: aten.upsample_nearest1d.default(x[:, :, 0], [2 * x.shape[-1]])
    + aten.upsample_nearest1d.vec(x[:, :, 0], None, [2.0]),
    "upsample_linear1d.default": lambda x: aten.upsample_linear1d.default(x[:, :, 0], [9], False),
    "upsample_nearest3d": lambda x: aten.upsample_nearest3d.default(x[:, :, None], [2, 6, 5])
    + aten.upsample_nearest3d.vec(x[:, :, None], [2, 6, 5], None),
    "upsample_trilinear3d.default": lambda x: aten.upsample_trilinear3d.default(x[:, :, None], [3, 4, 6], False),
    "upsample_bicubic2d.default": lambda x: aten.upsample_bicubic2d.default(x, [7, 9], False)
    + aten.upsample_bicubic2d.default(x, [7, 9], True),
    "upsample_bicubic2d.scales": lambda x: aten.upsample_bicubic2d.default(x, [6, 7], False, 1.5, 1.5),
    "grid_sampler_2d": lambda x: aten.grid_sampler_2d.default(x, x[:, :2].permute(0, 2, 3, 1) * 0.7, 0, 2, False)
    + aten.grid_sampler_2d.default(x, x[:, 1:].permute(0, 2, 3, 1) * 0.8, 1, 1, True)
    + aten.grid_sampler_2d.default(x, x[:, 1:].permute(0, 2, 3, 1) * 1.3, 2, 2, False),
    "nearest_exact.default": lambda x: aten._upsample_nearest_exact2d.default(x, [7, 3]),
    "nearest_exact1d": lambda x: aten._upsample_nearest_exact1d.default(x[:, :, 0], [7])
    + aten._upsample_nearest_exact1d.vec(x[:, :, 0], [7], None) * aten._upsample_nearest_exact1d.vec(x[:, :, 0, :1], None, [7.0]),
    "nearest_exact3d": lambda x: aten._upsample_nearest_exact3d.default(x[:, :, None], [2, 7, 3])
    + aten._upsample_nearest_exact3d.vec(x[:, :, None], [2, 7, 3], None),
    "constant_pad_nd": lambda x: aten.constant_pad_nd.default(x, [1, 2, 0, 1], 0.5),
    "reflection_pad": lambda x: (
        aten.reflection_pad2d.default(x, [1, 1, 2, 0])[..., :3, :3]
        + aten.reflection_pad1d.default(x[:, :, 0], [2, 1])[..., None, :3]
        + aten.reflection_pad3d.default(x[:, None], [1, 0, 0, 1, 1, 1])[:, 0, :x.shape[1], :3, :3]),
    "replication_pad": lambda x: (
        aten.replication_pad2d.default(x, [1, 1, 2, 0])[..., :3, :3]
        + aten.replication_pad1d.default(x[:, :, 0], [2, 1])[..., None, :3]
        + aten.replication_pad3d.default(x[:, None], [1, 0, 0, 1, 1, 1])[:, 0, :x.shape[1], :3, :3]),
}
_W2, _W3 = torch.randn(4, 3, 3, 2), torch.randn(2, 1, 3, 1, 2)
CONV_NORM = {
    "conv2d.padding": lambda x: aten.conv2d.padding(x, _W2, None, [1, 1], "same"),
    "conv3d.padding": lambda x: aten.conv3d.padding(x[:, None], _W3, None, [1, 1, 1], "same")[:, 0],
    "_convolution.deprecated": lambda x: aten._convolution.deprecated(
        x, _W2, None, [1, 2], [1, 0], [1, 1], False, [0, 0], 1, False, False, True),
    "adaptive_max_pool3d": lambda x: aten.adaptive_max_pool3d.default(x[:, None], [2, 3, 2])[0],
    "_prelu_kernel": lambda x: aten._prelu_kernel.default(x, torch.tensor([0.1, -0.5, 2.0])[:, None, None]),
    "_softmax": lambda x: aten._softmax.default(x, 1, False),
    "native_layer_norm": lambda x: aten.native_layer_norm.default(x, [x.shape[-1]], None, None, 1e-5)[0],
    "any.dim": lambda x: aten.any.dim(x > 1, 1).float(),
    "logical_not": lambda x: aten.logical_not.default(x > 0).float(),
    "mul.Scalar": lambda x: aten.mul.Scalar(x, -2.5),
    "squeeze.dims": lambda x: aten.squeeze.dims(x[:, :1, :, :1], [1, 3]),
}
# its size checks (O + k - 1 < L per dim) and samples sized from the batch pin every input dim: one size only
PINNED = {
    "fractional_max_pool3d": lambda x: aten.fractional_max_pool3d.default(
        x[:, None], [1, 2, 2], [2, 2, 2], torch.full((x.shape[0], 1, 3), 0.3))[0],
}
FAMILIES = {"conv_norm": CONV_NORM, "pinned": PINNED, "unary_inplace": UNARY_INPLACE, "binary_forms": BINARY_FORMS, "compare": COMPARE,
            "reduce": REDUCE,
            "shape": SHAPE, "resample": RESAMPLE}


class Catalog(nn.Module):
    """Every function of one family on the same input; the outputs as a tuple."""

    def __init__(self, fns: dict):
        super().__init__()
        self.fns = list(fns.values())

    def forward(self, x):
        return tuple(fn(x) for fn in self.fns)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_catalog_family(family):
    torch.manual_seed(0)
    model = Catalog(FAMILIES[family]).eval()
    if family == "pinned":  # the port must refuse the second size rather than run it
        ported = check_converted(model, torch.randn(2, 3, 4, 5), rel=2e-6)
        with pytest.raises(ValueError, match="breaks the condition"):
            ported(mx.random.normal((3, 3, 5, 6)))
        return
    check_converted(model, torch.randn(2, 3, 4, 5), torch.randn(3, 3, 5, 6), rel=2e-6)


class SymArith(nn.Module):
    """Size arithmetic that stays symbolic (operator.*, math.*, torch.sym_*), each result used as a value."""

    def forward(self, x):
        h, w = x.shape[2], x.shape[3]
        flags = torch.tensor([h == w, h != w, h < w, h <= w, h > w, h >= w], dtype=torch.float32)
        sizes = torch.tensor([h % 3, -h, h ** 2, min(h, w), math.floor(w / 3), math.trunc(-w / 4),
                              math.trunc(torch.sym_float(h) * 1.5), h + w, h - w],
                             dtype=torch.float32)
        return flags, sizes, torch.full((1,), torch.sym_float(w)) * x.mean()


def test_symbolic_size_arithmetic_in_values():
    ported = check_converted(SymArith().eval(), torch.randn(2, 3, 7, 9), torch.randn(1, 3, 8, 8), rel=1e-6)
    ops = {n["op"] for n in ported.graph["nodes"]}
    assert {"operator.eq", "operator.lt", "torch.sym_min", "math.floor"} <= ops, ops


class ScriptedSizes(nn.Module):
    """TorchScript spellings: ``x.size()`` (aten.size.default) and a list split (aten.split.sizes)."""

    def forward(self, x):
        n, c, h, w = x.size()
        first, rest = torch.split(x, [1, c - 1], 1)
        return x.reshape(n, c * h, w) * first.mean(), rest.sum(1)


def test_torchscript_sizes_and_list_split():
    model = ScriptedSizes().eval()
    ported = porter.convert(torch.jit.script(model), torch.randn(2, 3, 4, 5), io_layout="torch")
    for shape in [(2, 3, 4, 5), (3, 4, 2, 6)]:
        assert_matches(ported, model, (torch.randn(*shape),))
    ops = {n["op"] for n in ported.graph["nodes"]}
    assert {"aten.size.default", "aten.split.sizes"} <= ops, ops
