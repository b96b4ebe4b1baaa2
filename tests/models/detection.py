"""A YOLOv8-style detector with ultralytics' module structure and ``state_dict`` names (``model.<i>.conv.weight``,
``model.<i>.cv1.bn.running_mean``, ``model.22.dfl.conv.weight``), so a real ``yolov8n.pt``'s ``model.state_dict()``
keys and ranks match at full width.

Stresses: Conv-BN-SiLU (eps 1e-3), C2f's ``chunk`` + growing ``cat``, SPPF's three chained stride-1 max pools,
``nn.Upsample`` nearest x2 and skip concatenation (a layer reads earlier outputs by index, ``f``), and the
detect head: per-level ``view`` + ``cat`` over levels, ``split``, the DFL's reshape/transpose/softmax and its fixed
``arange`` 1x1 conv, anchors built from the feature sizes at run time (``arange`` + ``meshgrid``), ``dist2bbox``.
"""

from __future__ import annotations

from typing import List, Sequence

import torch
from torch import nn


def autopad(k, p=None, d: int = 1):
    """ultralytics' 'same' padding for odd kernels (an int or one per dim)."""
    if d > 1:
        k = d * (k - 1) + 1 if isinstance(k, int) else [d * (x - 1) + 1 for x in k]
    if p is None:
        p = k // 2 if isinstance(k, int) else [x // 2 for x in k]
    return p


class Conv(nn.Module):
    """Conv2d (no bias) -> BatchNorm2d(eps=1e-3, momentum=0.03) -> SiLU."""

    default_act = nn.SiLU()

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, p=None, g: int = 1, d: int = 1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p, d), groups=g, dilation=d, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=0.001, momentum=0.03)
        self.act = self.default_act if act is True else act if isinstance(act, nn.Module) else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1: int, c2: int, shortcut: bool = True, g: int = 1, k=(3, 3), e: float = 0.5):
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, k[0], 1)
        self.cv2 = Conv(c_, c2, k[1], 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C2f(nn.Module):
    """CSP bottleneck with two convolutions: ``cv1`` output chunked in two, each bottleneck appends its output."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False, g: int = 1, e: float = 0.5):
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, g, k=((3, 3), (3, 3)), e=1.0) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1: int, c2: int, k: int = 5):
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class Concat(nn.Module):
    def __init__(self, dimension: int = 1):
        super().__init__()
        self.d = dimension

    def forward(self, x: List[torch.Tensor]):
        return torch.cat(x, self.d)


class DFL(nn.Module):
    """Distribution focal loss integral: softmax over ``c1`` bins, then a fixed 1x1 conv with weights 0..c1-1."""

    def __init__(self, c1: int = 16):
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = nn.Parameter(torch.arange(c1, dtype=torch.float).view(1, c1, 1, 1))
        self.c1 = c1

    def forward(self, x):
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(feats, strides, grid_cell_offset: float = 0.5):
    anchor_points, stride_tensor = [], []
    dtype, device = feats[0].dtype, feats[0].device
    for i, stride in enumerate(strides):
        _, _, h, w = feats[i].shape
        sx = torch.arange(end=w, device=device, dtype=dtype) + grid_cell_offset
        sy = torch.arange(end=h, device=device, dtype=dtype) + grid_cell_offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        anchor_points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_tensor.append(torch.full((h * w, 1), stride, dtype=dtype, device=device))
    return torch.cat(anchor_points), torch.cat(stride_tensor)


def dist2bbox(distance, anchor_points, xywh: bool = True, dim: int = -1):
    lt, rb = distance.chunk(2, dim)
    x1y1 = anchor_points - lt
    x2y2 = anchor_points + rb
    if xywh:
        return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)
    return torch.cat((x1y1, x2y2), dim)


class Detect(nn.Module):
    """YOLOv8 (legacy) detect head; anchors are rebuilt on every call (ultralytics' ``dynamic=True`` / export)."""

    def __init__(self, nc: int = 80, ch: Sequence[int] = (), strides: Sequence[float] = (8.0, 16.0, 32.0),
                 reg_max: int = 16):
        super().__init__()
        self.nc, self.nl, self.reg_max = nc, len(ch), reg_max
        self.no = nc + reg_max * 4
        self.strides = tuple(float(s) for s in strides)
        c2, c3 = max((16, ch[0] // 4, self.reg_max * 4)), max(ch[0], min(self.nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg_max, 1)) for x in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, self.nc, 1)) for x in ch)
        self.dfl = DFL(self.reg_max)

    def forward(self, x: List[torch.Tensor]):
        x = list(x)
        for i in range(self.nl):
            x[i] = torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1)
        shape = x[0].shape
        anchors, strides = (a.transpose(0, 1) for a in make_anchors(x, self.strides, 0.5))
        x_cat = torch.cat([xi.view(shape[0], self.no, -1) for xi in x], 2)
        box, cls = x_cat.split((self.reg_max * 4, self.nc), 1)
        dbox = dist2bbox(self.dfl(box), anchors.unsqueeze(0), xywh=True, dim=1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1), x


class DetectionModel(nn.Module):
    """``model`` is an ``nn.Sequential`` of yolov8.yaml's 23 layers; each layer's ``f`` names its inputs (-1: the
    previous layer), and ``save`` the outputs kept for later layers (ultralytics' ``_predict_once``)."""

    def __init__(self, width: Sequence[int] = (4, 8, 16, 32, 64), nc: int = 5, reg_max: int = 8,
                 depth: Sequence[int] = (1, 2, 2, 1)):
        super().__init__()
        w0, w1, w2, w3, w4 = width
        n1, n2, n3, n4 = depth
        layers = [  # (from, module): yolov8.yaml
            (-1, Conv(3, w0, 3, 2)), (-1, Conv(w0, w1, 3, 2)), (-1, C2f(w1, w1, n1, True)),
            (-1, Conv(w1, w2, 3, 2)), (-1, C2f(w2, w2, n2, True)),
            (-1, Conv(w2, w3, 3, 2)), (-1, C2f(w3, w3, n3, True)),
            (-1, Conv(w3, w4, 3, 2)), (-1, C2f(w4, w4, n4, True)), (-1, SPPF(w4, w4, 5)),
            (-1, nn.Upsample(None, 2, "nearest")), ([-1, 6], Concat(1)), (-1, C2f(w4 + w3, w3, 1)),
            (-1, nn.Upsample(None, 2, "nearest")), ([-1, 4], Concat(1)), (-1, C2f(w3 + w2, w2, 1)),
            (-1, Conv(w2, w2, 3, 2)), ([-1, 12], Concat(1)), (-1, C2f(w2 + w3, w3, 1)),
            (-1, Conv(w3, w3, 3, 2)), ([-1, 9], Concat(1)), (-1, C2f(w3 + w4, w4, 1)),
            ([15, 18, 21], Detect(nc, (w2, w3, w4), reg_max=reg_max)),
        ]
        for i, (f, m) in enumerate(layers):
            m.f, m.i = f, i
        self.model = nn.Sequential(*(m for _, m in layers))
        self.save = sorted({x for f, _ in layers if isinstance(f, list) for x in f if x != -1})

    def forward(self, x):
        y = []
        for m in self.model:
            if m.f != -1:
                x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
            x = m(x)
            y.append(x if m.i in self.save else None)
        return x


def yolov8_small(num_classes: int = 5) -> DetectionModel:
    """yolov8n's graph at widths 4..64, 5 classes, 8 DFL bins."""
    return DetectionModel(nc=num_classes)
