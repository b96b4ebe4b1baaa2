"""ExportedProgram input, including programs already lowered to core ATen (``run_decompositions()``), as a
``.pt2`` file from ``torch.export.save`` would hold."""

import pytest
import torch

import porter
from tests.converter_check import assert_matches
from tests.models import REGISTRY, make_inputs


@pytest.mark.parametrize("name", ["mobilenet_v3", "vit", "deeplabv3"])
def test_decomposed_exported_program(name):
    spec = REGISTRY[name]
    model = spec.builder()
    example = make_inputs(spec.inputs, seed=0)
    ep = torch.export.export(model, example).run_decompositions()
    ported = porter.convert(ep, io_layout="torch")
    assert_matches(ported, model, example)
