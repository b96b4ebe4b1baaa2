"""Session 12's vision architectures Porter was not written against: timm's MLP-Mixer and gMLP
(``tests/models/timm_mixer.py``), timm's RepVGG and MobileOne in train-time and deploy form
(``timm_reparam.py``), the Stable Diffusion VAE decoder (``diffusers_vae.py``), Deformable DETR's encoder
(``deformable_detr.py``) and Segment Anything's ViT encoder (``sam.py``). Each converts and matches torch, run here
on the same data, at its example size and at a second size (another batch, and a size the strides, patches or
windows do not divide where the architecture allows one); save/load round trips, strict ``load_state_dict`` of the
port's ``torch_parameters()`` into the twin, gradients for the op families they add, the CLI on a saved
``state_dict``. The finding they turned up (sizes put into a tensor, ``linspace`` over a size: torch.export pinned
them) is tested op by op in ``tests/converters/test_capture_literals.py``.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import copy

import pytest
import torch

import porter
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, check_converted, run_ported
from tests.models import deformable_detr, diffusers_vae, sam, timm_mixer, timm_reparam
from tests.models._common import randomize_
from tests.twin_suite import Twin, TwinSuite, image as _image


def _pixels(b, h, w):
    """Images and a 0/1 pixel mask with padding at the right of the last image and the bottom of the first."""
    def make(seed):
        x = torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(seed))
        mask = torch.ones(b, h, w, dtype=torch.long)
        mask[-1, :, w - 5:] = 0
        mask[0, h - 3:, :] = 0
        return x, mask
    return make


TWINS = {
    # the token-mixing Linear fixes the number of patches (16): 8x32 images have 16 too
    "mlp_mixer": Twin(timm_mixer.mixer_small, _image(2, 3, 16, 16), _image(3, 3, 8, 32)),
    "gmlp": Twin(timm_mixer.gmlp_small, _image(2, 3, 16, 16), _image(1, 3, 32, 8)),
    "repvgg": Twin(timm_reparam.repvgg_small, _image(2, 3, 32, 32), _image(1, 3, 29, 35)),
    "mobileone": Twin(timm_reparam.mobileone_small, _image(2, 3, 32, 32), _image(1, 3, 29, 35)),
    # odd latents: 5x7 -> 20x28 images, and 6x3
    "sd_vae_decoder": Twin(diffusers_vae.sd_vae_decoder_small, _image(2, 4, 5, 7), _image(1, 4, 6, 3)),
    # two levels (strides 2 and 4) of sizes no stride divides at the second size, padded pixel masks
    "deformable_detr": Twin(deformable_detr.deformable_detr_encoder_small, _pixels(2, 24, 28), _pixels(1, 19, 33)),
    # SAM's absolute position embedding fixes the 64x64 input: other batch only
    # the absolute position table fixes the size; the every-dim capture runs out of budget (falling back to the
    # batch dim): the batch dim is asked for
    "sam_vit": Twin(sam.sam_vit_small, _image(2, 3, 64, 64), _image(1, 3, 64, 64), dynamic="batch"),
}
SLOW = {"sam_vit"}

SUITE = TwinSuite(TWINS)
build, _converted, _check = SUITE.build, SUITE.converted, SUITE.check


@pytest.mark.parametrize("name", sorted(set(TWINS) - SLOW))
def test_twin_matches_torch_at_two_sizes(name):
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_twin_matches_torch_at_two_sizes_slow(name):
    _check(name)


def test_twins_keep_their_reference_names():
    """``state_dict`` keys of each reference implementation (timm, diffusers, HF, segment_anything)."""
    expected = {
        "mlp_mixer": ["stem.proj.weight", "blocks.0.norm1.weight", "blocks.0.mlp_tokens.fc1.weight",
                      "blocks.1.mlp_channels.fc2.bias", "norm.bias", "head.weight"],
        "gmlp": ["stem.proj.weight", "blocks.0.norm.weight", "blocks.0.mlp_channels.fc1.weight",
                 "blocks.0.mlp_channels.gate.norm.weight", "blocks.1.mlp_channels.gate.proj.bias",
                 "blocks.1.mlp_channels.fc2.weight", "head.bias"],
        "repvgg": ["stem.conv_kxk.conv.weight", "stem.conv_kxk.bn.running_var", "stem.conv_1x1.bn.weight",
                   "stages.0.1.identity.running_mean", "stages.1.0.conv_1x1.conv.weight", "head.fc.weight"],
        "mobileone": ["stem.conv_kxk.0.conv.weight", "stem.conv_kxk.1.bn.bias", "stem.conv_scale.conv.weight",
                      "stages.0.2.identity.weight", "stages.0.1.conv_kxk.1.conv.weight", "head.fc.bias"],
        "sd_vae_decoder": ["post_quant_conv.weight", "decoder.conv_in.weight",
                           "decoder.mid_block.attentions.0.group_norm.weight",
                           "decoder.mid_block.attentions.0.to_q.weight",
                           "decoder.mid_block.attentions.0.to_out.0.bias", "decoder.mid_block.resnets.1.conv2.weight",
                           "decoder.up_blocks.0.upsamplers.0.conv.weight",
                           "decoder.up_blocks.2.resnets.0.conv_shortcut.weight",
                           "decoder.up_blocks.2.resnets.2.norm1.bias",
                           "decoder.conv_norm_out.weight", "decoder.conv_out.bias"],
        "deformable_detr": ["input_proj.0.0.weight", "input_proj.1.1.bias", "level_embed",
                            "encoder.layers.0.self_attn.sampling_offsets.weight",
                            "encoder.layers.0.self_attn.attention_weights.bias",
                            "encoder.layers.1.self_attn.value_proj.weight",
                            "encoder.layers.1.self_attn.output_proj.bias",
                            "encoder.layers.1.self_attn_layer_norm.weight", "encoder.layers.1.fc2.weight",
                            "encoder.layers.1.final_layer_norm.bias"],
        "sam_vit": ["pos_embed", "patch_embed.proj.weight", "blocks.0.norm1.weight", "blocks.0.attn.qkv.weight",
                    "blocks.0.attn.rel_pos_h", "blocks.1.attn.rel_pos_w", "blocks.2.mlp.lin1.weight",
                    "neck.0.weight", "neck.1.bias", "neck.2.weight", "neck.3.weight"],
    }
    for name, keys in expected.items():
        state = TWINS[name].builder().state_dict()
        missing = [k for k in keys if k not in state]
        assert not missing, f"{name}: missing {missing}"
    # SAM's window blocks carry (2 * window - 1)-row tables, its global block one for the whole 8x8 grid
    state = TWINS["sam_vit"].builder().state_dict()
    assert state["blocks.0.attn.rel_pos_h"].shape[0] == 5 and state["blocks.1.attn.rel_pos_h"].shape[0] == 15


@pytest.mark.parametrize("name", sorted(set(TWINS) - SLOW))
def test_a_checkpoint_round_trips_through_the_port(name):
    """The port's ``torch_parameters()`` load into a freshly built twin with strict ``load_state_dict`` and give
    torch's outputs (so a checkpoint saved by the reference code round-trips through the port)."""
    SUITE.round_trip(name)


