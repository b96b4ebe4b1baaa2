"""torch twin of torchvision's MNASNet (``torchvision.models.mnasnet``, version 2): same modules, names, builders."""

from __future__ import annotations

from torch import nn

from . import Case

_BN_MOMENTUM = 1 - 0.9997


class _InvertedResidual(nn.Module):
    def __init__(self, in_ch, out_ch, kernel_size, stride, expansion_factor, bn_momentum=0.1):
        super().__init__()
        mid = in_ch * expansion_factor
        self.apply_residual = in_ch == out_ch and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(in_ch, mid, 1, bias=False), nn.BatchNorm2d(mid, momentum=bn_momentum), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, kernel_size, padding=kernel_size // 2, stride=stride, groups=mid, bias=False),
            nn.BatchNorm2d(mid, momentum=bn_momentum), nn.ReLU(inplace=True),
            nn.Conv2d(mid, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch, momentum=bn_momentum))

    def forward(self, x):
        return self.layers(x) + x if self.apply_residual else self.layers(x)


def _stack(in_ch, out_ch, kernel_size, stride, exp_factor, repeats, bn_momentum):
    blocks = [_InvertedResidual(in_ch, out_ch, kernel_size, stride, exp_factor, bn_momentum=bn_momentum)]
    blocks += [_InvertedResidual(out_ch, out_ch, kernel_size, 1, exp_factor, bn_momentum=bn_momentum)
               for _ in range(1, repeats)]
    return nn.Sequential(*blocks)


def _round_to_multiple_of(val, divisor, round_up_bias=0.9):
    new_val = max(divisor, int(val + divisor / 2) // divisor * divisor)
    return new_val if new_val >= round_up_bias * val else new_val + divisor


class MNASNet(nn.Module):
    def __init__(self, alpha, num_classes=1000, dropout=0.2):
        super().__init__()
        d = [_round_to_multiple_of(x * alpha, 8) for x in [32, 16, 24, 40, 80, 96, 192, 320]]
        m = _BN_MOMENTUM
        self.layers = nn.Sequential(
            nn.Conv2d(3, d[0], 3, padding=1, stride=2, bias=False), nn.BatchNorm2d(d[0], momentum=m),
            nn.ReLU(inplace=True),
            nn.Conv2d(d[0], d[0], 3, padding=1, stride=1, groups=d[0], bias=False), nn.BatchNorm2d(d[0], momentum=m),
            nn.ReLU(inplace=True),
            nn.Conv2d(d[0], d[1], 1, padding=0, stride=1, bias=False), nn.BatchNorm2d(d[1], momentum=m),
            _stack(d[1], d[2], 3, 2, 3, 3, m), _stack(d[2], d[3], 5, 2, 3, 3, m), _stack(d[3], d[4], 5, 2, 6, 3, m),
            _stack(d[4], d[5], 3, 1, 6, 2, m), _stack(d[5], d[6], 5, 2, 6, 4, m), _stack(d[6], d[7], 3, 1, 6, 1, m),
            nn.Conv2d(d[7], 1280, 1, padding=0, stride=1, bias=False), nn.BatchNorm2d(1280, momentum=m),
            nn.ReLU(inplace=True))
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.classifier(self.layers(x).mean([2, 3]))


def mnasnet0_5(*, weights=None, progress=True, **kwargs):
    return MNASNet(0.5, **kwargs)


def mnasnet0_75(*, weights=None, progress=True, **kwargs):
    return MNASNet(0.75, **kwargs)


def mnasnet1_0(*, weights=None, progress=True, **kwargs):
    return MNASNet(1.0, **kwargs)


def mnasnet1_3(*, weights=None, progress=True, **kwargs):
    return MNASNet(1.3, **kwargs)


# torchvision's builders fix alpha, so the tests run the real sizes (all small); 33x29 is odd and non-square
_SMALL = {"num_classes": 7}
CASES = {
    "mnasnet0_5": Case(mnasnet0_5, _SMALL, inputs=((2, 3, 32, 32), (1, 3, 33, 29)), num_params=2218512),
    "mnasnet0_75": Case(mnasnet0_75, _SMALL, inputs=((1, 3, 32, 32), (1, 3, 33, 29)), num_params=3170208),
    "mnasnet1_0": Case(mnasnet1_0, _SMALL, inputs=((1, 3, 32, 32), (1, 3, 33, 29)), train=True,
                       train_input=(4, 3, 64, 64), train_kwargs={"dropout": 0.0}, num_params=4383312),
    "mnasnet1_3": Case(mnasnet1_3, _SMALL, inputs=((1, 3, 32, 32), (1, 3, 33, 29)), num_params=6282256),
}
