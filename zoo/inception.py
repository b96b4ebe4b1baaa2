"""Inception v3 in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``Conv2d_1a_3x3`` .. ``Conv2d_4a_3x3``, ``Mixed_5b`` .. ``Mixed_7c`` (``BasicConv2d``
branches such as ``branch7x7dbl_3``), ``AuxLogits`` (``conv0``, ``conv1``, ``fc``), ``fc``. In training with
``aux_logits`` the model returns :class:`InceptionOutputs` ``(logits, aux_logits)``, otherwise the logits. Example::

    >>> model = zoo.create("inception_v3", num_classes=10)
    >>> model(mx.zeros((1, 299, 299, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from collections import namedtuple
from typing import Mapping

import mlx.core as mx
import mlx.nn as nn

from porter.layers import AvgPool2d, MaxPool2d
from porter.layers.functional import concatenate

from ._inception_common import BasicConv2d, scaled, transform_input
from ._loading import TorchCheckpointMixin
from .registry import register_model

InceptionOutputs = namedtuple("InceptionOutputs", ["logits", "aux_logits"])

# torch's F.avg_pool2d(x, 3, stride=1, padding=1) counts the zero padding (count_include_pad=True)
_avg3 = AvgPool2d(3, stride=1, padding=1)
_max3 = MaxPool2d(3, stride=2)


def _cat(branches: list) -> mx.array:
    return concatenate(branches, axis=-1)


class InceptionA(nn.Module):
    """1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avg pool-1x1 (``pool_features``). Output ``c(64)*2 + c(96) + pool_features``."""

    def __init__(self, in_channels: int, pool_features: int, c=lambda v: v):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, c(64), kernel_size=1)
        self.branch5x5_1 = BasicConv2d(in_channels, c(48), kernel_size=1)
        self.branch5x5_2 = BasicConv2d(c(48), c(64), kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, c(64), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(c(64), c(96), kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(c(96), c(96), kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(in_channels, pool_features, kernel_size=1)

    def __call__(self, x: mx.array) -> mx.array:
        return _cat([self.branch1x1(x), self.branch5x5_2(self.branch5x5_1(x)),
                     self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))),
                     self.branch_pool(_avg3(x))])


class InceptionB(nn.Module):
    """Grid reduction: 3x3/2 | 1x1-3x3-3x3/2 | 3x3/2 max pool."""

    def __init__(self, in_channels: int, c=lambda v: v):
        super().__init__()
        self.branch3x3 = BasicConv2d(in_channels, c(384), kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, c(64), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(c(64), c(96), kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(c(96), c(96), kernel_size=3, stride=2)

    def __call__(self, x: mx.array) -> mx.array:
        return _cat([self.branch3x3(x), self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x))),
                     _max3(x)])


class InceptionC(nn.Module):
    """Factorized 7x7: 1x1 | 1x1-1x7-7x1 | 1x1-7x1-1x7-7x1-1x7 | avg pool-1x1 (each ``c(192)``)."""

    def __init__(self, in_channels: int, channels_7x7: int, c=lambda v: v):
        super().__init__()
        c7 = channels_7x7
        self.branch1x1 = BasicConv2d(in_channels, c(192), kernel_size=1)
        self.branch7x7_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, c(192), kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, c(192), kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_channels, c(192), kernel_size=1)

    def __call__(self, x: mx.array) -> mx.array:
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        d = x
        for i in range(1, 6):
            d = getattr(self, f"branch7x7dbl_{i}")(d)
        return _cat([self.branch1x1(x), b7, d, self.branch_pool(_avg3(x))])


class InceptionD(nn.Module):
    """Grid reduction: 1x1-3x3/2 | 1x1-1x7-7x1-3x3/2 | 3x3/2 max pool."""

    def __init__(self, in_channels: int, c=lambda v: v):
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_channels, c(192), kernel_size=1)
        self.branch3x3_2 = BasicConv2d(c(192), c(320), kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_channels, c(192), kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(c(192), c(192), kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(c(192), c(192), kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(c(192), c(192), kernel_size=3, stride=2)

    def __call__(self, x: mx.array) -> mx.array:
        b7 = x
        for i in range(1, 5):
            b7 = getattr(self, f"branch7x7x3_{i}")(b7)
        return _cat([self.branch3x3_2(self.branch3x3_1(x)), b7, _max3(x)])


class InceptionE(nn.Module):
    """Expanded filter bank: 1x1 | 1x1-(1x3, 3x1) | 1x1-3x3-(1x3, 3x1) | avg pool-1x1."""

    def __init__(self, in_channels: int, c=lambda v: v):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, c(320), kernel_size=1)
        self.branch3x3_1 = BasicConv2d(in_channels, c(384), kernel_size=1)
        self.branch3x3_2a = BasicConv2d(c(384), c(384), kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(c(384), c(384), kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_channels, c(448), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(c(448), c(384), kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(c(384), c(384), kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(c(384), c(384), kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(in_channels, c(192), kernel_size=1)

    def __call__(self, x: mx.array) -> mx.array:
        b3 = self.branch3x3_1(x)
        d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        return _cat([self.branch1x1(x), self.branch3x3_2a(b3), self.branch3x3_2b(b3), self.branch3x3dbl_3a(d),
                     self.branch3x3dbl_3b(d), self.branch_pool(_avg3(x))])


class InceptionAux(nn.Module):
    """Auxiliary classifier: 5x5/3 average pool, 1x1 conv (``conv0``), 5x5 conv (``conv1``), global average,
    ``fc``. Needs a map of at least 17x17 (torchvision's 299x299 input)."""

    def __init__(self, in_channels: int, num_classes: int, c=lambda v: v):
        super().__init__()
        self.pool = AvgPool2d(5, stride=3)
        self.conv0 = BasicConv2d(in_channels, c(128), kernel_size=1)
        self.conv1 = BasicConv2d(c(128), c(768), kernel_size=5)
        self.fc = nn.Linear(c(768), num_classes)

    def __call__(self, x: mx.array) -> mx.array:
        x = self.conv1(self.conv0(self.pool(x)))
        return self.fc(mx.mean(x, axis=(1, 2)))


class Inception3(TorchCheckpointMixin, nn.Module):
    """torchvision's Inception v3.

    Args:
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        aux_logits (bool, optional): build the auxiliary classifier (used in training). Default: ``True``.
        transform_input (bool, optional): re-normalize ImageNet-normalized input as the ported weights expect.
            Default: ``False``.
        init_weights (bool, optional): accepted for torchvision's signature; initialization is MLX's (load a
            checkpoint). Default: ``None``.
        dropout (float, optional): dropout before ``fc``. Default: ``0.5``.
        width_divisor (int, optional): divide every channel count by this (a divisor of 16; a reduced model with
            the same names). Default: ``1``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)`` (training with ``aux_logits``: :class:`InceptionOutputs`);
    ``H, W >= 75`` (``>= 299`` for the auxiliary classifier in training).
    """

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True, transform_input: bool = False,
                 init_weights=None, dropout: float = 0.5, width_divisor: int = 1):
        super().__init__()
        c = scaled(width_divisor, "Inception3")
        self.aux_logits = aux_logits
        self.transform_input = transform_input
        self.Conv2d_1a_3x3 = BasicConv2d(3, c(32), kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(c(32), c(32), kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(c(32), c(64), kernel_size=3, padding=1)
        self.maxpool1 = MaxPool2d(3, stride=2)
        self.Conv2d_3b_1x1 = BasicConv2d(c(64), c(80), kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(c(80), c(192), kernel_size=3)
        self.maxpool2 = MaxPool2d(3, stride=2)
        self.Mixed_5b = InceptionA(c(192), pool_features=c(32), c=c)
        self.Mixed_5c = InceptionA(c(256), pool_features=c(64), c=c)
        self.Mixed_5d = InceptionA(c(288), pool_features=c(64), c=c)
        self.Mixed_6a = InceptionB(c(288), c=c)
        self.Mixed_6b = InceptionC(c(768), channels_7x7=c(128), c=c)
        self.Mixed_6c = InceptionC(c(768), channels_7x7=c(160), c=c)
        self.Mixed_6d = InceptionC(c(768), channels_7x7=c(160), c=c)
        self.Mixed_6e = InceptionC(c(768), channels_7x7=c(192), c=c)
        if aux_logits:
            self.AuxLogits = InceptionAux(c(768), num_classes, c=c)
        self.Mixed_7a = InceptionD(c(768), c=c)
        self.Mixed_7b = InceptionE(c(1280), c=c)
        self.Mixed_7c = InceptionE(c(2048), c=c)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(c(2048), num_classes)

    def __call__(self, x: mx.array):
        if self.transform_input:
            x = transform_input(x)
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(self.maxpool1(x))))
        for name in ("Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"):
            x = getattr(self, name)(x)
        aux = self.AuxLogits(x) if self.training and self.aux_logits else None
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        x = self.fc(self.dropout(mx.mean(x, axis=(1, 2))))
        return InceptionOutputs(x, aux) if self.training and self.aux_logits else x

    def load_torch_state_dict(self, state_dict: Mapping, strict: bool = True):
        """As :meth:`TorchCheckpointMixin.load_torch_state_dict`; without ``aux_logits`` the checkpoint's
        ``AuxLogits.*`` tensors are skipped, as torchvision's builder drops the head after loading."""
        if not self.aux_logits:
            state_dict = {k: v for k, v in state_dict.items() if not k.startswith("AuxLogits.")}
        return super().load_torch_state_dict(state_dict, strict=strict)


@register_model("inception_v3", family="inception", summary="Inception v3 (299x299 input), 27.2M parameters",
                torch_model="torchvision.models:inception_v3", input_shape=(1, 3, 299, 299))
def inception_v3(num_classes: int = 1000, **kwargs) -> Inception3:
    """Inception v3 as torchvision's ``inception_v3`` (for torchvision's ImageNet weights pass
    ``transform_input=True``). ``kwargs``: ``aux_logits``, ``transform_input``, ``init_weights``, ``dropout``."""
    return Inception3(num_classes=num_classes, **kwargs)
