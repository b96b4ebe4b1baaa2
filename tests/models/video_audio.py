"""A small r3d-style video ResNet (Conv3d, BatchNorm3d, MaxPool3d, AdaptiveAvgPool3d) and a 1D audio CNN."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn


# ---------------------------------------------------------------------------------------------------- video
class Conv3DSimple(nn.Conv3d):
    """3x3x3 conv without bias (torchvision's r3d conv builder)."""

    def __init__(self, in_planes: int, out_planes: int, midplanes: int = None, stride: int = 1, padding: int = 1):
        super().__init__(in_planes, out_planes, kernel_size=(3, 3, 3), stride=stride, padding=padding, bias=False)

    @staticmethod
    def get_downsample_stride(stride: int) -> tuple:
        return stride, stride, stride


class VideoBasicBlock(nn.Module):
    """torchvision.models.video.resnet.BasicBlock: ``conv1`` (conv, BN, ReLU), ``conv2`` (conv, BN), residual."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, conv_builder: type, stride: int = 1, downsample=None):
        super().__init__()
        midplanes = (inplanes * planes * 3 * 3 * 3) // (inplanes * 3 * 3 + 3 * planes)
        self.conv1 = nn.Sequential(conv_builder(inplanes, planes, midplanes, stride), nn.BatchNorm3d(planes),
                                   nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(conv_builder(planes, planes, midplanes), nn.BatchNorm3d(planes))
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x if self.downsample is None else self.downsample(x)
        out = self.conv2(self.conv1(x))
        out += residual
        return self.relu(out)


class BasicStem(nn.Sequential):
    """(3, 7, 7) conv with stride (1, 2, 2), BN, ReLU."""

    def __init__(self, width: int = 64):
        super().__init__(
            nn.Conv3d(3, width, kernel_size=(3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
            nn.BatchNorm3d(width),
            nn.ReLU(inplace=True),
        )


class VideoResNet(nn.Module):
    """r3d: ``stem``, optional ``maxpool`` (MaxPool3d; torchvision's r3d has none, its state_dict keys are
    unchanged by it), ``layer1..4``, ``avgpool`` (AdaptiveAvgPool3d), ``fc``. Input ``(N, 3, T, H, W)``."""

    def __init__(self, layers: Sequence[int] = (2, 2, 2, 2), widths: Sequence[int] = (64, 128, 256, 512),
                 num_classes: int = 400, stem_pool: bool = False):
        super().__init__()
        self.inplanes = widths[0]
        self.stem = BasicStem(widths[0])
        self.maxpool = nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)) if stem_pool else None
        self.layer1 = self._make_layer(widths[0], layers[0], stride=1)
        self.layer2 = self._make_layer(widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(widths[3], num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            ds_stride = Conv3DSimple.get_downsample_stride(stride)
            downsample = nn.Sequential(nn.Conv3d(self.inplanes, planes, kernel_size=1, stride=ds_stride, bias=False),
                                       nn.BatchNorm3d(planes))
        layers = [VideoBasicBlock(self.inplanes, planes, Conv3DSimple, stride, downsample)]
        self.inplanes = planes
        layers += [VideoBasicBlock(planes, planes, Conv3DSimple) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        if self.maxpool is not None:
            x = self.maxpool(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def r3d_small(num_classes: int = 10) -> VideoResNet:
    return VideoResNet(layers=(1, 1, 1, 1), widths=(8, 8, 16, 16), num_classes=num_classes, stem_pool=True)


# ---------------------------------------------------------------------------------------------------- audio
class AudioCNN(nn.Module):
    """M5-style raw-waveform classifier: a wide strided Conv1d front end, Conv1d/BatchNorm1d/MaxPool1d stages,
    AdaptiveAvgPool1d(1), linear, log-softmax. Input ``(N, 1, samples)``."""

    def __init__(self, n_input: int = 1, n_output: int = 10, stride: int = 16, n_channel: int = 8):
        super().__init__()
        c = n_channel
        self.conv1 = nn.Conv1d(n_input, c, kernel_size=80, stride=stride)
        self.bn1 = nn.BatchNorm1d(c)
        self.pool1 = nn.MaxPool1d(4)
        self.conv2 = nn.Conv1d(c, c, kernel_size=3)
        self.bn2 = nn.BatchNorm1d(c)
        self.pool2 = nn.MaxPool1d(4)
        self.conv3 = nn.Conv1d(c, 2 * c, kernel_size=3, padding=1, dilation=1)
        self.bn3 = nn.BatchNorm1d(2 * c)
        self.pool3 = nn.MaxPool1d(3, stride=2, ceil_mode=True)
        self.conv4 = nn.Conv1d(2 * c, 2 * c, kernel_size=3, dilation=2, padding=2)
        self.bn4 = nn.BatchNorm1d(2 * c)
        self.avgpool = nn.AdaptiveAvgPool1d(1)
        self.fc1 = nn.Linear(2 * c, n_output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        x = self.pool3(F.relu(self.bn3(self.conv3(x))))
        x = F.relu(self.bn4(self.conv4(x)))
        x = self.avgpool(x).squeeze(-1)
        return F.log_softmax(self.fc1(x), dim=1)


def audio_cnn_small(num_classes: int = 10) -> AudioCNN:
    return AudioCNN(n_output=num_classes)
