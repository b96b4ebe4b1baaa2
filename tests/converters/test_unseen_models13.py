"""Session 13's architectures Porter was not written against: diffusers' ``UNet2DConditionModel``
(``tests/models/diffusers_unet_cond.py``), transformers' ``RobertaModel`` (``roberta.py``) and ``RwkvModel``
(RWKV-4, ``rwkv.py``). Each converts and matches torch, run here on the same data, at its example size and batch
and at a second one; strict ``load_state_dict`` of the port's ``torch_parameters()`` into the twin, gradients, and
the refusals they hit, each naming its cause: RWKV's time loop fixes the sequence length, the UNet's
``forward_upsample_size`` branch the latent's parity, RWKV's one-time in-place rescale of its weights.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import copy
import warnings

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, run_ported
from tests.models import diffusers_unet_cond, encodec, pvt_v2, roberta, rwkv, wavlm
from tests.models._common import randomize_
from tests.twin_suite import Twin, TwinSuite, image


def _latent(b, h, w, length=77, scalar=False):
    """seed -> (latent (B, 4, H, W), timesteps (B,) in [0, 1000) or a 0-d one, encoder states (B, L, 24))."""
    def make(seed):
        gen = torch.Generator().manual_seed(seed)
        t = torch.tensor(37.0) if scalar else torch.rand(b, generator=gen) * 1000
        return torch.randn(b, 4, h, w, generator=gen), t, torch.randn(b, length, 24, generator=gen)
    return make


def _ids(b, n, padded=True):
    """Token ids in [2, 64) (1 is RoBERTa's padding id); with ``padded`` row i ends in i padding tokens and the
    0/1 attention mask says so."""
    def make(seed):
        ids = torch.randint(2, 64, (b, n), generator=torch.Generator().manual_seed(seed))
        if not padded:
            return (ids,)
        mask = torch.ones(b, n, dtype=torch.long)
        for i in range(1, b):
            ids[i, -i:], mask[i, -i:] = 1, 0
        return ids, mask
    return make


def _features(b, t, padded=True):
    """seed -> WavLM encoder features (B, T, 16) and, with ``padded``, a 0/1 mask where row i ends in 2i pads."""
    def make(seed):
        x = torch.randn(b, t, 16, generator=torch.Generator().manual_seed(seed))
        if not padded:
            return (x,)
        mask = torch.ones(b, t, dtype=torch.long)
        for i in range(1, b):
            mask[i, -2 * i:] = 0
        return x, mask
    return make


TWINS = {
    # 8x8 latent, 77 encoder tokens; the second: another batch, a non-square latent and 5 encoder tokens
    "unet2d_condition": Twin(diffusers_unet_cond.unet2d_condition_small, _latent(2, 8, 8), _latent(3, 12, 6, 5)),
    "roberta": Twin(roberta.roberta_small, _ids(2, 7), _ids(3, 11)),
    "roberta_no_mask": Twin(roberta.roberta_small, _ids(2, 7, padded=False), _ids(1, 13, padded=False)),
    # the WKV loop runs over the sequence in Python: the length is fixed (another batch only; tested below)
    "rwkv": Twin(rwkv.rwkv_small, _ids(2, 7, padded=False), _ids(3, 7, padded=False)),
    # WavLM's encoder on features: the log buckets start at distance 4, so 11 and 17 frames reach them; padded
    # frames (row i loses 2i) zeroed in place and masked as keys
    "wavlm": Twin(wavlm.wavlm_encoder_small, lambda seed: _features(2, 11)(seed),
                  lambda seed: _features(3, 17)(seed)),
    "wavlm_no_mask": Twin(wavlm.wavlm_encoder_small, lambda seed: _features(2, 11, False)(seed),
                          lambda seed: _features(1, 5, False)(seed)),
    # 72x56: the sr convs (8, 4, 2) meet 18x14, 9x7, 5x4 maps, sizes they do not all divide (floor)
    "pvt_v2": Twin(pvt_v2.pvt_v2_small, image(2, 3, 64, 64), image(1, 3, 72, 56)),
    # the linear variant pools keys/values to 7x7 adaptively: from 16x16 and 18x14 (uneven windows)
    "pvt_v2_linear": Twin(pvt_v2.pvt_v2_linear_small, image(2, 3, 64, 64), image(3, 3, 72, 56)),
}
SLOW = {"unet2d_condition", "pvt_v2"}  # ~21-22 s CPU to convert

SUITE = TwinSuite(TWINS)
build, _converted = SUITE.build, SUITE.converted


def _marked(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(names)]


@pytest.mark.parametrize("name", _marked(TWINS))
def test_twin_matches_torch_at_two_sizes(name):
    SUITE.check(name)


@pytest.mark.parametrize("name", _marked(TWINS))
def test_a_checkpoint_round_trips_through_the_port(name):
    SUITE.round_trip(name)


def test_twins_keep_their_reference_names():
    expected = {
        "unet2d_condition": [
            "conv_in.weight", "time_embedding.linear_1.weight", "time_embedding.linear_2.bias",
            "down_blocks.0.resnets.0.norm1.weight", "down_blocks.0.resnets.0.time_emb_proj.weight",
            "down_blocks.0.attentions.0.norm.weight", "down_blocks.0.attentions.0.proj_in.weight",
            "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight",
            "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight",
            "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_out.0.bias",
            "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj.weight",
            "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.2.weight",
            "down_blocks.0.attentions.0.transformer_blocks.0.norm3.bias",
            "down_blocks.0.attentions.0.proj_out.weight", "down_blocks.0.downsamplers.0.conv.weight",
            "down_blocks.1.resnets.0.conv_shortcut.weight", "mid_block.attentions.0.proj_in.bias",
            "mid_block.resnets.1.conv2.weight", "up_blocks.0.upsamplers.0.conv.weight",
            "up_blocks.1.attentions.1.transformer_blocks.0.attn2.to_v.weight", "conv_norm_out.weight",
            "conv_out.bias"],
        "roberta": ["embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
                    "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
                    "encoder.layer.0.attention.self.query.weight", "encoder.layer.1.attention.output.dense.bias",
                    "encoder.layer.1.intermediate.dense.weight", "encoder.layer.1.output.LayerNorm.bias",
                    "pooler.dense.weight"],
        "pvt_v2": ["patch_embed.proj.weight", "patch_embed.norm.bias", "stages.0.blocks.0.attn.q.weight",
                   "stages.0.blocks.0.attn.kv.bias", "stages.0.blocks.0.attn.sr.weight",
                   "stages.0.blocks.0.attn.norm.weight", "stages.0.blocks.0.attn.proj.weight",
                   "stages.0.blocks.0.mlp.fc1.weight", "stages.0.blocks.0.mlp.dwconv.weight",
                   "stages.0.blocks.0.mlp.fc2.bias", "stages.1.downsample.proj.weight",
                   "stages.1.downsample.norm.weight", "stages.3.norm.weight", "head.weight"],
        "wavlm": ["pos_conv_embed.conv.bias", "pos_conv_embed.conv.parametrizations.weight.original0",
                  "pos_conv_embed.conv.parametrizations.weight.original1", "layer_norm.weight",
                  "layers.0.attention.rel_attn_embed.weight", "layers.0.attention.gru_rel_pos_const",
                  "layers.1.attention.gru_rel_pos_linear.weight", "layers.1.attention.q_proj.bias",
                  "layers.1.attention.out_proj.weight", "layers.0.feed_forward.intermediate_dense.weight",
                  "layers.0.feed_forward.output_dense.bias", "layers.1.final_layer_norm.weight"],
        "rwkv": ["embeddings.weight", "blocks.0.pre_ln.weight", "blocks.0.ln1.weight", "blocks.1.ln2.bias",
                 "blocks.0.attention.time_decay", "blocks.0.attention.time_first",
                 "blocks.1.attention.time_mix_key", "blocks.1.attention.time_mix_receptance",
                 "blocks.0.attention.key.weight", "blocks.0.attention.output.weight",
                 "blocks.1.feed_forward.time_mix_key", "blocks.1.feed_forward.value.weight", "ln_out.weight"],
    }
    for name, keys in expected.items():
        state = TWINS[name].builder().state_dict()
        missing = [k for k in keys if k not in state]
        assert not missing, f"{name}: missing {missing}"
    state = TWINS["unet2d_condition"].builder().state_dict()
    assert not any(k.endswith(("to_q.bias", "to_k.bias", "to_v.bias")) for k in state)  # diffusers: bias=False
    assert "stages.3.blocks.0.attn.sr.weight" not in TWINS["pvt_v2"].builder().state_dict()  # sr ratio 1
    assert "stages.0.downsample.proj.weight" not in TWINS["pvt_v2"].builder().state_dict()
    assert "layers.1.attention.rel_attn_embed.weight" not in TWINS["wavlm"].builder().state_dict()
    assert "blocks.1.pre_ln.weight" not in TWINS["rwkv"].builder().state_dict()
    assert not any("position_ids" in k or "token_type_ids" in k for k in TWINS["roberta"].builder().state_dict())


# ---------------------------------------------------------------------------------------------------- UNet
@pytest.mark.slow
def test_unet2d_condition_takes_a_0d_timestep_and_other_encoder_lengths():
    """diffusers' pipelines pass a 0-d timestep (``timesteps[None].expand(B)``); the port takes it at any batch.
    The encoder states' length (77 at conversion) is dynamic: 1 and 5 tokens."""
    model, ported = _converted("unet2d_condition")
    assert_matches(ported, model, _latent(2, 8, 8, scalar=True)(5))
    assert_matches(ported, model, _latent(1, 10, 8, length=1, scalar=True)(6))
    assert_matches(ported, model, _latent(3, 6, 6, length=5)(7))


@pytest.mark.slow
def test_unet2d_condition_odd_latent_upsamples_to_the_skip_size():
    """An odd side makes diffusers forward the skip's size to the upsampler (``F.interpolate(size=...)``): a port
    converted at an even latent refuses an odd one naming the condition; converted at an odd one (9x7) it takes
    other odd sizes (11x5) and refuses even ones."""
    model, ported = _converted("unet2d_condition")
    with pytest.raises(ValueError, match=r"input 'sample' \(input 0\) has size 9 in dim 2.*% 2\) == 0"):
        run_ported(ported, _latent(1, 9, 7)(0))
    odd = porter.convert(model, _latent(2, 9, 7)(0), io_layout="torch")
    assert_matches(odd, model, _latent(1, 11, 5, length=3)(1))
    with pytest.raises(ValueError, match=r"input 'sample' \(input 0\) has size 8 in dim 2"):
        run_ported(odd, _latent(1, 8, 7)(0))


@pytest.mark.slow
def test_unet2d_condition_gradients_and_float16():
    """Gradients to the latent, the encoder states and every parameter (GEGLU, cross attention, GroupNorm, the
    nearest upsample); the float16 port against torch's float16 model on the same float16 inputs, within twice
    torch's own float16 error (its float16 run against its float32 one on the same inputs): measured 0.41% of the
    output's range, torch's own 0.30%.
    A float32 timestep near 600 given to both: torch's float16 UNet keeps it float32 into the sinusoid
    (``timesteps[:, None].float()``), and so does the port (``precision.inputs_cast_first``: the graph casts it to
    float32 before any other use); cast to float16 on entry it was 3.1% off. The sinusoid's frequencies
    (``torch.arange(..., dtype=torch.float32)``, folded) stay float32 too (``float32_constants``): rounded to
    float16 they left the port 1.2% off; now 0.30% (torch's own 0.33%)."""
    model, ported = _converted("unet2d_condition")
    result = grad_parity(model, ported, _latent(2, 8, 8)(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    assert {r["name"] for r in result["parameters"]} == {n for n, _ in model.named_parameters()}
    x = [t.half() for t in _latent(2, 8, 6, length=9)(2)]
    half = ported.astype("float16")
    got = np.array(half(*[mx.array(t.float().numpy()) for t in x])[0].astype(mx.float32))
    with torch.no_grad():
        ref = copy.deepcopy(model).half()(*x)[0].float().numpy()
        own = np.abs(model(*[t.float() for t in x])[0].numpy() - ref).max()
    assert np.abs(got - ref).max() <= 2 * own
    assert half._program.inputs_as_given == frozenset({"timestep"})
    sample, t, enc = x
    t = torch.full(t.shape, 601.3)  # float32, as diffusers' schedulers give it
    got = np.array(half(mx.array(sample.float().numpy()), mx.array(t.numpy()), mx.array(enc.float().numpy()))[0]
                   .astype(mx.float32))
    with torch.no_grad():
        ref = copy.deepcopy(model).half()(sample, t, enc)[0].float().numpy()
        own = np.abs(model(sample.float(), t, enc.float())[0].numpy() - ref).max()
    assert np.abs(got - ref).max() <= 2 * own


# ---------------------------------------------------------------------------------------------------- RoBERTa
def test_roberta_gradients_to_every_parameter():
    model, ported = _converted("roberta")
    result = grad_parity(model, ported, _ids(3, 9)(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    assert {r["name"] for r in result["parameters"]} == {n for n, _ in model.named_parameters()}


def test_roberta_positions_past_the_table_are_refused_like_torch():
    """39 tokens need position 40 of a 40-row table: torch raises, and so does the port (never reads past it)."""
    model, ported = _converted("roberta_no_mask")
    x = _ids(1, 39, padded=False)(0)
    with pytest.raises(IndexError, match="index out of range"):
        model(*x)
    with pytest.raises(ValueError, match=r"Embedding: index 40 is out of range for a dimension of size "
                                         r"40 .*'embeddings\.position_embeddings'"):
        run_ported(ported, x)


# ---------------------------------------------------------------------------------------------------- RWKV
def test_rwkv_with_state_matches_torch():
    """``use_cache=True``: the five state tensors built in the forward and written per layer by slice assignment
    come back as outputs, float32 for the WKV ones."""
    torch.manual_seed(0)
    model = randomize_(rwkv.rwkv_small(), 0)
    ported = porter.convert(model, _ids(2, 7, padded=False)(0), example_kwargs={"use_cache": True},
                            io_layout="torch")
    for seed, batch in ((1, 2), (2, 3)):
        assert_matches(ported, model, _ids(batch, 7, padded=False)(seed), kwargs={"use_cache": True})


def test_rwkv_gradients_to_every_parameter():
    model, ported = _converted("rwkv")
    result = grad_parity(model, ported, _ids(2, 7, padded=False)(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    assert {r["name"] for r in result["parameters"]} == {n for n, _ in model.named_parameters()}


def test_rwkv_another_length_is_refused_naming_the_dim():
    """transformers' CPU WKV is ``for current_index in range(seq_length)``, unrolled by the capture: another
    length is refused before any kernel, naming the input, the dim and the size (found, not fixed)."""
    _, ported = _converted("rwkv")
    with pytest.raises(ValueError,
                       match=r"input 'input_ids' \(input 0\) has size 9 in dim 1.*input_ids.size\(1\) == 7"):
        run_ported(ported, _ids(2, 9, padded=False)(0))


def test_rwkv_rescale_in_the_first_eval_forward_is_refused_with_the_way_out():
    """transformers' ``RwkvModel`` divides block weights in place on its first eval forward (``_rescale_layers``,
    ``rescale_every`` 6 by default): a write into weights the next call reads, refused naming the weight and
    saying that a write made only once is out of the way after one eager call; after one, the port matches."""
    torch.manual_seed(0)
    model = randomize_(rwkv.rwkv_rescaled_small(), 0)
    example = _ids(2, 7, padded=False)(0)
    with pytest.raises(NotImplementedError,
                       match=r"writes 'blocks\.0\.attention\.output\.weight' in place.*run the model once"):
        porter.convert(model, example, io_layout="torch")
    with torch.no_grad():
        model(*example)  # rescales once; later eval calls leave the weights alone
    ported = porter.convert(model, example, io_layout="torch")
    assert_matches(ported, model, _ids(3, 7, padded=False)(1))


# ---------------------------------------------------------------------------------------------------- EnCodec
def _wave(b, t):
    return lambda seed: (torch.randn(b, 1, t, generator=torch.Generator().manual_seed(seed)),)


def _encodec(builder):
    torch.manual_seed(0)
    return randomize_(builder(), 0)


@pytest.mark.parametrize("builder", [encodec.encodec_small, encodec.encodec_non_causal_small])
def test_encodec_is_refused_by_torch_export_naming_the_cause(builder):
    """transformers' ``EncodecConv1d`` keeps ``stride``/``kernel_size``/``padding_total`` as 0-d int64 buffers and
    computes its padding with tensor ops on them and the length, then branches on ``length <= max(pads)``: under
    torch.export those values are data-dependent (found, not fixed). The refusal says so; a trace converts
    (next test)."""
    model = _encodec(builder)
    with pytest.raises(porter.CaptureError, match=r"data-dependent.*torch.jit"):
        porter.convert(model, _wave(2, 101)(0), io_layout="torch")


@pytest.mark.parametrize("builder", [encodec.encodec_small, encodec.encodec_non_causal_small])
def test_encodec_traced_matches_torch_at_other_lengths_and_refuses_short_ones(builder, tmp_path):
    """``torch.jit.trace`` records the padding arithmetic on the traced sizes (``aten::size`` -> tensors -> pad
    sizes), so the port follows other lengths and batches; ``F.pad(..., "reflect", 0.0)`` (an explicit zero fill,
    which torch allows) runs. The trace baked ``length <= max_pad`` as False: a length that needs the short-input
    branch (9 samples: 2 frames at the deepest conv) is refused by the pad naming the sizes, never computed wrong.
    The trace's ``state_dict`` holds the non-persistent size buffers too (TorchScript drops ``persistent=False``),
    so the port's ``torch_parameters()`` are the model's plus those."""
    model = _encodec(builder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(model, _wave(2, 101)(0), check_trace=False)
    ported = porter.convert(traced, _wave(2, 101)(0), io_layout="torch")
    porter.save(ported, tmp_path / "encodec")
    loaded = porter.load(tmp_path / "encodec")
    for port in (ported, loaded):
        for make, seed in ((_wave(3, 101), 1), (_wave(1, 77), 2), (_wave(2, 160), 3)):
            assert_matches(port, model, make(seed))
    model(*_wave(1, 9)(0))  # torch pads the short input first
    with pytest.raises(ValueError, match=r"Padding size should be less than the corresponding input dimension"):
        run_ported(ported, _wave(1, 9)(0))
    extra = set(ported.torch_parameters()) - set(model.state_dict())
    assert extra and all(k.rsplit(".", 1)[1] in ("stride", "kernel_size", "padding_total") for k in extra)
    result = grad_parity(model, ported, _wave(2, 77)(4), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result


# ---------------------------------------------------------------------------------------------------- PVT v2
@pytest.mark.parametrize("name", [pytest.param("pvt_v2", marks=pytest.mark.slow), "pvt_v2_linear"])
def test_pvt_v2_gradients_and_odd_images(name):
    """Gradients through the spatial-reduction convs, the adaptive pool, the depthwise MLP conv and the
    channels-last patch-embed norms; a 33x45 image (maps 9x12, 5x6, 3x3, 2x2: the 8x8 reduction conv meets a
    9-row map) matches too."""
    model, ported = _converted(name)
    result = grad_parity(model, ported, image(2, 3, 72, 56)(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    assert {r["name"] for r in result["parameters"]} == {n for n, _ in model.named_parameters()}
    assert_matches(ported, model, image(1, 3, 33, 45)(2))


# ---------------------------------------------------------------------------------------------------- WavLM
def test_wavlm_gradients_to_the_features_and_every_parameter():
    """Through the bucketed bias embedding (layer 0 only), the gate, ``multi_head_attention_forward``'s separate
    projections and the weight-normed positional conv."""
    model, ported = _converted("wavlm_no_mask")
    result = grad_parity(model, ported, _features(2, 13, False)(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    assert {r["name"] for r in result["parameters"]} == {n for n, _ in model.named_parameters()}


def test_wavlm_buckets_match_torch_past_the_log_range():
    """Distances beyond ``max_distance`` (20) clamp to the last bucket: 29 frames, both signs."""
    model, ported = _converted("wavlm")
    assert_matches(ported, model, _features(2, 29)(3))
