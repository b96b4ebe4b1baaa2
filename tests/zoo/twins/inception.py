"""Inception v3's torch twin (torchvision.models.inception's structure and names) and its zoo case.

``width_divisor`` (a divisor of 16) divides every channel count: a reduced model with the same names for the tests.
"""

from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn

from . import Case
from .googlenet import BasicConv2d

InceptionOutputs = namedtuple("InceptionOutputs", ["logits", "aux_logits"])
_ID = lambda v: v  # noqa: E731


class InceptionA(nn.Module):
    def __init__(self, in_channels, pool_features, c=_ID):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, c(64), kernel_size=1)
        self.branch5x5_1 = BasicConv2d(in_channels, c(48), kernel_size=1)
        self.branch5x5_2 = BasicConv2d(c(48), c(64), kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, c(64), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(c(64), c(96), kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(c(96), c(96), kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(in_channels, pool_features, kernel_size=1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    def __init__(self, in_channels, c=_ID):
        super().__init__()
        self.branch3x3 = BasicConv2d(in_channels, c(384), kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, c(64), kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(c(64), c(96), kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(c(96), c(96), kernel_size=3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([b3, bd, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionC(nn.Module):
    def __init__(self, in_channels, channels_7x7, c=_ID):
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, c(192), kernel_size=1)
        c7 = channels_7x7
        self.branch7x7_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, c(192), kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, c(192), kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_channels, c(192), kernel_size=1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        bd = self.branch7x7dbl_5(self.branch7x7dbl_4(self.branch7x7dbl_3(self.branch7x7dbl_2(bd))))
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class InceptionD(nn.Module):
    def __init__(self, in_channels, c=_ID):
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_channels, c(192), kernel_size=1)
        self.branch3x3_2 = BasicConv2d(c(192), c(320), kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_channels, c(192), kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(c(192), c(192), kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(c(192), c(192), kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(c(192), c(192), kernel_size=3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(self.branch7x7x3_2(self.branch7x7x3_1(x))))
        return torch.cat([b3, b7, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class InceptionE(nn.Module):
    def __init__(self, in_channels, c=_ID):
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

    def forward(self, x):
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)], 1)
        bp = self.branch_pool(F.avg_pool2d(x, kernel_size=3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class InceptionAux(nn.Module):
    def __init__(self, in_channels, num_classes, c=_ID):
        super().__init__()
        self.conv0 = BasicConv2d(in_channels, c(128), kernel_size=1)
        self.conv1 = BasicConv2d(c(128), c(768), kernel_size=5)
        self.fc = nn.Linear(c(768), num_classes)

    def forward(self, x):
        x = self.conv1(self.conv0(F.avg_pool2d(x, kernel_size=5, stride=3)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


class Inception3(nn.Module):
    def __init__(self, num_classes=1000, aux_logits=True, transform_input=False, init_weights=None, dropout=0.5,
                 width_divisor=1):
        super().__init__()
        c = lambda v: max(1, v // width_divisor)  # noqa: E731
        self.aux_logits = aux_logits
        self.transform_input = transform_input
        self.Conv2d_1a_3x3 = BasicConv2d(3, c(32), kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(c(32), c(32), kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(c(32), c(64), kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Conv2d_3b_1x1 = BasicConv2d(c(64), c(80), kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(c(80), c(192), kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Mixed_5b = InceptionA(c(192), pool_features=c(32), c=c)
        self.Mixed_5c = InceptionA(c(256), pool_features=c(64), c=c)
        self.Mixed_5d = InceptionA(c(288), pool_features=c(64), c=c)
        self.Mixed_6a = InceptionB(c(288), c=c)
        self.Mixed_6b = InceptionC(c(768), channels_7x7=c(128), c=c)
        self.Mixed_6c = InceptionC(c(768), channels_7x7=c(160), c=c)
        self.Mixed_6d = InceptionC(c(768), channels_7x7=c(160), c=c)
        self.Mixed_6e = InceptionC(c(768), channels_7x7=c(192), c=c)
        self.AuxLogits = InceptionAux(c(768), num_classes, c=c) if aux_logits else None
        self.Mixed_7a = InceptionD(c(768), c=c)
        self.Mixed_7b = InceptionE(c(1280), c=c)
        self.Mixed_7c = InceptionE(c(2048), c=c)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(c(2048), num_classes)

    def forward(self, x):
        if self.transform_input:
            x_ch0 = torch.unsqueeze(x[:, 0], 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5
            x_ch1 = torch.unsqueeze(x[:, 1], 1) * (0.224 / 0.5) + (0.456 - 0.5) / 0.5
            x_ch2 = torch.unsqueeze(x[:, 2], 1) * (0.225 / 0.5) + (0.406 - 0.5) / 0.5
            x = torch.cat((x_ch0, x_ch1, x_ch2), 1)
        x = self.maxpool1(self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x))))
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)))
        x = self.Mixed_6a(self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x))))
        x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(x))))
        aux = self.AuxLogits(x) if self.AuxLogits is not None and self.training else None
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        x = torch.flatten(self.dropout(self.avgpool(x)), 1)
        x = self.fc(x)
        if self.training and self.aux_logits:
            return InceptionOutputs(x, aux)
        return x


def inception_v3(**kwargs):
    return Inception3(**kwargs)


# 75x75 is the minimum. Training runs at torchvision's 299x299, which the auxiliary head needs (a 17x17 map before
# it) and which keeps 8x8 positions per channel in the last stage; at width_divisor=16 (2-channel layers) the
# train-mode network is too ill-conditioned for 3 SGD steps in float32 (MLX drifted ~5x further than torch).
CASES = {
    "inception_v3": Case(inception_v3, {"num_classes": 7, "width_divisor": 8},
                         inputs=((2, 3, 75, 75), (1, 3, 107, 93)), train=True, train_input=(2, 3, 299, 299),
                         train_kwargs={"dropout": 0.0}, num_params=27161264),
}
