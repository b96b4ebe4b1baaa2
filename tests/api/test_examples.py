"""porter.examples: the built-in ResNets have torchvision's structure, names and sizes.

The expected counts are torchvision 0.28's (parameters and state_dict entries of resnet18/34/50), so a
torchvision checkpoint would load with strict=True.
"""

import pytest
import torch

from porter.examples import EXAMPLES, BasicBlock, Bottleneck, ResNet, resnet18, resnet50

TORCHVISION = {  # name: (parameters, state_dict entries)
    "resnet18": (11_689_512, 122),
    "resnet34": (21_797_672, 218),
    "resnet50": (25_557_032, 320),
}


@pytest.mark.parametrize("name", sorted(TORCHVISION))
def test_sizes_match_torchvision(name):
    model = EXAMPLES[name]()
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
