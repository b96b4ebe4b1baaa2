"""ConvTranspose1d / 2d / 3d and their functional forms, exact to torch, channels-last.

Input ``(N, *spatial, C_in)`` or unbatched ``(*spatial, C_in)``. Porter keeps the weight in the layout of the
equivalent forward conv, ``(C_out, *kernel, C_in/groups)``; torch's ``(C_in, C_out/groups, *kernel)`` converts with
:func:`porter.layers.conv_weights.torch_conv_transpose_weight_to_mlx` (a regroup, not just a transpose, when
``groups > 1``).

Why not ``mx.conv_transpose*``: it gives wrong shapes or values for some legal paddings (``padding > d*(k-1)``;
docs/ARCHITECTURE.md, MLX facts). A transposed conv is a conv of the stride-dilated input with the flipped kernel, padded by
``d*(k-1) - p`` before and ``d*(k-1) - p + output_padding`` after; negative amounts are crops, applied to the output.
Without dilation it runs as one stride-1 conv per output phase; with dilation, the zero-stuffed input goes through
Porter's stride-1 dilated conv (both in ``layers/_conv_transpose_engine.py``, which this file's checked calls go to).
MLX's ``input_dilation``/``kernel_dilation`` conv paths are 10-50x slower than torch on CPU, and its gradient of the
``input_dilation`` conv has a wrong input-gradient shape when ``output_padding > 0``; both paths use plain ops, so
autodiff gives the gradients. Kernel == stride without padding (2x2/s2 upsampling) is one matmul plus a reshape.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

from . import _blocked_sum, _conv_transpose_engine, _grad_order
from ._conv_transpose_engine import base_size as _base_size
from ._utils import ntuple
from .conv import (
    check_arrays,
    check_bias,
    check_channels,
    check_groups,
    check_positive,
    init_conv_params,
)


def _check_output_padding(output_padding: tuple, stride: tuple, dilation: tuple, layer: str) -> None:
    if any(op < 0 for op in output_padding):
        raise ValueError(f"[{layer}] negative output_padding is not supported (got output_padding={output_padding}).")
    if any(op >= s and op >= d for op, s, d in zip(output_padding, stride, dilation)):
        raise ValueError(
            f"[{layer}] output padding must be smaller than either stride or dilation, but got "
            f"output_padding={output_padding} stride={stride} dilation={dilation}"
        )


# ---------------------------------------------------------------------------------------------------- functional
def conv_transpose_nd(
    input, weight, bias, stride, padding, output_padding, groups, dilation, *, nd: int, layer: str
) -> mx.array:
    """The generic N-d transposed convolution behind ``conv_transpose1d/2d/3d`` (see :func:`conv_transpose2d`)."""
    check_arrays(input, weight, bias, nd, layer, f"conv_transpose{nd}d")
    stride = ntuple(stride, nd, "stride", layer)
    padding = ntuple(padding, nd, "padding", layer)
    output_padding = ntuple(output_padding, nd, "output_padding", layer)
    dilation = ntuple(dilation, nd, "dilation", layer)
    groups = check_groups(groups, layer)
    check_positive(stride, "stride", layer)
    check_positive(dilation, "dilation", layer)
    if any(p < 0 for p in padding):
        raise ValueError(f"[{layer}] negative padding is not supported (got padding={padding}).")
    _check_output_padding(output_padding, stride, dilation, layer)

    c_out, kernel = weight.shape[0], tuple(weight.shape[1:-1])
    if c_out % groups:
        raise ValueError(
            f"[{layer}] Given groups={groups}, expected weight (C_out, *kernel, C_in/groups) to be divisible by "
            f"{groups} at dimension 0, but got weight of size {list(weight.shape)} instead"
        )
    batched = input.ndim == nd + 2
    x = input if batched else input[None]
    c_in = x.shape[-1]
    if c_in != weight.shape[-1] * groups:
        raise ValueError(
            f"[{layer}] Given transposed=1, groups={groups}, weight of size {list(weight.shape)}, expected input"
            f"{list(input.shape)} to have {weight.shape[-1] * groups} channels, but got {c_in} channels instead"
        )
    check_bias(bias, c_out, weight, layer, transposed=True)
    check_positive(kernel, "kernel size", layer)
    spatial = tuple(x.shape[1:-1])
    out = tuple(
        _base_size(n, k, s, p, d) + op
        for n, k, s, p, d, op in zip(spatial, kernel, stride, padding, dilation, output_padding)
    )
    if any(o <= 0 for o in out):  # torch 2.13 refuses an empty output too (docs/SEMANTICS.md §10)
        raise ValueError(
            f"[{layer}] Given input size per channel: ({' x '.join(map(str, spatial))}). Calculated output size per "
            f"channel: ({' x '.join(map(str, out))}). Output size is too small"
        )

    if x.size == 0:  # zero batch: an empty output of the right shape
        y = mx.zeros((x.shape[0], *out, c_out), dtype=x.dtype)
    else:  # the strategy (float64, patch matmul, per-phase convs, zero-stuffed dilated conv) is the engine's choice
        y = _conv_transpose_engine.conv_transpose(x, weight, stride, padding, output_padding, dilation, groups)
    if bias is not None:
        y = _blocked_sum.add_bias(y, bias)  # its gradient over N x spatial in blocks
    return y if batched else y[0]


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """1-d transposed convolution, torch's ``F.conv_transpose1d`` on channels-last data.

    See :func:`conv_transpose2d`. Layout: input ``(N, L, C_in)`` or ``(L, C_in)``, weight ``(C_out, k, C_in/groups)``.
    """
    return conv_transpose_nd(
        input, weight, bias, stride, padding, output_padding, groups, dilation, nd=1, layer="conv_transpose1d"
    )


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-d transposed convolution, torch's ``F.conv_transpose2d`` on channels-last data (note: groups before dilation).

    Args:
        input (mx.array): ``(N, H, W, C_in)`` or unbatched ``(H, W, C_in)``.
        weight (mx.array): ``(C_out, kH, kW, C_in/groups)``, Porter's layout (see the module docstring for torch's).
        bias (mx.array, optional): ``(C_out,)``. Default: ``None``.
        stride (int or tuple, optional): Default: ``1``.
        padding (int or tuple, optional): ``d*(k-1) - padding`` is the implicit zero padding. Default: ``0``.
        output_padding (int or tuple, optional): extra size on the high side; each must be smaller than the stride
            or the dilation. Default: ``0``.
        groups (int, optional): Default: ``1``.
        dilation (int or tuple, optional): Default: ``1``.

    Returns:
        mx.array: ``(N, H_out, W_out, C_out)`` with ``H_out = (H-1)*s - 2p + d*(k-1) + output_padding + 1``.

    Example:
        >>> x = mx.random.normal((1, 8, 8, 16))
        >>> w = mx.random.normal((3, 4, 4, 16))
        >>> conv_transpose2d(x, w, stride=2, padding=1).shape   # (1, 16, 16, 3)
    """
    return conv_transpose_nd(
        input, weight, bias, stride, padding, output_padding, groups, dilation, nd=2, layer="conv_transpose2d"
    )


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """3-d transposed convolution, torch's ``F.conv_transpose3d`` on channels-last data.

    See :func:`conv_transpose2d`. Layout: input ``(N, D, H, W, C_in)``, weight ``(C_out, kD, kH, kW, C_in/groups)``.
    """
    return conv_transpose_nd(
        input, weight, bias, stride, padding, output_padding, groups, dilation, nd=3, layer="conv_transpose3d"
    )


