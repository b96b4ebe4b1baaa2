"""``tensor_split`` by an integer tensor (``aten.tensor_split.tensor_indices_or_sections``): cut positions given as a
run-time 1-d input (read when the graph runs: other positions give torch's other pieces) or a constant tensor, a
constant 0-d section count, and the refusal of a run-time 0-d count (it would fix the number of outputs)."""

import pytest
import torch
import torch.nn as nn

import porter
from tests.converter_check import assert_matches, check_converted


class ByTensor(nn.Module):
    def forward(self, x, cuts):
        return (*torch.tensor_split(x, cuts, dim=1), *torch.tensor_split(x, torch.tensor([2, -1, 9]), dim=-1),
                *torch.tensor_split(x, torch.tensor(3), dim=0))


class ByPositions(nn.Module):
    """The 1-d forms only: the op-coverage exerciser (which turns constant folding off, so a 0-d constant count
    reaches the converter through ``detach`` and is refused there)."""

    def forward(self, x, cuts):
        return (*torch.tensor_split(x, cuts, dim=1), *torch.tensor_split(x, torch.tensor([2, -1, 9]), dim=-1))


def test_tensor_indices_match_torch():
    x = torch.randn(5, 6, 7)
    ported = porter.convert(ByTensor().eval(), (x, torch.tensor([1, 4])), io_layout="torch")
    for inputs in [(x, torch.tensor([1, 4])), (x, torch.tensor([3, 2])), (x, torch.tensor([-2, 10])),
                   (torch.randn(8, 6, 4), torch.tensor([0, 6]))]:
        assert_matches(ported, ByTensor().eval(), inputs)


def test_runtime_section_count_is_refused():
    model = nn.Module()
    model.forward = lambda x, n: torch.tensor_split(x, n)
    with pytest.raises(Exception, match="tensor_indices_or_sections|data-dependent"):
        porter.convert(model.eval(), (torch.randn(6, 2), torch.tensor(3)), io_layout="torch")

