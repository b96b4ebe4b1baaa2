"""S3D (separable 3D Inception) in MLX, channels-last, loading torchvision checkpoints.

torchvision.models.video.s3d's names: ``features.<i>`` (``TemporalSeparableConv`` as ``<i>.0``/``<i>.1``
Conv3dNormActivation lists, ``SepInceptionBlock3D`` with ``branch0..3``), ``classifier.1`` (a 1x1x1 conv).
Input ``(N, T, H, W, 3)`` with the final map at least ``2 x 7 x 7`` (torchvision's fixed ``AvgPool3d((2, 7, 7))``:
e.g. 16 frames of 224x224), output ``(N, num_classes)``. Example::

    >>> model = zoo.create("s3d", num_classes=10)
    >>> model(mx.zeros((1, 16, 224, 224, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from functools import partial

import mlx.core as mx
import mlx.nn as nn

from porter.layers import AvgPool3d, BatchNorm3d, Conv3d, MaxPool3d

from ._blocks import conv_norm_activation
from ._common import apply_sequence
from ._loading import TorchCheckpointMixin
from .registry import register_model

# torchvision's S3D batch norm: eps 1e-3, momentum 1e-3
_norm = partial(BatchNorm3d, eps=0.001, momentum=0.001)


def _cna(in_planes: int, out_planes: int, kernel_size=1, stride=1, padding=None) -> list:
    """torchvision's ``Conv3dNormActivation`` (conv without bias, S3D's batch norm, ReLU)."""
    return conv_norm_activation(in_planes, out_planes, kernel_size, stride=stride, padding=padding, bias=False,
                                norm_layer=_norm, nd=3)


def temporal_separable_conv(in_planes: int, out_planes: int, kernel_size: int, stride: int, padding: int) -> list:
    """torchvision's ``TemporalSeparableConv``: a ``1 x k x k`` then a ``k x 1 x 1`` Conv3dNormActivation."""
    return [_cna(in_planes, out_planes, (1, kernel_size, kernel_size), (1, stride, stride), (0, padding, padding)),
            _cna(out_planes, out_planes, (kernel_size, 1, 1), (stride, 1, 1), (padding, 0, 0))]


class SepInceptionBlock3D(nn.Module):
    """Four branches concatenated on channels: 1x1x1; 1x1x1 -> separable 3x3x3 (twice, different widths);
    3x3x3 max pool -> 1x1x1.

    Shape: ``(N, T, H, W, in_planes)`` -> ``(N, T, H, W, b0_out + b1_out + b2_out + b3_out)``.
    """

    def __init__(self, in_planes: int, b0_out: int, b1_mid: int, b1_out: int, b2_mid: int, b2_out: int,
                 b3_out: int):
        super().__init__()
        self.branch0 = _cna(in_planes, b0_out)
        self.branch1 = [_cna(in_planes, b1_mid), temporal_separable_conv(b1_mid, b1_out, 3, 1, 1)]
        self.branch2 = [_cna(in_planes, b2_mid), temporal_separable_conv(b2_mid, b2_out, 3, 1, 1)]
        self.branch3 = [MaxPool3d(3, stride=1, padding=1), _cna(in_planes, b3_out)]

    def __call__(self, x: mx.array) -> mx.array:
        return mx.concatenate([apply_sequence(b, x) for b in (self.branch0, self.branch1, self.branch2,
                                                              self.branch3)], axis=-1)


# torchvision's inception blocks (b0_out, b1_mid, b1_out, b2_mid, b2_out, b3_out); "pool" marks its max pools.
_BLOCKS = ["pool1", (64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), "pool3",
           (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
           (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128), "pool2",
           (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]
_POOLS = {"pool1": ((1, 3, 3), (1, 2, 2), (0, 1, 1)), "pool3": (3, 2, 1), "pool2": (2, 2, 0)}


class S3D(TorchCheckpointMixin, nn.Module):
    """torchvision's ``S3D``.

    Args:
        num_classes (int, optional): classifier outputs. Default: ``400``.
        dropout (float, optional): dropout before the classifier. Default: ``0.2``.
        width_divisor (int, optional): divide every width by this (at least 1 channel each), for reduced models
            with the same structure and names. Default: ``1`` (torchvision's).
    Shape: ``(N, T, H, W, 3)`` -> ``(N, num_classes)``.
    """

    def __init__(self, num_classes: int = 400, dropout: float = 0.2, width_divisor: int = 1):
        super().__init__()
        if not isinstance(width_divisor, int) or width_divisor < 1:
            raise ValueError(f"[S3D] 'width_divisor' must be a positive int but got {width_divisor!r}.")

        def w(c):
            return max(1, c // width_divisor)

        self.features = [temporal_separable_conv(3, w(64), 7, 2, 3),
                         MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
                         _cna(w(64), w(64)),
                         temporal_separable_conv(w(64), w(192), 3, 1, 1)]
        channels = w(192)
        for spec in _BLOCKS:
            if isinstance(spec, str):
                kernel, stride, padding = _POOLS[spec]
                self.features.append(MaxPool3d(kernel, stride=stride, padding=padding))
                continue
            widths = [w(c) for c in spec]
            self.features.append(SepInceptionBlock3D(channels, *widths))
            channels = widths[0] + widths[2] + widths[4] + widths[5]
        self.avgpool = AvgPool3d((2, 7, 7), stride=1)
        self.classifier = [nn.Dropout(dropout), Conv3d(channels, num_classes, 1, bias=True)]

    def __call__(self, x: mx.array) -> mx.array:
        if x.ndim != 5 or x.shape[-1] != 3:
            raise ValueError(f"[S3D] expected input (N, T, H, W, 3) but got shape {x.shape}.")
        x = apply_sequence(self.features, x)
        if x.shape[1] < 2 or x.shape[2] < 7 or x.shape[3] < 7:
            raise ValueError(f"[S3D] the final feature map {x.shape[1:4]} is smaller than the 2x7x7 average pool; "
                             f"give at least 13 frames of 209x209 pixels.")
        x = apply_sequence(self.classifier, self.avgpool(x))
        return mx.mean(x, axis=(1, 2, 3))


@register_model("s3d", family="video", summary="S3D: separable 3D Inception (Kinetics-400 head), 8.3M parameters",
                torch_model="torchvision.models.video:s3d", input_shape=(1, 3, 16, 224, 224))
def s3d(num_classes: int = 400, **kwargs) -> S3D:
    """torchvision's ``s3d``. ``kwargs``: ``dropout``, ``width_divisor``."""
    return S3D(num_classes=num_classes, **kwargs)
