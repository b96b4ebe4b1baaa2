"""A forward that writes into its input (``x.mul_(2)``): conversion's eager forwards (the dropout survey, the
training-mode probe, the final check against torch) ran on the user's example itself, so the example came back
changed, and in training mode every probe saw another input, the forward differed from itself and the model was
refused as "computes something else in training mode". They now run on copies (``capture_buffers.example_copy``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import porter
from tests.converter_check import run_ported


class WritesInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        x.mul_(2.0)
        return self.fc(x) + x.sum(dim=1, keepdim=True)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_a_forward_writing_into_its_input_converts_and_leaves_the_example(training):
    torch.manual_seed(0)
    model = WritesInput().train(training)
    x = torch.randn(2, 3)
    kept = x.clone()
    ported = porter.convert(model, (x,), io_layout="torch")
    assert torch.equal(x, kept)
    y = torch.randn(5, 3)
    with torch.no_grad():
        expected = model(y.clone()).numpy()  # torch doubles its copy of y; the port computes the same from y
    np.testing.assert_allclose(run_ported(ported, (y,))[0], expected, rtol=1e-6, atol=1e-6)
