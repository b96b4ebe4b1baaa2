"""Session 17's encoder twins: transformers' ``HubertModel`` (``tests/models/hubert.py``: wav2vec2's conv feature
encoder with its group norm and weight-normed positional conv, the audio padding mask turned into a frame mask by
conv length arithmetic and ``flip``-``cumsum``-``flip``), ``SiglipModel`` (``tests/models/siglip.py``: vision and
text towers in one forward, the attention-pooling head's probe through ``nn.MultiheadAttention``, last-token text
pooling, the sigmoid logits between L2-normalised embeddings; as many texts as images or not),
``PerceiverForSequenceClassification`` (``tests/models/perceiver.py``: learned latents cross-attending to the token
embeddings, score and value widths apart, the self-attention stack run ``num_blocks`` times with the same weights, a
one-query classification decoder) and ``DistilBertForSequenceClassification`` (``distilbert.py``: ``masked_fill`` of
the expanded padding mask, post-norm blocks; learned positions, or numpy sinusoids frozen with ``requires_grad =
False``). Each converts and matches torch, run here on the same data, at its example size and at another batch and
length (padded rows), the Perceiver's latents too; strict ``load_state_dict`` of the port's ``torch_parameters()``
into the twin, gradients to every trainable parameter (the frozen table gets none, in torch and in the port), train
mode, float16.

No converter change was needed for these.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

from tests.models import distilbert, hubert, perceiver, siglip
from tests.twin_suite import Twin, TwinSuite, assert_gradients_match, token_ids

_ids = partial(token_ids, low=1)


def _texts_and_images(texts, length, images, padded=True):
    """seed -> SigLIP's ``(input_ids (texts, length), pixel_values (images, 3, 24, 24)[, attention_mask])``."""
    def make(seed):
        ids = _ids(texts, length, padded=padded)(seed)
        pixels = torch.randn(images, 3, 24, 24, generator=torch.Generator().manual_seed(seed + 100))
        return (ids[0], pixels) + ids[1:]
    return make


def _audio(b, samples, padded=True):
    """seed -> HuBERT's ``(input_values (b, samples)[, attention_mask])``: row i loses its last 37 * i samples
    (zeroed, as a feature extractor pads)."""
    def make(seed):
        x = torch.randn(b, samples, generator=torch.Generator().manual_seed(seed))
        if not padded:
            return (x,)
        mask = torch.ones(b, samples, dtype=torch.long)
        for i in range(1, b):
            mask[i, samples - 37 * i:] = 0
        return x * mask, mask
    return make


TWINS = {
    # 400 samples -> 19 frames (the padded row: 17); 333 -> 16 frames (the padded rows: 14 and 12)
    "hubert": Twin(hubert.hubert_small, _audio(2, 400), _audio(3, 333)),
    "hubert_no_mask": Twin(hubert.hubert_small, _audio(2, 400, False), _audio(1, 357, False)),
    # 2 texts against 3 images, then 3 longer texts against 1 image
    "siglip": Twin(siglip.siglip_small, _texts_and_images(2, 7, 3), _texts_and_images(3, 13, 1)),
    "perceiver": Twin(perceiver.perceiver_small, _ids(2, 7), _ids(3, 13)),
    "perceiver_default_channels": Twin(perceiver.perceiver_default_channels_small, _ids(2, 7, False),
                                       _ids(1, 12, False)),
    "distilbert": Twin(distilbert.distilbert_small, _ids(2, 7, pad_id=0), _ids(3, 13, pad_id=0)),
    "distilbert_sinusoidal": Twin(distilbert.distilbert_sinusoidal_small, _ids(2, 7, pad_id=0),
                                  _ids(3, 11, pad_id=0), fix=distilbert.real_sinusoids),
}

SUITE = TwinSuite(TWINS)
# a conversion of its own (~10 s wall)
_SLOW = ("perceiver_default_channels", "hubert_no_mask")
test_twin_matches_torch_at_two_sizes = SUITE.parity_test(slow=_SLOW)
test_a_checkpoint_round_trips_through_the_port = SUITE.round_trip_test(slow=_SLOW)


