"""Tensors a model computes from its parameters and keeps in a Python attribute (timm's eval-mode
``attention_bias_cache`` in TinyViT, LeViT and EfficientFormer: ``attention_biases[:, attention_bias_idxs]``
cached per device), and the buffers Porter's probing forwards touch.

Torch, in each test, is the oracle: a model converted with an empty cache differentiates into the parameter as
torch does; one whose cache an earlier eval forward filled is captured with that tensor as a constant, so the
port's eval outputs are torch's (torch reads the same cache) but gradients cannot reach the parameter: the
conversion warns (``capture_attributes.py``) and training mode is refused for the module, naming it. Conversion writes no buffer it did
not change (torch's autograd version counters stay put), so a graph torch built before it still differentiates.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches


class CachedBiasAttention(nn.Module):
    """timm's pattern: a (heads, offsets) parameter gathered by a non-persistent int64 index buffer, the gather
    cached in a dict in eval mode (the cache emptied by ``train()``)."""

    def __init__(self, dim=8, heads=2, window=3):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        points = list(itertools.product(range(window), range(window)))
        offsets, idxs = {}, []
        for p1, p2 in itertools.product(points, points):
            idxs.append(offsets.setdefault((abs(p1[0] - p2[0]), abs(p1[1] - p2[1])), len(offsets)))
        self.attention_biases = nn.Parameter(torch.randn(heads, len(offsets)))
        self.register_buffer("attention_bias_idxs", torch.tensor(idxs).view(len(points), len(points)),
                             persistent=False)
        self.attention_bias_cache = {}

    def train(self, mode=True):
        super().train(mode)
        if mode:
            self.attention_bias_cache = {}
        return self

    def biases(self, device):
        if self.training:
            return self.attention_biases[:, self.attention_bias_idxs]
        key = str(device)
        if key not in self.attention_bias_cache:
            self.attention_bias_cache[key] = self.attention_biases[:, self.attention_bias_idxs]
        return self.attention_bias_cache[key]

    def forward(self, x):  # (B, 9, dim)
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) + self.biases(x.device)).softmax(-1)
        return (attn @ v).transpose(1, 2).reshape(B, N, C)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(CachedBiasAttention(), nn.Linear(8, 4)).eval()


def _x(seed, batch=2):
    return (torch.randn(batch, 9, 8, generator=torch.Generator().manual_seed(seed)),)


def test_an_empty_cache_converts_into_a_gather_that_gradients_reach():
    model = _model()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ported = porter.convert(model, _x(0), io_layout="torch", dynamic="batch")
    assert not [w for w in record if "neither a parameter nor a buffer" in str(w.message)]  # (torch warns)
    assert ported.train_refusals == {}
    assert_matches(ported, model, _x(1, 3))
    # torch's reference gradient: assert_matches' no_grad forward filled the cache with a tensor gradients cannot
    # reach through (timm's eval cache); empty again, torch computes the gather with history
    model[0].attention_bias_cache.clear()
    result = grad_parity(model, ported, _x(2), rtol=1e-4, atol=1e-6, seed=1)
    assert result["ok"], result
    assert "0.attention_biases" in {r["name"] for r in result["parameters"]}


def test_the_conversion_leaves_the_models_caches_as_it_found_them():
    """Porter's forwards (the eval capture, the probes) would fill an empty eval cache with a tensor carrying autograd
    history: the torch model the user keeps could then no longer be deep-copied ("Only Tensors created explicitly
    by the user support the deepcopy protocol"), and its cache would hold Porter's tensors. Dict and list attributes
    go back to their contents from before the conversion; a cache the user filled stays as it was."""
    import copy

    model = _model()
    model[0].history = []
    porter.convert(model, _x(0), io_layout="torch", dynamic="batch")
    assert model[0].attention_bias_cache == {} and model[0].history == []
    copy.deepcopy(model)
    with torch.no_grad():
        model(*_x(5))
    filled = dict(model[0].attention_bias_cache)
    porter.convert(model, _x(0), io_layout="torch", dynamic="batch")
    assert model[0].attention_bias_cache.keys() == filled.keys()
    assert all(model[0].attention_bias_cache[k] is v for k, v in filled.items())


def test_a_filled_cache_is_a_frozen_constant_the_conversion_names_and_training_refuses():
    """The cache filled by an eval forward before the conversion: the port's eval forward is torch's, but its
    ``attention_biases`` no longer reach the output, so ``train()`` is refused naming the module."""
    model = _model()
    with torch.no_grad():
        model(*_x(5))  # an eval forward (a validation pass) fills the cache
    with torch.enable_grad():
        model[0].attention_bias_cache = {}
        model(*_x(5))  # now with autograd history, as a forward outside no_grad leaves it
    with pytest.warns(UserWarning, match=r"0\.attention_bias_cache\['cpu'\] holds a tensor that is neither"):
        ported = porter.convert(model, _x(0), io_layout="torch", dynamic="batch")
    assert_matches(ported, model, _x(1, 3))
    assert set(ported.train_refusals) == {"0"}
    with pytest.raises(porter.TrainModeError, match=r"'0': reads 0\.lifted_tensor_0 \(IndexBackward0\), a tensor computed from parameters before the "
                                                  r"capture"):
        ported.train()
    # torch's gradient reaches the parameter through the cache's history; the port's cannot
    result = grad_parity(model, ported, _x(2), rtol=1e-4, atol=1e-6, seed=1)
    rows = {r["name"]: r for r in result["parameters"]}
    assert not rows["0.attention_biases"]["ok"] and rows["0.qkv.weight"]["ok"]


def test_conversion_writes_no_buffer_it_did_not_change():
    """Porter's train-mode probe and dropout survey run the model in training mode and restore its buffers: only
    those that changed (batch norm's running statistics) are written back. A tensor torch saved for backward
    before the conversion (the cached gather saves the index buffer) still differentiates after it."""
    torch.manual_seed(0)
    model = nn.Sequential(CachedBiasAttention(), nn.Linear(8, 9), nn.Unflatten(2, (9, 1)),
                          nn.BatchNorm2d(9)).eval()
    with torch.no_grad():
        model[3].running_var.uniform_(0.5, 1.5)
    model(*_x(5))  # fills the cache with a gather that saved attention_bias_idxs for backward
    idxs, stats = model[0].attention_bias_idxs, model[3].running_mean.clone()
    version = idxs._version
    with pytest.warns(UserWarning, match="attention_bias_cache"):
        porter.convert(model, _x(0), io_layout="torch", dynamic="batch")
    assert idxs._version == version
    torch.testing.assert_close(model[3].running_mean, stats, rtol=0, atol=0)  # the probe's update undone
    out = model(*_x(6))
    out.sum().backward()  # torch: "modified by an inplace operation" if the index buffer had been rewritten
    assert model[0].attention_biases.grad is not None and np.isfinite(model[0].attention_biases.grad.numpy()).all()


class BatchNormAct(nn.BatchNorm2d):
    """timm's ``BatchNormAct2d``: a batch norm subclass with its activation inside."""

    def forward(self, x):
        return torch.relu(super().forward(x))


def test_running_statistics_the_probes_update_are_put_back():
    """The probes' training forwards update a batch norm subclass's running statistics in place without moving
    their version counter: they are restored by value (GhostNet's ``ConvBnAct`` came out 2e3 off torch when only
    the version was checked), and the port matches the eval model after."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), BatchNormAct(4), nn.Dropout(0.1), nn.Conv2d(4, 2, 1)).eval()
    with torch.no_grad():
        model[1].running_var.uniform_(0.5, 1.5)
        model[1].running_mean.normal_()
    stats = {name: b.clone() for name, b in model.named_buffers()}
    x = (torch.randn(2, 3, 9, 7, generator=torch.Generator().manual_seed(1)),)
    ported = porter.convert(model, x, io_layout="torch")
    for name, b in model.named_buffers():
        torch.testing.assert_close(b, stats[name], rtol=0, atol=0, msg=name)
    assert_matches(ported, model, x)


def test_validate_gradients_are_not_misled_by_an_eval_cache():
    """porter.validate's own no_grad forwards filled the eval cache, so torch's gradient pass then read the cached
    (history-free) tensor and reported ``attention_biases`` as a gradient failure ("torch has no gradient for it");
    the model's containers go back before the gradient pass and after."""
    model = _model()
    ported = porter.convert(model, _x(0), io_layout="torch", dynamic="batch")
    report = porter.validate(model, ported, [_x(1)], grads=True, rtol=1e-4)
    assert report.ok, str(report)
    assert "0.attention_biases" in {r["name"] for r in report.grads["parameters"]}
    assert model[0].attention_bias_cache == {}
