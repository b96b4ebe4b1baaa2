"""Shapeless .mlxfn exports: correct at other input sizes (checked against torch in a process without torch or
porter), or refused naming the module and the MLX op, with nothing written."""

import math
import os

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter

from tests.export.mlxfn_check import assert_close, port_inputs, run_without_porter, torch_outputs


class Block(nn.Module):
    """A pre-norm transformer block on (N, L, D): LayerNorm, single-head attention (matmuls and softmax), GELU MLP."""

    def __init__(self, d=16):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d))

    def forward(self, x):
        h = self.norm(x)
        scores = self.q(h) @ self.k(h).transpose(-2, -1) / math.sqrt(h.shape[-1])
        x = x + torch.softmax(scores, dim=-1) @ self.v(h)
        return x + self.mlp(x)


class PoolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(torch.relu(self.conv(x)))


class FlatNet(nn.Module):
    """conv -> flatten -> linear: the flatten is a reshape to sizes read off the example."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


def _seeded(module):
    torch.manual_seed(0)
    m = module()
    with torch.no_grad():
        for p in m.parameters():  # LayerNorm's ones and zeros too
            p.uniform_(-0.5, 0.5)
    return m.eval()


def _leftovers(folder):
    return sorted(name for name in os.listdir(folder) if "tmp" in name or name.endswith(".mlxfn"))


@pytest.mark.slow
def test_shapeless_block_is_right_at_other_sizes(tmp_path):
    model = _seeded(Block)
    example = (torch.randn(2, 5, 16),)
    ported = porter.convert(model, example, dynamic=[0, 1])
    path = tmp_path / "block.mlxfn"
    report = porter.export_function(ported, path, port_inputs(ported, example), shapeless=True)
    assert report.shapeless and report.probe_shapes and report.probe_shapes[0] != (2, 5, 16)
    assert ("native softmax -> pure-MLX ops" in report.replacements) == porter.layers._native.available()
    sizes = [example, (torch.randn(3, 9, 16),), (torch.randn(1, 1, 16),), (torch.randn(4, 2, 16),)]
    results = run_without_porter([(path, port_inputs(ported, x)) for x in sizes], tmp_path)
    for x, outputs in zip(sizes, results):
        assert not isinstance(outputs, str), outputs
        (expected,) = torch_outputs(model, x)
        assert_close(outputs[0], expected, what=f"shapeless file at {tuple(x[0].shape)} vs torch")
        assert_close(outputs[0], np.array(ported(*port_inputs(ported, x))), what="vs the port")


def test_shapeless_refuses_a_pool_and_names_the_module(tmp_path):
    model = _seeded(PoolNet)
    example = (torch.randn(2, 3, 12, 12),)
    ported = porter.convert(model, example, dynamic=[0, 2, 3])
    with pytest.raises(porter.ExportError) as info:
        porter.export_function(ported, tmp_path / "pool.mlxfn", port_inputs(ported, example), shapeless=True)
    text = str(info.value)
    assert "Module 'pool'" in text and ("Pad" in text or "Slice" in text), text
    assert "without shapeless" in text
    assert _leftovers(tmp_path) == []
    # the same model exports with fixed shapes
    porter.export_function(ported, tmp_path / "pool.mlxfn", port_inputs(ported, example))
    assert _leftovers(tmp_path) == ["pool.mlxfn"]


def test_shapeless_refuses_a_reshape_fixed_at_export(tmp_path):
    model = _seeded(FlatNet)
    example = (torch.randn(2, 3, 8, 8),)
    ported = porter.convert(model, example, dynamic="batch")
    with pytest.raises(porter.ExportError) as info:
        porter.export_function(ported, tmp_path / "flat.mlxfn", port_inputs(ported, example), shapeless=True)
    text = str(info.value)
    assert "Module 'fc'" in text and "reshape" in text and "(3, 8, 8, 3)" in text, text
    assert _leftovers(tmp_path) == []


def test_shapeless_refuses_wrong_numbers_at_another_size(tmp_path):
    """A size read in Python becomes a constant of the file: it runs at another batch, with the wrong numbers."""
    w = mx.array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))

    def scaled(x):
        return (x @ w) / x.shape[0]

    with pytest.raises(porter.ExportError, match="differ from the model's"):
        porter.export_function(scaled, tmp_path / "f.mlxfn", [(2, 4)], shapeless=True)
    assert _leftovers(tmp_path) == []

    def fine(x):
        return mx.tanh(x @ w)

    report = porter.export_function(fine, tmp_path / "f.mlxfn", [(2, 4)], shapeless=True)
    assert report.probe_shapes == [(3, 4)] and report.replacements == {}
    x = mx.random.normal((7, 4))
    assert_close(np.array(mx.import_function(str(tmp_path / "f.mlxfn"))(x)[0]), np.array(fine(x)), rel=0)


def test_shapeless_needs_dynamic_dims_and_a_size_the_model_accepts(tmp_path):
    model = _seeded(Block)
    example = (torch.randn(2, 5, 16),)
    static = porter.convert(model, example, dynamic="static")
    with pytest.raises(porter.ExportError, match="'shapeless': the model keeps no input dim dynamic"):
        porter.export_function(static, tmp_path / "b.mlxfn", port_inputs(static, example), shapeless=True)
    dynamic = porter.convert(model, example, dynamic=[0, 1])
    with pytest.raises(porter.ExportError, match="'probe_inputs'.*refuses them"):
        porter.export_function(dynamic, tmp_path / "b.mlxfn", port_inputs(dynamic, example), shapeless=True,
                               probe_inputs=[(3, 5, 7)])
    assert _leftovers(tmp_path) == []


def test_shapeless_refusal_without_modules_quotes_mlx(tmp_path):
    """A plain function has no modules to name: the refusal quotes MLX's message naming the op."""

    def crop(x):
        return mx.tanh(x[:, 1:])

    with pytest.raises(porter.ExportError, match=r"even at the example's size\. MLX: .*Slice cannot infer"):
        porter.export_function(crop, tmp_path / "c.mlxfn", [(2, 5)], shapeless=True)
    assert _leftovers(tmp_path) == []


def test_mlx_linear_layers_go_shapeless(tmp_path):
    """mlx.nn.Linear (a ported model's Linear layers) runs addmm, whose reshapes a shapeless file would freeze;
    the export computes matmul + bias instead, and the file follows other sizes."""
    import mlx.nn as mlx_nn

    class Head(mlx_nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = mlx_nn.Linear(8, 4)
            self.out = mlx_nn.Linear(4, 2, bias=False)

        def __call__(self, x):
            return self.out(mx.tanh(self.proj(x)))

    model = Head()
    mx.eval(model.parameters())
    report = porter.export_function(model, tmp_path / "h.mlxfn", [(2, 5, 8)], shapeless=True)
    assert report.replacements == {"mlx.nn.Linear's addmm (reshapes to the traced sizes) -> matmul + bias": 1}
    assert mlx_nn.Linear.__call__.__qualname__ == "Linear.__call__"  # MLX's own again
    fn = mx.import_function(report.path)
    for shape in [(3, 7, 8), (1, 1, 8), (4, 2, 8)]:
        x = mx.random.normal(shape)
        assert_close(np.array(fn(x)[0]), np.array(model(x)), rel=1e-6, what=str(shape))
