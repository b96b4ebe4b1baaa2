"""GoogLeNet (Inception v1) in MLX, channels-last, loading torchvision-format checkpoints.

Names are torchvision's: ``conv1..3`` and ``inception3a..5b`` (``BasicConv2d``: ``conv``, ``bn``; branches
``branch1``, ``branch2.0/1``, ``branch3.0/1``, ``branch4.1``), ``aux1``/``aux2`` (``conv``, ``fc1``, ``fc2``), ``fc``.
In training with ``aux_logits`` the model returns :class:`GoogLeNetOutputs` ``(logits, aux_logits2, aux_logits1)``,
otherwise the logits, as torchvision. Example::

    >>> model = zoo.create("googlenet", num_classes=10, aux_logits=False)
    >>> model(mx.zeros((1, 224, 224, 3))).shape
    (1, 10)
"""

from __future__ import annotations

from collections import namedtuple
from typing import Mapping

import mlx.core as mx
import mlx.nn as nn

from porter.layers import AdaptiveAvgPool2d, MaxPool2d
from porter.layers.functional import concatenate

from ._common import apply_sequence
from ._inception_common import BasicConv2d, scaled, transform_input
from ._loading import FlattenLinear, TorchCheckpointMixin
from .registry import register_model

GoogLeNetOutputs = namedtuple("GoogLeNetOutputs", ["logits", "aux_logits2", "aux_logits1"])


class Inception(nn.Module):
    """Four branches concatenated: 1x1; 1x1-3x3; 1x1-3x3 (torchvision's 3x3 where the paper has 5x5); 3x3 max pool
    (ceil mode)-1x1. Shape: ``(N, H, W, in_channels)`` -> ``(N, H, W, ch1x1 + ch3x3 + ch5x5 + pool_proj)``."""

    def __init__(self, in_channels: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int, ch5x5: int,
                 pool_proj: int):
        super().__init__()
        self.branch1 = BasicConv2d(in_channels, ch1x1, kernel_size=1)
        self.branch2 = [BasicConv2d(in_channels, ch3x3red, kernel_size=1),
                        BasicConv2d(ch3x3red, ch3x3, kernel_size=3, padding=1)]
        self.branch3 = [BasicConv2d(in_channels, ch5x5red, kernel_size=1),
                        BasicConv2d(ch5x5red, ch5x5, kernel_size=3, padding=1)]
        self.branch4 = [MaxPool2d(3, stride=1, padding=1, ceil_mode=True), BasicConv2d(in_channels, pool_proj,
                                                                                       kernel_size=1)]

    def __call__(self, x: mx.array) -> mx.array:
        branches = [self.branch1(x)] + [apply_sequence(b, x) for b in (self.branch2, self.branch3, self.branch4)]
        return concatenate(branches, axis=-1)


class InceptionAux(nn.Module):
    """Auxiliary classifier: 4x4 adaptive average pool, 1x1 conv to 128, ``fc1`` (ReLU, dropout), ``fc2``.

    Shape: ``(N, H, W, in_channels)`` -> ``(N, num_classes)``.
    """

    def __init__(self, in_channels: int, num_classes: int, dropout: float = 0.7, width=lambda c: c):
        super().__init__()
        self.pool = AdaptiveAvgPool2d((4, 4))
        self.conv = BasicConv2d(in_channels, width(128), kernel_size=1)
        self.fc1 = FlattenLinear((width(128), 4, 4), width(1024))
        self.fc2 = nn.Linear(width(1024), num_classes)
        self.dropout = nn.Dropout(dropout)

    def __call__(self, x: mx.array) -> mx.array:
        x = self.conv(self.pool(x))
        return self.fc2(self.dropout(nn.relu(self.fc1(x))))


