"""Session 17's architectures Porter was not written against (second helper): timm's ``ResNeSt``
(``tests/models/resnest.py``: split attention, the radix softmax over groups, the 3x3 average pool before or after
it, average-pool shortcuts that round up), ``Sequencer2d`` (``sequencer.py``: bidirectional LSTMs along the columns
and the rows of an NHWC map, concatenated or added) and facebookresearch/DiT (``dit.py``: adaLN-Zero modulation, the
sinusoidal timestep and label embeddings, patchify/unpatchify by einsum, classifier-free guidance). Each converts and
matches torch, run here on the same data, at its example size and a second one (another batch, and sizes the
strides do not divide; DiT's latent and CrossViT's image size are fixed by their position tables: another batch;
Swin3D's window sizes and shifts are Python branches on the sizes, so its dynamic capture runs past the budget: the
batch only, and a second port at a clip no patch or window divides); strict ``load_state_dict``
of the port's ``torch_parameters()`` into the twin, gradients to every trainable parameter, train mode, float16.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch

import porter
from porter.validate_half import DEFAULT_FACTOR
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, run_ported
from tests.models._common import randomize_
from tests.models import crossvit, dit, resnest, sequencer, swin3d
from tests.twin_suite import Twin, TwinSuite, assert_gradients_match, image


TWINS = {
    # 45x38 and 37x50: odd maps from the stem on (the shortcut pools round up, the avd pools pad)
    "resnest": Twin(resnest.resnest_small, image(2, 3, 64, 64), image(3, 3, 45, 38)),
    "resnest_4s2x": Twin(resnest.resnest_4s2x_small, image(2, 3, 64, 64), image(1, 3, 37, 50)),  # batch 1: eval
    # patch sizes 4, 2: multiples of 8 (another batch, wide and tall grids: the LSTMs' lengths and batches swap)
    "sequencer": Twin(sequencer.sequencer2d_small, image(2, 3, 32, 32), image(3, 3, 40, 24)),
    "sequencer_add": Twin(sequencer.sequencer2d_add_small, image(2, 3, 32, 32), image(1, 3, 24, 48)),
    "dit": Twin(dit.dit_small, dit.latents(2), dit.latents(3)),
    "crossvit": Twin(crossvit.crossvit_small, image(2, 3, 48, 48), image(3, 3, 48, 48)),
    "crossvit_crop": Twin(crossvit.crossvit_crop_small, image(2, 3, 48, 48), image(1, 3, 48, 48)),
    # 8 frames of 32x32: 4x8x8 tokens, shifted 4x4x4 windows, then 4x4x4 (one window: no shift)
    "swin3d": Twin(swin3d.swin3d_small, image(2, 3, 8, 32, 32), image(3, 3, 8, 32, 32), dynamic="batch"),
}

SUITE = TwinSuite(TWINS)
build, _converted = SUITE.build, SUITE.converted
test_twin_matches_torch_at_two_sizes = SUITE.parity_test()
test_a_checkpoint_round_trips_through_the_port = SUITE.round_trip_test()


def test_twins_keep_their_reference_names():
    SUITE.assert_keeps_names({
        "resnest": [
            "conv1.0.weight", "conv1.1.running_var", "conv1.3.weight", "conv1.4.bias", "conv1.6.weight",
            "bn1.weight", "layer1.0.conv1.weight", "layer1.0.bn1.running_mean", "layer1.0.conv2.conv.weight",
            "layer1.0.conv2.bn0.weight", "layer1.0.conv2.fc1.weight", "layer1.0.conv2.fc1.bias",
            "layer1.0.conv2.bn1.running_var", "layer1.0.conv2.fc2.weight", "layer1.0.conv2.fc2.bias",
            "layer1.0.conv3.weight", "layer1.0.bn3.bias", "layer1.0.downsample.1.weight",
            "layer2.0.downsample.1.weight", "layer2.0.downsample.2.running_mean", "layer4.0.conv2.conv.weight",
            "fc.weight", "fc.bias"],
        "resnest_4s2x": ["layer1.1.conv2.fc2.weight", "layer3.0.downsample.2.weight"],
        "sequencer": [
            "stem.proj.weight", "stem.proj.bias", "stages.0.blocks.0.norm1.weight",
            "stages.0.blocks.0.rnn_tokens.rnn_v.weight_ih_l0", "stages.0.blocks.0.rnn_tokens.rnn_v.weight_hh_l0",
            "stages.0.blocks.0.rnn_tokens.rnn_v.bias_ih_l0_reverse",
            "stages.0.blocks.0.rnn_tokens.rnn_h.weight_hh_l0_reverse", "stages.0.blocks.0.rnn_tokens.fc.weight",
            "stages.0.blocks.0.norm2.bias", "stages.0.blocks.0.mlp_channels.fc1.weight",
            "stages.0.blocks.0.mlp_channels.fc2.bias", "stages.1.downsample.down.weight",
            "stages.2.downsample.down.bias", "norm.weight", "head.fc.weight"],
        "sequencer_add": ["stages.1.blocks.0.rnn_tokens.rnn_h.weight_ih_l1_reverse"],
        "swin3d": [
            "patch_embed.proj.weight", "patch_embed.norm.bias", "features.0.0.norm1.weight",
            "features.0.0.attn.qkv.weight", "features.0.1.attn.proj.bias",
            "features.0.1.attn.relative_position_bias_table", "features.0.1.attn.relative_position_index",
            "features.0.0.norm2.weight", "features.0.0.mlp.0.weight", "features.0.1.mlp.3.bias",
            "features.1.reduction.weight", "features.1.norm.weight", "features.2.1.attn.qkv.bias", "norm.weight",
            "head.weight", "head.bias"],
        "crossvit": [
            "cls_token_0", "cls_token_1", "pos_embed_0", "pos_embed_1", "patch_embed.0.proj.weight",
            "patch_embed.1.proj.bias", "blocks.0.blocks.0.0.norm1.weight", "blocks.0.blocks.0.0.attn.qkv.weight",
            "blocks.0.blocks.1.1.attn.proj.bias", "blocks.0.blocks.1.0.mlp.fc1.weight",
            "blocks.0.blocks.1.1.mlp.fc2.bias", "blocks.0.projs.0.0.weight", "blocks.0.projs.1.2.weight",
            "blocks.1.fusion.0.norm1.weight", "blocks.1.fusion.0.attn.wq.weight", "blocks.1.fusion.1.attn.wk.bias",
            "blocks.1.fusion.1.attn.wv.weight", "blocks.1.fusion.0.attn.proj.weight",
            "blocks.1.revert_projs.0.2.weight", "blocks.1.revert_projs.1.0.bias", "norm.0.weight", "norm.1.bias",
            "head.0.weight", "head.1.bias"],
        "dit": [
            "pos_embed", "x_embedder.proj.weight", "x_embedder.proj.bias", "t_embedder.mlp.0.weight",
            "t_embedder.mlp.2.bias", "y_embedder.embedding_table.weight", "blocks.0.attn.qkv.weight",
            "blocks.0.attn.qkv.bias", "blocks.0.attn.proj.weight", "blocks.1.mlp.fc1.weight", "blocks.1.mlp.fc2.bias",
            "blocks.1.adaLN_modulation.1.weight", "final_layer.linear.weight", "final_layer.adaLN_modulation.1.bias"],
    })
    state = build("resnest").state_dict()
    assert "layer2.0.downsample.1.weight" in state and state["layer1.0.conv2.conv.weight"].shape == (16, 4, 3, 3)
    assert "stages.0.downsample.down.weight" not in build("sequencer").state_dict()
    assert build("dit").state_dict()["y_embedder.embedding_table.weight"].shape[0] == 11  # the null class row
    assert not build("dit").pos_embed.requires_grad
    cross = build("crossvit").state_dict()
    assert cross["pos_embed_0"].shape == (1, 1 + 4 * 4, 16) and cross["pos_embed_1"].shape == (1, 1 + 5 * 5, 32)
    assert cross["blocks.0.fusion.0.attn.wq.weight"].shape == (32, 32)  # branch 0's token at branch 1's width
    table = build("swin3d").state_dict()["features.0.0.attn.relative_position_bias_table"]
    assert table.shape == (7 * 7 * 7, 2)  # (2 * 4 - 1) ** 3 offsets, one column per head


def test_swin3d_at_a_clip_no_patch_or_window_divides():
    """Converted at 6 frames of 40x28: 3x10x7 tokens (patch padding), the frame window shrunk to 3 without a temporal
    shift, H and W padded to 12x8 under the 4x4 windows, then 3x5x4 after merging (odd H padded); another batch."""
    model = build("swin3d")
    ported = porter.convert(model, image(1, 3, 6, 40, 28)(0), io_layout="torch", dynamic="batch")
    assert_matches(ported, model, image(2, 3, 6, 40, 28)(1))


def test_resnest_avd_pools_sit_where_timm_puts_them():
    """The stride moves from the split-attention conv to a 3x3 average pool after it (``avd_last``) or before it
    (``avd_first``), in the strided blocks only."""
    last, first = build("resnest"), build("resnest_4s2x")
    assert last.layer2[0].avd_last is not None and last.layer2[0].avd_first is None
    assert first.layer2[0].avd_first is not None and first.layer2[0].avd_last is None
    assert last.layer1[0].avd_last is None and last.layer2[0].conv2.conv.stride == (1, 1)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_gradients_to_every_parameter(name):
    """ResNeSt: through the radix softmax and the weighted sum of the splits; Sequencer: both directions of every
    LSTM (all layers), along columns and rows; DiT: the modulation, the timestep MLP, the label table (gathered)."""
    second = TWINS[name].second(1)
    SUITE.gradients_match(name, second)


def _train_form(name):
    """The twin in train mode with nothing random left: DiT's label dropout at rate 0 (what the train-mode refusal
    says to do; the table keeps its null row), the others have no dropout."""
    model = build(name).train()
    if name == "dit":
        model.y_embedder.dropout_prob = 0.0
    return model


@pytest.mark.parametrize("name", sorted(TWINS))
def test_train_mode_matches_torch(name):
    """Converted in train mode: batch statistics (ResNeSt's every BN, the split attention's on a 1x1 map too)."""
    model = _train_form(name)
    ported = porter.convert(model, TWINS[name].inputs(0), io_layout="torch", dynamic=TWINS[name].dynamic)
    second = image(2, 3, 37, 50)(1) if name == "resnest_4s2x" else TWINS[name].second(1)  # batch statistics: 2+
    assert_matches(ported, model, second)
    if not name.startswith("resnest"):
        assert_gradients_match(model, ported, TWINS[name].inputs(2), seed=2)
        return
    # batch 4: at batch 2 the split attention's train-mode BN over a 1x1 map is ill-conditioned (torch's own
    # float32 gradients 2.5% from its float64 ones). Seed 5: on seed 2's images one pre-activation of layer1.0's
    # last ReLU is -8.4e-6 (float64), the port's +5.2e-6 (its error 1.4e-5, within the forward bar), and the one
    # flipped ReLU mask moves the gradients of everything before it by up to 3%: a kink, not a wrong derivative
    result = grad_parity(model, ported, image(4, 3, 64, 64)(5), rtol=1e-3, atol=1e-5, seed=2)
    grads = {r["name"]: r for r in result["parameters"]}
    assert set(grads) == {n for n, _ in model.named_parameters()}
    # split attention's fc1 feeds a train-mode BN, which takes any constant off: fc1's bias has a gradient of zero
    # in exact arithmetic, so both sides hold rounding noise (torch's: 2e-4 of fc1's weight gradient or less)
    noise = [n for n in grads if n.endswith("conv2.fc1.bias")]
    for n in noise:
        assert grads[n]["scale"] <= 1e-3 * grads[n.replace(".bias", ".weight")]["scale"], grads[n]
    assert all(r["ok"] for n, r in grads.items() if n not in noise), [r for r in grads.values() if not r["ok"]]


def test_dit_train_mode_with_label_dropout_is_refused():
    """DiT's label dropout draws ``torch.rand`` in training: converting it in train mode is refused, and says how,
    though on this batch of 2 no label happens to drop (torch's training output is its eval output: the probe
    counts the draws, ``converters/capture_train.py``; before, this port would have run eval numbers in training)."""
    model, x = build("dit"), TWINS["dit"].inputs(0)
    with torch.no_grad():
        want = model(*x)
        torch.manual_seed(0)
        assert torch.equal(model.train()(*x), want)
    # the root is named: DiT's own forward hands ``self.training`` to the label embedder
    with pytest.raises(porter.TrainModeError, match="'<root>': its forward \\(DiT\\).*set their rates to 0"):
        porter.convert(model, x, io_layout="torch")


def test_dit_classifier_free_guidance_converts_at_its_batch_and_refuses_others():
    """``forward_with_cfg`` (the sampler's call) matches torch at the conversion batch. Its ``x[: len(x) // 2]``
    and ``torch.split(eps, len(eps) // 2)`` read the batch through Python's ``len()``, which must return an int: the
    non-strict capture pins the batch to the example's, and the port refuses another batch (torch runs any even
    one), naming the line that pinned it and why."""
    model = randomize_(dit.dit_guided_small(), 0)  # not in TWINS: one batch only
    ported = porter.convert(model, dit.latents(4)(0), io_layout="torch")
    assert_matches(ported, model, dit.latents(4)(1))
    with pytest.raises(ValueError, match=r"size 6 in dim 0.*x\.size\(0\) == 4") as info:
        run_ported(ported, dit.latents(6)(2))
    line = inspect.getsourcelines(dit.DiT.forward_with_cfg)[1] + 1  # the method's first statement
    assert f"(at dit.py:{line} in forward_with_cfg: half = x[: len(x) // 2])" in str(info.value)
    assert "Python's len() of a tensor returns a plain int" in str(info.value)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_float16_port_is_as_close_to_float32_as_torch_float16(name):
    """The float16 port is no further from torch's float32 output than porter.validate's half bar allows: four
    times torch's own float16 model's error (``validate_half.DEFAULT_FACTOR``), plus 0.2% of the range. DiT cannot
    run as ``model.half()`` in torch (its timestep embedding is ``t.float()`` by design, and the float MLP input
    meets half weights): its torch float16 run is under ``torch.autocast`` instead. Both lose ~10% there, from the
    timesteps themselves (up to 1000: a float16 step of 0.5 inside ``cos``/``sin``): measured port 0.93, torch
    0.92 of a largest output 8.8."""
    model, ported = _converted(name)
    x = TWINS[name].second(3)
    half_inputs = tuple(t.half() if t.is_floating_point() else t for t in x)
    got = run_ported(ported.astype("float16"), half_inputs)[0].astype(np.float32)
    with torch.no_grad():
        full = model(*x).numpy()
        if name == "dit":
            with torch.autocast("cpu", dtype=torch.float16):
                half = model(*half_inputs).float().numpy()
        else:
            half = copy.deepcopy(model).half()(*half_inputs).float().numpy()
    assert np.isfinite(got).all()
    err, own, scale = np.abs(got - full).max(), np.abs(half - full).max(), np.abs(full).max()
    assert err <= DEFAULT_FACTOR * own + 2e-3 * scale, (err, own, scale)
