"""Hugging Face-style KV caches passed in and returned (``past_key_values``: a tuple of ``(key, value)`` per layer;
``use_cache=True`` returns the new one): a decoder converts as two ports, the prefill (no past) and the decode
step (a past of any length), and decoding token by token gives torch's logits and caches call by call, at two batch
sizes. The cache argument binds as the forward takes it (tuples nested as converted; a wrong nesting or a ``None``
element is a ``TypeError`` naming the element), also after save/load.

Torch is the oracle: every step runs the torch model on the same tokens and caches in the test.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from tests.models.gpt2_cache import gpt2_cached_small


@pytest.fixture(scope="module")
def ports():
    torch.manual_seed(0)
    model = gpt2_cached_small(seed=3)
    ids = torch.randint(0, 97, (2, 7))
    prefill = porter.convert(model, (ids,))
    with torch.no_grad():
        _, past = model(ids)
    decode = porter.convert(model, (ids[:, :1],), example_kwargs={"past_key_values": past})
    return model, prefill, decode


def _close(mine, theirs, what):
    np.testing.assert_allclose(np.asarray(mine), theirs.numpy(), rtol=1e-5, atol=1e-5, err_msg=what)


def _check_cache(mine, theirs, what):
    assert len(mine) == len(theirs) and all(len(a) == len(b) == 2 for a, b in zip(mine, theirs))
    for layer, (a, b) in enumerate(zip(mine, theirs)):
        for i in range(2):
            assert tuple(a[i].shape) == tuple(b[i].shape), f"{what}: layer {layer} {'kv'[i]}"
            _close(a[i], b[i], f"{what}: layer {layer} {'kv'[i]}")


def test_decode_port_takes_the_cache_by_name(ports):
    _, _, decode = ports
    assert decode.call_signature == "(input_ids, past_key_values, use_cache=True)"
    assert decode.input_arguments == ["input_ids", "past_key_values[0][0]", "past_key_values[0][1]",
                                      "past_key_values[1][0]", "past_key_values[1][1]"]
    assert {d["input"] for d in decode.dynamic_dims if d["axis"] == 2} == {1, 2, 3, 4}  # the past's length


@pytest.mark.parametrize("batch, prompt", [(2, 5), (3, 9)])
def test_prefill_then_five_decode_steps_match_torch(ports, batch, prompt):
    model, prefill, decode = ports
    ids = torch.randint(0, 97, (batch, prompt), generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        logits, past = model(ids)
    mine_logits, mine_past = prefill(mx.array(ids.numpy()))
    _close(mine_logits, logits, "prefill logits")
    _check_cache(mine_past, past, "prefill cache")
    token = logits[:, -1:].argmax(-1)
    for step in range(5):
        with torch.no_grad():
            logits, past = model(token, past_key_values=past)
        mine_logits, mine_past = decode(mx.array(token.numpy()), past_key_values=mine_past)
        assert past[0][0].shape[2] == prompt + step + 1
        _close(mine_logits, logits, f"step {step} logits")
        _check_cache(mine_past, past, f"step {step} cache")
        assert np.array_equal(np.asarray(mine_logits)[:, -1].argmax(-1), logits[:, -1].argmax(-1).numpy())
        token = logits[:, -1:].argmax(-1)


def test_a_wrongly_nested_cache_is_refused_naming_the_element(ports):
    model, prefill, decode = ports
    ids = mx.array(np.zeros((2, 3), np.int64))
    _, past = prefill(ids)
    token = mx.array(np.zeros((2, 1), np.int64))
    with pytest.raises(TypeError, match=r"'past_key_values' was converted as a tuple of 2 .*but got a tuple of 1"):
        decode(token, past_key_values=past[:1])
    with pytest.raises(TypeError, match=r"'past_key_values'\[0\]\[1\] was converted with a tensor, so it cannot be "
                                        r"None"):
        decode(token, past_key_values=[(past[0][0], None), past[1]])
    with pytest.raises(TypeError, match=r"'past_key_values'\[1\] was converted as a tuple of 2 .*but got an array"):
        decode(token, past_key_values=(past[0], past[1][0]))
    with pytest.raises(TypeError, match=r"'past_key_values'\[0\]\[0\] was converted with a tensor, but got a tuple"):
        decode(token, past_key_values=((past[0], past[0][1]), past[1]))
    lists = [list(layer) for layer in past]  # lists are tuples to the binding, as to torch's pytree
    mx.eval(decode(token, past_key_values=lists))


def test_the_decode_port_round_trips_through_save_and_load(ports, tmp_path):
    model, prefill, decode = ports
    porter.save(decode, tmp_path / "decode")
    loaded = porter.load(tmp_path / "decode")
    ids = torch.randint(0, 97, (1, 4), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        logits, past = model(ids)
        token = logits[:, -1:].argmax(-1)
        logits, new_past = model(token, past_key_values=past)
    mine = [tuple(mx.array(t.numpy()) for t in layer) for layer in past]
    mine_logits, mine_past = loaded(mx.array(token.numpy()), past_key_values=mine)
    assert loaded.call_signature == decode.call_signature
    _close(mine_logits, logits, "loaded decode logits")
    _check_cache(mine_past, new_past, "loaded decode cache")
    args, kwargs = loaded.split_inputs(list(range(5)))
    assert (args, kwargs) == ([0, ((1, 2), (3, 4))], {})


def test_a_cache_example_must_hold_tensors():
    model = gpt2_cached_small(seed=3)
    ids = torch.zeros(1, 1, dtype=torch.long)
    with pytest.raises(TypeError, match=r"example_kwargs\['past_key_values'\]\[0\]\[1\] must be a torch.Tensor"):
        porter.convert(model, (ids,), example_kwargs={"past_key_values": ((torch.zeros(1, 4, 2, 8), 3),)})
    with pytest.raises(TypeError, match=r"example_kwargs\['past_key_values'\] must be .*but got an empty tuple"):
        porter.convert(model, (ids,), example_kwargs={"past_key_values": ()})


# ---------------------------------------------------------------------------------------------------- hostile paths
def _record(*paths, constants=None):
    record = {"params": [{"name": "ids", "kind": "positional_or_keyword"},
                         {"name": "past", "kind": "positional_or_keyword"}],
              "inputs": [{"param": "ids"}] + [{"param": "past", "path": p} for p in paths]}
    if constants is not None:
        record["constants"] = constants
    return record


HOSTILE_PATHS = {
    "not a list": (_record("01"), "path' must be a list"),
    "a bool index": (_record([True]), "path' must be a list"),
    "a negative index": (_record([-1]), "path' must be a list"),
    "too deep": (_record([0] * 9), "at most 8 indices"),
    "a gap": (_record([0], [2]), r"the indices \[0, 2\] at one level"),
    "a gap one level down": (_record([0, 0], [0, 2], [1, 0]), r"'past\[0\]' the indices \[0, 2\]"),
    "a prefix of another": (_record([0], [0, 1], [1]), r"'past\[0\]' both whole and by 'path'"),
    "whole and by path": (_record([], [0]), "both whole and by 'path'"),
    "the same path twice": (_record([0], [0]), "a second time"),
    "a constant inside a tuple": (_record([0], constants=[{"param": "past", "path": [1], "value": 3}]),
                                  "inside a tuple argument cannot be a constant"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PATHS))
def test_hostile_input_paths_are_refused_naming_the_field(case):
    from porter.converters.input_binding import compile_signature

    record, message = HOSTILE_PATHS[case]
    with pytest.raises(ValueError, match=message):
        compile_signature(record, len(record["inputs"]))


def test_a_whole_tree_of_paths_binds():
    from porter.converters.input_binding import Binding

    binding = Binding(_record([1, 1], [0], [1, 0]), 4)  # inputs in any order: past = (in 2, (in 3, in 1))
    assert binding.bind(("i", ("a", ["b", "c"])), {}) == ["i", "c", "a", "b"]
    assert binding.names() == ["ids", "past[1][1]", "past[0]", "past[1][0]"]
    assert binding.split(["i", "c", "a", "b"]) == (["i"], {"past": ("a", ("b", "c"))})
