"""Session 17's other text twins: transformers' ``MarianMTModel`` (``tests/models/marian.py``: encoder-decoder, frozen
sinusoidal positions, one embedding under three names), ``Gemma2ForCausalLM`` (``tests/models/gemma2.py``: attention
and final logit soft-capping, sliding-window layers alternating with global ones, pre and post norms),
``AlbertModel`` (``albert.py``: one layer group's weights run by every layer, factorized embeddings) and
``GPTJForCausalLM`` (``gptj.py``: the interleaved rotary embedding on part of each head, parallel attention and MLP).
Each converts and matches torch, run here on the same data, at its example size and at another batch and length
(padded rows, left or right); strict ``load_state_dict`` of the port's ``torch_parameters()`` into the twin,
gradients to every parameter, train mode, float16. ALBERT's port holds its shared layer once, under its one
``state_dict`` name, and sums its gradient over the layers that run it.

No converter change was needed for these.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

from functools import partial

import pytest
from mlx.utils import tree_flatten

from tests.converters.test_unseen_models14t import _real_rope
from tests.models import albert, gemma2, gptj, marian
from tests.twin_suite import Twin, TwinSuite, assert_gradients_match, token_ids

_ids = partial(token_ids, low=1)


def _gemma2_rope(model):
    _real_rope(model.model)


def _translation(b, n, m):
    """seed -> Marian's ``(input_ids, attention_mask, decoder_input_ids, decoder_attention_mask)``, both sides
    right-padded (row i loses i tokens), pads 0."""
    def make(seed):
        return _ids(b, n, pad_id=0)(seed) + _ids(b, m, pad_id=0)(seed + 50)
    return make


TWINS = {
    "marian": Twin(marian.marian_small, _translation(2, 7, 5), _translation(3, 13, 9), fix=marian.real_sinusoids),
    # window 4: layers 0 and 2 slide, both lengths pass it; the second size left-padded
    "gemma2": Twin(gemma2.gemma2_small, _ids(2, 7), _ids(3, 13, left=True), fix=_gemma2_rope),
    "gemma2_uncapped": Twin(gemma2.gemma2_uncapped_small, _ids(2, 7, False), _ids(1, 12, False), fix=_gemma2_rope),
    "albert": Twin(albert.albert_small, _ids(2, 7, pad_id=0), _ids(3, 13, pad_id=0)),
    "albert_two_groups": Twin(albert.albert_two_groups_small, _ids(2, 7, pad_id=0), _ids(3, 11, pad_id=0)),
    "gptj": Twin(gptj.gptj_small, _ids(2, 7), _ids(3, 13), fix=gptj.real_positions),
    "gptj_full_rotary": Twin(gptj.gptj_full_rotary_small, _ids(2, 7, False), _ids(1, 12, False),
                             fix=gptj.real_positions),
}

SUITE = TwinSuite(TWINS)
# the variants each cost a conversion of their own (6-10 s wall on the loaded machine)
_SLOW = ("gemma2_uncapped", "gptj_full_rotary")
test_twin_matches_torch_at_two_sizes = SUITE.parity_test(slow=_SLOW)
test_a_checkpoint_round_trips_through_the_port = SUITE.round_trip_test(slow=_SLOW)


def test_twins_keep_their_reference_names():
    SUITE.assert_keeps_names({
        "gemma2": ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                   "model.layers.2.self_attn.o_proj.weight", "model.layers.1.mlp.gate_proj.weight",
                   "model.layers.0.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
                   "model.layers.2.pre_feedforward_layernorm.weight",
                   "model.layers.0.post_feedforward_layernorm.weight", "model.norm.weight", "lm_head.weight"],
        "albert": ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                   "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.bias",
                   "encoder.embedding_hidden_mapping_in.weight",
                   "encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight",
                   "encoder.albert_layer_groups.0.albert_layers.0.attention.dense.bias",
                   "encoder.albert_layer_groups.0.albert_layers.0.attention.LayerNorm.weight",
                   "encoder.albert_layer_groups.0.albert_layers.0.ffn.weight",
                   "encoder.albert_layer_groups.0.albert_layers.0.ffn_output.bias",
                   "encoder.albert_layer_groups.0.albert_layers.0.full_layer_layer_norm.weight", "pooler.weight"],
        "albert_two_groups": ["encoder.albert_layer_groups.1.albert_layers.1.attention.key.bias"],
        "marian": ["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                   "model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight",
                   "model.encoder.layers.0.self_attn.q_proj.bias", "model.encoder.layers.1.self_attn_layer_norm.weight",
                   "model.encoder.layers.0.fc1.weight", "model.encoder.layers.1.final_layer_norm.bias",
                   "model.decoder.layers.0.encoder_attn.k_proj.weight",
                   "model.decoder.layers.1.encoder_attn_layer_norm.weight", "model.decoder.layers.0.fc2.bias",
                   "lm_head.weight", "final_logits_bias"],
        "gptj": ["transformer.wte.weight", "transformer.h.0.ln_1.weight", "transformer.h.1.attn.q_proj.weight",
                 "transformer.h.0.attn.out_proj.weight", "transformer.h.1.mlp.fc_in.bias",
                 "transformer.h.0.mlp.fc_out.weight", "transformer.ln_f.bias", "lm_head.bias"],
    })
    state = TWINS["albert"].builder().state_dict()
    assert not any("albert_layers.1" in k or "albert_layer_groups.1" in k or "position_ids" in k for k in state)
    gptj_state = TWINS["gptj"].builder().state_dict()
    assert not any(k.endswith(("attn.bias", "masked_bias", "embed_positions")) for k in gptj_state)


def test_marian_port_holds_the_shared_embedding_once_and_the_positions_frozen():
    """``model.shared`` is also both stacks' ``embed_tokens`` and the head: one array in the port (its gradient the
    sum of the three uses, as torch's); the sinusoid tables are not trainable, in torch and in the port."""
    model, ported = SUITE.converted("marian")
    assert model.lm_head.weight is model.model.shared.weight is model.model.decoder.embed_tokens.weight
    arrays = [a for _, a in tree_flatten(ported.parameters())]
    unique = {id(t) for t in [*model.parameters(), *model.buffers()]}
    assert len({id(a) for a in arrays}) == len(arrays) == len(unique)
    trainable = {n for n, _ in tree_flatten(ported.trainable_parameters())}
    assert not any("embed_positions" in n for n in trainable)


