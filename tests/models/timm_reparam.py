"""timm's re-parameterizable nets (``timm/models/byobnet.py``: ``RepVggBlock``, ``MobileOneBlock``) with timm's
module structure and ``state_dict`` names (``stem.conv_kxk.conv``, ``stem.conv_1x1.bn``, ``stages.<i>.<j>.identity``
(a BatchNorm), ``.conv_kxk.<k>.conv`` and ``.conv_scale`` for MobileOne, ``head.fc``), so a timm checkpoint's keys
match at full size.

Train-time form: every block sums a kxk conv+BN branch, a 1x1 conv+BN branch and, where shapes allow, a BN-only
identity branch (MobileOne: several kxk branches summed in place, ``out += ck(x)``; depthwise 3x3 blocks followed
by pointwise ones). ``reparameterize()`` folds each block into one biased conv (``reparam_conv``) as timm's
``reparameterize`` does (BN folded into each branch, the 1x1 padded to kxk, the identity as a centred delta
kernel), the deploy form a checkpoint converted with ``timm.utils.reparameterize_model`` holds.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class BatchNormAct2d(nn.BatchNorm2d):
    """timm ``layers/norm_act.py::BatchNormAct2d`` with ``apply_act=False`` (the BN's own names, ``drop``/``act``
    identities)."""

    def __init__(self, num_features: int):
        super().__init__(num_features)
        self.drop = nn.Identity()
        self.act = nn.Identity()

    def forward(self, x):
        return self.act(self.drop(super().forward(x)))


class ConvNormAct(nn.Module):
    """timm ``layers/conv_bn_act.py::ConvNormAct`` without activation: ``conv`` (no bias) then ``bn``."""

    def __init__(self, in_chs: int, out_chs: int, kernel_size: int, stride: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, stride, padding=kernel_size // 2, groups=groups,
                              bias=False)
        self.bn = BatchNormAct2d(out_chs)

    def forward(self, x):
        return self.bn(self.conv(x))


def _fuse(bn: nn.BatchNorm2d, kernel: torch.Tensor):
    """timm ``_fuse_bn_tensor``: the branch's kernel scaled by gamma / std and its bias."""
    std = (bn.running_var + bn.eps).sqrt()
    t = (bn.weight / std).reshape(-1, 1, 1, 1)
    return kernel * t, bn.bias - bn.running_mean * bn.weight / std


def _identity_kernel(channels: int, groups: int, k: int, like: torch.Tensor):
    per_group = channels // groups
    kernel = torch.zeros(channels, per_group, k, k, dtype=like.dtype)
    for i in range(channels):
        kernel[i, i % per_group, k // 2, k // 2] = 1
    return kernel


class _Reparam(nn.Module):
    """What RepVGG and MobileOne blocks share: the deploy conv and the fold of the branches into it."""

    def _deploy(self, weight, bias):
        conv = self.conv_kxk[0].conv if isinstance(self.conv_kxk, nn.ModuleList) else self.conv_kxk.conv
        self.reparam_conv = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                                      conv.padding, groups=conv.groups, bias=True)
        self.reparam_conv.weight.data.copy_(weight)
        self.reparam_conv.bias.data.copy_(bias)
        for name in ("conv_kxk", "conv_1x1", "conv_scale", "identity", "drop_path"):
            if hasattr(self, name):
                delattr(self, name)

    def _identity_branch(self, conv: nn.Conv2d):
        if self.identity is None:
            return 0, 0
        k = conv.kernel_size[0]
        return _fuse(self.identity, _identity_kernel(conv.in_channels, conv.groups, k, conv.weight))

    @staticmethod
    def _padded(branch: ConvNormAct, k: int):
        pad = (k - branch.conv.kernel_size[0]) // 2
        return _fuse(branch.bn, F.pad(branch.conv.weight, [pad] * 4))


