"""porter.examples: the built-in ResNets, VGG-BNs and MobileNetV2 have torchvision's structure, names and sizes.

The expected counts are torchvision 0.28's (parameters and state_dict entries), so a torchvision checkpoint
would load with strict=True.
"""

import pytest
import torch

from porter import examples
from porter.examples import EXAMPLES, BasicBlock, Bottleneck, MobileNetV2, ResNet, mobilenet_v2, resnet18, resnet50

TORCHVISION = {  # name: (parameters, state_dict entries)
    "resnet18": (11_689_512, 122),
    "resnet34": (21_797_672, 218),
    "resnet50": (25_557_032, 320),
    "vgg11_bn": (132_868_840, 62),
    "vgg16_bn": (138_365_992, 97),
    "mobilenet_v2": (3_504_872, 314),
}


@pytest.mark.parametrize("name", sorted(TORCHVISION))
def test_sizes_match_torchvision(name):
    model = getattr(examples, name)()
    params, entries = TORCHVISION[name]
    assert sum(p.numel() for p in model.parameters()) == params
    assert len(model.state_dict()) == entries


def test_resnet18_names_and_shapes():
    sd = resnet18().state_dict()
    keys = list(sd)
    assert keys[:6] == ["conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
                        "bn1.num_batches_tracked"]
    assert keys[-2:] == ["fc.weight", "fc.bias"]
    assert sd["layer1.0.conv1.weight"].shape == (64, 64, 3, 3)
    assert sd["layer2.0.downsample.0.weight"].shape == (128, 64, 1, 1)
    assert sd["layer2.0.downsample.1.running_var"].shape == (128,)
    assert "layer1.0.downsample.0.weight" not in sd  # no projection where shapes already match
    assert sd["fc.weight"].shape == (1000, 512)
    names = [n for n, _ in resnet18().named_children()]
    assert names == ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc"]


def test_resnet50_bottleneck_layout():
    sd = resnet50(num_classes=10).state_dict()
    assert sd["layer3.0.conv1.weight"].shape == (256, 512, 1, 1)
    assert sd["layer3.0.conv2.weight"].shape == (256, 256, 3, 3)  # stride on the 3x3 conv ("v1.5")
    assert sd["layer3.0.conv3.weight"].shape == (1024, 256, 1, 1)
    assert sd["fc.weight"].shape == (10, 2048)
    assert resnet50().layer3[0].conv2.stride == (2, 2)
    assert resnet50().layer3[0].conv1.stride == (1, 1)


def test_forward_shapes_and_any_input_size():
    torch.manual_seed(0)
    model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=7, widths=(8, 8, 16, 16)).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
        assert model(torch.randn(1, 3, 45, 37)).shape == (1, 7)


def test_dilated_bottleneck_keeps_resolution():
    model = ResNet(Bottleneck, [1, 1, 1, 2], widths=(4, 8, 8, 8), replace_stride_with_dilation=[False, True, True])
    # As in torchvision, a stage's first block keeps the previous dilation; the following blocks use the new one.
    assert model.layer3[0].conv2.stride == (1, 1) and model.layer3[0].conv2.dilation == (1, 1)
    assert model.layer4[0].conv2.dilation == (2, 2)
    assert model.layer4[1].conv2.dilation == (4, 4) and model.layer4[1].conv2.padding == (4, 4)
    with torch.no_grad():
        x = torch.randn(1, 3, 32, 32)
        stem = model.eval().maxpool(model.relu(model.bn1(model.conv1(x))))
        assert model.layer4(model.layer3(model.layer2(model.layer1(stem)))).shape[-2:] == (4, 4)  # stride 8


def test_errors_name_the_layer():
    with pytest.raises(ValueError, match=r"\[ResNet\] 'layers' and 'widths' must have 4 entries"):
        ResNet(BasicBlock, [2, 2, 2])
    with pytest.raises(NotImplementedError, match=r"\[BasicBlock\] 'dilation'"):
        ResNet(BasicBlock, [1, 1, 1, 2], replace_stride_with_dilation=[False, False, True])
    with pytest.raises(ValueError, match=r"\[ResNet\] 'replace_stride_with_dilation' must have 3 entries"):
        ResNet(Bottleneck, [1, 1, 1, 1], replace_stride_with_dilation=[True])


def test_examples_offered_by_the_cli():
    # VGG is not an --example on purpose (a 0.5 GB checkpoint); every offered builder takes num_classes.
    assert sorted(EXAMPLES) == ["mobilenet_v2", "resnet18", "resnet34", "resnet50"]
    for name, build in EXAMPLES.items():
        assert build is getattr(examples, name)


def test_mobilenet_v2_names_and_reduced_configuration():
    sd = mobilenet_v2().state_dict()
    assert sd["features.0.0.weight"].shape == (32, 3, 3, 3)
    assert sd["features.1.conv.0.0.weight"].shape == (32, 1, 3, 3)  # t=1: no expansion conv
    assert sd["features.2.conv.0.0.weight"].shape == (96, 16, 1, 1)
    assert sd["features.18.0.weight"].shape == (1280, 320, 1, 1)
    assert sd["classifier.1.weight"].shape == (1000, 1280)
    # A reduced model keeps the names: round_nearest=4 keeps a 12-channel stage that 8 would round to 16.
    small = MobileNetV2(10, inverted_residual_setting=[[1, 8, 1, 1], [4, 12, 2, 2]], round_nearest=4,
                        input_channel=8, last_channel=32)
    sd = small.state_dict()
    assert sd["features.2.conv.2.weight"].shape == (12, 32, 1, 1)
    assert sd["features.4.0.weight"].shape == (32, 12, 1, 1) and sd["classifier.1.weight"].shape == (10, 32)
    with torch.no_grad():
        assert small.eval()(torch.randn(1, 3, 45, 37)).shape == (1, 10)


def test_mobilenet_v2_errors_name_the_layer():
    with pytest.raises(ValueError, match=r"\[InvertedResidual\] 'stride' must be 1 or 2 but got 3"):
        MobileNetV2(inverted_residual_setting=[[1, 16, 1, 3]])
    with pytest.raises(ValueError, match=r"\[MobileNetV2\] 'inverted_residual_setting'"):
        MobileNetV2(inverted_residual_setting=[[1, 16, 1]])