def test_twins_keep_their_reference_names():
    layer = "perceiver.encoder.cross_attention."
    decoder = "perceiver.decoder.decoder."
    SUITE.assert_keeps_names({
        "perceiver": ["perceiver.input_preprocessor.embeddings.weight",
                      "perceiver.input_preprocessor.position_embeddings.weight", "perceiver.embeddings.latents",
                      layer + "attention.self.layernorm1.weight", layer + "attention.self.layernorm2.bias",
                      layer + "attention.self.query.weight", layer + "attention.self.key.bias",
                      layer + "attention.self.value.weight", layer + "attention.output.dense.weight",
                      layer + "layernorm.weight", layer + "mlp.dense1.weight", layer + "mlp.dense2.bias",
                      "perceiver.encoder.self_attends.1.attention.self.query.weight",
                      decoder + "output_position_encodings.position_embeddings",
                      decoder + "decoding_cross_attention.attention.self.layernorm2.weight",
                      decoder + "final_layer.weight"],
        "hubert": ["feature_extractor.conv_layers.0.conv.weight", "feature_extractor.conv_layers.0.layer_norm.weight",
                   "feature_extractor.conv_layers.2.conv.weight", "feature_projection.layer_norm.bias",
                   "feature_projection.projection.weight",
                   "encoder.pos_conv_embed.conv.parametrizations.weight.original0",
                   "encoder.pos_conv_embed.conv.parametrizations.weight.original1", "encoder.layer_norm.weight",
                   "encoder.layers.0.attention.k_proj.bias", "encoder.layers.1.attention.out_proj.weight",
                   "encoder.layers.0.layer_norm.weight", "encoder.layers.1.feed_forward.intermediate_dense.weight",
                   "encoder.layers.0.feed_forward.output_dense.bias", "encoder.layers.1.final_layer_norm.weight"],
        "siglip": ["vision_model.embeddings.patch_embedding.weight",
                   "vision_model.embeddings.position_embedding.weight",
                   "vision_model.encoder.layers.1.self_attn.q_proj.weight",
                   "vision_model.encoder.layers.0.layer_norm1.bias", "vision_model.encoder.layers.0.mlp.fc2.weight",
                   "vision_model.post_layernorm.weight", "vision_model.head.probe",
                   "vision_model.head.attention.in_proj_weight", "vision_model.head.attention.out_proj.bias",
                   "vision_model.head.layernorm.weight", "vision_model.head.mlp.fc1.bias",
                   "text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight",
                   "text_model.encoder.layers.1.self_attn.out_proj.bias", "text_model.final_layer_norm.weight",
                   "text_model.head.weight", "logit_scale", "logit_bias"],
        "distilbert": ["distilbert.embeddings.word_embeddings.weight",
                       "distilbert.embeddings.position_embeddings.weight", "distilbert.embeddings.LayerNorm.weight",
                       "distilbert.transformer.layer.0.attention.q_lin.weight",
                       "distilbert.transformer.layer.1.attention.out_lin.bias",
                       "distilbert.transformer.layer.0.sa_layer_norm.weight",
                       "distilbert.transformer.layer.1.ffn.lin1.weight",
                       "distilbert.transformer.layer.0.ffn.lin2.bias",
                       "distilbert.transformer.layer.1.output_layer_norm.bias", "pre_classifier.weight",
                       "classifier.bias"],
    })
    state = TWINS["perceiver"].builder().state_dict()
    assert not any("self_attends.2" in k or "self_attends.0.attention.self.layernorm2" in k for k in state)
    assert not any("position_ids" in k for k in TWINS["siglip"].builder().state_dict())
    assert "distilbert.embeddings.position_ids" not in TWINS["distilbert"].builder().state_dict()


def test_hubert_gradients_to_the_audio_and_every_parameter():
    """Through the conv stack and its group norm, the weight norm's ``g`` and ``v``, the zeroed padded frames."""
    model, ported = SUITE.converted("hubert")
    assert_gradients_match(model, ported, _audio(2, 371)(1))


def test_siglip_gradients_to_the_pixels_and_every_parameter():
    """Through the logits' ``logit_scale.exp()``, both normalisations, the pooling head's multihead attention and
    its probe's ``repeat``, the patch conv; the text tower's last-token pooling under the padding mask."""
    model, ported = SUITE.converted("siglip")
    assert_gradients_match(model, ported, _texts_and_images(3, 9, 2)(1))


@pytest.mark.parametrize("name", ["perceiver", "distilbert", "distilbert_sinusoidal"])
def test_gradients_to_every_parameter(name):
    """Perceiver: the latents through their expand, the self-attention weights summed over the blocks that reuse
    them, the decoder's query; DistilBERT: through the masked fill; the frozen sinusoid table gets none."""
    model, ported = SUITE.converted(name)
    assert_gradients_match(model, ported, _ids(2, 9, pad_id=0)(1))
    if name == "distilbert_sinusoidal":
        assert not model.distilbert.embeddings.position_embeddings.weight.requires_grad


@pytest.mark.slow  # a fresh train-mode conversion each (8-20 s wall)
@pytest.mark.parametrize("name", ["hubert", "siglip", "perceiver", "distilbert"])
def test_train_mode_matches_torch(name):
    SUITE.train_mode_check(name)


@pytest.mark.parametrize("name", ["hubert", "siglip", "perceiver", "distilbert"])
def test_float16_port_matches_torch_float16(name):
    """The float16 port against torch's float16 model on the same ids (and float16 pixels or audio), within 2% of
    the output's range (torch's own float16 run against its float32 one printed on failure)."""
    SUITE.float16_check(name)
