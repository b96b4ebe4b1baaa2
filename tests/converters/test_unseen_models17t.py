"""Session 17's sparse mixture-of-experts twins: transformers' ``MixtralModel`` and ``Qwen2MoeModel``
(``tests/models/mixtral.py``: Mixtral's loop over the experts that were hit, Qwen2-MoE's loop over every expert with
a sigmoid-gated shared expert, top-k weights renormalised or not). Each converts and matches torch, run here on the
same data, at its example size and at another batch and length (padded rows; left-padded for Mixtral), the router
logits of every layer too; strict ``load_state_dict`` of the port's ``torch_parameters()`` into the twin, gradients
to every parameter (router through ``topk``, every expert), train mode, float16.

torch.export cannot capture the blocks' data-dependent token selection (Mixtral: ``for expert_idx in expert_hit``
needs the hit count; Qwen2-MoE records ``nonzero``): the capture now runs each such block as its dense equivalent,
checked against the block first (``converters/capture_moe.py``, ``tests/converters/test_capture_moe.py``).

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

from functools import partial

import pytest

from tests.converters.test_unseen_models14t import _real_rope
from tests.models import mixtral
from tests.twin_suite import Twin, TwinSuite, assert_gradients_match, token_ids

_ids = partial(token_ids, low=1)

TWINS = {
    "mixtral": Twin(mixtral.mixtral_small, _ids(2, 7), _ids(3, 13, left=True), fix=_real_rope),
    "qwen2_moe": Twin(mixtral.qwen2_moe_small, _ids(2, 7), _ids(3, 11), fix=_real_rope),
    "qwen2_moe_normalized": Twin(mixtral.qwen2_moe_normalized_small, _ids(2, 7, False), _ids(1, 12, False),
                                 fix=_real_rope),
}

SUITE = TwinSuite(TWINS)
test_twin_matches_torch_at_two_sizes = SUITE.parity_test()
test_a_checkpoint_round_trips_through_the_port = SUITE.round_trip_test()


def test_twins_keep_their_reference_names():
    SUITE.assert_keeps_names({
        "mixtral": ["embed_tokens.weight", "layers.0.self_attn.q_proj.weight", "layers.1.self_attn.o_proj.weight",
                    "layers.0.block_sparse_moe.gate.weight", "layers.0.block_sparse_moe.experts.0.w1.weight",
                    "layers.1.block_sparse_moe.experts.3.w2.weight", "layers.1.block_sparse_moe.experts.2.w3.weight",
                    "layers.0.input_layernorm.weight", "layers.1.post_attention_layernorm.weight", "norm.weight"],
        "qwen2_moe": ["layers.0.self_attn.q_proj.bias", "layers.0.mlp.gate.weight",
                      "layers.0.mlp.experts.5.gate_proj.weight", "layers.1.mlp.experts.0.up_proj.weight",
                      "layers.1.mlp.experts.2.down_proj.weight", "layers.0.mlp.shared_expert.gate_proj.weight",
                      "layers.1.mlp.shared_expert.down_proj.weight", "layers.0.mlp.shared_expert_gate.weight"],
    })
    state = TWINS["mixtral"].builder().state_dict()
    assert not any(k.endswith("gate.bias") or "inv_freq" in k or ".mlp." in k for k in state)


def test_the_ported_tree_keeps_every_expert():
    """The port holds each expert's weights under its torch path (not a stacked copy) and runs them all."""
    _, ported = SUITE.converted("mixtral")
    names = set(ported.torch_parameters())
    assert {f"layers.1.block_sparse_moe.experts.{e}.w{i}.weight" for e in range(4) for i in (1, 2, 3)} <= names


@pytest.mark.parametrize("name, left", [("mixtral", True), ("qwen2_moe", False)])
def test_gradients_to_every_parameter(name, left):
    """To the router through ``topk`` and the renormalisation, to every expert through its weight column, to
    Qwen2-MoE's shared expert and its sigmoid gate (every expert is hit at these sizes)."""
    model, ported = SUITE.converted(name)
    assert_gradients_match(model, ported, _ids(2, 9, left=left)(1))


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_train_mode_matches_torch(name):
    SUITE.train_mode_check(name)


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_float16_port_matches_torch_float16(name):
    """The float16 port against torch's float16 model on the same ids, within 2% of the output's range (the
    router's softmax in float32 in both; torch's own float16 run against its float32 one printed on failure)."""
    SUITE.float16_check(name)