@pytest.mark.parametrize("name", ["albert", "albert_two_groups"])
def test_albert_port_holds_each_shared_layer_once(name):
    """One array per torch parameter and buffer (the non-persistent ``position_ids`` / ``token_type_ids`` too),
    under torch's name: the layer group run 4 (6) times is held once, as in torch."""
    model, ported = SUITE.converted(name)
    arrays = tree_flatten(ported.parameters())
    assert sorted(n for n, _ in arrays) == sorted(n for n, _ in [*model.named_parameters(), *model.named_buffers()])
    assert len({id(a) for _, a in arrays}) == len(arrays)
    assert set(ported.torch_parameters()) == set(model.state_dict())


def test_marian_gradients_to_every_trainable_parameter():
    """Through both stacks and the cross attention into the encoder, the shared embedding's three uses summed."""
    model, ported = SUITE.converted("marian")
    assert_gradients_match(model, ported, _translation(2, 9, 6)(1))


@pytest.mark.parametrize("name, left", [("gemma2", True), ("albert_two_groups", False), ("gptj", False)])
def test_gradients_to_every_parameter(name, left):
    """Gemma2: through both soft-caps' tanh, the sliding mask, the tied head; ALBERT: the shared layers' gradients
    summed over the layers that run them; GPT-J: through the interleaved rotation and the parallel block."""
    model, ported = SUITE.converted(name)
    inputs = _ids(2, 9, left=left, pad_id=0 if "albert" in name else None)(1)
    assert_gradients_match(model, ported, inputs)


@pytest.mark.slow  # a fresh train-mode conversion each (6-10 s wall)
@pytest.mark.parametrize("name", ["marian", "gemma2", "albert", "gptj"])
def test_train_mode_matches_torch(name):
    SUITE.train_mode_check(name)


@pytest.mark.parametrize("name", ["marian", "gemma2", "albert", "gptj"])
def test_float16_port_matches_torch_float16(name):
    """The float16 port against torch's float16 model on the same ids, within 2% of the output's range (torch's own
    float16 run against its float32 one printed on failure). Gemma2's masks and GPT-J's are ``finfo.min`` of the
    working dtype; GPT-J's attention runs in float32 and its logits come back as float32."""
    SUITE.float16_check(name)
