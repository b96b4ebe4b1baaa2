"""A GPT-2 twin (transformers' module tree and names, ``lm_head`` tied to ``wte``): parity at two sequence lengths,
the tie kept through conversion and save/load, fine-tuning steps that move the weights as torch's do, and
sequence lengths beyond the position table refused as torch refuses them.

Torch is the oracle: every comparison runs the torch model on the same data in the test.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import mlx.optimizers as optim
import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten

import porter
from tests.models.gpt2 import gpt2_small


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    model = gpt2_small(seed=3)
    port = porter.convert(model, (torch.randint(0, 97, (2, 9)),))
    directory = tmp_path_factory.mktemp("gpt2") / "gpt2-mlx"
    porter.save(port, directory)
    return model, port, directory


def test_names_and_tie(converted):
    model, port, _ = converted
    assert port.tied_weights == {"lm_head.weight": "transformer.wte.weight"}
    assert {k for k, _ in tree_flatten(port.trainable_parameters())} == {n for n, _ in model.named_parameters()}
    assert port.transformer.h[1].attn.c_attn.weight.shape == (32, 96)  # Conv1D's (in, out) weight as torch holds it


@pytest.mark.parametrize("shape", [(2, 9), (1, 23), (3, 64)])
def test_logits_match_torch(converted, shape):
    model, port, directory = converted
    ids = torch.randint(0, 97, shape)
    with torch.no_grad():
        want = model(ids).numpy()
    for candidate in (port, porter.load(directory)):
        np.testing.assert_allclose(np.array(candidate(mx.array(ids.numpy()))), want, rtol=1e-4, atol=2e-4)


def test_longer_than_the_position_table_is_refused(converted):
    model, port, _ = converted
    ids = torch.randint(0, 97, (1, 65))
    with pytest.raises(IndexError):
        model(ids)  # torch: the position embedding has 64 rows
    with pytest.raises(ValueError, match="input"):
        port(mx.array(ids.numpy()))


def test_fine_tuning_steps_match_torch(tmp_path):
    model = gpt2_small(seed=4)
    port = porter.load(_saved(model, tmp_path))
    ids = torch.randint(0, 97, (2, 12))
    targets = torch.randint(0, 97, (2, 12))
    # SGD, not Adam: the key bias's true gradient is zero (softmax ignores a per-row constant), and Adam would
    # scale each framework's rounding noise there up to full-size, different steps
    opt_t = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    opt_m = optim.SGD(learning_rate=0.5, momentum=0.9)

    def mlx_loss(m):
        logits = m(mx.array(ids.numpy()))
        return mnn.losses.cross_entropy(logits, mx.array(targets.numpy()), reduction="mean")

    for _ in range(3):
        opt_t.zero_grad()
        torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), targets.flatten()).backward()
        opt_t.step()
        _, grads = mnn.value_and_grad(port, mlx_loss)(port)
        opt_m.update(port, grads)
        mx.eval(port.parameters())
    params = dict(tree_flatten(port.parameters()))
    for name, p in model.named_parameters():
        np.testing.assert_allclose(np.array(params[name]), p.detach().numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


def _saved(model, tmp_path):
    porter.save(porter.convert(model, (torch.randint(0, 97, (2, 9)),)), tmp_path / "m")
    return tmp_path / "m"
