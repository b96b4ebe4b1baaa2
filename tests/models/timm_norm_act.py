"""Twins of timm's norm + activation layers (``timm/layers/norm_act.py``) and a small timm-style EfficientNet built
from them (``timm/models/efficientnet.py``, ``_efficientnet_blocks.py``), with timm's module structure and
``state_dict`` names.

``BatchNormAct2d`` subclasses ``nn.BatchNorm2d`` (the checkpoint keeps a separate BN's names: ``weight``, ``bias``,
``running_mean``, ``running_var``, ``num_batches_tracked``) and its forward is a copy of torch's batch norm forward
(``F.batch_norm`` with the momentum logic, the counter updated in place in training) followed by the ``drop`` and
``act`` children (``nn.Identity`` when absent, ``apply_act=False``). ``SyncBatchNormAct`` is timm's
``nn.SyncBatchNorm`` subclass whose forward is the base's then ``drop``/``act`` where present;
``FrozenBatchNormAct2d`` (not a batch norm subclass: buffers only, one multiply-add); ``GroupNormAct`` and
``LayerNormAct2d`` (channels permuted last around ``F.layer_norm``) have no training-mode behaviour of their own.

The EfficientNet: ``conv_stem``, ``bn1``, ``blocks.<stage>.<i>`` (stage 0: ``DepthwiseSeparableConv`` with
``conv_dw``, ``bn1``, ``se``, ``conv_pw``, ``bn2`` (no act); then ``InvertedResidual`` with ``conv_pw``, ``bn1``,
``conv_dw``, ``bn2``, ``se`` (``conv_reduce``, ``act1``, ``conv_expand``, ``gate``), ``conv_pwl``, ``bn3`` (no act);
the residual where stride 1 and widths equal), ``conv_head``, ``bn2``, ``global_pool``, ``classifier``; SiLU
throughout, a sigmoid gate, timm's ``round_chs_fn``-style widths kept small.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._common import randomize_


def _act(act_layer, apply_act: bool, inplace: bool):
    if not apply_act or act_layer is None:
        return nn.Identity()
    try:
        return act_layer(inplace=inplace)
    except TypeError:  # activations without an inplace argument (nn.GELU)
        return act_layer()


class BatchNormAct2d(nn.BatchNorm2d):
    """timm ``BatchNormAct2d``: batch norm (torch's forward, inlined) -> ``drop`` -> ``act``."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, apply_act: bool = True, act_layer=nn.ReLU, inplace: bool = True,
                 drop_layer=None):
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine,
                         track_running_stats=track_running_stats)
        self.drop = drop_layer() if drop_layer is not None else nn.Identity()
        self.act = _act(act_layer, apply_act, inplace)

    def forward(self, x):
        torch._assert(x.ndim == 4, f"expected 4D input (got {x.ndim}D input)")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        use_batch = True if self.training else (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        x = F.batch_norm(x, self.running_mean if keep else None, self.running_var if keep else None,
                         self.weight, self.bias, use_batch, factor, self.eps)
        x = self.drop(x)
        return self.act(x)


class SyncBatchNormAct(nn.SyncBatchNorm):
    """timm ``SyncBatchNormAct`` (built by timm's ``convert_sync_batchnorm`` from a ``BatchNormAct2d``): the base's
    forward, then ``drop`` and ``act`` where the conversion set them."""

    def forward(self, x):
        x = super().forward(x)
        if hasattr(self, "drop"):
            x = self.drop(x)
        if hasattr(self, "act"):
            x = self.act(x)
        return x


def sync_batch_norm_act(bn: BatchNormAct2d) -> SyncBatchNormAct:
    """timm ``convert_sync_batchnorm`` for one ``BatchNormAct2d`` (the same tensors, ``drop``/``act`` moved over)."""
    out = SyncBatchNormAct(bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats)
    if bn.affine:
        out.weight, out.bias = bn.weight, bn.bias
    out.running_mean, out.running_var = bn.running_mean, bn.running_var
    out.num_batches_tracked = bn.num_batches_tracked
    out.act, out.drop = bn.act, bn.drop
    return out


class FrozenBatchNormAct2d(nn.Module):
    """timm ``FrozenBatchNormAct2d``: fixed statistics and affine, all four as buffers (``weight``, ``bias``,
    ``running_mean``, ``running_var``), then ``drop`` and ``act``; the same in both modes."""

    def __init__(self, num_features: int, eps: float = 1e-5, apply_act: bool = True, act_layer=nn.ReLU,
                 inplace: bool = True, drop_layer=None):
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.drop = drop_layer() if drop_layer is not None else nn.Identity()
        self.act = _act(act_layer, apply_act, inplace)

    def forward(self, x):
        scale = self.weight.reshape(1, -1, 1, 1) * (self.running_var.reshape(1, -1, 1, 1) + self.eps).rsqrt()
        shift = self.bias.reshape(1, -1, 1, 1) - self.running_mean.reshape(1, -1, 1, 1) * scale
        return self.act(self.drop(x * scale + shift))


class GroupNormAct(nn.GroupNorm):
    """timm ``GroupNormAct`` (``num_channels`` first): group norm -> ``drop`` -> ``act``."""

    def __init__(self, num_channels: int, num_groups: int = 32, eps: float = 1e-5, affine: bool = True,
                 apply_act: bool = True, act_layer=nn.ReLU, inplace: bool = True, drop_layer=None):
        super().__init__(num_groups, num_channels, eps=eps, affine=affine)
        self.drop = drop_layer() if drop_layer is not None else nn.Identity()
        self.act = _act(act_layer, apply_act, inplace)

    def forward(self, x):
        x = F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
        return self.act(self.drop(x))


class LayerNormAct2d(nn.LayerNorm):
    """timm ``LayerNormAct2d``: layer norm over the channels of NCHW (permuted last and back) -> ``drop`` -> ``act``."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True, apply_act: bool = True,
                 act_layer=nn.ReLU, inplace: bool = True, drop_layer=None):
        super().__init__(num_channels, eps=eps, elementwise_affine=affine)
        self.drop = drop_layer() if drop_layer is not None else nn.Identity()
        self.act = _act(act_layer, apply_act, inplace)

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        x = x.permute(0, 3, 1, 2)
        return self.act(self.drop(x))


# ---------------------------------------------------------------------------------------------------- EfficientNet
class SqueezeExcite(nn.Module):
    """timm ``_efficientnet_blocks.SqueezeExcite``: spatial mean -> ``conv_reduce`` -> ``act1`` -> ``conv_expand``
    -> ``gate``, times the input."""

    def __init__(self, in_chs: int, rd_channels: int):
        super().__init__()
        self.conv_reduce = nn.Conv2d(in_chs, rd_channels, 1, bias=True)
        self.act1 = nn.SiLU(inplace=True)
        self.conv_expand = nn.Conv2d(rd_channels, in_chs, 1, bias=True)
        self.gate = nn.Sigmoid()

    def forward(self, x):
        x_se = x.mean((2, 3), keepdim=True)
        x_se = self.conv_expand(self.act1(self.conv_reduce(x_se)))
        return x * self.gate(x_se)


def _norm_act(chs, apply_act=True):
    return BatchNormAct2d(chs, act_layer=nn.SiLU, apply_act=apply_act)


class DepthwiseSeparableConv(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, se_chs: int):
        super().__init__()
        self.has_skip = in_chs == out_chs
        self.conv_dw = nn.Conv2d(in_chs, in_chs, 3, padding=1, groups=in_chs, bias=False)
        self.bn1 = _norm_act(in_chs)
        self.aa = nn.Identity()
        self.se = SqueezeExcite(in_chs, se_chs)
        self.conv_pw = nn.Conv2d(in_chs, out_chs, 1, bias=False)
        self.bn2 = _norm_act(out_chs, apply_act=False)
        self.drop_path = nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.se(self.aa(self.bn1(self.conv_dw(x))))
        x = self.bn2(self.conv_pw(x))
        return self.drop_path(x) + shortcut if self.has_skip else x


class InvertedResidual(nn.Module):
    def __init__(self, in_chs: int, out_chs: int, stride: int, expand: int = 4, kernel: int = 3):
        super().__init__()
        mid = in_chs * expand
        self.has_skip = in_chs == out_chs and stride == 1
        self.conv_pw = nn.Conv2d(in_chs, mid, 1, bias=False)
        self.bn1 = _norm_act(mid)
        self.conv_dw = nn.Conv2d(mid, mid, kernel, stride, padding=kernel // 2, groups=mid, bias=False)
        self.bn2 = _norm_act(mid)
        self.aa = nn.Identity()
        self.se = SqueezeExcite(mid, max(1, in_chs // 4))
        self.conv_pwl = nn.Conv2d(mid, out_chs, 1, bias=False)
        self.bn3 = _norm_act(out_chs, apply_act=False)
        self.drop_path = nn.Identity()

    def forward(self, x):
        shortcut = x
        x = self.bn1(self.conv_pw(x))
        x = self.se(self.aa(self.bn2(self.conv_dw(x))))
        x = self.bn3(self.conv_pwl(x))
        return self.drop_path(x) + shortcut if self.has_skip else x


class SelectAdaptivePool2d(nn.Module):
    """timm's ``SelectAdaptivePool2d(pool_type="avg", flatten=True)``: ``pool`` then ``flatten``."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)

    def forward(self, x):
        return self.flatten(self.pool(x))


class EfficientNet(nn.Module):
    """A narrow timm ``EfficientNet`` (B0's block types, one or two blocks per stage)."""

    def __init__(self, num_classes: int = 5, stem: int = 8, head: int = 32):
        super().__init__()
        self.conv_stem = nn.Conv2d(3, stem, 3, 2, padding=1, bias=False)
        self.bn1 = _norm_act(stem)
        self.blocks = nn.Sequential(
            nn.Sequential(DepthwiseSeparableConv(stem, 8, 2)),
            nn.Sequential(InvertedResidual(8, 12, 2), InvertedResidual(12, 12, 1)),
            nn.Sequential(InvertedResidual(12, 16, 2, kernel=5)),
        )
        self.conv_head = nn.Conv2d(16, head, 1, bias=False)
        self.bn2 = _norm_act(head)
        self.global_pool = SelectAdaptivePool2d()
        self.classifier = nn.Linear(head, num_classes)

    def forward(self, x):
        x = self.bn2(self.conv_head(self.blocks(self.bn1(self.conv_stem(x)))))
        return self.classifier(self.global_pool(x))


def efficientnet(seed: int = 0) -> EfficientNet:
    """The twin with seeded random weights and statistics, in eval mode."""
    return randomize_(EfficientNet(), seed)
