"""One harness for the tests of twins of outside architectures (tests/converters/test_unseen_*.py): a twin's
builder and seeded inputs at its conversion size and at a second size, built with seeded random weights (parameters
that start at 0 or 1 re-randomised, then the twin's own fix), converted once per session, and checked against
torch on the same data at both sizes."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, NamedTuple, Optional

import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, run_ported
from tests.models._common import randomize_


class Twin(NamedTuple):
    builder: Callable[[], nn.Module]
    inputs: Callable  # seed -> example inputs (conversion size)
    second: Callable  # seed -> inputs at the second size
    dynamic: str = "auto"
    fix: Optional[Callable[[nn.Module], None]] = None  # run under no_grad after randomising (fixed buffers)


def image(*shape):
    """seed -> one NCHW (or any shape) normal tensor."""
    return lambda seed: (torch.randn(shape, generator=torch.Generator().manual_seed(seed)),)


def token_ids(b, n, padded=True, left=False, pad_id=None, low=0, vocab=64):
    """seed -> token ids (B, L) in [low, vocab) and, with ``padded``, a 0/1 mask where row i has i padded places
    (at the end, or at the start with ``left``); ``pad_id`` is written at padded places when given."""
    def make(seed):
        ids = torch.randint(low, vocab, (b, n), generator=torch.Generator().manual_seed(seed))
        if not padded:
            return (ids,)
        mask = torch.ones(b, n, dtype=torch.long)
        for i in range(1, b):
            if left:
                mask[i, :i] = 0
            else:
                mask[i, -i:] = 0
        if pad_id is not None:
            ids = torch.where(mask.bool(), ids, pad_id)
        return ids, mask
    return make


class TwinSuite:
    def __init__(self, twins: dict):
        self.twins = twins
        self.converted = lru_cache(maxsize=None)(self._convert)

    def build(self, name, seed=0):
        twin = self.twins[name]
        torch.manual_seed(seed)
        model = randomize_(twin.builder(), seed)
        if twin.fix is not None:
            with torch.no_grad():
                twin.fix(model)
        return model

    def _convert(self, name):
        model = self.build(name)
        twin = self.twins[name]
        return model, porter.convert(model, twin.inputs(0), io_layout="torch", dynamic=twin.dynamic)

    def check(self, name):
        """The port against torch at the conversion size (other data) and at the second size."""
        model, ported = self.converted(name)
        assert_matches(ported, model, self.twins[name].inputs(1))
        assert_matches(ported, model, self.twins[name].second(2))

    def assert_keeps_names(self, expected: dict):
        """Each twin's ``state_dict`` holds the reference implementation's keys listed for it (name -> keys)."""
        for name, keys in expected.items():
            state = self.twins[name].builder().state_dict()
            missing = [k for k in keys if k not in state]
            assert not missing, f"{name}: missing {missing}"

    def parity_test(self, slow=()):
        """The test of every twin at both sizes, for a test module to bind as
        ``test_twin_matches_torch_at_two_sizes = SUITE.parity_test()`` (twins in ``slow`` marked ``slow``)."""
        return self._per_twin(self.check, slow)

    def round_trip_test(self, slow=()):
        """:meth:`round_trip` of every twin, for a test module to bind as
        ``test_a_checkpoint_round_trips_through_the_port = SUITE.round_trip_test()``."""
        return self._per_twin(self.round_trip, slow)

    def _per_twin(self, check, slow=()):
        """A test running ``check(name)`` for every twin (pytest names it after the module attribute bound)."""
        @pytest.mark.parametrize("name", self.params(slow))
        def test(name):
            check(name)
        return test

    def gradients_match(self, name, inputs):
        """The converted twin's eval-mode gradients on ``inputs`` are torch's (:func:`assert_gradients_match`)."""
        model, ported = self.converted(name)
        assert_gradients_match(model, ported, inputs)

    def round_trip(self, name):
        """A freshly built twin (other weights) loaded strictly with the port's ``torch_parameters()`` gives the
        converted model's outputs, as a checkpoint saved by the reference code would; returns that twin."""
        model, ported = self.converted(name)
        other = self.build(name, seed=3)
        other.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ported.torch_parameters().items()},
                              strict=True)
        inputs = self.twins[name].inputs(4)
        with torch.no_grad():
            torch.testing.assert_close(other(*inputs), model(*inputs))
        return other

    def train_mode_check(self, name):
        """Converted in train mode (dropout at 0): outputs at the second size and eval-style gradients to every
        parameter as torch's train-mode model's."""
        twin = self.twins[name]
        model = self.build(name).train()
        ported = porter.convert(model, twin.inputs(0), io_layout="torch", dynamic=twin.dynamic)
        assert_matches(ported, model, twin.second(1))
        assert_gradients_match(model, ported, twin.inputs(2), seed=2)

    def float16_check(self, name, rel=2e-2):
        """The float16 port against torch's float16 model on the second size's inputs (float inputs in float16, ids
        as they are): the first output finite and within ``rel`` of its range (torch's own float16 error against its
        float32 model is printed on failure, as the yardstick)."""
        import copy

        model, ported = self.converted(name)
        x = tuple(t.half() if t.is_floating_point() else t for t in self.twins[name].second(3))
        got = run_ported(ported.astype("float16"), x)[0].astype(np.float32)
        with torch.no_grad():
            ref = torch.utils._pytree.tree_leaves(copy.deepcopy(model).half()(*x))[0].float().numpy()
            full = torch.utils._pytree.tree_leaves(model(*(t.float() if t.is_floating_point() else t for t in x)))[0]
        assert np.isfinite(got).all()
        err, own = np.abs(got - ref).max(), np.abs(full.numpy() - ref).max()
        assert err <= rel * np.abs(ref).max(), (err, own, np.abs(ref).max())

    def params(self, slow=()):
        """The twins' names for ``pytest.mark.parametrize``, those in ``slow`` marked ``slow``."""
        return [pytest.param(n, marks=pytest.mark.slow) if n in slow else n for n in sorted(self.twins)]

    def assert_reference_names(self, expected: dict):
        """Each twin's ``state_dict`` holds the reference library's names ``expected[name]`` lists."""
        for name, keys in expected.items():
            state = self.twins[name].builder().state_dict()
            missing = [k for k in keys if k not in state]
            assert not missing, f"{name}: missing {missing}"

    def float16_errors(self, name, x):
        """``(port_err, torch_err)``: the float16 port's and torch's float16 model's max error on the float16 input
        ``x``, each against torch's float32 output, relative to that output's largest magnitude."""
        import copy

        import mlx.core as mx

        model, ported = self.converted(name)
        x = x.half()
        got = ported.astype("float16")(mx.array(x.float().numpy()))
        assert got.dtype == mx.float16
        got = np.array(got.astype(mx.float32))
        with torch.no_grad():
            ref16 = copy.deepcopy(model).half()(x).float().numpy()
            ref32 = model(x.float()).numpy()
        scale = np.abs(ref32).max()
        return np.abs(got - ref32).max() / scale, np.abs(ref16 - ref32).max() / scale


def assert_gradients_match(model, ported, inputs, seed=1, noise=()):
    """``grad_parity`` passes and covers every trainable parameter of ``model``. The biases named in ``noise`` have a
    zero gradient in exact arithmetic (a constant a later norm or softmax takes off), so both sides hold rounding
    noise: torch's must only be noise-sized, <= 1e-5 of their weight's gradient."""
    result = grad_parity(model, ported, inputs, rtol=1e-3, atol=1e-5, seed=seed)
    grads = {r["name"]: r for r in result["parameters"]}
    assert set(grads) == {n for n, p in model.named_parameters() if p.requires_grad}
    if not noise:
        assert result["ok"], result
        return
    for n in noise:
        assert grads[n]["scale"] <= 1e-5 * grads[n.replace(".bias", ".weight")]["scale"], grads[n]
    assert all(r["ok"] for r in result["inputs"]), result["inputs"]
    assert all(r["ok"] for n, r in grads.items() if n not in noise), [r for r in grads.values() if not r["ok"]]
