"""Session 18's architectures Porter was not written against: torchvision's MViT v2 (``tests/models/mvit.py``:
pooled attention, decomposed relative positions written into ``attn[:, :, 1:, 1:]`` in place, residual pooling) and
RAFT (``raft.py``: all-pairs correlation pyramid, ``grid_sample`` lookups, iterative ConvGRU updates, bilinear or
convex upsampling by ``unfold``, a list of flows out), timm's BoTNet / HaloNet (``byoanet.py``: rel_to_abs
relative logits, halo windows by pad + ``Tensor.unfold``), DaViT (``davit.py``: channel attention, window
attention over padded maps, convolutional position encodings), CoaT (``coat.py``: factorized attention,
convolutional relative positions, parallel blocks mixing three scales, tied weights) and GCViT (``gcvit.py``: global
query tokens pooled from the map, shared by every window). Each converts and matches torch, run here on the same data, at its example size and a second one; strict ``load_state_dict`` of the port's ``torch_parameters()``
into the twin, gradients to every trainable parameter, train mode, float16.

Second sizes: MViT's, BoTNet's, CoaT's and GCViT's grids are fixed at build time (another batch); RAFT another batch
at 72x80 (feature maps and pyramid levels of 9x10, 4x5, 2x2), captured with every dim dynamic. HaloNet's and
DaViT's every-dim captures take torch.export 60-120 CPU s here (past the capture budget: the batch only), so their
odd sizes are checked on a second port converted at that size.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import porter
from porter.validate_half import DEFAULT_FACTOR
from tests.converter_check import assert_matches, run_ported
from tests.models import byoanet, coat, davit, gcvit, mvit, raft
from tests.twin_suite import Twin, TwinSuite, assert_gradients_match, image


def image_pair(*shape):
    """seed -> two NCHW images (RAFT's frames)."""
    def make(seed):
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    return make


TWINS = {
    "mvit_v2": Twin(mvit.mvit_v2_small, image(2, 3, 4, 32, 32), image(3, 3, 4, 32, 32), dynamic="batch"),
    "mvit_v2_wide": Twin(mvit.mvit_v2_wide, image(2, 3, 4, 32, 48), image(1, 3, 4, 32, 48), dynamic="batch"),
    "mvit_v1": Twin(mvit.mvit_v1_small, image(2, 3, 4, 32, 32), image(3, 3, 4, 32, 32), dynamic="batch"),
    "raft_small": Twin(raft.raft_small_twin, image_pair(2, 3, 64, 64), image_pair(1, 3, 72, 80)),
    "raft_large": Twin(raft.raft_large_twin, image_pair(2, 3, 64, 64), image_pair(3, 3, 72, 80)),
    "botnet": Twin(byoanet.botnet26t_small, image(2, 3, 64, 64), image(3, 3, 64, 64), dynamic="batch",
                   fix=byoanet.soften_attention),
    "halonet": Twin(byoanet.halonet26t_small, image(2, 3, 64, 64), image(1, 3, 64, 64), dynamic="batch",
                    fix=byoanet.soften_attention),
    "halonet_avg_down": Twin(byoanet.halonet_avg_down_small, image(2, 3, 96, 96), image(3, 3, 96, 96),
                             dynamic="batch", fix=byoanet.soften_attention),
    "davit": Twin(davit.davit_small_twin, image(2, 3, 64, 64), image(3, 3, 64, 64), dynamic="batch"),
    "davit_fl": Twin(davit.davit_fl_small_twin, image(2, 3, 64, 64), image(1, 3, 64, 64), dynamic="batch"),
    # fixed image sizes (patch embeddings and pooling depths set at build time): another batch
    "coat": Twin(coat.coat_tiny_small, image(2, 3, 64, 64), image(3, 3, 64, 64), dynamic="batch"),
    "coat_lite": Twin(coat.coat_lite_small, image(2, 3, 64, 64), image(1, 3, 64, 64), dynamic="batch"),
    "gcvit": Twin(gcvit.gcvit_small_twin, image(2, 3, 64, 64), image(3, 3, 64, 64), dynamic="batch"),
}

# the heaviest captures here (RAFT's unrolled updates: 30-70 s a conversion on two loaded cores) run with `slow`
SLOW = ("raft_small", "raft_large", "davit_fl")
SUITE = TwinSuite(TWINS)
build, _converted = SUITE.build, SUITE.converted
test_twin_matches_torch_at_two_sizes = SUITE.parity_test(slow=SLOW)
test_a_checkpoint_round_trips_through_the_port = SUITE.round_trip_test(slow=SLOW)


def test_twins_keep_their_reference_names():
    SUITE.assert_keeps_names({
        "mvit_v2": [
            "conv_proj.weight", "conv_proj.bias", "pos_encoding.class_token", "blocks.0.norm1.weight",
            "blocks.0.attn.qkv.weight", "blocks.0.attn.project.0.bias", "blocks.0.attn.pool_q.pool.weight",
            "blocks.0.attn.pool_q.norm_act.0.weight", "blocks.0.attn.pool_k.pool.weight",
            "blocks.0.attn.pool_v.norm_act.0.bias", "blocks.0.attn.rel_pos_h", "blocks.0.attn.rel_pos_w",
            "blocks.0.attn.rel_pos_t", "blocks.0.norm2.weight", "blocks.0.mlp.0.weight", "blocks.0.mlp.3.bias",
            "blocks.1.project.weight", "norm.weight", "head.1.weight", "head.1.bias"],
        "mvit_v1": ["pos_encoding.spatial_pos", "pos_encoding.temporal_pos", "pos_encoding.class_pos"],
        "raft_small": [
            "raft.feature_encoder.convnormrelu.0.weight", "raft.feature_encoder.layer1.0.convnormrelu1.0.weight",
            "raft.feature_encoder.layer2.0.downsample.0.bias", "raft.feature_encoder.layer3.1.convnormrelu3.0.bias",
            "raft.feature_encoder.conv.weight", "raft.context_encoder.layer1.1.convnormrelu2.0.weight",
            "raft.update_block.motion_encoder.convcorr1.0.weight",
            "raft.update_block.motion_encoder.convflow1.0.weight", "raft.update_block.motion_encoder.conv.0.bias",
            "raft.update_block.recurrent_block.convgru1.convz.weight",
            "raft.update_block.recurrent_block.convgru1.convq.bias", "raft.update_block.flow_head.conv1.weight",
            "raft.update_block.flow_head.conv2.bias"],
        "raft_large": [
            "raft.context_encoder.convnormrelu.1.running_var", "raft.update_block.motion_encoder.convcorr2.0.weight",
            "raft.update_block.recurrent_block.convgru2.convr.weight", "raft.mask_predictor.convrelu.0.weight",
            "raft.mask_predictor.conv.bias"],
        "botnet": [
            "stem.conv1.conv.weight", "stem.conv1.bn.weight", "stem.conv3.bn.running_var",
            "stages.0.0.shortcut.conv.weight", "stages.0.0.shortcut.bn.bias", "stages.0.0.conv1_1x1.conv.weight",
            "stages.0.0.conv2_kxk.bn.weight", "stages.0.0.conv3_1x1.conv.weight", "stages.1.1.self_attn.qkv.weight",
            "stages.1.1.self_attn.pos_embed.height_rel", "stages.1.1.self_attn.pos_embed.width_rel",
            "stages.1.1.post_attn.weight", "stages.2.0.conv3_1x1.bn.running_mean", "head.fc.weight"],
        "halonet": ["stages.1.1.self_attn.q.weight", "stages.1.1.self_attn.kv.weight",
                    "stages.2.0.self_attn.pos_embed.height_rel", "stages.2.0.post_attn.running_var"],
        "davit": [
            "stem.conv.weight", "stem.norm.weight", "stages.1.downsample.norm.weight",
            "stages.1.downsample.conv.weight", "stages.0.blocks.0.0.cpe1.proj.weight",
            "stages.0.blocks.0.0.norm1.weight", "stages.0.blocks.0.0.attn.qkv.weight",
            "stages.0.blocks.0.0.attn.proj.bias", "stages.0.blocks.0.0.cpe2.proj.bias",
            "stages.0.blocks.0.0.norm2.weight", "stages.0.blocks.0.0.mlp.fc1.weight",
            "stages.0.blocks.0.1.attn.qkv.weight", "stages.2.blocks.1.1.mlp.fc2.bias", "head.norm.weight",
            "head.fc.weight"],
        "davit_fl": ["stages.0.blocks.0.spatial_block.attn.qkv.weight",
                     "stages.3.blocks.0.channel_block.cpe1.proj.weight"],
        "coat": [
            "cls_token1", "cls_token4", "patch_embed1.proj.weight", "patch_embed2.norm.bias", "cpe1.proj.weight",
            "crpe1.conv_list.0.weight", "crpe2.conv_list.2.bias", "serial_blocks1.0.cpe.proj.weight",
            "serial_blocks1.0.norm1.weight", "serial_blocks1.0.factoratt_crpe.qkv.weight",
            "serial_blocks1.0.factoratt_crpe.crpe.conv_list.1.weight", "serial_blocks1.0.factoratt_crpe.proj.bias",
            "serial_blocks4.0.mlp.fc2.weight", "parallel_blocks.0.norm12.weight",
            "parallel_blocks.0.factoratt_crpe3.qkv.bias", "parallel_blocks.1.norm24.bias",
            "parallel_blocks.0.mlp2.fc1.weight", "parallel_blocks.0.mlp3.fc1.weight",
            "parallel_blocks.0.mlp4.fc2.bias", "norm2.weight", "norm3.bias", "norm4.weight", "aggregate.weight",
            "head.weight"],
        "gcvit": [
            "stem.conv1.weight", "stem.down.norm1.weight", "stem.down.conv_block.conv_dw.weight",
            "stem.down.conv_block.se.fc1.weight", "stem.down.conv_block.se.fc2.weight",
            "stem.down.conv_block.conv_pw.weight", "stem.down.reduction.weight", "stem.down.norm2.bias",
            "stages.0.global_block.blocks.conv1.conv_dw.weight", "stages.0.global_block.blocks.conv2.se.fc1.weight",
            "stages.0.blocks.0.norm1.weight", "stages.0.blocks.0.attn.rel_pos.relative_position_bias_table",
            "stages.0.blocks.0.attn.qkv.weight", "stages.0.blocks.1.attn.qkv.bias",
            "stages.0.blocks.0.attn.proj.weight",
            "stages.0.blocks.0.mlp.fc1.weight", "stages.1.downsample.reduction.weight", "stages.3.norm.weight",
            "head.fc.weight"],
    })
    coat_state = build("coat").state_dict()  # tied: one storage under several names
    ptr = {k: v.data_ptr() for k, v in coat_state.items()}
    assert ptr["parallel_blocks.0.mlp3.fc1.weight"] == ptr["parallel_blocks.0.mlp2.fc1.weight"]
    assert ptr["serial_blocks2.0.cpe.proj.weight"] == ptr["cpe2.proj.weight"]
    gc = build("gcvit")
    qkv = [blk.attn.qkv.out_features for blk in gc.stages[0].blocks]
    assert qkv == [3 * 8, 2 * 8]  # the second block takes its queries from the global block
    assert [len(s.global_block.blocks) for s in gc.stages] == [4, 2, 1, 1]  # MBConv + pool per level, or one MBConv
    assert "stages.0.blocks.0.attn.rel_pos.relative_position_index" not in gc.state_dict()  # non-persistent
    state = build("mvit_v2").state_dict()
    assert state["blocks.0.attn.rel_pos_h"].shape == (15, 16)  # 2 * 8 - 1 offsets over the 8x8 token grid
    assert state["blocks.3.attn.rel_pos_t"].shape == (3, 16)  # 2 frames of tokens
    assert build("mvit_v2_wide").state_dict()["blocks.0.attn.rel_pos_h"].shape == (23, 16)  # the longer side, 12
    assert build("davit").state_dict()["stages.1.downsample.conv.weight"].shape[-1] == 2
    assert build("davit_fl").state_dict()["stages.1.downsample.conv.weight"].shape[-1] == 3
    assert build("botnet").state_dict()["stages.1.1.self_attn.pos_embed.height_rel"].shape == (15, 4)
    halo = build("halonet").stages[2][0].self_attn
    assert (halo.block_stride, halo.block_size_ds, halo.win_size) == (2, 2, 6)
    avg = build("halonet_avg_down").stages[2][0].self_attn
    assert avg.block_stride == 1 and isinstance(avg.pool, torch.nn.AvgPool2d)


@pytest.mark.parametrize("name", ["raft_small", "raft_large"])
def test_raft_flows_are_finite_and_move(name):
    """torch's flows at both sizes are finite and not zero (with a 1x1 pyramid level they were NaN everywhere, and
    the parity checks compared NaN with NaN), and each update changes the flow."""
    model = build(name)
    for make in (TWINS[name].inputs, TWINS[name].second):
        with torch.no_grad():
            flows = model(*make(5))
        assert all(torch.isfinite(f).all() and f.abs().max() > 1 for f in flows)
        assert all((a - b).abs().max() > 1e-2 for a, b in zip(flows, flows[1:]))


@pytest.mark.parametrize("name, size", [("halonet", (1, 3, 64, 96)), ("davit", (1, 3, 72, 56)),
                                        pytest.param("davit_fl", (2, 3, 50, 74), marks=pytest.mark.slow)])
def test_odd_sizes_on_a_port_converted_there(name, size):
    """HaloNet at 64x96 (maps of 8x12: 2x3 blocks of 4, then 4x6); DaViT at sizes no window or downsample divides
    (72x56 -> 18x14 tokens padded to 20x16 under the 4x4 windows, then 2x2 downsamples padding 9x7 to 10x8: 5x4,
    3x2; 50x74 padded to 52x76 by the stem: 13x19 tokens, then 3x3 downsamples: 7x10, 4x5, 2x3), each another batch."""
    model = build(name)
    ported = porter.convert(model, image(*size)(0), io_layout="torch", dynamic="batch")
    assert_matches(ported, model, image(size[0] + 1, *size[1:])(1))


def _normalised_biases(model):
    """Biases of convs that feed a norm which takes any per-channel constant off: an ``InstanceNorm2d`` (RAFT's
    feature encoders; affine-free) or a training-mode ``BatchNorm2d`` (RAFT large's context encoder in train mode).
    Their gradients are zero in exact arithmetic and both sides hold rounding noise (1e-4 against 1e3 for the conv
    weights)."""
    def centres(norm):
        return isinstance(norm, nn.InstanceNorm2d) or (isinstance(norm, nn.BatchNorm2d) and norm.training)
    return {f"{name}.0.bias" for name, m in model.named_modules()
            if isinstance(m, nn.Sequential) and len(m) > 1 and isinstance(m[0], nn.Conv2d) and m[0].bias is not None
            and centres(m[1])}


def _check_gradients(model, ported, inputs, seed):
    """Gradients to the inputs and every trainable parameter as torch's; a conv bias before a centring norm only has
    to be noise-sized next to its weight's gradient."""
    assert_gradients_match(model, ported, inputs, seed=seed, noise=_normalised_biases(model))


@pytest.mark.parametrize("name", SUITE.params(SLOW))
def test_gradients_to_every_parameter(name):
    """MViT: through the relative-position einsums and the in-place writes, the pooling convs; RAFT: through every
    update (the coordinates detached), ``grid_sample``'s value gradient, the correlation matmul; BoTNet/HaloNet:
    through rel_to_abs's pads and slices and the unfolded windows; DaViT: both attentions."""
    model, ported = _converted(name)
    _check_gradients(model, ported, TWINS[name].second(1), seed=1)


@pytest.mark.parametrize("name", SUITE.params(SLOW))
def test_train_mode_matches_torch(name):
    """Converted in train mode: batch statistics in BoTNet's/HaloNet's every BN and RAFT large's context encoder
    (instance norm either way); the others have no train-mode behaviour at dropout 0."""
    twin = TWINS[name]
    model = build(name).train()
    ported = porter.convert(model, twin.inputs(0), io_layout="torch", dynamic=twin.dynamic)
    assert_matches(ported, model, twin.second(1))
    _check_gradients(model, ported, twin.inputs(2), seed=2)


def _torch_half(name, model, half_inputs):
    """torch's float16 run: ``model.half()``; RAFT under ``torch.autocast`` instead (``.half()`` cannot run it:
    its coordinate grid and lookup offsets are built float32 in the forward and meet half maps in ``grid_sample``)."""
    if name.startswith("raft"):
        with torch.autocast("cpu", dtype=torch.float16):
            return model(*half_inputs)
    return copy.deepcopy(model).half()(*half_inputs)


@pytest.mark.parametrize("name", SUITE.params(SLOW))
def test_float16_port_is_as_close_to_float32_as_torch_float16(name):
    """The float16 port is no further from torch's float32 output than porter.validate's half bar allows: four
    times torch's own float16 model's error (``validate_half.DEFAULT_FACTOR``), plus 0.2% of the range (RAFT: its
    first flow)."""
    model, ported = _converted(name)
    x = TWINS[name].second(3)
    half_inputs = tuple(t.half() for t in x)
    got = run_ported(ported.astype("float16"), half_inputs)[0].astype(np.float32)
    with torch.no_grad():
        full = torch.utils._pytree.tree_leaves(model(*x))[0].numpy()
        half = torch.utils._pytree.tree_leaves(_torch_half(name, model, half_inputs))[0].float().numpy()
    assert np.isfinite(got).all()
    err, own, scale = np.abs(got - full).max(), np.abs(half - full).max(), np.abs(full).max()
    assert err <= DEFAULT_FACTOR * own + 2e-3 * scale, (err, own, scale)