class GoogLeNet(TorchCheckpointMixin, nn.Module):
    """torchvision's GoogLeNet.

    Args:
        num_classes (int, optional): classifier outputs. Default: ``1000``.
        aux_logits (bool, optional): build the two auxiliary classifiers (used in training). Default: ``True``.
        transform_input (bool, optional): re-normalize ImageNet-normalized input as the ported weights expect.
            Default: ``False``.
        init_weights (bool, optional): accepted for torchvision's signature; initialization is MLX's (load a
            checkpoint). Default: ``None``.
        dropout (float, optional): dropout before ``fc``. Default: ``0.2``.
        dropout_aux (float, optional): dropout in the auxiliary classifiers. Default: ``0.7``.
        width_divisor (int, optional): divide every channel count by this (a divisor of 8; a reduced model with
            the same names). Default: ``1``.
    Shape: ``(N, H, W, 3)`` -> ``(N, num_classes)`` (training with ``aux_logits``: :class:`GoogLeNetOutputs`);
    ``H, W >= 15``.
    """

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True, transform_input: bool = False,
                 init_weights=None, dropout: float = 0.2, dropout_aux: float = 0.7, width_divisor: int = 1):
        super().__init__()
        c = scaled(width_divisor, "GoogLeNet")
        self.aux_logits = aux_logits
        self.transform_input = transform_input
        self.conv1 = BasicConv2d(3, c(64), kernel_size=7, stride=2, padding=3)
        self.maxpool1 = MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = BasicConv2d(c(64), c(64), kernel_size=1)
        self.conv3 = BasicConv2d(c(64), c(192), kernel_size=3, padding=1)
        self.maxpool2 = MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception3a = Inception(c(192), c(64), c(96), c(128), c(16), c(32), c(32))
        self.inception3b = Inception(c(256), c(128), c(128), c(192), c(32), c(96), c(64))
        self.maxpool3 = MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception4a = Inception(c(480), c(192), c(96), c(208), c(16), c(48), c(64))
        self.inception4b = Inception(c(512), c(160), c(112), c(224), c(24), c(64), c(64))
        self.inception4c = Inception(c(512), c(128), c(128), c(256), c(24), c(64), c(64))
        self.inception4d = Inception(c(512), c(112), c(144), c(288), c(32), c(64), c(64))
        self.inception4e = Inception(c(528), c(256), c(160), c(320), c(32), c(128), c(128))
        self.maxpool4 = MaxPool2d(2, stride=2, ceil_mode=True)
        self.inception5a = Inception(c(832), c(256), c(160), c(320), c(32), c(128), c(128))
        self.inception5b = Inception(c(832), c(384), c(192), c(384), c(48), c(128), c(128))
        if aux_logits:
            self.aux1 = InceptionAux(c(512), num_classes, dropout=dropout_aux, width=c)
            self.aux2 = InceptionAux(c(528), num_classes, dropout=dropout_aux, width=c)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(c(1024), num_classes)

    def __call__(self, x: mx.array):
        if self.transform_input:
            x = transform_input(x)
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.inception4a(x)
        aux = self.training and self.aux_logits
        aux1 = self.aux1(x) if aux else None
        x = self.inception4d(self.inception4c(self.inception4b(x)))
        aux2 = self.aux2(x) if aux else None
        x = self.maxpool4(self.inception4e(x))
        x = self.inception5b(self.inception5a(x))
        x = self.fc(self.dropout(mx.mean(x, axis=(1, 2))))
        return GoogLeNetOutputs(x, aux2, aux1) if aux else x

    def load_torch_state_dict(self, state_dict: Mapping, strict: bool = True):
        """As :meth:`TorchCheckpointMixin.load_torch_state_dict`; without ``aux_logits`` the checkpoint's
        ``aux1.*``/``aux2.*`` tensors are skipped, as torchvision's builder drops the heads after loading."""
        if not self.aux_logits:
            state_dict = {k: v for k, v in state_dict.items() if not k.startswith(("aux1.", "aux2."))}
        return super().load_torch_state_dict(state_dict, strict=strict)


@register_model("googlenet", family="googlenet", summary="GoogLeNet (Inception v1), 6.6M parameters without aux heads",
                torch_model="torchvision.models:googlenet")
def googlenet(num_classes: int = 1000, **kwargs) -> GoogLeNet:
    """GoogLeNet as torchvision's ``googlenet`` (no weights: ``aux_logits=True``, ``transform_input=False``; for
    torchvision's ImageNet weights pass ``aux_logits=False, transform_input=True``). ``kwargs``: ``aux_logits``,
    ``transform_input``, ``init_weights``, ``dropout``, ``dropout_aux``."""
    return GoogLeNet(num_classes=num_classes, **kwargs)