# ---------------------------------------------------------------------------------------------------- modules
class _ConvTransposeNd(nn.Module):
    """Generic N-d transposed convolution module; ``ConvTranspose1d/2d/3d`` fix ``nd``."""

    nd = 0

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
    ):
        super().__init__()
        layer, nd = type(self).__name__, self.nd
        if padding_mode != "zeros":
            raise ValueError(f'[{layer}] Only "zeros" padding mode is supported for {layer}')
        self.groups = check_channels(in_channels, out_channels, groups, layer)
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = ntuple(kernel_size, nd, "kernel_size", layer)
        self.stride = ntuple(stride, nd, "stride", layer)
        self.padding = ntuple(padding, nd, "padding", layer)
        self.output_padding = ntuple(output_padding, nd, "output_padding", layer)
        self.dilation = ntuple(dilation, nd, "dilation", layer)
        check_positive(self.kernel_size, "kernel_size", layer)
        check_positive(self.stride, "stride", layer)
        check_positive(self.dilation, "dilation", layer)
        if any(p < 0 for p in self.padding):
            raise ValueError(f"[{layer}] negative padding is not supported (got padding={self.padding}).")
        _check_output_padding(self.output_padding, self.stride, self.dilation, layer)
        self.padding_mode = padding_mode
        # torch's transposed weight is (C_in, C_out/groups, *k), so its fan_in counts output channels
        fan_in = (self.out_channels // self.groups) * math.prod(self.kernel_size)
        shape = (self.out_channels, *self.kernel_size, self.in_channels // self.groups)
        init_conv_params(self, shape, fan_in, bias, self.out_channels)

    def _extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        for name, default in (("padding", 0), ("output_padding", 0), ("dilation", 1)):
            if getattr(self, name) != (default,) * self.nd:
                s += f", {name}={getattr(self, name)}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s

    def _output_padding(self, x: mx.array, output_size) -> tuple:
        """Torch's rule: ``output_size`` picks the output padding inside ``[min, min + stride - 1]`` per dim.

        ``output_size`` lists the spatial sizes, or the whole output shape in Porter's layout
        (``(N, *spatial, C)`` batched, ``(*spatial, C)`` unbatched).
        """
        layer, nd = type(self).__name__, self.nd
        if output_size is None:
            return self.output_padding
        batched = x.ndim == nd + 2
        size = list(output_size)
        non_spatial = 2 if batched else 1
        if len(size) == nd + non_spatial:
            size = size[1:-1] if batched else size[:-1]
        if len(size) != nd:
            raise ValueError(
                f"[{layer}] ConvTranspose{nd}D: for {x.ndim}D input, output_size must have {nd} or "
                f"{nd + non_spatial} elements (got {len(list(output_size))})"
            )
        spatial = tuple(x.shape[1:-1] if batched else x.shape[:-1])
        lo = [
            _base_size(n, k, s, p, d)
            for n, k, s, p, d in zip(spatial, self.kernel_size, self.stride, self.padding, self.dilation)
        ]
        hi = [m + s - 1 for m, s in zip(lo, self.stride)]
        if any(not (a <= o <= b) for o, a, b in zip(size, lo, hi)):
            raise ValueError(
                f"[{layer}] requested an output size of {size}, but valid sizes range from {lo} to {hi} "
                f"(for an input of {spatial})"
            )
        return tuple(o - a for o, a in zip(size, lo))

    def __call__(self, x: mx.array, output_size=None) -> mx.array:
        layer = type(self).__name__
        if not isinstance(x, mx.array) or x.ndim not in (self.nd + 1, self.nd + 2):
            check_arrays(x, self.weight, self.bias, self.nd, layer, f"conv_transpose{self.nd}d")
        output_padding = self._output_padding(x, output_size)
        x, weight, bias = _grad_order.weights_first(self, x, self.weight, self.bias)
        return conv_transpose_nd(
            x,
            weight,
            bias,
            self.stride,
            self.padding,
            output_padding,
            self.groups,
            self.dilation,
            nd=self.nd,
            layer=layer,
        )


class ConvTranspose1d(_ConvTransposeNd):
    """Torch's ``nn.ConvTranspose1d`` on channels-last input.

    Args:
        in_channels (int), out_channels (int), kernel_size (int or tuple): as in torch.
        stride (int or tuple, optional): Default: ``1``.
        padding (int or tuple, optional): Default: ``0``.
        output_padding (int or tuple, optional): Default: ``0``.
        groups (int, optional): Default: ``1``.
        bias (bool, optional): Default: ``True``.
        dilation (int or tuple, optional): Default: ``1``.
        padding_mode (str, optional): only ``'zeros'``, as in torch. Default: ``'zeros'``.

    Shape: input ``(N, L, C_in)`` or ``(L, C_in)``; output ``(N, L_out, C_out)``. Weight ``(C_out, k, C_in/groups)``.
    ``__call__(x, output_size=None)`` accepts torch's ``output_size``.

    Example:
        >>> up = ConvTranspose1d(8, 4, 4, stride=2, padding=1)
        >>> up(mx.random.normal((2, 10, 8))).shape   # (2, 20, 4)
    """

    nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Torch's ``nn.ConvTranspose2d`` on channels-last input; arguments as :class:`ConvTranspose1d`.

    Shape: input ``(N, H, W, C_in)`` or ``(H, W, C_in)``; output ``(N, H_out, W_out, C_out)``.
    Weight ``(C_out, kH, kW, C_in/groups)``.

    Example:
        >>> up = ConvTranspose2d(16, 8, 3, stride=2, padding=1)
        >>> up(mx.random.normal((1, 7, 7, 16)), output_size=(14, 14)).shape   # (1, 14, 14, 8)
    """

    nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Torch's ``nn.ConvTranspose3d`` on channels-last input; arguments as :class:`ConvTranspose1d`.

    Shape: input ``(N, D, H, W, C_in)`` or ``(D, H, W, C_in)``; output ``(N, D_out, H_out, W_out, C_out)``.
    Weight ``(C_out, kD, kH, kW, C_in/groups)``.

    Example:
        >>> up = ConvTranspose3d(4, 2, 2, stride=2)
        >>> up(mx.random.normal((1, 3, 4, 4, 4))).shape   # (1, 6, 8, 8, 2)
    """

    nd = 3