class RepVggBlock(_Reparam):
    def __init__(self, in_chs: int, out_chs: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        super().__init__()
        self.groups = groups
        self.reparam_conv = None
        use_ident = in_chs == out_chs and stride == 1
        self.identity = BatchNormAct2d(out_chs) if use_ident else None
        self.conv_kxk = ConvNormAct(in_chs, out_chs, kernel_size, stride, groups)
        self.conv_1x1 = ConvNormAct(in_chs, out_chs, 1, stride, groups)
        self.drop_path = nn.Identity()
        self.attn = nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        if self.reparam_conv is not None:
            return self.act(self.attn(self.reparam_conv(x)))
        if self.identity is None:
            x = self.conv_1x1(x) + self.conv_kxk(x)
        else:
            identity = self.identity(x)
            x = self.conv_1x1(x) + self.conv_kxk(x)
            x = self.drop_path(x)
            x = x + identity
        x = self.attn(x)
        return self.act(x)

    @torch.no_grad()
    def reparameterize(self):
        k = self.conv_kxk.conv.kernel_size[0]
        w, b = _fuse(self.conv_kxk.bn, self.conv_kxk.conv.weight)
        w1, b1 = self._padded(self.conv_1x1, k)
        wi, bi = self._identity_branch(self.conv_kxk.conv)
        self._deploy(w + w1 + wi, b + b1 + bi)


class MobileOneBlock(_Reparam):
    def __init__(self, in_chs: int, out_chs: int, kernel_size: int = 3, stride: int = 1, groups: int = 1,
                 num_conv_branches: int = 2):
        super().__init__()
        self.num_conv_branches = num_conv_branches
        self.groups = groups
        self.reparam_conv = None
        use_ident = in_chs == out_chs and stride == 1
        self.identity = BatchNormAct2d(out_chs) if use_ident else None
        self.conv_kxk = nn.ModuleList(ConvNormAct(in_chs, out_chs, kernel_size, stride, groups)
                                      for _ in range(num_conv_branches))
        self.conv_scale = ConvNormAct(in_chs, out_chs, 1, stride, groups) if kernel_size > 1 else None
        self.drop_path = nn.Identity()
        self.attn = nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        if self.reparam_conv is not None:
            return self.act(self.attn(self.reparam_conv(x)))
        identity_out = 0
        if self.identity is not None:
            identity_out = self.identity(x)
        scale_out = 0
        if self.conv_scale is not None:
            scale_out = self.conv_scale(x)
        out = scale_out
        for ck in self.conv_kxk:
            out += ck(x)
        out = self.drop_path(out)
        out += identity_out
        return self.act(self.attn(out))

    @torch.no_grad()
    def reparameterize(self):
        conv = self.conv_kxk[0].conv
        k = conv.kernel_size[0]
        weight, bias = self._identity_branch(conv)
        if self.conv_scale is not None:
            ws, bs = self._padded(self.conv_scale, k)
            weight, bias = weight + ws, bias + bs
        for branch in self.conv_kxk:
            wk, bk = _fuse(branch.bn, branch.conv.weight)
            weight, bias = weight + wk, bias + bk
        self._deploy(weight, bias)


class ClassifierHead(nn.Module):
    """timm ``ClassifierHead``: average pool (``global_pool``), ``fc``."""

    def __init__(self, dim: int, num_classes: int):
        super().__init__()
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.0)
        self.fc = nn.Linear(dim, num_classes)
        self.flatten = nn.Flatten(1)

    def forward(self, x):
        return self.fc(self.drop(self.flatten(self.global_pool(x))))


class ByobNet(nn.Module):
    """timm ``ByobNet`` of re-parameterizable blocks: ``stem`` (stride 2), ``stages`` (first block of each stride 2),
    ``final_conv`` (identity), ``head``. MobileOne stages alternate depthwise 3x3 and pointwise 1x1 blocks."""

    def __init__(self, block: str = "rep_vgg", widths=(8, 16, 24), depths=(2, 2), num_classes: int = 10):
        super().__init__()
        if block == "rep_vgg":
            make = lambda i, o, s: [RepVggBlock(i, o, 3, s)]  # noqa: E731
        else:
            make = lambda i, o, s: [MobileOneBlock(i, i, 3, s, groups=i), MobileOneBlock(i, o, 1, 1)]  # noqa: E731
        self.stem = (RepVggBlock if block == "rep_vgg" else MobileOneBlock)(3, widths[0], 3, 2)
        stages, prev = [], widths[0]
        for width, depth in zip(widths[1:], depths):
            blocks = []
            for j in range(depth):
                blocks += make(prev, width, 2 if j == 0 else 1)
                prev = width
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.final_conv = nn.Identity()
        self.head = ClassifierHead(prev, num_classes)

    def forward(self, x):
        return self.head(self.final_conv(self.stages(self.stem(x))))

    def reparameterize(self):
        for module in self.modules():
            if isinstance(module, _Reparam):
                module.reparameterize()
        return self


def repvgg_small() -> ByobNet:
    return ByobNet("rep_vgg")


def mobileone_small() -> ByobNet:
    return ByobNet("mobileone")
