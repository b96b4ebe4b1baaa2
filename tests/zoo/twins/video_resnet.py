"""Torch twin of torchvision's video ResNets (torchvision.models.video.resnet) and their cases.

Module structure, ``state_dict`` names and builders are torchvision's; ``VideoResNet`` also takes ``widths`` (the
stem's and the stages' channels; torchvision's are 64, 128, 256, 512) so the tests can build reduced models, and
``stem_pool`` (a ``maxpool``, MaxPool3d (1, 3, 3)/(1, 2, 2), after the stem; torchvision has none, and the
``state_dict`` keys do not change) so the converter tests (``tests/models``) run a 3-d max pool in a real network.
"""

import torch
from torch import nn

from . import Case
from ._randomize import randomized


class Conv3DSimple(nn.Conv3d):
    def __init__(self, in_planes, out_planes, midplanes=None, stride=1, padding=1):
        super().__init__(in_planes, out_planes, kernel_size=(3, 3, 3), stride=stride, padding=padding, bias=False)

    @staticmethod
    def get_downsample_stride(stride):
        return stride, stride, stride


class Conv2Plus1D(nn.Sequential):
    def __init__(self, in_planes, out_planes, midplanes, stride=1, padding=1):
        super().__init__(
            nn.Conv3d(in_planes, midplanes, kernel_size=(1, 3, 3), stride=(1, stride, stride),
                      padding=(0, padding, padding), bias=False),
            nn.BatchNorm3d(midplanes),
            nn.ReLU(inplace=True),
            nn.Conv3d(midplanes, out_planes, kernel_size=(3, 1, 1), stride=(stride, 1, 1), padding=(padding, 0, 0),
                      bias=False))

    @staticmethod
    def get_downsample_stride(stride):
        return stride, stride, stride


class Conv3DNoTemporal(nn.Conv3d):
    def __init__(self, in_planes, out_planes, midplanes=None, stride=1, padding=1):
        super().__init__(in_planes, out_planes, kernel_size=(1, 3, 3), stride=(1, stride, stride),
                         padding=(0, padding, padding), bias=False)

    @staticmethod
    def get_downsample_stride(stride):
        return 1, stride, stride


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, conv_builder, stride=1, downsample=None):
        midplanes = (inplanes * planes * 3 * 3 * 3) // (inplanes * 3 * 3 + 3 * planes)
        super().__init__()
        self.conv1 = nn.Sequential(conv_builder(inplanes, planes, midplanes, stride), nn.BatchNorm3d(planes),
                                   nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(conv_builder(planes, planes, midplanes), nn.BatchNorm3d(planes))
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x
        out = self.conv1(x)
        out = self.conv2(out)
        if self.downsample is not None:
            residual = self.downsample(x)
        out += residual
        return self.relu(out)


class BasicStem(nn.Sequential):
    def __init__(self, width=64):
        super().__init__(nn.Conv3d(3, width, kernel_size=(3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
                         nn.BatchNorm3d(width), nn.ReLU(inplace=True))


class R2Plus1dStem(nn.Sequential):
    def __init__(self, width=64):
        super().__init__(nn.Conv3d(3, 45, kernel_size=(1, 7, 7), stride=(1, 2, 2), padding=(0, 3, 3), bias=False),
                         nn.BatchNorm3d(45), nn.ReLU(inplace=True),
                         nn.Conv3d(45, width, kernel_size=(3, 1, 1), stride=(1, 1, 1), padding=(1, 0, 0), bias=False),
                         nn.BatchNorm3d(width), nn.ReLU(inplace=True))


class VideoResNet(nn.Module):
    def __init__(self, block, conv_makers, layers, stem, num_classes=400, zero_init_residual=False,
                 widths=(64, 128, 256, 512), stem_pool=False):
        super().__init__()
        self.inplanes = widths[0]
        self.stem = stem(widths[0])
        self.maxpool = nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)) if stem_pool else None
        self.layer1 = self._make_layer(block, conv_makers[0], widths[0], layers[0], stride=1)
        self.layer2 = self._make_layer(block, conv_makers[1], widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(block, conv_makers[2], widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(block, conv_makers[3], widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)

    def forward(self, x):
        x = self.stem(x)
        if self.maxpool is not None:
            x = self.maxpool(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.avgpool(x).flatten(1)
        return self.fc(x)

    def _make_layer(self, block, conv_builder, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            ds_stride = conv_builder.get_downsample_stride(stride)
            downsample = nn.Sequential(
                nn.Conv3d(self.inplanes, planes * block.expansion, kernel_size=1, stride=ds_stride, bias=False),
                nn.BatchNorm3d(planes * block.expansion))
        layers = [block(self.inplanes, planes, conv_builder, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, conv_builder))
        return nn.Sequential(*layers)


def _video_resnet(block, conv_makers, layers, stem, weights=None, progress=True, **kwargs):
    return VideoResNet(block, conv_makers, layers, stem, **kwargs)


def r3d_18(*, weights=None, progress=True, **kwargs):
    return _video_resnet(BasicBlock, [Conv3DSimple] * 4, [2, 2, 2, 2], BasicStem, weights, progress, **kwargs)


def mc3_18(*, weights=None, progress=True, **kwargs):
    return _video_resnet(BasicBlock, [Conv3DSimple] + [Conv3DNoTemporal] * 3, [2, 2, 2, 2], BasicStem, weights,
                         progress, **kwargs)


def r2plus1d_18(*, weights=None, progress=True, **kwargs):
    return _video_resnet(BasicBlock, [Conv2Plus1D] * 4, [2, 2, 2, 2], R2Plus1dStem, weights, progress, **kwargs)


_SMALL = {"num_classes": 7, "widths": (8, 12, 16, 20)}
# odd, non-square second clip: 5 frames of 19x14 (every stride-2 stage sees an odd size)
_INPUTS = ((2, 3, 4, 16, 16), (1, 3, 5, 19, 14))
CASES = {
    "r3d_18": Case(randomized(r3d_18), _SMALL, inputs=_INPUTS, num_params=33371472),
    "mc3_18": Case(randomized(mc3_18), _SMALL, inputs=_INPUTS, num_params=11695440),
    "r2plus1d_18": Case(randomized(r2plus1d_18), _SMALL, inputs=_INPUTS, train=True, train_input=(4, 3, 8, 32, 32),
                        num_params=31505325),
}
