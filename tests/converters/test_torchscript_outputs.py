"""TorchScript forwards returning dicts (``prim::DictConstruct``) and nested tuples: the port returns the same
nesting (``output_tree``), scripted and traced, compared with torch at two sizes, and through save/load."""

import warnings

import mlx.core as mx
import pytest
import torch
from torch import nn

import porter
from tests.converter_check import assert_matches


class DictOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = self.conv(x)
        pooled = y.mean((2, 3))
        heads = {"logits": self.fc(pooled), "features": y}
        return heads["logits"] * 2, {"pooled": pooled, "total": pooled.sum(1)}, (heads, y.amax(1))


def _source(model, frontend, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.script(model) if frontend == "script" else torch.jit.trace(model, x, strict=False)


@pytest.mark.parametrize("frontend", ["script", "trace"])
def test_dict_and_nested_outputs_keep_their_structure(frontend, tmp_path):
    torch.manual_seed(0)
    model = DictOutputs().eval()
    x = torch.randn(2, 3, 8, 8)
    ported = porter.convert(_source(model, frontend, (x,)), (x,))
    assert ported.graph["output_tree"] is not None
    for inputs in ((x,), (torch.randn(3, 3, 5, 7),)):
        assert_matches(ported, model, inputs)
    porter.save(ported, tmp_path / "m")
    loaded = porter.load(tmp_path / "m")
    scaled, stats, (heads, peak) = loaded(mx.array(x.permute(0, 2, 3, 1).numpy()))
    assert list(stats) == ["pooled", "total"] and list(heads) == ["logits", "features"]
    assert heads["features"].shape == (2, 8, 8, 4) and peak.shape == (2, 8, 8)  # channels-last, torch's (2, 8, 8)
    assert_matches(loaded, model, (x,))
