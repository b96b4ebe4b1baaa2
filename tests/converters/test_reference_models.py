"""The reference models themselves: seeded, in eval mode, with non-trivial norm statistics, and accepting
both registered input sizes (the coverage test relies on all of this)."""

import pytest
import torch
from torch import nn

from tests.models import REGISTRY, make_inputs

ISSUE3_COVERAGE = {  # issue 3's list -> registry entries that cover it
    "ResNet basic block with downsample": "resnet_basic",
    "ResNet bottleneck block with downsample": "resnet_bottleneck",
    "VGG with BatchNorm": "vgg_bn",
    "AlexNet-style AdaptiveAvgPool2d((6, 6))": "alexnet",
    "SqueezeNet fire modules": "squeezenet",
    "DenseNet blocks": "densenet",
    "Inception/GoogLeNet branches": "googlenet",
    "MobileNetV2": "mobilenet_v2",
    "MobileNetV3": "mobilenet_v3",
    "EfficientNet": "efficientnet",
    "ShuffleNetV2 channel shuffle": "shufflenet_v2",
    "ConvNeXt": "convnext",
    "RegNet": "regnet",
    "ViT": "vit",
    "3D video net": "r3d",
    "1D audio CNN": "audio_cnn",
    "MaxPool2d(return_indices) + MaxUnpool2d": "segnet_unpool",
    "dilated convs + bilinear interpolate": "deeplabv3",
    "UNet with ConvTranspose2d and skips": "unet",
}


def test_registry_covers_issue3_list():
    assert set(ISSUE3_COVERAGE.values()) <= set(REGISTRY)


def _module_types(model):
    return {type(m) for m in model.modules()}


@pytest.mark.parametrize("item, name, types", [
    ("squeezenet ceil-mode pools", "squeezenet", None),
    ("r3d", "r3d", {nn.Conv3d, nn.BatchNorm3d, nn.MaxPool3d, nn.AdaptiveAvgPool3d}),
    ("audio", "audio_cnn", {nn.Conv1d, nn.BatchNorm1d, nn.MaxPool1d, nn.AdaptiveAvgPool1d}),
    ("unpool", "segnet_unpool", {nn.MaxUnpool2d}),
    ("unet", "unet", {nn.ConvTranspose2d}),
    ("mobilenet_v3", "mobilenet_v3", {nn.Hardswish, nn.Hardsigmoid}),
    ("mobilenet_v2", "mobilenet_v2", {nn.ReLU6}),
    ("efficientnet", "efficientnet", {nn.SiLU, nn.Sigmoid}),
    ("vit", "vit", {nn.MultiheadAttention, nn.LayerNorm, nn.GELU}),
    ("convnext", "convnext", {nn.LayerNorm, nn.GELU}),
])
def test_models_use_the_layers_the_issue_names(item, name, types):
    model = REGISTRY[name].builder()
    if types is None:
        assert any(isinstance(m, nn.MaxPool2d) and m.ceil_mode for m in model.modules())
    else:
        assert types <= _module_types(model), f"{item}: missing {types - _module_types(model)}"


def test_extra_structure():
    assert any(isinstance(m, nn.Conv2d) and m.groups > 1 and m.groups < m.in_channels
               for m in REGISTRY["regnet"].builder().modules())  # true group conv, not depthwise
    assert any(isinstance(m, nn.Conv2d) and m.dilation[0] > 1 for m in REGISTRY["deeplabv3"].builder().modules())
    assert any(isinstance(m, nn.MaxPool2d) and m.return_indices for m in REGISTRY["segnet_unpool"].builder().modules())
    # ConvNeXt's layer scale is random, not 1e-6: the residual branch matters numerically.
    scales = [p for n, p in REGISTRY["convnext"].builder().named_parameters() if n.endswith("layer_scale")]
    assert scales and all(float(p.detach().min()) >= 0.5 for p in scales)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_seeded_eval_models_with_nontrivial_stats(name):
    spec = REGISTRY[name]
    a, b, c = spec.builder(seed=0), spec.builder(seed=0), spec.builder(seed=1)
    assert not a.training and all(not m.training for m in a.modules())
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)  # same seed, same weights
    assert any(not torch.equal(sa[k], sc[k]) for k in sa if sa[k].dtype.is_floating_point)
    for mod_name, m in a.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            assert float(m.running_mean.abs().max()) > 0, f"{name}.{mod_name}: zero running_mean"
            assert float((m.running_var - 1).abs().max()) > 0.05, f"{name}.{mod_name}: unit running_var"
    shapes = [spec.inputs] + ([spec.second_inputs] if spec.second_inputs else [])
    with torch.no_grad():
        outs = [a(*make_inputs(s)) for s in shapes]
    for out in outs:
        leaves = torch.utils._pytree.tree_leaves(out)  # a tensor, a dict or a tuple of them
        assert all(torch.isfinite(t).all() and float(t.abs().max()) > 0.1 for t in leaves)
    if spec.second_inputs:
        assert spec.second_inputs != spec.inputs
