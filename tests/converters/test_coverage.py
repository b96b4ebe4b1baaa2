"""Issue 3's coverage list: every registered reference model converts and matches torch at two input sizes.

Torch is the oracle, run here on the same inputs. The float32 bar (porter.compare's, no atol floor):
max|porter - torch| <= 1e-4 * max|torch| per output. The example used for conversion and the test inputs are different draws (nothing input-specific
may be baked into the port); the second input size differs in batch and spatial size from the example.
"""

from functools import lru_cache

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from tests.models import REGISTRY, make_inputs
from porter.compare import RTOL, assert_close, leaves, port_inputs, to_torch_layout

BAR = RTOL

# Models also checked with io_layout="mlx" (channels-last I/O): 1d, 2d and 3d inputs, dict output, unpool indices,
# a token model whose output is not image-like.
MLX_LAYOUT_MODELS = ["resnet_basic", "convnext", "vit", "r3d", "audio_cnn", "segnet_unpool", "deeplabv3", "hifigan",
                     "monai_unet3d"]

CHANNELS_LAST = {3: "NCL->NLC", 4: "NCHW->NHWC", 5: "NCDHW->NDHWC"}


@lru_cache(maxsize=None)
def _converted(name, io_layout):
    """(torch model, port) for a registry entry; cached because conversion dominates this file's runtime.
    Tests that change a port restore it before returning."""
    spec = REGISTRY[name]
    model = spec.builder()
    return model, porter.convert(model, make_inputs(spec.inputs, seed=0), io_layout=io_layout)


def _input_sets(spec):
    sets = [make_inputs(spec.inputs, seed=1)]
    if spec.second_inputs is not None:
        sets.append(make_inputs(spec.second_inputs, seed=2))
    return sets


def _run_and_compare(model, ported, xs, what):
    """Run both models on ``xs`` (torch layout) and check every output against the bar."""
    in_layouts = list(ported.input_layouts)
    assert len(in_layouts) == len(xs), f"{what}: port declares {len(in_layouts)} inputs, model takes {len(xs)}"
    xs_mx, _ = port_inputs(ported, xs)
    with torch.no_grad():
        expected = leaves(model(*xs))
    got = leaves(ported(*xs_mx))
    assert len(got) == len(expected), f"{what}: torch returned {len(expected)} outputs, the port {len(got)}"
    out_layouts = list(ported.output_layouts)
    assert len(out_layouts) == len(got), f"{what}: {len(out_layouts)} output layouts for {len(got)} outputs"
    for i, (t, p, lay) in enumerate(zip(expected, got, out_layouts)):
        assert isinstance(p, mx.array), f"{what}: output {i} is {type(p).__name__}, not mx.array"
        assert p.dtype == mx.float32, f"{what}: output {i} dtype {p.dtype}, torch float32"
        p_t = to_torch_layout(np.array(p), lay)
        e = t.numpy()
        assert p_t.shape == e.shape, f"{what}: output {i} shape {p_t.shape} (after {lay}) != torch {e.shape}"
        assert_close(p_t, e, rtol=BAR, atol=0.0, what=f"{what}: output {i}")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_converted_model_matches_torch(name):
    spec = REGISTRY[name]
    example = make_inputs(spec.inputs, seed=0)
    model, ported = _converted(name, "torch")
    assert ported.io_layout == "torch"
    assert list(ported.input_layouts) == ["as-is"] * len(example)
    sets = _input_sets(spec)
    for xs in sets:
        _run_and_compare(model, ported, xs, f"{name} at {[tuple(x.shape) for x in xs]}")
    # The same check through porter.validate, which also compares every submodule's output.
    report = porter.validate(model, ported, sets[:1], rtol=BAR, atol=0.0)
    assert report.ok, str(report)
    assert report.first_divergence is None, str(report)
    assert report.runs[0]["modules"], f"{name}: no module outputs were compared"


@pytest.mark.parametrize("name", MLX_LAYOUT_MODELS)
def test_converted_model_matches_torch_channels_last(name):
    spec = REGISTRY[name]
    example = make_inputs(spec.inputs, seed=0)
    model, ported = _converted(name, "mlx")
    assert ported.io_layout == "mlx"
    # Image-like inputs (rank 3-5) are channels-last in the "mlx" I/O layout.
    assert list(ported.input_layouts) == [CHANNELS_LAST.get(x.ndim, "as-is") for x in example]
    for xs in _input_sets(spec):
        _run_and_compare(model, ported, xs, f"{name} (mlx layout) at {[tuple(x.shape) for x in xs]}")


def _leaf_paths(tree, path=()):
    """(key path, array) for every array of an MLX parameter tree; keys may contain dots (torch names)."""
    if isinstance(tree, dict):
        return [item for k, v in tree.items() for item in _leaf_paths(v, path + (k,))]
    if isinstance(tree, (list, tuple)):
        return [item for i, v in enumerate(tree) for item in _leaf_paths(v, path + (i,))]
    return [(path, tree)]


def _replace_leaf(tree, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(tree, dict):
        return {k: (_replace_leaf(v, rest, value) if k == head else v) for k, v in tree.items()}
    return [(_replace_leaf(v, rest, value) if i == head else v) for i, v in enumerate(tree)]


def test_validate_names_a_perturbed_module_in_a_real_port():
    """Scale one converted weight by 1.01: validate must fail and name that module first."""
    model, ported = _converted("resnet_basic", "mlx")
    assert porter.validate(model, ported).ok
    target = np.sort(model.get_parameter("layer2.0.conv1.weight").detach().numpy().ravel())
    # Find the converted array by its values (a weight transform permutes values, it does not change them), so
    # the test does not depend on how the port names its parameters internally.
    params = ported.parameters()
    matches = [(path, v) for path, v in _leaf_paths(params)
               if v.size == target.size and np.array_equal(np.sort(np.array(v).ravel()), target)]
    assert len(matches) == 1, f"{len(matches)} converted arrays hold layer2.0.conv1.weight's values"
    path, leaf = matches[0]
    ported.update(_replace_leaf(params, path, leaf * 1.01))
    try:
        report = porter.validate(model, ported)
    finally:
        ported.update(_replace_leaf(params, path, leaf))
    assert porter.validate(model, ported, [make_inputs(REGISTRY["resnet_basic"].inputs)]).ok  # restored
    assert not report.ok
    assert report.first_divergence["name"] == "layer2.0.conv1", str(report)
    assert report.first_divergence["type"] == "Conv2d"
    assert "first divergence: layer2.0.conv1 (Conv2d)" in str(report)


@pytest.mark.parametrize("name", ["convnext", "mobilenet_v3", "segnet_unpool", "hifigan", "llama"])
def test_validate_gradient_parity_on_a_real_port(name):
    model, ported = _converted(name, "mlx")
    report = porter.validate(model, ported, grads=True)
    assert report.ok, str(report)
    assert len(report.runs) == 2  # example size and a second size picked by validate
    names = {r["name"] for r in report.grads["parameters"]}
    assert names == {n for n, p in model.named_parameters() if p.requires_grad}
