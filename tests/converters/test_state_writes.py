"""A forward that writes a buffer in place (a streaming cache, a step counter, a KV cache filled by slice
assignment) carries state from one call to the next. A port runs without state between calls, so such a port gave
torch's numbers on the first call and different ones on the second: conversion now refuses it, naming the buffer,
on both frontends (torch.export; TorchScript script and trace). Training-mode batch norm statistics are the
port's norm layers' own business and still convert."""

import mlx.core as mx
import numpy as np
import pytest
import torch
from torch import nn

import porter


class StreamingConv(nn.Module):
    """Keeps the last two frames of the previous call (``cache.copy_``)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3)
        self.register_buffer("cache", torch.zeros(1, 4, 2))

    def forward(self, x):
        full = torch.cat([self.cache, x], -1)
        self.cache.copy_(full[..., -2:])
        return self.conv(full)


class StepCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x):
        self.steps += 1
        return x * self.steps


class KVCache(nn.Module):
    """Fills a cache by slice assignment, as decoder KV caches do."""

    def __init__(self):
        super().__init__()
        self.register_buffer("kv", torch.zeros(1, 8, 4))

    def forward(self, x):
        self.kv[:, : x.shape[1]] = x
        return self.kv.sum(1)


CASES = {"streaming conv": (StreamingConv, (1, 4, 5), "'cache'"), "step counter": (StepCounter, (2, 3), "'steps'"),
         "kv cache": (KVCache, (1, 3, 4), "'kv'")}


def _frontends(model, x):
    yield "eager", model
    yield "trace", torch.jit.trace(model, x.clone(), check_trace=False)
    yield "script", torch.jit.script(model)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_second_call_differs_in_torch(case):
    """The premise: each model's second call on the same input differs from its first (so a stateless port
    would be wrong on it)."""
    cls, shape, _ = CASES[case]
    torch.manual_seed(0)
    model, x = cls().eval(), torch.randn(*shape)
    with torch.no_grad():
        first, second = model(x), model(torch.randn(*shape) if case == "kv cache" else x)
    assert not torch.equal(first, second)


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_writes_refused_naming_the_buffer(case):
    cls, shape, name = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    for frontend, model in _frontends(cls().eval(), x):
        with pytest.raises(NotImplementedError) as info:
            porter.convert(model, x.clone(), io_layout="torch")
        message = str(info.value)
        # the kv cache under TorchScript is refused earlier, as a write through a view
        assert name in message or (case == "kv cache" and frontend != "eager" and "view" in message), \
            (frontend, message)


def test_cli_reports_the_state_write(tmp_path):
    from click.testing import CliRunner

    from porter.cli.main import main

    path = tmp_path / "stream_ts.pt"
    torch.jit.save(torch.jit.script(StreamingConv().eval()), str(path))
    result = CliRunner().invoke(main, ["convert", str(path), "--input-shape", "1,4,5"])
    assert result.exit_code == 2, result.output
    assert "writes 'cache' in place" in result.output
    assert not (tmp_path / "stream_ts-mlx").exists()


def test_a_stateless_model_with_in_place_ops_still_converts():
    """In-place ops on the forward's own values (``relu_``, ``x += ...``, a masked write into a fresh tensor) are
    not state: they convert and give torch's numbers on every call."""

    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)
            self.register_buffer("scale", torch.full((6,), 0.5))

        def forward(self, x):
            y = self.fc(x)
            y.relu_()
            y += self.scale
            z = torch.zeros_like(y)
            z[:, :3] = y[:, :3]
            return z

    torch.manual_seed(0)
    model = InPlace().eval()
    ported = porter.convert(model, torch.randn(2, 6), io_layout="torch")
    for _ in range(2):
        x = torch.randn(3, 6)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), want, rtol=1e-6, atol=1e-6)


def test_training_mode_batch_norm_still_converts():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    ported = porter.convert(model, torch.randn(2, 3, 8, 8), io_layout="torch")
    assert ported.training


def test_embedding_max_norm_writes_its_weight_but_every_call_matches_torch():
    """``nn.Embedding(max_norm=...)`` renormalises the rows it looks up in place; a second call finds them within
    the bound, so the stateless port (which renormalises on every call) matches torch's later calls too."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4, max_norm=1.0), nn.Linear(4, 3)).eval()
    with torch.no_grad():
        model[0].weight.mul_(3.0)  # most rows above the bound
    ids = torch.tensor([[1, 2, 3, 2], [4, 5, 1, 9]])
    ported = porter.convert(model, ids.clone())
    for call in range(3):
        x = ids if call < 2 else torch.tensor([[0, 6, 7, 8], [1, 1, 2, 3]])
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), want, rtol=1e-5, atol=1e-6,
                                   err_msg=f"call {call}")
