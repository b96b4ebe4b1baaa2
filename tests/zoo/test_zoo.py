"""porter.zoo: every registered model against its torch reference, strict loading, the registry, torch-free loading."""

import importlib
import json
import os
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter import zoo
from porter.zoo.registry import register_model

sys.path.insert(0, os.path.dirname(__file__))
from helpers import check_against_torch  # noqa: E402

MODELS = zoo.list_models()
_SMALL_RESNET = {"num_classes": 7, "widths": (8, 16, 24, 32)}
# A reduced configuration per model (same structure and names, small widths) that both factories accept.
SMALL = {
    "resnet18": _SMALL_RESNET,
    "resnet34": _SMALL_RESNET,
    "resnet50": {"num_classes": 7, "widths": (4, 8, 12, 16)},
    "vgg11_bn": {"num_classes": 7, "width_divisor": 8, "hidden": 32},
    "vgg16_bn": {"num_classes": 7, "width_divisor": 8, "hidden": 32},
    "mobilenet_v2": {"num_classes": 7, "width_mult": 0.25},
}
# Two input sizes (N, H, W): one even, one odd and non-square; the smallest that survive VGG's five pools.
SIZES = [(2, 32, 32), (1, 45, 38)]


def torch_factory(name):
    """The torch reference named by ``model_info(name)["torch_model"]``, imported as the CLI's ``--arch`` does."""
    module, _, factory = zoo.model_info(name)["torch_model"].partition(":")
    return getattr(importlib.import_module(module), factory)


def seeded_twin(name, seed=0):
    """The torch reference in eval mode with seeded random weights and randomized BatchNorm statistics."""
    torch.manual_seed(seed)
    model = torch_factory(name)(**SMALL[name])
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                c = module.num_features
                module.weight.copy_(torch.rand(c, generator=gen) + 0.5)
                module.bias.copy_(torch.randn(c, generator=gen) * 0.2)
                module.running_mean.copy_(torch.randn(c, generator=gen) * 0.2)
                module.running_var.copy_(torch.rand(c, generator=gen) * 1.5 + 0.5)
                module.num_batches_tracked.fill_(7)
    return model.eval()


def numpy_state_dict(model):
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def loaded_zoo_model(name, twin):
    return zoo.create(name, **SMALL[name]).load_torch_state_dict(numpy_state_dict(twin))


def test_every_model_has_a_small_configuration():
    assert MODELS, "the zoo registers no model"
    assert sorted(SMALL) == MODELS


@pytest.mark.parametrize("name", MODELS)
def test_matches_torch(name):
    twin = seeded_twin(name)
    model = loaded_zoo_model(name, twin)
    for n, h, w in SIZES:
        x = torch.randn(n, 3, h, w, generator=torch.Generator().manual_seed(h))
        with torch.no_grad():
            scale = twin(x).abs().max().item()
        check_against_torch(twin, model, x, nd=2, grad=False, atol=1e-4 * scale, rtol=0)


def test_input_gradient_matches_torch():
    """Eval-mode backward through a whole network (BatchNorm with running statistics, pools, residuals)."""
    name = "resnet18"
    twin = seeded_twin(name)
    model = loaded_zoo_model(name, twin)
    x = torch.randn(1, 3, 33, 35, generator=torch.Generator().manual_seed(5))
    xt = x.clone().requires_grad_(True)
    (twin(xt) * torch.from_numpy(np.random.default_rng(0).standard_normal((1, 7)).astype(np.float32))).sum().backward()
    scale = twin(x).abs().max().item()
    check_against_torch(twin, model, x, nd=2, atol=1e-4 * scale, rtol=0, grad_atol=1e-4 * xt.grad.abs().max().item(),
                        grad_rtol=0)