# ---------------------------------------------------------------------------------------------------- artifacts
@pytest.mark.parametrize("name", ["gmlp", "mobileone", "sd_vae_decoder", "deformable_detr"])
def test_save_load_round_trip(name, tmp_path):
    model, ported = _converted(name)
    porter.save(ported, tmp_path / name)
    loaded = porter.load(tmp_path / name)
    assert loaded.dynamic_dims == ported.dynamic_dims
    assert_matches(loaded, model, TWINS[name].inputs(5))
    assert_matches(loaded, model, TWINS[name].second(6))


@pytest.mark.slow
def test_cli_converts_a_state_dict(tmp_path):
    """``porter convert x.pt --model module:factory`` on a RepVGG state_dict; the folder loads and matches torch at
    a size the strides do not divide."""
    from click.testing import CliRunner

    from porter.cli.main import main

    model = build("repvgg")
    path = tmp_path / "repvgg.pt"
    torch.save(model.state_dict(), path)
    result = CliRunner().invoke(main, ["convert", str(path), "--model", "tests.models.timm_reparam:repvgg_small",
                                       "--input-shape", "2,3,32,32", "-o", str(tmp_path / "rv")])
    assert result.exit_code == 0, result.output
    assert_matches(porter.load(tmp_path / "rv"), model, TWINS["repvgg"].second(7))


