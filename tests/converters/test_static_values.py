"""Input-independent nodes computed once and kept (converters/static_values.py): a Swin-like attention bias (a
parameter table gathered by a buffer index, a mask built from slice writes on ``new_zeros``, a small MLP over a
constant table as Swin V2's) against torch on every call, after the weights change, after a layer is replaced, with
gradients reaching the table, in training mode (dropout: never kept), and the same bits with the cache off.
"""

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.compare import assert_close
from porter.converters import static_values


class AttentionBias(nn.Module):
    """scores (N, 2, 3, 3) + table[index] (per head) + a slice-written mask + an MLP over a constant table."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.table = nn.Parameter(torch.randn(9, 2))
        self.register_buffer("index", torch.tensor([4, 3, 2, 5, 4, 3, 8, 7, 6]))
        self.register_buffer("coords", torch.randn(3, 2))
        self.mlp = nn.Sequential(nn.Linear(2, 5), nn.ReLU(), nn.Dropout(dropout), nn.Linear(5, 2))

    def forward(self, scores):
        bias = self.table[self.index].view(3, 3, 2).permute(2, 0, 1)
        mask = scores.new_zeros((3, 3))
        mask[1:, :2] = 1.0
        mask[:1, 2:] = 2.0
        mask = mask.masked_fill(mask != 0, -100.0)
        mlp = self.mlp(self.coords).t().unsqueeze(1)  # (2, 1, 3): varies along the softmax axis
        return torch.softmax(scores + bias + mask + mlp, dim=-1)


def _port(model, scores):
    return porter.convert(model, (scores,), io_layout="torch")


def _kernel_calls(ported) -> dict:
    """Wrap every input-independent node's kernel with a counter: {"calls": n}."""
    counter = {"calls": 0}
    program = ported._program
    for index in program.static.nodes:
        fn = program.kernels[index]
        if fn is None or fn is program.identity:
            continue

        def counted(*args, _fn=fn, **kwargs):
            counter["calls"] += 1
            return _fn(*args, **kwargs)

        program.kernels[index] = counted
    return counter


@pytest.fixture()
def case():
    torch.manual_seed(0)
    model = AttentionBias().eval()
    scores = torch.randn(2, 2, 3, 3)
    return model, scores, _port(model, scores)


def test_input_independent_nodes_found(case):
    _, _, ported = case
    static = ported._program.static
    assert static.nodes and "table" in static.params and "index" in static.params
    assert set(static.modules) == {"mlp.0", "mlp.1", "mlp.2", "mlp.3"}  # the MLP over the constant table
    for index in static.nodes:  # no node reading the input is kept
        assert not any(spec == {"ref": "scores"} for spec in ported.graph["nodes"][index]["inputs"])


def test_every_call_matches_torch_and_the_second_runs_no_kept_kernel(case):
    model, scores, ported = case
    calls = _kernel_calls(ported)
    expected = model(scores).detach().numpy()
    assert_close(np.array(ported(mx.array(scores.numpy()))), expected)
    first = calls["calls"]
    assert first > 0
    other = torch.randn(2, 2, 3, 3)  # the kept values do not depend on the input
    assert_close(np.array(ported(mx.array(other.numpy()))), model(other).detach().numpy())
    assert calls["calls"] == first


def test_cache_off_gives_the_same_bits(case, monkeypatch):
    _, scores, ported = case
    x = mx.array(scores.numpy())
    on = [np.array(ported(x)) for _ in range(2)]
    monkeypatch.setattr(static_values, "ENABLED", False)
    off = np.array(ported(x))
    np.testing.assert_array_equal(on[0], off)
    np.testing.assert_array_equal(on[1], off)


def test_new_weights_are_seen(case):
    model, scores, ported = case
    x = mx.array(scores.numpy())
    ported(x)
    with torch.no_grad():
        model.table.add_(torch.randn(9, 2) * 3)
        model.mlp[0].weight.mul_(-2.0)
    ported.load_torch_state_dict(model.state_dict())
    assert_close(np.array(ported(x)), model(scores).detach().numpy())
    ported.update({"table": ported.table * 0.5})  # a port-side update: a new array at the name
    with torch.no_grad():
        model.table.mul_(0.5)
    assert_close(np.array(ported(x)), model(scores).detach().numpy())


def test_replaced_layer_is_seen(case):
    model, scores, ported = case
    x = mx.array(scores.numpy())
    ported(x)
    torch.manual_seed(1)
    model.mlp[3] = nn.Linear(5, 2)
    replacement = porter.layers.Linear(5, 2)
    replacement.weight = mx.array(model.mlp[3].weight.detach().numpy())
    replacement.bias = mx.array(model.mlp[3].bias.detach().numpy())
    ported.mlp[3] = replacement.eval()  # (a new MLX module trains: that alone would turn the cache off)
    assert_close(np.array(ported(x)), model(scores).detach().numpy())


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_gradients_reach_the_table(case, train):
    model, scores, ported = case
    x = mx.array(scores.numpy())
    weight = torch.randn(2, 2, 3, 3)
    ported(x)  # values kept from the weights as they are; the gradient call must not reuse them
    model.train(train)
    ported.train(train)
    (model(scores) * weight).sum().backward()
    _, grads = mnn.value_and_grad(ported, lambda: (ported(x) * mx.array(weight.numpy())).sum())()
    got = ported.torch_parameter_grads(grads)
    for name, param in model.named_parameters():
        assert_close(got[name], param.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_training_mode_recomputes_dropout():
    torch.manual_seed(0)
    model = AttentionBias(dropout=0.5).eval()
    scores = torch.randn(2, 2, 3, 3)
    ported = _port(model, scores)
    x = mx.array(scores.numpy())
    assert_close(np.array(ported(x)), model(scores).detach().numpy())
    ported.train()
    mx.random.seed(0)
    draws = {np.array(ported(x)).tobytes() for _ in range(4)}
    assert len(draws) > 1  # dropout in the MLP draws again on each training call
    ported.eval()
    assert_close(np.array(ported(x)), model(scores).detach().numpy())


def test_export_traces_the_nodes(case, tmp_path):
    model, scores, ported = case
    x = mx.array(scores.numpy())
    ported(x)
    report = porter.export_function(ported, str(tmp_path / "bias.mlxfn"), (x,))
    assert report.max_abs_diff <= 1e-6
    (fn,) = [mx.import_function(str(tmp_path / "bias.mlxfn"))]
    assert_close(np.array(fn(x)[0]), model(scores).detach().numpy())


def test_half_precision_port_keeps_the_same_values(case, monkeypatch):
    _, scores, ported = case
    half = ported.astype("float16")
    x = mx.array(scores.numpy())
    on = [np.array(half(x)) for _ in range(2)]
    monkeypatch.setattr(static_values, "ENABLED", False)
    off = np.array(half(x))
    np.testing.assert_array_equal(on[0], off)
    np.testing.assert_array_equal(on[1], off)
