"""A small r3d video ResNet (Conv3d, BatchNorm3d, MaxPool3d, AdaptiveAvgPool3d) and a 1D audio CNN.

The video ResNet is the zoo tests' torchvision twin (``tests/zoo/twins/video_resnet.py``) at a small size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tests.zoo.twins.video_resnet import BasicBlock, BasicStem, Conv3DSimple, VideoResNet


# ---------------------------------------------------------------------------------------------------- video
def r3d_small(num_classes: int = 10) -> VideoResNet:
    """torchvision's r3d (the zoo tests' twin) with one block per stage, widths 8-8-16-16 and a MaxPool3d stem."""
    return VideoResNet(BasicBlock, [Conv3DSimple] * 4, [1, 1, 1, 1], BasicStem, num_classes=num_classes,
                       widths=(8, 8, 16, 16), stem_pool=True)


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
