"""Benchmark cases for the convolution family: Conv1d/2d/3d and ConvTranspose2d against torch.

Weights are copied from the torch module into Porter's through the converter's transforms, so both sides compute the
same function. ``conv2d_1x1 ... (conv_general)`` rows time the generic conv path for the 1x1 case that Porter runs as
a matmul (``porter.layers._conv_engine.MATMUL_1X1``), to show why the shortcut is taken; ``(no winograd)`` rows time MLX's
conv for the stride-1 3x3 convs that Porter's native kernels run as Winograd F(2x2, 3x3)
(``porter.layers._conv_engine.WINOGRAD``).
"""

from __future__ import annotations

import mlx.core as mx
import torch

import porter.layers as L
import porter.layers._conv_engine as conv_module
from benchmarks.layers import case
from porter.layers.conv_weights import torch_conv_transpose_weight_to_mlx, torch_conv_weight_to_mlx

_TORCH = {
    "Conv1d": torch.nn.Conv1d,
    "Conv2d": torch.nn.Conv2d,
    "Conv3d": torch.nn.Conv3d,
    "ConvTranspose2d": torch.nn.ConvTranspose2d,
}


def _pair(cls_name: str, *args, **kwargs):
    """(torch module, Porter module) with the same weights."""
    torch.manual_seed(0)
    tm = _TORCH[cls_name](*args, **kwargs)
    pm = getattr(L, cls_name)(*args, **kwargs)
    w = tm.weight.detach().numpy()
    if "Transpose" in cls_name:
        pm.weight = mx.array(torch_conv_transpose_weight_to_mlx(w, tm.groups))
    else:
        pm.weight = mx.array(torch_conv_weight_to_mlx(w))
    if tm.bias is not None:
        pm.bias = mx.array(tm.bias.detach().numpy())
    return tm, pm


def _register(name: str, shape: tuple, cls_name: str, *args, generic_path: bool = False, winograd: bool = True,
              **kwargs) -> None:
    modules = {}

    def pair():
        if not modules:
            modules["t"], modules["p"] = _pair(cls_name, *args, **kwargs)
        return modules["t"], modules["p"]

    def make_porter():
        pm = pair()[1]
        if not generic_path and winograd:
            return pm

        def run(x):  # the path is chosen while the graph is built, so toggling around the call is enough
            conv_module.MATMUL_1X1, conv_module.WINOGRAD = not generic_path, winograd
            try:
                return pm(x)
            finally:
                conv_module.MATMUL_1X1 = conv_module.WINOGRAD = True

        return run

    case(name, shape, lambda: pair()[0], make_porter)


# 2d: realistic (ResNet stage-1 size) and small
_register("conv2d_3x3 64->64 p1", (8, 64, 56, 56), "Conv2d", 64, 64, 3, padding=1)
_register("conv2d_3x3 64->64 p1 (no winograd)", (8, 64, 56, 56), "Conv2d", 64, 64, 3, padding=1, winograd=False)
# ResNet-18's stride-1 3x3 convs at batch 1 (the 512@7 one has 16 tiles: MLX's conv)
_register("conv2d_3x3 64->64 p1 (batch 1)", (1, 64, 56, 56), "Conv2d", 64, 64, 3, padding=1)
_register("conv2d_3x3 64->64 p1 (batch 1, no winograd)", (1, 64, 56, 56), "Conv2d", 64, 64, 3, padding=1,
          winograd=False)
_register("conv2d_3x3 128->128 p1 (batch 1)", (1, 128, 28, 28), "Conv2d", 128, 128, 3, padding=1)
_register("conv2d_3x3 128->128 p1 (batch 1, no winograd)", (1, 128, 28, 28), "Conv2d", 128, 128, 3, padding=1,
          winograd=False)
_register("conv2d_3x3 256->256 p1 (batch 1)", (1, 256, 14, 14), "Conv2d", 256, 256, 3, padding=1)
_register("conv2d_3x3 256->256 p1 (batch 1, no winograd)", (1, 256, 14, 14), "Conv2d", 256, 256, 3, padding=1,
          winograd=False)
_register("conv2d_3x3 512->512 p1 (batch 1)", (1, 512, 7, 7), "Conv2d", 512, 512, 3, padding=1)
_register("conv2d_3x3 16->16 p1 (small)", (2, 16, 16, 16), "Conv2d", 16, 16, 3, padding=1)
_register("conv2d_3x3 64->64 s2 p1", (8, 64, 56, 56), "Conv2d", 64, 64, 3, stride=2, padding=1)
_register("conv2d_1x1 64->256", (8, 64, 56, 56), "Conv2d", 64, 256, 1)
_register("conv2d_1x1 64->256 (conv_general)", (8, 64, 56, 56), "Conv2d", 64, 256, 1, generic_path=True)
_register("conv2d_1x1 16->32 (small)", (2, 16, 16, 16), "Conv2d", 16, 32, 1)
_register("conv2d_1x1 16->32 (small, conv_general)", (2, 16, 16, 16), "Conv2d", 16, 32, 1, generic_path=True)
_register("conv2d_dw3x3 64 p1", (8, 64, 56, 56), "Conv2d", 64, 64, 3, padding=1, groups=64)
_register("conv2d_dw3x3 32 s2 p1", (8, 32, 112, 112), "Conv2d", 32, 32, 3, stride=2, padding=1, groups=32)
_register("conv2d_dw5x5 120 p2", (8, 120, 28, 28), "Conv2d", 120, 120, 5, padding=2, groups=120)
_register("conv2d_dw3x3 24x2 p1 (multiplier 2)", (8, 24, 56, 56), "Conv2d", 24, 48, 3, padding=1, groups=24)
_register("conv2d_dw3x3 16 p1 (small)", (2, 16, 16, 16), "Conv2d", 16, 16, 3, padding=1, groups=16)
_register("conv2d_3x3 d2 32->16 p2", (4, 32, 56, 56), "Conv2d", 32, 16, 3, padding=2, dilation=2)
_register("conv2d_3x3 reflect 32->32 p1", (4, 32, 64, 64), "Conv2d", 32, 32, 3, padding=1, padding_mode="reflect")
# 1d and 3d
_register("conv1d_k3 64->64 p1", (8, 64, 1024), "Conv1d", 64, 64, 3, padding=1)
_register("conv3d_3x3x3 16->16 p1", (2, 16, 8, 28, 28), "Conv3d", 16, 16, 3, padding=1)
# transposed (decoder upsampling)
_register("conv_transpose2d_k2s2 64->32", (8, 64, 28, 28), "ConvTranspose2d", 64, 32, 2, stride=2)
_register(
    "conv_transpose2d_k3s2 64->32 p1 op1", (8, 64, 28, 28), "ConvTranspose2d", 64, 32, 3, stride=2, padding=1,
    output_padding=1,
)
_register(
    "conv_transpose2d_k3s2 32->16 p1 d2", (4, 32, 28, 28), "ConvTranspose2d", 32, 16, 3, stride=2, padding=1,
    dilation=2,
)
_register("conv_transpose2d_k4s2 16->8 p1 (small)", (2, 16, 16, 16), "ConvTranspose2d", 16, 8, 4, stride=2, padding=1)
