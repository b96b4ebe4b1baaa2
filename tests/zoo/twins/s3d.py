"""Torch twin of torchvision's S3D (torchvision.models.video.s3d) and its case.

Module structure, ``state_dict`` names and builder are torchvision's; ``S3D`` also takes ``width_divisor`` (every
width divided, at least 1) so the tests can build a reduced model.
"""

from functools import partial

import torch
from torch import nn

from . import Case
from ._randomize import randomized


class Conv3dNormActivation(nn.Sequential):
    """torchvision.ops.Conv3dNormActivation (ReLU, conv bias only without norm)."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=None, norm_layer=nn.BatchNorm3d,
                 activation_layer=nn.ReLU, bias=None):
        ks = kernel_size if isinstance(kernel_size, tuple) else (kernel_size,) * 3
        if padding is None:
            padding = tuple((k - 1) // 2 for k in ks)
        if bias is None:
            bias = norm_layer is None
        layers = [nn.Conv3d(in_channels, out_channels, kernel_size, stride, padding, bias=bias)]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            layers.append(activation_layer(inplace=True))
        super().__init__(*layers)


class TemporalSeparableConv(nn.Sequential):
    def __init__(self, in_planes, out_planes, kernel_size, stride, padding, norm_layer):
        super().__init__(
            Conv3dNormActivation(in_planes, out_planes, kernel_size=(1, kernel_size, kernel_size),
                                 stride=(1, stride, stride), padding=(0, padding, padding), bias=False,
                                 norm_layer=norm_layer),
            Conv3dNormActivation(out_planes, out_planes, kernel_size=(kernel_size, 1, 1), stride=(stride, 1, 1),
                                 padding=(padding, 0, 0), bias=False, norm_layer=norm_layer))


class SepInceptionBlock3D(nn.Module):
    def __init__(self, in_planes, b0_out, b1_mid, b1_out, b2_mid, b2_out, b3_out, norm_layer):
        super().__init__()
        self.branch0 = Conv3dNormActivation(in_planes, b0_out, kernel_size=1, stride=1, norm_layer=norm_layer)
        self.branch1 = nn.Sequential(
            Conv3dNormActivation(in_planes, b1_mid, kernel_size=1, stride=1, norm_layer=norm_layer),
            TemporalSeparableConv(b1_mid, b1_out, kernel_size=3, stride=1, padding=1, norm_layer=norm_layer))
        self.branch2 = nn.Sequential(
            Conv3dNormActivation(in_planes, b2_mid, kernel_size=1, stride=1, norm_layer=norm_layer),
            TemporalSeparableConv(b2_mid, b2_out, kernel_size=3, stride=1, padding=1, norm_layer=norm_layer))
        self.branch3 = nn.Sequential(
            nn.MaxPool3d(kernel_size=(3, 3, 3), stride=1, padding=1),
            Conv3dNormActivation(in_planes, b3_out, kernel_size=1, stride=1, norm_layer=norm_layer))

    def forward(self, x):
        return torch.cat((self.branch0(x), self.branch1(x), self.branch2(x), self.branch3(x)), 1)


class S3D(nn.Module):
    def __init__(self, num_classes=400, dropout=0.2, norm_layer=None, width_divisor=1):
        super().__init__()
        if norm_layer is None:
            norm_layer = partial(nn.BatchNorm3d, eps=0.001, momentum=0.001)

        def w(*cs):
            return [max(1, c // width_divisor) for c in cs]

        def block(*cs):
            return SepInceptionBlock3D(*w(*cs), norm_layer)

        def cat(*cs):  # the next block's input: the previous block's four branch outputs
            b0, _, b1, _, b2, b3 = w(*cs)
            return b0 + b1 + b2 + b3

        b1 = (64, 96, 128, 16, 32, 32)
        b2 = (128, 128, 192, 32, 96, 64)
        b3 = (192, 96, 208, 16, 48, 64)
        b4 = (160, 112, 224, 24, 64, 64)
        b5 = (128, 128, 256, 24, 64, 64)
        b6 = (112, 144, 288, 32, 64, 64)
        b7 = (256, 160, 320, 32, 128, 128)
        b8 = (256, 160, 320, 32, 128, 128)
        b9 = (384, 192, 384, 48, 128, 128)
        self.features = nn.Sequential(
            TemporalSeparableConv(3, *w(64), 7, 2, 3, norm_layer),
            nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
            Conv3dNormActivation(*w(64, 64), kernel_size=1, stride=1, norm_layer=norm_layer),
            TemporalSeparableConv(*w(64, 192), 3, 1, 1, norm_layer),
            nn.MaxPool3d(kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
            block(192, *b1),
            SepInceptionBlock3D(cat(*b1), *w(*b2), norm_layer),
            nn.MaxPool3d(kernel_size=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1)),
            SepInceptionBlock3D(cat(*b2), *w(*b3), norm_layer),
            SepInceptionBlock3D(cat(*b3), *w(*b4), norm_layer),
            SepInceptionBlock3D(cat(*b4), *w(*b5), norm_layer),
            SepInceptionBlock3D(cat(*b5), *w(*b6), norm_layer),
            SepInceptionBlock3D(cat(*b6), *w(*b7), norm_layer),
            nn.MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0)),
            SepInceptionBlock3D(cat(*b7), *w(*b8), norm_layer),
            SepInceptionBlock3D(cat(*b8), *w(*b9), norm_layer),
        )
        self.avgpool = nn.AvgPool3d(kernel_size=(2, 7, 7), stride=1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout),
                                        nn.Conv3d(cat(*b9), num_classes, kernel_size=1, stride=1, bias=True))

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = self.classifier(x)
        return torch.mean(x, dim=(2, 3, 4))


def s3d(*, weights=None, progress=True, **kwargs):
    return S3D(**kwargs)


# torchvision's fixed 2x7x7 average pool needs a final map of at least 2x7x7: 13+ frames of 209x209+ pixels.
# Training parity: the video family's member is r2plus1d_18 (at S3D's input size three SGD steps take minutes);
# tests/zoo/test_video.py checks S3D's train-mode gradients and running statistics on its features.
# The second clip is longer, odd and non-square (final map 2x7x8: two pooled positions).
CASES = {
    "s3d": Case(randomized(s3d), {"num_classes": 7, "width_divisor": 16}, inputs=((2, 3, 13, 209, 215),
                                                                                  (1, 3, 17, 240, 269)),
                num_params=8320048),
}