# ---------------------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", ["mlp_mixer", "gmlp", "repvgg", "mobileone", "deformable_detr"])
def test_gradient_parity(name):
    """Eval-mode gradients to the float inputs and every parameter: the token-mixing Linear on a transposed tensor,
    the spatial gating unit (chunk, LayerNorm of one half, Linear over tokens), eval BN in three summed branches and
    MobileOne's in-place sums, ``grid_sample`` to the values and to the sampling offsets (through the softmax over
    levels x points and the offset normaliser)."""
    model, ported = _converted(name)
    result = grad_parity(model, ported, TWINS[name].inputs(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    names = {r["name"] for r in result["parameters"]}
    assert names == {n for n, p in model.named_parameters() if p.requires_grad}


# ---------------------------------------------------------------------------------------------------- deploy form
@pytest.mark.parametrize("name", ["repvgg", "mobileone"])
def test_reparameterized_deploy_form_converts(name):
    """timm's ``reparameterize()`` folds each block's branches into one biased conv (``reparam_conv``): torch's
    deploy model computes the train-time model's function, and its port matches it at both sizes; its
    ``state_dict`` is the deploy checkpoint's (``*.reparam_conv.weight``/``bias``, no branch left)."""
    train = build(name)
    deploy = copy.deepcopy(train).reparameterize()
    x = TWINS[name].inputs(1)[0]
    with torch.no_grad():
        torch.testing.assert_close(deploy(x), train(x), rtol=1e-4, atol=1e-4)
    keys = deploy.state_dict().keys()
    assert "stem.reparam_conv.weight" in keys and "stages.0.0.reparam_conv.bias" in keys
    assert not any("conv_kxk" in k or "identity" in k for k in keys)
    check_converted(deploy, TWINS[name].inputs(0), TWINS[name].inputs(1), TWINS[name].second(2))


# ---------------------------------------------------------------------------------------------------- SAM
@pytest.mark.slow
def test_sam_encoder_without_absolute_positions_is_pinned_to_its_grid():
    """Without the absolute position embedding (``use_abs_pos=False``) torch runs SAM's encoder at any size (the
    global block resizes its 15-row tables by linear interpolation, ``get_rel_pos``), but the capture keeps the
    grid only at the example's: even with every dim asked dynamic, a 5x6 grid (40x48 images; the example's is 7x9)
    is refused by name on the resized table's length (torch's guard ``2 * (H // 8) - 1 == 13``: SAM's own
    ``get_rel_pos`` calls ``int(2 * max(q_size, k_size) - 1)`` on the symbolic grid size, and ``int()`` of a SymInt
    specialises it; found, not fixed). The height and width were also pinned by torch's ``IntTrueDiv(E, E) >= 1.0``
    (non-strict export's ``_tensor_min_max``), now checked exactly.
    The refusal names that line and the int() as the cause. Another batch at the example's size matches torch,
    batch 1 too (refused until session 19: a guard ``batch * windows // windows != 1`` from the batch-2 example,
    made by Porter's own contiguity question and by ``view(-1, ...)``'s C++ size inference, not by the model)."""
    torch.manual_seed(0)
    model = randomize_(sam.sam_vit_any_size(), 0)
    ported = porter.convert(model, _image(2, 3, 56, 72)(0), io_layout="torch", dynamic="all")
    with pytest.raises(ValueError, match=r"has size 40 in dim 2") as info:
        run_ported(ported, _image(3, 3, 40, 48)(3))
    assert "in get_rel_pos: max_rel_dist = int(2 * max(q_size, k_size) - 1)" in str(info.value)
    assert "Python's int() of a size computed from the input returns a plain int" in str(info.value)
    assert_matches(ported, model, _image(3, 3, 56, 72)(1))
    assert_matches(ported, model, _image(1, 3, 56, 72)(2))


@pytest.mark.slow
def test_sam_encoder_with_absolute_positions_runs_where_torch_does_and_names_the_embedding_elsewhere():
    """SAM's own configuration adds a position embedding of a fixed 8x8 grid to the patch map: torch runs any image
    whose patch grid is 8x8 (64x70: the patch conv floors 70 / 8) and fails at any other grid. The port captured
    with every dim dynamic does the same: torch's numbers at 64x70 and another batch, and a 72x72 image refused
    naming the dims and a parameter's size as the cause."""
    torch.manual_seed(0)
    model = randomize_(sam.sam_vit_small(), 0)
    ported = porter.convert(model, _image(2, 3, 64, 64)(0), io_layout="torch", dynamic="all")
    assert ported.dynamic_dims == [{"input": 0, "axis": 0}, {"input": 0, "axis": 2}, {"input": 0, "axis": 3}]
    assert_matches(ported, model, _image(1, 3, 64, 70)(1))
    assert_matches(ported, model, _image(3, 3, 71, 64)(2))
    with pytest.raises(RuntimeError, match="must match the size"):
        model(_image(1, 3, 72, 72)(3)[0])
    with pytest.raises(ValueError, match=r"has size 72 in dim 2 and input 'x' \(input 0\) has size 72 in dim 3") as info:
        run_ported(ported, _image(1, 3, 72, 72)(3))
    assert "to a size a parameter of the model has" in str(info.value)
