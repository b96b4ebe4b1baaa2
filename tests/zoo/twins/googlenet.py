"""GoogLeNet's torch twin (torchvision.models.googlenet's structure and names) and its zoo case.

``width_divisor`` (a divisor of 8) divides every channel count: a reduced model with the same names for the tests.
"""

from collections import namedtuple

import torch
import torch.nn.functional as F
from torch import nn

from . import Case

GoogLeNetOutputs = namedtuple("GoogLeNetOutputs", ["logits", "aux_logits2", "aux_logits1"])


class BasicConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, **kwargs):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    def __init__(self, in_channels, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
        super().__init__()
        self.branch1 = BasicConv2d(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(BasicConv2d(in_channels, ch3x3red, kernel_size=1),
                                     BasicConv2d(ch3x3red, ch3x3, kernel_size=3, padding=1))
        self.branch3 = nn.Sequential(BasicConv2d(in_channels, ch5x5red, kernel_size=1),
                                     BasicConv2d(ch5x5red, ch5x5, kernel_size=3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
                                     BasicConv2d(in_channels, pool_proj, kernel_size=1))

    def forward(self, x):
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class InceptionAux(nn.Module):
    def __init__(self, in_channels, num_classes, dropout=0.7, c=lambda v: v):
        super().__init__()
        self.conv = BasicConv2d(in_channels, c(128), kernel_size=1)
        self.fc1 = nn.Linear(c(128) * 16, c(1024))
        self.fc2 = nn.Linear(c(1024), num_classes)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        x = torch.flatten(self.conv(F.adaptive_avg_pool2d(x, (4, 4))), 1)
        return self.fc2(self.dropout(F.relu(self.fc1(x), inplace=True)))


class GoogLeNet(nn.Module):
    def __init__(self, num_classes=1000, aux_logits=True, transform_input=False, init_weights=None, dropout=0.2,
                 dropout_aux=0.7, width_divisor=1):
        super().__init__()
        c = lambda v: max(1, v // width_divisor)  # noqa: E731
        self.aux_logits = aux_logits
        self.transform_input = transform_input
        self.conv1 = BasicConv2d(3, c(64), kernel_size=7, stride=2, padding=3)
        self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = BasicConv2d(c(64), c(64), kernel_size=1)
        self.conv3 = BasicConv2d(c(64), c(192), kernel_size=3, padding=1)
        self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception3a = Inception(c(192), c(64), c(96), c(128), c(16), c(32), c(32))
        self.inception3b = Inception(c(256), c(128), c(128), c(192), c(32), c(96), c(64))
        self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.inception4a = Inception(c(480), c(192), c(96), c(208), c(16), c(48), c(64))
        self.inception4b = Inception(c(512), c(160), c(112), c(224), c(24), c(64), c(64))
        self.inception4c = Inception(c(512), c(128), c(128), c(256), c(24), c(64), c(64))
        self.inception4d = Inception(c(512), c(112), c(144), c(288), c(32), c(64), c(64))
        self.inception4e = Inception(c(528), c(256), c(160), c(320), c(32), c(128), c(128))
        self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)
        self.inception5a = Inception(c(832), c(256), c(160), c(320), c(32), c(128), c(128))
        self.inception5b = Inception(c(832), c(384), c(192), c(384), c(48), c(128), c(128))
        if aux_logits:
            self.aux1 = InceptionAux(c(512), num_classes, dropout=dropout_aux, c=c)
            self.aux2 = InceptionAux(c(528), num_classes, dropout=dropout_aux, c=c)
        else:
            self.aux1 = None
            self.aux2 = None
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(c(1024), num_classes)

    def _transform_input(self, x):
        if self.transform_input:
            x_ch0 = torch.unsqueeze(x[:, 0], 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5
            x_ch1 = torch.unsqueeze(x[:, 1], 1) * (0.224 / 0.5) + (0.456 - 0.5) / 0.5
            x_ch2 = torch.unsqueeze(x[:, 2], 1) * (0.225 / 0.5) + (0.406 - 0.5) / 0.5
            x = torch.cat((x_ch0, x_ch1, x_ch2), 1)
        return x

    def forward(self, x):
        x = self._transform_input(x)
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.inception4a(x)
        aux1 = self.aux1(x) if self.aux1 is not None and self.training else None
        x = self.inception4d(self.inception4c(self.inception4b(x)))
        aux2 = self.aux2(x) if self.aux2 is not None and self.training else None
        x = self.maxpool4(self.inception4e(x))
        x = self.inception5b(self.inception5a(x))
        x = self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))
        if self.training and self.aux_logits:
            return GoogLeNetOutputs(x, aux2, aux1)
        return x


def googlenet(**kwargs):
    return GoogLeNet(**kwargs)


# torchvision documents 6,624,904 parameters for its weights, which drop the aux heads (aux_logits=False; checked
# in test_zooa_families.py); the default build keeps them, so no count here.
CASES = {
    "googlenet": Case(googlenet, {"num_classes": 7, "width_divisor": 8}, inputs=((2, 3, 32, 32), (1, 3, 61, 47)),
                      train=True, train_input=(4, 3, 64, 64), train_kwargs={"dropout": 0.0, "dropout_aux": 0.0}),
}