@pytest.mark.parametrize("name", MODELS)
def test_model_info(name):
    info = zoo.model_info(name)
    assert {"summary", "family", "input_shape", "num_parameters", "torch_model"} <= set(info)
    assert info["summary"] and "\n" not in info["summary"]
    assert len(info["input_shape"]) == 4 and info["input_shape"][1] == 3
    module, _, factory = info["torch_model"].partition(":")
    assert module and factory == name


@pytest.mark.parametrize("name", MODELS)
def test_default_configuration_has_the_references_keys_and_shapes(name):
    """Full size: the zoo model expects exactly the torch reference's state_dict (num_batches_tracked optional), and
    ``num_parameters`` is the reference's count. Built on the meta device: no memory for VGG's 138M parameters."""
    from porter.zoo._loading import torch_parameter_specs

    with torch.device("meta"):
        reference = torch_factory(name)()
    expected = {k: tuple(v.shape) for k, v in reference.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert {k: spec[1] for k, spec in torch_parameter_specs(zoo.create(name)).items()} == expected
    assert zoo.model_info(name)["num_parameters"] == sum(p.numel() for p in reference.parameters())


# Parameter counts torchvision's documentation lists for its weights: an outside check that the references (and so
# the zoo models) have torchvision's architecture, not only self-consistent names.
TORCHVISION_NUM_PARAMS = {"resnet18": 11689512, "resnet34": 21797672, "resnet50": 25557032,
                          "vgg11_bn": 132868840, "vgg16_bn": 138365992, "mobilenet_v2": 3504872}


@pytest.mark.parametrize("name", sorted(TORCHVISION_NUM_PARAMS))
def test_parameter_count_is_torchvisions(name):
    assert zoo.model_info(name)["num_parameters"] == TORCHVISION_NUM_PARAMS[name]


def test_resnet_torch_model_is_the_example():
    from porter import examples

    for name in ("resnet18", "resnet34", "resnet50"):
        assert zoo.model_info(name)["torch_model"] == f"porter.examples:{name}"
        assert hasattr(examples, name)


def test_accepts_anything_with_array_and_ignores_num_batches_tracked():
    twin = seeded_twin("resnet18")
    state = twin.state_dict()  # torch tensors: they have __array__
    model = zoo.create("resnet18", **SMALL["resnet18"]).load_torch_state_dict(state)
    without = {k: v for k, v in numpy_state_dict(twin).items() if not k.endswith("num_batches_tracked")}
    other = zoo.create("resnet18", **SMALL["resnet18"]).load_torch_state_dict(without)
    x = mx.random.normal((1, 32, 32, 3), key=mx.random.key(0))
    assert np.array_equal(np.array(model(x)), np.array(other(x)))


def test_strict_loading_lists_every_bad_key():
    name = "resnet18"
    state = numpy_state_dict(seeded_twin(name))
    del state["layer1.0.bn1.running_var"], state["fc.bias"]
    state["layer9.0.conv1.weight"] = np.zeros((3, 3, 3, 3), np.float32)
    state["fc.weight"] = state["fc.weight"][:, :-1]
    state["conv1.weight"] = np.moveaxis(state["conv1.weight"], 1, -1)  # already channels-last: refused
    model = zoo.create(name, **SMALL[name])
    with pytest.raises(ValueError) as info:
        model.load_torch_state_dict(state)
    message = str(info.value)
    for key in ("layer1.0.bn1.running_var", "fc.bias", "layer9.0.conv1.weight", "fc.weight", "conv1.weight"):
        assert key in message
    assert "2 missing, 1 unexpected, 2 mis-shaped" in message
    # Non-strict loading tolerates missing and unexpected keys, never a wrong shape.
    with pytest.raises(ValueError, match="mis-shaped") as info:
        model.load_torch_state_dict(state, strict=False)
    assert "fc.bias" not in str(info.value)


def test_non_strict_loads_what_is_there():
    twin = seeded_twin("resnet18")
    state = numpy_state_dict(twin)
    model = zoo.create("resnet18", **SMALL["resnet18"])
    before = np.array(model.fc.bias)
    state.pop("fc.bias")
    state["extra.weight"] = np.ones(3, np.float32)
    model.load_torch_state_dict(state, strict=False)
    assert np.array_equal(np.array(model.fc.weight), state["fc.weight"])
    assert np.array_equal(np.array(model.fc.bias), before)
    assert np.array_equal(np.array(model.layer1[0].bn1.running_var), state["layer1.0.bn1.running_var"])


def test_registry_errors():
    with pytest.raises(ValueError, match="already registered"):
        register_model("resnet18", family="resnet", summary="again", torch_model="x:y")(lambda: None)
    with pytest.raises(ValueError, match="resnet18") as info:
        zoo.create("resnet19")
    assert "unknown model 'resnet19'" in str(info.value) and all(n in str(info.value) for n in MODELS)
    with pytest.raises(ValueError, match="unknown model"):
        zoo.model_info("nope")
    with pytest.raises(ValueError, match="one line"):
        register_model("two_lines", family="x", summary="a\nb", torch_model="x:y")
    assert "two_lines" not in zoo.list_models()


def test_model_argument_errors():
    with pytest.raises(ValueError, match=r"\[ResNet\] 'layers' and 'widths'"):
        zoo.create("resnet18", widths=(8, 16))
    with pytest.raises(ValueError, match=r"\[VGG\] 'width_divisor'"):
        zoo.create("vgg11_bn", width_divisor=0)
    with pytest.raises(ValueError, match=r"\[MobileNetV2\] 'width_mult'"):
        zoo.create("mobilenet_v2", width_mult=0)
    with pytest.raises(TypeError):
        zoo.create("resnet18", no_such_argument=1)
    with pytest.raises(ValueError, match=r"\.safetensors"):
        zoo.create("resnet18", **SMALL["resnet18"]).load_checkpoint("weights.pt")


def test_create_and_load_checkpoint_never_import_torch(tmp_path):
    """A fresh interpreter builds a model, loads a .safetensors checkpoint and runs it without importing torch."""
    from safetensors.numpy import save_file

    name = "resnet18"
    twin = seeded_twin(name)
    save_file(numpy_state_dict(twin), str(tmp_path / "w.safetensors"))
    x = torch.randn(1, 3, 33, 40, generator=torch.Generator().manual_seed(3))
    np.save(tmp_path / "x.npy", x.permute(0, 2, 3, 1).numpy())
    with torch.no_grad():
        expected = twin(x).numpy()
    script = f"""
import sys, json
import numpy as np, mlx.core as mx
from porter.zoo import create, list_models, model_info
model = create({name!r}, **json.loads({json.dumps(json.dumps(SMALL[name]))}))
model.load_checkpoint({str(tmp_path / 'w.safetensors')!r})
np.save({str(tmp_path / 'y.npy')!r}, np.array(model(mx.array(np.load({str(tmp_path / 'x.npy')!r})))))
[model_info(n) for n in list_models()]
assert "torch" not in sys.modules, sorted(m for m in sys.modules if m.startswith("torch"))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    got = np.load(tmp_path / "y.npy")
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()


def test_load_checkpoint_casts_to_the_models_dtype(tmp_path):
    """A bfloat16 checkpoint (numpy has no bfloat16) loads into the float32 model as torch's load_state_dict would:
    each value widened exactly."""
    state = numpy_state_dict(seeded_twin("resnet18"))
    path = str(tmp_path / "w.safetensors")
    mx.save_safetensors(path, {k: mx.array(v).astype(mx.bfloat16) if v.dtype == np.float32 else mx.array(v)
                               for k, v in state.items()})
    model = zoo.create("resnet18", **SMALL["resnet18"]).load_checkpoint(path)
    expected = torch.from_numpy(state["layer2.0.conv1.weight"]).bfloat16().float().permute(0, 2, 3, 1).numpy()
    assert model.layer2[0].conv1.weight.dtype == mx.float32
    assert np.array_equal(np.array(model.layer2[0].conv1.weight), expected)
