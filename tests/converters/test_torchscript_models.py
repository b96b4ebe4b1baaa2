"""The TorchScript frontend on reference architectures (scripted and traced), against the eager torch model at
the example size and a second size."""

import warnings

import pytest
import torch

import porter
from tests.converter_check import assert_matches
from tests.models import REGISTRY, make_inputs

CASES = [
    ("resnet_basic", "script"),
    ("densenet", "script"),       # list append + cat in a loop over layers
    ("mobilenet_v3", "script"),   # hardswish, squeeze-excitation
    ("convnext", "script"),       # permute + LayerNorm, layer scale
    ("vit", "script"),            # fused MultiheadAttention inference path, class token
    ("shufflenet_v2", "trace"),   # channel shuffle view/transpose
    ("unet", "trace"),            # ConvTranspose2d, skip concatenation
    # a trace's size arithmetic on prim::NumToTensor (causal-mask and rotary slices: k - q, size // 2) feeds slice
    # bounds: kept as int arithmetic (was: 'Slice indices must be integers' at run time, or aten::pow of an int)
    ("gpt2", "trace"),
    ("llama", "trace"),
    ("bert", "trace"),
    ("t5", "trace"),
]


@pytest.mark.parametrize("name,how", CASES)
def test_torchscript_model(name, how):
    spec = REGISTRY[name]
    model = spec.builder()
    example = make_inputs(spec.inputs, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit's own deprecation notice
        scripted = torch.jit.script(model) if how == "script" else torch.jit.trace(model, example)
    ported = porter.convert(scripted, example, io_layout="mlx")
    assert ported.graph["frontend"] == "torchscript"
    assert_matches(ported, model, example)
    if spec.second_inputs is not None:
        assert_matches(ported, model, make_inputs(spec.second_inputs, seed=1))
