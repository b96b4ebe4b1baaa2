"""Session 19's architectures Porter was not written against: timm's InceptionNeXt (``tests/models/inception_next.py``:
uneven channel split into identity, square and band depthwise branches, layer scale), HF MobileViTV2
(``tests/models/mobilevitv2.py``: ``F.unfold``/``F.fold`` patches, linear self-attention, ``GroupNorm(1)``), HF
PatchTST (``tests/models/patchtst.py``: masked std/mean scalers, ``unfold`` patches, attention across time and across
channels, batch norm over the transposed tokens, class token) and torchvision's detection heads
(``tests/models/torchvision_heads.py``): FCOS (GroupNorm towers, ReLU'd box distances, centre-ness), SSD300 on VGG-16
(ceil-mode pool, L2-normalised conv4_3 with a learnt scale, atrous fc6, frozen first stages), SSDlite320 on
MobileNetV3 (the backbone split inside a block, depthwise extra blocks to 1x1), the RPN head on an FPN with its
flattening and pre-NMS top-n (``topk`` per level, gather), and the RoI heads (v2's conv + BN box head, Mask R-CNN's
and Keypoint R-CNN's conv stacks and transposed-conv predictors, the keypoints' bilinear x2); and Informer's
ProbSparse attention (``tests/models/informer.py``: its core with the key sample as an input; HF's form, which
samples with ``torch.randint``, refused). Each twin converts and matches torch, run here on the same data, at its
example size and a second one; strict ``load_state_dict`` of the port's ``torch_parameters()`` into the twin,
gradients to every trainable parameter, train mode, float16.

Second sizes: SSD's and SSDlite's inputs are fixed by the model (300x300, 320x320), PatchTST's context length too:
another batch; FCOS and the RPN another batch and image size (75x50: maps no stride divides), MobileViTV2 72x88
(odd maps under its patches), InceptionNeXt 72x56, the RoI heads another number of regions.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output. SSDlite's and PatchTST
prediction's batch norms hold statistics measured on a seeded batch (``calibrate_batch_norms``): with random ones
SSDlite's activations grew 60x through the backbone and PatchTST's residual stream to ~900, and torch's own float32
output was 1.5e-4 of the range from its float64 one (the port's as far, block by block no further than torch's), so
the bar measured noise.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import porter
from porter.validate_half import DEFAULT_FACTOR
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, run_ported
from tests.models import inception_next as inx
from tests.models import informer
from tests.models import mobilevitv2 as mv
from tests.models import patchtst as pt
from tests.models import torchvision_heads as th
from tests.twin_suite import Twin, TwinSuite, assert_gradients_match, image


def series(batch, length=32, channels=3):
    """seed -> PatchTST's ``past_values`` (B, L, C) and ``past_observed_mask`` (0/1 floats, 20% missing; the second
    example's channel 1 never observed, where the mean scaler falls back on the batch's scale)."""
    def make(seed):
        gen = torch.Generator().manual_seed(seed)
        values = torch.randn(batch, length, channels, generator=gen) * 2 + 1
        observed = (torch.rand(batch, length, channels, generator=gen) > 0.2).float()
        observed[1, :, 1] = 0
        return values, observed
    return make


def regions(count, channels=16):
    """seed -> pooled RoI features: box ``(R, C, 7, 7)``, mask and keypoint ``(R, C, 14, 14)``."""
    def make(seed):
        gen = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(count, channels, s, s, generator=gen) for s in (7, 14, 14))
    return make


TWINS = {
    "fcos": Twin(th.fcos_small, image(2, 3, 64, 64), image(1, 3, 75, 50)),
    "ssd300_vgg16": Twin(th.ssd300_vgg16_small, image(1, 3, 300, 300), image(2, 3, 300, 300), dynamic="batch"),
    "ssdlite320": Twin(th.ssdlite320_mobilenet_v3_large_small, image(2, 3, 320, 320), image(3, 3, 320, 320),
                       dynamic="batch", fix=th.calibrate_ssdlite),
    "rpn_fpn": Twin(th.rpn_fpn_small, image(2, 3, 64, 64), image(1, 3, 75, 50)),
    "roi_heads": Twin(th.roi_heads_small, regions(5), regions(3), dynamic="batch"),
    # the context length is the model's: another batch
    "patchtst_prediction": Twin(pt.patchtst_prediction_small, series(2), series(3), dynamic="batch",
                                fix=pt.calibrate_patchtst),
    "patchtst_classification": Twin(pt.patchtst_classification_small, series(3), series(2), dynamic="batch"),
    # 72x88: maps of 9x11, 5x6 and 3x3 under the 2x2 patches (unfold drops the odd row and column, fold zero-fills)
    "mobilevitv2": Twin(mv.mobilevitv2_small, image(2, 3, 64, 64), image(1, 3, 72, 88)),
    # 72x56: maps of 18x14, 9x7, 4x3, 2x1 (the 11-tap band convs pad past the map)
    "inception_next": Twin(inx.inception_next_small, image(2, 3, 64, 64), image(1, 3, 72, 56)),
}
# SSD's and SSDlite's fixed 300x300 and 320x320 inputs: 50-170 s of tests each on two loaded cores
SLOW = ("ssd300_vgg16", "ssdlite320")
SUITE = TwinSuite(TWINS)
build, _converted = SUITE.build, SUITE.converted
test_twin_matches_torch_at_two_sizes = SUITE.parity_test(slow=SLOW)
test_a_checkpoint_round_trips_through_the_port = SUITE.round_trip_test(slow=SLOW)


def test_twins_keep_their_reference_names():
    SUITE.assert_keeps_names({
        "fcos": [
            "backbone.body.conv1.weight", "backbone.fpn.inner_blocks.0.0.weight", "backbone.fpn.layer_blocks.2.0.bias",
            "backbone.fpn.extra_blocks.p6.weight", "backbone.fpn.extra_blocks.p7.bias",
            "head.classification_head.conv.0.weight", "head.classification_head.conv.1.weight",
            "head.classification_head.conv.4.bias", "head.classification_head.cls_logits.weight",
            "head.regression_head.conv.3.weight", "head.regression_head.bbox_reg.weight",
            "head.regression_head.bbox_ctrness.bias"],
        "ssd300_vgg16": [
            "backbone.scale_weight", "backbone.features.0.weight", "backbone.features.21.bias",
            "backbone.extra.0.1.weight", "backbone.extra.0.7.1.weight", "backbone.extra.0.7.3.bias",
            "backbone.extra.1.0.weight", "backbone.extra.1.2.bias", "backbone.extra.4.2.weight",
            "head.classification_head.module_list.0.weight", "head.regression_head.module_list.5.bias"],
        "ssdlite320": [
            "backbone.features.0.0.0.weight", "backbone.features.0.12.block.0.0.weight",
            "backbone.features.0.13.0.weight", "backbone.features.0.13.1.running_var",  # the C4 expansion
            "backbone.features.1.0.1.0.weight",  # the C4 depthwise: the block's slice keeps its keys 1, 2, 3
            "backbone.features.1.0.2.fc1.weight", "backbone.features.1.0.3.0.weight", "backbone.features.1.3.0.weight",
            "backbone.extra.0.0.0.weight", "backbone.extra.0.1.1.bias", "backbone.extra.3.2.1.running_mean",
            "head.classification_head.module_list.0.0.0.weight", "head.classification_head.module_list.0.0.1.bias",
            "head.classification_head.module_list.0.1.weight", "head.regression_head.module_list.5.1.bias"],
        "rpn_fpn": [
            "backbone.fpn.inner_blocks.3.0.weight", "rpn.head.conv.0.0.weight", "rpn.head.conv.1.0.bias",
            "rpn.head.cls_logits.weight", "rpn.head.bbox_pred.bias"],
        "roi_heads": [
            "roi_heads.box_head.0.0.weight", "roi_heads.box_head.0.1.running_var", "roi_heads.box_head.3.weight",
            "roi_heads.box_predictor.cls_score.weight", "roi_heads.box_predictor.bbox_pred.bias",
            "roi_heads.mask_head.0.0.weight", "roi_heads.mask_head.1.1.bias",
            "roi_heads.mask_predictor.conv5_mask.weight", "roi_heads.mask_predictor.mask_fcn_logits.bias",
            "roi_heads.keypoint_head.0.weight", "roi_heads.keypoint_head.2.bias",
            "roi_heads.keypoint_predictor.kps_score_lowres.weight"],
        "patchtst_prediction": [
            "model.encoder.embedder.input_embedding.0.weight", "model.encoder.embedder.input_embedding.2.bias",
            "model.encoder.positional_encoder.position_enc", "model.encoder.layers.0.self_attn.q_proj.weight",
            "model.encoder.layers.0.self_attn.out_proj.bias", "model.encoder.layers.0.norm_sublayer1.batchnorm.weight",
            "model.encoder.layers.1.norm_sublayer2.batchnorm.running_var", "model.encoder.layers.0.ff.0.weight",
            "model.encoder.layers.1.ff.3.bias", "model.encoder.layers.1.norm_sublayer3.batchnorm.bias",
            "head.projection.weight"],
        "patchtst_classification": [
            "model.encoder.embedder.input_embedding.weight", "model.encoder.positional_encoder.cls_token",
            "model.encoder.positional_encoder.position_enc", "model.encoder.layers.0.norm_sublayer1.weight",
            "model.encoder.layers.1.norm_sublayer3.bias", "head.linear.weight"],
        "mobilevitv2": [
            "mobilevitv2.conv_stem.convolution.weight", "mobilevitv2.conv_stem.normalization.running_var",
            "mobilevitv2.encoder.layer.0.layer.0.expand_1x1.convolution.weight",
            "mobilevitv2.encoder.layer.1.layer.1.conv_3x3.normalization.bias",
            "mobilevitv2.encoder.layer.2.downsampling_layer.reduce_1x1.convolution.weight",
            "mobilevitv2.encoder.layer.2.conv_kxk.convolution.weight",
            "mobilevitv2.encoder.layer.2.conv_1x1.convolution.weight",
            "mobilevitv2.encoder.layer.3.transformer.layer.0.layernorm_before.weight",
            "mobilevitv2.encoder.layer.3.transformer.layer.0.attention.qkv_proj.convolution.bias",
            "mobilevitv2.encoder.layer.4.transformer.layer.0.attention.out_proj.convolution.weight",
            "mobilevitv2.encoder.layer.4.transformer.layer.0.ffn.conv2.convolution.bias",
            "mobilevitv2.encoder.layer.4.layernorm.bias",
            "mobilevitv2.encoder.layer.4.conv_projection.normalization.weight",
            "classifier.weight"],
        "inception_next": [
            "stem.0.weight", "stem.1.running_var", "stages.0.blocks.0.token_mixer.dwconv_hw.weight",
            "stages.0.blocks.0.token_mixer.dwconv_w.bias", "stages.0.blocks.0.token_mixer.dwconv_h.weight",
            "stages.0.blocks.0.norm.weight", "stages.0.blocks.0.mlp.fc1.weight", "stages.0.blocks.0.mlp.fc2.bias",
            "stages.0.blocks.0.gamma", "stages.1.downsample.0.running_mean", "stages.1.downsample.1.weight",
            "stages.2.blocks.1.gamma", "head.fc1.weight", "head.norm.weight", "head.fc2.bias"],
    })
    prediction = build("patchtst_prediction")
    assert [n for n, p in prediction.named_parameters() if not p.requires_grad] == [
        "model.encoder.positional_encoder.position_enc"]  # sin-cos positions: a frozen parameter
    assert prediction.model.patchifier.sequence_start == 2 and prediction.model.patchifier.num_patches == 7
    ssd = build("ssd300_vgg16")
    frozen = [n for n, p in ssd.named_parameters() if not p.requires_grad]
    assert frozen == [f"backbone.features.{i}.{k}" for i in (0, 2, 5, 7, 10, 12, 14) for k in ("weight", "bias")]
    assert [m.ceil_mode for m in ssd.backbone.features if isinstance(m, torch.nn.MaxPool2d)] == [False, False, True]
    with torch.no_grad():
        maps = [v.shape[-1] for v in ssd.backbone(torch.zeros(1, 3, 300, 300)).values()]
        lite = [v.shape[-1] for v in build("ssdlite320").backbone(torch.zeros(1, 3, 320, 320)).values()]
    assert maps == [38, 19, 10, 5, 3, 1] and lite == [20, 10, 5, 3, 2, 1]
    fcos = build("fcos").head.classification_head.conv[1]
    assert isinstance(fcos, torch.nn.GroupNorm) and (fcos.num_groups, fcos.num_channels) == (32, 64)


def test_rpn_top_n_follows_the_scores():
    """The port's top-n indices are torch's exactly (int64; each level's offset added), and they differ between the
    two images, so neither the ``topk`` nor the gather is a constant of the capture."""
    model, ported = _converted("rpn_fpn")
    x = TWINS["rpn_fpn"].inputs(5)[0]
    out = run_ported(ported, (x,))
    with torch.no_grad():
        ref = model(x)
    assert out[3].dtype == np.int64
    np.testing.assert_array_equal(out[3], ref["top_n_idx"].numpy())
    assert not np.array_equal(out[3][0], out[3][1])


def _key_biases(model):
    """PatchTST's key-projection biases: they add a constant to each query's row of logits, which the softmax takes
    off, so their gradients are zero in exact arithmetic and both sides hold rounding noise."""
    return {n for n, _ in model.named_parameters() if n.endswith("self_attn.k_proj.bias")}


@pytest.mark.parametrize("name", SUITE.params(SLOW))
def test_gradients_to_every_parameter(name):
    """Every trainable parameter (SSD's frozen VGG stages have none) and the inputs, eval mode: through the
    GroupNorm towers, the L2 normalisation and its scale, the split MobileNetV3 block, the top-n gather (the
    objectness is detached there, as torchvision does), the transposed convs and the bilinear resize."""
    model, ported = _converted(name)
    assert_gradients_match(model, ported, TWINS[name].second(1), noise=_key_biases(model))


def _torch_grads(model, inputs, seed):
    """torch's parameter gradients of ``sum(out_i * g_i)`` with grad_parity's cotangents (float32 normals from
    ``default_rng(seed + 7)``, one per output leaf in order), in float64."""
    model.zero_grad(set_to_none=True)
    outs = torch.utils._pytree.tree_leaves(model(*inputs))
    gen = np.random.default_rng(seed + 7)
    weights = [gen.standard_normal(tuple(t.shape)).astype(np.float32) for t in outs]
    sum((t * torch.from_numpy(w).to(t.dtype)).sum() for t, w in zip(outs, weights)).backward()
    return {n: p.grad.double() for n, p in model.named_parameters() if p.grad is not None}


def _assert_gradients_as_close_as_torch(model, ported, inputs, seed):
    """Every parameter gradient of the port is as close to torch's float64 model's as twice torch float32's is
    (plus 1e-4 of the largest gradient): for training-mode batch norm over two examples on 1x1 maps, where torch's
    own float32 gradients are ~1% from its float64 ones and no fixed bar separates rounding from a wrong port."""
    exact = copy.deepcopy(model).double()
    forward = exact.forward
    exact.forward = lambda *xs: {k: v.float() for k, v in forward(*(x.double() for x in xs)).items()}
    result = grad_parity(exact, ported, inputs, rtol=1e-3, atol=1e-5, seed=seed)
    exact.forward = forward
    own = _torch_grads(copy.deepcopy(model), inputs, seed)
    reference = _torch_grads(exact, tuple(x.double() for x in inputs), seed)
    rows = {r["name"]: r for r in result["parameters"]}
    assert set(rows) == {n for n, p in model.named_parameters() if p.requires_grad}
    largest = max(r["scale"] for r in rows.values())
    for name, row in rows.items():
        theirs = (own[name] - reference[name]).abs().max().item()
        assert row["max_abs"] <= 2 * theirs + 1e-4 * largest, (name, row["max_abs"], theirs, largest)


@pytest.mark.parametrize("name", SUITE.params(SLOW))
def test_train_mode_matches_torch(name):
    """Converted in train mode: batch statistics in SSDlite's every BN, PatchTST prediction's and the RoI heads' box
    and mask heads; FCOS (GroupNorm), SSD, the RPN and PatchTST classification have no train-mode behaviour.
    SSDlite's gradients against torch's float64 model (:func:`_assert_gradients_as_close_as_torch`)."""
    twin = TWINS[name]
    model = build(name).train()
    ported = porter.convert(model, twin.inputs(0), io_layout="torch", dynamic=twin.dynamic)
    assert_matches(ported, model, twin.second(1))
    if name == "ssdlite320":
        _assert_gradients_as_close_as_torch(model, ported, twin.inputs(2), seed=2)
    else:
        assert_gradients_match(model, ported, twin.inputs(2), seed=2, noise=_key_biases(model))


@pytest.mark.parametrize("name", SUITE.params(SLOW))
def test_float16_port_is_as_close_to_float32_as_torch_float16(name):
    """The float16 port is no further from torch's float32 output than porter.validate's half bar allows: four
    times torch's own float16 model's error, plus 0.2% of the range; non-finite exactly where torch's float16 model's
    output is (PatchTST prediction's example with a never-observed channel: its std scaler divides by sqrt(1e-5))."""
    model, ported = _converted(name)
    x = TWINS[name].second(3)
    half_inputs = tuple(t.half() for t in x)
    got = run_ported(ported.astype("float16"), half_inputs)
    with torch.no_grad():
        full = torch.utils._pytree.tree_leaves(model(*x))
        half = torch.utils._pytree.tree_leaves(copy.deepcopy(model).half()(*half_inputs))
    for g, f, h in zip(got, full, half):
        if not f.is_floating_point():
            continue  # the RPN's top-n indices: float16 scores may rank near-ties otherwise
        g, f, h = g.astype(np.float32), f.numpy(), h.float().numpy()
        finite = np.isfinite(h)  # PatchTST's never-observed series: x / sqrt(1e-5) overflows float16 in torch too
        np.testing.assert_array_equal(np.isfinite(g), finite)
        assert finite.mean() > 0.5
        g, f, h = g[finite], f[finite], h[finite]
        err, own, scale = np.abs(g - f).max(), np.abs(h - f).max(), np.abs(f).max()
        assert err <= DEFAULT_FACTOR * own + 2e-3 * scale, (err, own, scale)


# ---------------------------------------------------------------------------------------------------- Informer
def _attention_inputs(batch, length, seed):
    gen = torch.Generator().manual_seed(seed)
    qkv = tuple(torch.randn(batch, 2, length, 4, generator=gen) for _ in range(3))
    return qkv + (torch.randint(0, length, (length, 5), generator=gen),)


def test_prob_sparse_attention_matches_torch():
    """Informer's ProbSparse core (the key sample an input): the unsorted top-u, the gather and the write by three
    broadcast index tensors into V's expanded mean, at two batches and lengths, and its gradients to q, k, v."""
    model = informer.ProbSparseCore().eval()
    ported = porter.convert(model, _attention_inputs(2, 12, 0), io_layout="torch")
    assert_matches(ported, model, _attention_inputs(2, 12, 1))
    assert_matches(ported, model, _attention_inputs(3, 16, 2))
    result = grad_parity(model, ported, _attention_inputs(2, 12, 3), rtol=1e-3, atol=1e-5, seed=0)
    assert result["ok"] and len(result["inputs"]) == 3, result


def test_sampled_prob_sparse_attention_is_refused():
    """HF's form draws its key sample with ``torch.randint`` in every forward, eval included: the port cannot give
    torch's draws, and the refusal names the op and the way out (the sample as an input)."""
    with pytest.raises(porter.UnsupportedOpsError, match=r"aten\.randint.*pass the noise in as an input"):
        porter.convert(informer.SampledProbSparse().eval(), _attention_inputs(2, 12, 0)[:3], io_layout="torch")
