"""Family-specific checks for AlexNet, VGG, ResNet/ResNeXt/Wide ResNet, SqueezeNet, DenseNet, GoogLeNet,
Inception v3 and the FCN/DeepLabV3 segmentation models, beyond the registry-wide tests of test_zoo.py: auxiliary
heads in training, torchvision's weight-file conventions, documented counts of the weight configurations,
bilinear upsampling, builder argument errors."""

import re

import mlx.core as mx
import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten

from porter import examples, zoo
from porter.zoo.segmentation import interpolate_bilinear
from porter.zoo.squeezenet import SqueezeNet

from tests.zoo.test_zoo import SMALL, compare_forward, loaded_zoo_model, numpy_state_dict, seeded_twin  # noqa: E402
from tests.zoo.twins import CASES  # noqa: E402


def _count(model) -> int:
    return sum(v.size for _, v in tree_flatten(model.trainable_parameters()))


@pytest.mark.parametrize("name, kwargs, documented", [
    ("googlenet", {"aux_logits": False}, 6624904),
    ("fcn_resnet50", {"aux_loss": True}, 35322218),
    ("fcn_resnet101", {"aux_loss": True}, 54314346),
    ("deeplabv3_resnet50", {"aux_loss": True}, 42004074),
    ("deeplabv3_resnet101", {"aux_loss": True}, 60996202),
    ("deeplabv3_mobilenet_v3_large", {"aux_loss": True}, 11029328),
])
def test_documented_counts_of_the_weight_configurations(name, kwargs, documented):
    """torchvision documents these for its weights, which drop GoogLeNet's aux heads and keep the segmentation aux
    head; the zoo model and the twin (built on the meta device) agree with the documentation."""
    with torch.device("meta"):
        twin = CASES[name].twin(**kwargs)
    assert sum(p.numel() for p in twin.parameters()) == documented
    assert _count(zoo.create(name, **kwargs)) == documented


@pytest.mark.parametrize("name, kwargs, shape", [
    ("googlenet", {"dropout": 0.0, "dropout_aux": 0.0}, (3, 3, 67, 59)),
    ("inception_v3", {"dropout": 0.0}, (2, 3, 299, 299)),
])
def test_auxiliary_heads_in_training_match_torch(name, kwargs, shape):
    """Train mode returns torchvision's (logits, aux...) tuple, every element torch's (batch statistics)."""
    twin = seeded_twin(name, **kwargs).train()
    model = loaded_zoo_model(name, twin, **kwargs)
    model.train()
    out = model(mx.zeros((shape[0],) + shape[2:] + (3,)))
    assert isinstance(out, tuple) and len(out) == {"googlenet": 3, "inception_v3": 2}[name]
    compare_forward(twin, model, shape, seed=3, atol=1e-3)
    model.eval()
    assert isinstance(model(mx.zeros((1,) + shape[2:] + (3,))), mx.array)


@pytest.mark.parametrize("name, prefixes", [("googlenet", ("aux1.", "aux2.")), ("inception_v3", ("AuxLogits.",))])
def test_aux_tensors_of_a_checkpoint_are_skipped_without_aux_logits(name, prefixes):
    """torchvision's GoogLeNet/Inception weight files hold the aux heads; a model built without them loads the file
    strictly (as torchvision's builder drops the heads after loading), and a model with them still requires them."""
    twin = seeded_twin(name)
    state = numpy_state_dict(twin)
    assert any(k.startswith(prefixes) for k in state)
    model = zoo.create(name, **SMALL[name], aux_logits=False).load_torch_state_dict(state)
    compare_forward(twin, model, CASES[name].inputs[1], seed=0, atol=1e-4)
    with pytest.raises(ValueError, match="missing"):
        zoo.create(name, **SMALL[name]).load_torch_state_dict(
            {k: v for k, v in state.items() if not k.startswith(prefixes)})


def test_densenet_loads_torchvisions_legacy_key_names(tmp_path):
    """torchvision's published DenseNet files use the old names ``denselayer1.norm.1.weight``; they load (from a
    .pth file, without torch) as torchvision's own loader renames them."""
    twin = seeded_twin("densenet121")
    legacy = {re.sub(r"(denselayer\d+\.(?:norm|relu|conv))([12])\.", r"\1.\2.", k): v
              for k, v in twin.state_dict().items() if not k.endswith("num_batches_tracked")}  # newer than the files
    assert "features.denseblock1.denselayer1.norm.1.weight" in legacy
    torch.save(legacy, tmp_path / "densenet121-legacy.pth")
    model = zoo.create("densenet121", **SMALL["densenet121"]).load_checkpoint(str(tmp_path / "densenet121-legacy.pth"))
    compare_forward(twin, model, (1, 3, 45, 38), seed=0, atol=1e-4)


@pytest.mark.parametrize("size_in, size_out", [((4, 5), (32, 40)), ((6, 5), (45, 38)), ((9, 7), (4, 3)),
                                               ((5, 5), (5, 9)), ((1, 1), (3, 2)), ((7, 3), (7, 3))])
