"""torch twin of torchvision's ShuffleNetV2 (``torchvision.models.shufflenetv2``): same modules, names, builders."""

from __future__ import annotations

import torch
from torch import nn

from . import Case


def channel_shuffle(x, groups):
    n, c, h, w = x.size()
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, -1, h, w)


def _dw(i, stride):
    return nn.Conv2d(i, i, 3, stride, 1, bias=False, groups=i)


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride):
        super().__init__()
        self.stride = stride
        bf = oup // 2
        if stride > 1:
            self.branch1 = nn.Sequential(_dw(inp, stride), nn.BatchNorm2d(inp), nn.Conv2d(inp, bf, 1, 1, 0, bias=False),
                                         nn.BatchNorm2d(bf), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(inp if stride > 1 else bf, bf, 1, 1, 0, bias=False), nn.BatchNorm2d(bf), nn.ReLU(inplace=True),
            _dw(bf, stride), nn.BatchNorm2d(bf), nn.Conv2d(bf, bf, 1, 1, 0, bias=False), nn.BatchNorm2d(bf),
            nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, stages_repeats, stages_out_channels, num_classes=1000):
        super().__init__()
        c = stages_out_channels[0]
        self.conv1 = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        for name, repeats, out in zip(["stage2", "stage3", "stage4"], stages_repeats, stages_out_channels[1:]):
            seq = [InvertedResidual(c, out, 2)] + [InvertedResidual(out, out, 1) for _ in range(repeats - 1)]
            setattr(self, name, nn.Sequential(*seq))
            c = out
        last = stages_out_channels[-1]
        self.conv5 = nn.Sequential(nn.Conv2d(c, last, 1, 1, 0, bias=False), nn.BatchNorm2d(last), nn.ReLU(inplace=True))
        self.fc = nn.Linear(last, num_classes)

    def forward(self, x):
        x = self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(x)))))
        return self.fc(self.conv5(x).mean([2, 3]))


def shufflenet_v2_x0_5(*, weights=None, progress=True, **kwargs):
    return ShuffleNetV2([4, 8, 4], [24, 48, 96, 192, 1024], **kwargs)


def shufflenet_v2_x1_0(*, weights=None, progress=True, **kwargs):
    return ShuffleNetV2([4, 8, 4], [24, 116, 232, 464, 1024], **kwargs)


def shufflenet_v2_x1_5(*, weights=None, progress=True, **kwargs):
    return ShuffleNetV2([4, 8, 4], [24, 176, 352, 704, 1024], **kwargs)


def shufflenet_v2_x2_0(*, weights=None, progress=True, **kwargs):
    return ShuffleNetV2([4, 8, 4], [24, 244, 488, 976, 2048], **kwargs)


# torchvision's builders fix the widths, so the tests run the real sizes (all small); 33x29 is odd and non-square
_SMALL = {"num_classes": 7}
_INPUTS = ((1, 3, 32, 32), (1, 3, 33, 29))
CASES = {
    "shufflenet_v2_x0_5": Case(shufflenet_v2_x0_5, _SMALL, inputs=((2, 3, 32, 32), (1, 3, 33, 29)), train=True,
                               train_input=(4, 3, 96, 96), num_params=1366792),
    "shufflenet_v2_x1_0": Case(shufflenet_v2_x1_0, _SMALL, inputs=_INPUTS, num_params=2278604),
    "shufflenet_v2_x1_5": Case(shufflenet_v2_x1_5, _SMALL, inputs=_INPUTS, num_params=3503624),
    "shufflenet_v2_x2_0": Case(shufflenet_v2_x2_0, _SMALL, inputs=_INPUTS, num_params=7393996),
}
