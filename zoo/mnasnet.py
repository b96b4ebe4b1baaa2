"""MNASNet 0.5/0.75/1.0/1.3 in MLX, channels-last, loading torchvision-format checkpoints.

torchvision's current (version 2) layout: ``layers.0``-``layers.7`` (stem conv, depthwise-separable conv, both
scaled by ``alpha``), ``layers.8``-``layers.13`` (stacks of inverted residuals, ``layers.<i>.<j>.layers.<k>``),
``layers.14``-``layers.16`` (1x1 conv to 1280), ``classifier.1``. Batch norm momentum is ``1 - 0.9997``. Example::

    >>> model = zoo.create("mnasnet1_0", num_classes=10)
    >>> model(mx.zeros((1, 64, 64, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from functools import partial

import mlx.core as mx
import mlx.nn as nn

from porter.layers import BatchNorm, Conv2d

from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from ._mobile_blocks import ReLU
from .registry import register_model

# TensorFlow's batch-norm momentum 0.9997, in torch's convention
_BN = partial(BatchNorm, momentum=1 - 0.9997)


class _InvertedResidual(nn.Module):
    """1x1 expand (ReLU), kxk depthwise (ReLU), linear 1x1 projection; residual when the shape is kept.

    Args:
        in_ch (int): input channels.
        out_ch (int): output channels.
        kernel_size (int): 3 or 5.
        stride (int): 1 or 2.
        expansion_factor (int): hidden width is ``in_ch * expansion_factor``.
    Shape: ``(N, H, W, in_ch)`` -> ``(N, ceil(H / stride), ceil(W / stride), out_ch)``.
    """

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int, expansion_factor: int):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"[MNASNet] 'stride' must be 1 or 2 but got {stride}.")
        if kernel_size not in (3, 5):
            raise ValueError(f"[MNASNet] 'kernel_size' must be 3 or 5 but got {kernel_size}.")
        mid = in_ch * expansion_factor
        self.apply_residual = in_ch == out_ch and stride == 1
        self.layers = [Conv2d(in_ch, mid, 1, bias=False), _BN(mid), ReLU(),
                       Conv2d(mid, mid, kernel_size, stride=stride, padding=kernel_size // 2, groups=mid, bias=False),
                       _BN(mid), ReLU(),
                       Conv2d(mid, out_ch, 1, bias=False), _BN(out_ch)]

    def __call__(self, x: mx.array) -> mx.array:
        out = apply_sequence(self.layers, x)
        return out + x if self.apply_residual else out


def _stack(in_ch: int, out_ch: int, kernel_size: int, stride: int, exp_factor: int, repeats: int) -> list:
    """``repeats`` inverted residuals; only the first changes the shape."""
    return [_InvertedResidual(in_ch if i == 0 else out_ch, out_ch, kernel_size, stride if i == 0 else 1, exp_factor)
            for i in range(repeats)]


def _round_to_multiple_of(val: float, divisor: int, round_up_bias: float = 0.9) -> int:
    """Round to a multiple of ``divisor``, up unless that adds more than ``1 / round_up_bias`` (torchvision's)."""
    new_val = max(divisor, int(val + divisor / 2) // divisor * divisor)
    return new_val if new_val >= round_up_bias * val else new_val + divisor


def _get_depths(alpha: float) -> list:
    return [_round_to_multiple_of(depth * alpha, 8) for depth in (32, 16, 24, 40, 80, 96, 192, 320)]


class MNASNet(TorchCheckpointMixin, nn.Module):
    """MNASNet-B1 with depth multiplier ``alpha`` (torchvision's version-2 checkpoints).

    Args:
        alpha (float): depth multiplier, positive.
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        dropout (float, optional): dropout before the classifier (inactive in eval). Default: ``0.2``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)``; any ``H, W >= 1``.
    """

    def __init__(self, alpha: float, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        if not alpha > 0.0:
            raise ValueError(f"[MNASNet] 'alpha' should be greater than 0.0 but got {alpha!r}.")
        d = _get_depths(alpha)
        self.layers = [
            Conv2d(3, d[0], 3, stride=2, padding=1, bias=False), _BN(d[0]), ReLU(),
            Conv2d(d[0], d[0], 3, padding=1, groups=d[0], bias=False), _BN(d[0]), ReLU(),
            Conv2d(d[0], d[1], 1, bias=False), _BN(d[1]),
            _stack(d[1], d[2], 3, 2, 3, 3), _stack(d[2], d[3], 5, 2, 3, 3), _stack(d[3], d[4], 5, 2, 6, 3),
            _stack(d[4], d[5], 3, 1, 6, 2), _stack(d[5], d[6], 5, 2, 6, 4), _stack(d[6], d[7], 3, 1, 6, 1),
            Conv2d(d[7], 1280, 1, bias=False), _BN(1280), ReLU(),
        ]
        self.classifier = [nn.Dropout(dropout), nn.Linear(1280, num_classes)]

    def __call__(self, x: mx.array) -> mx.array:
        x = apply_sequence(self.layers, x)
        return apply_sequence(self.classifier, mx.mean(x, axis=(1, 2)))


def _register(alpha: float, params: str):
    name = f"mnasnet{str(alpha).replace('.', '_')}"

    @register_model(name, family="mnasnet", summary=f"MNASNet-B1, depth multiplier {alpha}, {params} parameters",
                    torch_model=f"torchvision.models:{name}")
    def factory(num_classes: int = 1000, **kwargs) -> MNASNet:
        return MNASNet(alpha, num_classes=num_classes, **kwargs)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"torchvision's ``{name}`` (``alpha={alpha}``). ``kwargs``: ``dropout``."
    return factory


mnasnet0_5 = _register(0.5, "2.2M")
mnasnet0_75 = _register(0.75, "3.2M")
mnasnet1_0 = _register(1.0, "4.4M")
mnasnet1_3 = _register(1.3, "6.3M")