def test_interpolate_bilinear_matches_torch(size_in, size_out):
    """Up, down, non-integer factors, one axis unchanged, a single pixel; values and the input gradient."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, *size_in, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.interpolate(x, size=size_out, mode="bilinear", align_corners=False)
    w = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    (y * w).sum().backward()
    xm = mx.array(x.detach().permute(0, 2, 3, 1).numpy().astype(np.float32))
    wm = mx.array(w.permute(0, 2, 3, 1).numpy().astype(np.float32))
    got = np.array(interpolate_bilinear(xm, size_out))
    assert got.shape == (2,) + tuple(size_out) + (3,)
    assert np.abs(got - y.detach().permute(0, 2, 3, 1).numpy()).max() <= 1e-5
    grad = mx.grad(lambda a: (interpolate_bilinear(a, size_out) * wm).sum())(xm)
    assert np.abs(np.array(grad) - x.grad.permute(0, 2, 3, 1).numpy()).max() <= 1e-5


def test_dilated_and_zero_init_resnets_match_torch():
    """replace_stride_with_dilation (output stride 8, the segmentation backbones) on a classifier, and
    zero_init_residual zeroing the last BN of every block as torchvision does."""
    kwargs = {"num_classes": 5, "widths": (4, 8, 8, 8), "replace_stride_with_dilation": [False, True, True]}
    torch.manual_seed(0)
    twin = examples.resnext50_32x4d(**{**kwargs, "widths": (16, 16, 16, 16)}).eval()
    model = zoo.create("resnext50_32x4d", **{**kwargs, "widths": (16, 16, 16, 16)})
    model.load_torch_state_dict(numpy_state_dict(twin))
    compare_forward(twin, model, (1, 3, 45, 38), seed=0, atol=1e-4)
    zero = zoo.create("resnet50", zero_init_residual=True, widths=(4, 8, 8, 8))
    assert all(float(mx.abs(b.bn3.weight).max()) == 0 for stage in (zero.layer1, zero.layer4) for b in stage)
    assert float(mx.abs(zero.layer1[0].bn1.weight).min()) > 0


def test_builder_argument_errors():
    with pytest.raises(ValueError, match="'groups' expected value 32 but got 8"):
        zoo.create("resnext50_32x4d", groups=8)
    with pytest.raises(ValueError, match="'width_per_group' expected value 128"):
        zoo.create("wide_resnet50_2", width_per_group=64)
    with pytest.raises(NotImplementedError, match="BasicBlock.*dilation"):
        zoo.create("resnet18", replace_stride_with_dilation=[False, True, True])
    with pytest.raises(ValueError, match="replace_stride_with_dilation"):
        zoo.create("resnet50", replace_stride_with_dilation=[False, True])
    with pytest.raises(ValueError, match=r"\[SqueezeNet\] Unsupported SqueezeNet version 1_2"):
        SqueezeNet("1_2")
    with pytest.raises(NotImplementedError, match=r"\[DenseNet\] 'memory_efficient'"):
        zoo.create("densenet121", memory_efficient=True)
    with pytest.raises(ValueError, match=r"\[DenseNet\] 'block_config'"):
        zoo.create("densenet121", block_config=(6, 0))
    with pytest.raises(ValueError, match=r"\[GoogLeNet\] 'width_divisor'"):
        zoo.create("googlenet", width_divisor=0)
    with pytest.raises(ValueError, match=r"\[Inception3\] 'width_divisor'"):
        zoo.create("inception_v3", width_divisor=1.5)
    with pytest.raises(ValueError, match=r"\[AlexNet\] 'width_divisor'"):
        zoo.create("alexnet", width_divisor=-1)
    with pytest.raises(ValueError, match=r"\[interpolate_bilinear\] 'size'"):
        interpolate_bilinear(mx.zeros((1, 4, 4, 1)), (0, 3))
    with pytest.raises(TypeError):
        zoo.create("fcn_resnet50", no_such_argument=1)
    with pytest.raises(TypeError, match="atrous_rates"):  # a DeepLab argument, never dropped by FCN
        zoo.create("fcn_resnet50", atrous_rates=(1, 2, 3))


def test_segmentation_outputs_and_defaults():
    """torchvision's defaults: 21 classes, no aux head unless aux_loss; outputs at the input size."""
    model = zoo.create("deeplabv3_resnet50", widths=(4, 8, 8, 8))
    out = model(mx.zeros((1, 33, 27, 3)))
    assert sorted(out) == ["out"] and out["out"].shape == (1, 33, 27, 21)
    model = zoo.create("fcn_resnet50", widths=(4, 8, 8, 8), aux_loss=True, num_classes=3)
    out = model(mx.zeros((2, 20, 31, 3)))
    assert sorted(out) == ["aux", "out"] and out["aux"].shape == out["out"].shape == (2, 20, 31, 3)
