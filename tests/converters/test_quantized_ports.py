"""Quantized ports of real architectures (issue 13): the error against torch's float model, measured per module by
validation (``porter.validation.cost``), stays within what the weights' quantization step allows, shrinks with more
bits, and the worst module is named."""

import numpy as np
import pytest
import torch

import porter
from porter.layers import quantize_model
from porter.validation.cost import cost
from tests.models import REGISTRY, make_inputs


def _quantization_cost(name, bits, group_size=32):
    spec = REGISTRY[name]
    model = spec.builder(seed=5)
    inputs = make_inputs(spec.inputs)
    ported = porter.convert(model, inputs)
    report = quantize_model(ported, group_size=group_size, bits=bits)
    measured = cost(porter.validate(model, ported, [inputs]))
    return measured, report


@pytest.mark.parametrize("name", ["vit", "resnet_bottleneck"])
def test_quantization_error_is_bounded_and_shrinks_with_bits(name):
    eight, report8 = _quantization_cost(name, 8)
    four, _ = _quantization_cost(name, 4)
    assert report8.quantized, "nothing was quantized"
    # 8 bits: a weight moves by at most one step of (max - min) / 255 of its group, a fraction of a percent; through a
    # few layers the output moves by a few percent of its scale at most. 4 bits: 17x coarser steps.
    assert 0 < eight["max_rel_error"] < 0.05, eight["max_rel_error"]
    assert four["max_rel_error"] > 2 * eight["max_rel_error"]
    assert eight["worst_module"] in {row["name"] for row in eight["modules"]}
    assert eight["modules"][0]["max_rel"] == eight["worst_module_rel_error"]
    assert all(a["max_rel"] >= b["max_rel"] for a, b in zip(eight["modules"], eight["modules"][1:]))
