"""Session 15's vision architectures Porter was not written against: timm's VOLO (``tests/models/volo.py``),
GhostNet v1 and v2 (``ghostnet.py``), FocalNet (``focalnet.py``, pre-norm and post-norm forms), TinyViT
(``tiny_vit.py``) and EdgeNeXt (``edgenext.py``). Each converts and matches torch, run here on the same data, at
its example size and batch and at a second one (odd maps where the model takes them); strict ``load_state_dict``
of the port's ``torch_parameters()`` into the twin; gradients to the image and every parameter; train mode with
BatchNorm's batch statistics (VOLO's stem, GhostNet v2, TinyViT); float16; the sizes a fixed position embedding
or the capture's assumptions tie the port to, refused by name.

Found on the way (fixed, tested in ``test_capture_cached_tensors.py``): TinyViT's eval-mode
``attention_bias_cache``: Porter's probing forwards rewrote every buffer (its index buffer too), so a cache filled
before the conversion could no longer be differentiated in torch; and a cache filled before the conversion is a
frozen constant in the port, for which training mode is now refused by name. timm's ``BatchNormAct2d`` (GhostNet's
``ConvBnAct``) was captured in its eval form and its training mode refused; since session 16 it maps to the port's
batch norm (``converters/capture_batch_norms.py``) and trains as torch.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import copy

import pytest
import torch

import porter
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, assert_state_matches, run_ported
from tests.models import edgenext, focalnet, ghostnet, tiny_vit, volo
from tests.twin_suite import Twin, TwinSuite, image


def _outlooker():
    return volo.Outlooker(16, kernel_size=3, padding=1, stride=2, num_heads=2)


TWINS = {
    # pos_embed fixes the pooled grid at 4x4 (images 64..79 after the stem): with H, W dynamic torch.export itself
    # fails ("4 - 4*(((x/2)//8)) < 0 cannot be solved"), so the batch dim only; 72x72 gives a 9x9 outlook grid
    # (odd: the ceil-mode pool's last window is partial, unfold/fold at stride 2 over 5x5 positions)
    "volo": Twin(volo.volo_small, image(2, 3, 72, 72), image(3, 3, 72, 72), dynamic="batch"),
    # outlook attention alone on an NHWC grid, every dim dynamic: 9x9 (5x5 pooled) and 6x11 (3x6 pooled)
    "outlooker": Twin(_outlooker, image(2, 9, 9, 16), image(3, 6, 11, 16)),
    # 45x39: 23x20 after the stem, then 12x10, 6x5, 3x3; v2's DFC gate pools 12x10 -> 6x5 and 6x5 -> 3x2, and
    # nearest-upsamples 3x2 back to 6x5
    "ghostnet": Twin(ghostnet.ghostnet_small, image(2, 3, 64, 64), image(3, 3, 45, 39)),
    "ghostnetv2": Twin(ghostnet.ghostnetv2_small, image(2, 3, 64, 64), image(3, 3, 45, 39)),
    # 75x53: 18x13 after the patchify stem, 9x6, 4x3, 2x1 (the overlapping form: 18x13, 9x7, 5x4, 3x2)
    "focalnet": Twin(focalnet.focalnet_small, image(2, 3, 64, 64), image(3, 3, 75, 53)),
    "focalnet_post_norm": Twin(focalnet.focalnet_post_norm_small, image(2, 3, 64, 64), image(3, 3, 75, 53)),
    # 72x56: 18x14, 9x7, 5x4, 3x2 grids; windows 3, 4, 3 pad 9x7 -> 9x9, 5x4 -> 8x4, 3x2 -> 3x3. The capture with
    # H, W dynamic runs past its budget (the pad arithmetic, as Twins-SVT): the batch dim
    "tiny_vit": Twin(tiny_vit.tiny_vit_small, image(2, 3, 72, 56), image(3, 3, 72, 56), dynamic="batch"),
    # 75x67: 18x16, 9x8, 4x4, 2x2 (the Fourier encoding at 9x8). "auto" runs past its budget (torch.export alone
    # took 16 CPU s of the 16.7 s share, measured loaded) and falls back to the batch dim: every dim, asked for.
    # torch.export assumes each size >= 2, so the last stage's H/32 >= 2: the port refuses images under 64
    "edgenext": Twin(edgenext.edgenext_small, image(2, 3, 64, 64), image(3, 3, 75, 67), dynamic="all"),
}
SLOW = {"ghostnet", "ghostnetv2", "focalnet_post_norm", "tiny_vit", "edgenext"}  # ~18-30 s CPU to convert

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


@pytest.mark.parametrize("name, size", [
    ("volo", (2, 3, 72, 72)), ("outlooker", (2, 6, 11, 16)),
    pytest.param("ghostnet", (2, 3, 45, 39), marks=pytest.mark.slow),
    pytest.param("ghostnetv2", (2, 3, 45, 39), marks=pytest.mark.slow),
    ("focalnet", (2, 3, 75, 53)), pytest.param("focalnet_post_norm", (2, 3, 75, 53), marks=pytest.mark.slow),
    pytest.param("tiny_vit", (2, 3, 72, 56), marks=pytest.mark.slow),
    pytest.param("edgenext", (2, 3, 75, 67), marks=pytest.mark.slow)])
def test_gradients_to_the_image_and_every_parameter(name, size):
    """VOLO: unfold/fold and the ceil-mode pool's partial windows, class attention, the aux head's max over
    tokens; GhostNet: the sliced concat, SE, v2's DFC gate through the nearest upsample; FocalNet: the gates,
    the global context, layer scale; TinyViT: the padded windows and their crop, the gathered attention bias;
    EdgeNeXt: the chained split convs, XCA's normalised q/k and temperature, the Fourier encoding's projection."""
    model, ported = _converted(name)
    for module in model.modules():  # TinyViT's eval cache, filled by an earlier no_grad forward, would stop torch's
        if isinstance(getattr(module, "attention_bias_cache", None), dict):  # gradient to attention_biases
            module.attention_bias_cache.clear()
    result = grad_parity(model, ported, image(*size)(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    assert {r["name"] for r in result["parameters"]} == {n for n, _ in model.named_parameters()}


def test_twins_keep_their_reference_names():
    expected = {
        "volo": ["patch_embed.conv.0.weight", "patch_embed.conv.1.running_mean", "patch_embed.conv.7.weight",
                 "patch_embed.proj.bias", "pos_embed", "network.0.0.norm1.weight", "network.0.0.attn.v.weight",
                 "network.0.0.attn.attn.bias", "network.0.0.attn.proj.weight", "network.0.0.mlp.fc2.bias",
                 "network.1.proj.weight", "network.2.0.attn.qkv.weight", "network.4.0.norm2.bias",
                 "post_network.0.attn.kv.weight", "post_network.1.attn.q.weight", "post_network.1.mlp.fc1.weight",
                 "cls_token", "aux_head.weight", "norm.weight", "head.bias"],
        "ghostnetv2": ["conv_stem.weight", "bn1.running_var", "blocks.0.0.ghost1.primary_conv.0.weight",
                       "blocks.0.0.ghost1.cheap_operation.1.bias", "blocks.1.0.conv_dw.weight",
                       "blocks.1.0.bn_dw.running_mean", "blocks.1.0.shortcut.2.weight",
                       "blocks.2.0.ghost1.short_conv.0.weight", "blocks.2.0.ghost1.short_conv.5.running_var",
                       "blocks.2.0.se.conv_reduce.weight", "blocks.2.0.se.conv_expand.bias",
                       "blocks.3.1.ghost2.primary_conv.1.weight", "blocks.5.0.conv.weight",
                       "blocks.5.0.bn1.running_mean", "conv_head.bias", "classifier.weight"],
        "focalnet": ["stem.proj.weight", "stem.norm.bias", "layers.0.blocks.0.norm1.weight",
                     "layers.0.blocks.0.modulation.f.weight", "layers.0.blocks.0.modulation.h.bias",
                     "layers.0.blocks.0.modulation.focal_layers.1.0.weight", "layers.0.blocks.0.modulation.proj.bias",
                     "layers.0.blocks.0.mlp.fc1.weight", "layers.1.downsample.proj.weight",
                     "layers.1.downsample.norm.weight", "layers.2.blocks.1.norm2.bias",
                     "layers.2.blocks.0.modulation.focal_layers.2.0.weight", "norm.weight", "head.fc.weight"],
        "focalnet_post_norm": ["layers.0.blocks.0.norm1_post.weight", "layers.0.blocks.0.norm2_post.bias",
                               "layers.0.blocks.0.ls1.gamma", "layers.3.blocks.0.ls2.gamma",
                               "layers.0.blocks.0.modulation.norm.weight", "head.norm.weight",
                               "head.pre_logits.fc.weight", "head.fc.bias"],
        "tiny_vit": ["patch_embed.conv1.conv.weight", "patch_embed.conv2.bn.running_var",
                     "stages.0.blocks.0.conv1.conv.weight", "stages.0.blocks.0.conv3.bn.bias",
                     "stages.1.downsample.conv2.conv.weight", "stages.1.blocks.0.attn.attention_biases",
                     "stages.1.blocks.0.attn.norm.weight", "stages.1.blocks.0.attn.qkv.weight",
                     "stages.2.blocks.1.attn.proj.bias", "stages.2.blocks.0.local_conv.conv.weight",
                     "stages.3.blocks.0.mlp.norm.bias", "stages.3.blocks.0.mlp.fc2.weight", "head.norm.weight",
                     "head.fc.bias"],
    }
    for name, keys in expected.items():
        state = TWINS[name].builder().state_dict()
        missing = [k for k in keys if k not in state]
        assert not missing, f"{name}: missing {missing}"
    state = TWINS["edgenext"].builder().state_dict()
    for key in ("stem.0.weight", "stem.1.bias", "stages.0.blocks.1.conv_dw.weight", "stages.0.blocks.0.gamma",
                "stages.1.downsample.0.weight", "stages.1.downsample.1.bias", "stages.1.blocks.1.convs.0.weight",
                "stages.1.blocks.1.pos_embd.token_projection.weight", "stages.2.blocks.1.convs.1.bias",
                "stages.2.blocks.1.norm_xca.weight", "stages.2.blocks.1.gamma_xca", "stages.3.blocks.1.xca.temperature",
                "stages.3.blocks.1.xca.qkv.weight", "stages.3.blocks.1.xca.proj.bias", "stages.3.blocks.1.mlp.fc2.weight",
                "head.norm.weight", "head.fc.bias"):
        assert key in state, key
    assert "stages.2.blocks.1.pos_embd.token_projection.weight" not in state
    assert "stages.1.blocks.0.attn.attention_bias_idxs" not in TWINS["tiny_vit"].builder().state_dict()
    assert "layers.0.blocks.0.norm1.weight" not in TWINS["focalnet_post_norm"].builder().state_dict()
    v1 = TWINS["ghostnet"].builder().state_dict()
    assert "blocks.2.0.ghost1.short_conv.0.weight" not in v1 and "blocks.1.0.ghost1.short_conv.0.weight" not in \
        TWINS["ghostnetv2"].builder().state_dict()


# ---------------------------------------------------------------------------------------------------- VOLO
def test_volo_refuses_the_sizes_its_position_embedding_does_not_fit():
    """Converted at 72x72 with the batch dim dynamic: 64x71 (an 8x9 outlook grid, still a 4x4 pooled grid, so
    torch runs it) is refused naming the dims; 80x80 fails in torch at the pos_embed add. A port converted at
    64x71 matches torch there."""
    model, ported = _converted("volo")
    with pytest.raises(ValueError, match=r"input 'x' \(input 0\) has size 64 in dim 2.*x.size\(2\) == 72"):
        run_ported(ported, image(1, 3, 64, 71)(0))
    with pytest.raises(RuntimeError, match="must match the size"):
        model(*image(1, 3, 80, 80)(0))
    other = porter.convert(model, image(2, 3, 64, 71)(0), io_layout="torch", dynamic="batch")
    assert_matches(other, model, image(1, 3, 64, 71)(1))


def test_volo_trains_with_batch_statistics_as_torch():
    """The stem's BatchNorms in train mode (batch statistics, running ones updated and compared), dropout p=0."""
    model = copy.deepcopy(_converted("volo")[0])
    ported = porter.convert(model, image(2, 3, 72, 72)(0), io_layout="torch", dynamic="batch")
    assert ported.train_refusals == {}
    model.train()
    ported.train()
    assert_matches(ported, model, image(3, 3, 72, 72)(10))
    assert_state_matches(ported, model)


# ---------------------------------------------------------------------------------------------------- GhostNet
@pytest.mark.slow
def test_ghostnetv2_trains_with_batch_statistics_as_torch():
    """Every ghost module's and DFC branch's BatchNorm in train mode at the odd size, two steps, then eval; timm's
    BatchNormAct2d (the last stage's ConvBnAct, a BatchNorm2d subclass with its activation inside) among them."""
    model = copy.deepcopy(_converted("ghostnetv2")[0])
    ported = porter.convert(model, image(2, 3, 64, 64)(0), io_layout="torch")
    assert ported.train_refusals == {}
    assert ported.graph["modules"]["blocks.5.0.bn1"]["type"] == "BatchNorm"
    model.train()
    ported.train()
    for step, size in enumerate(((2, 3, 64, 64), (3, 3, 45, 39))):
        assert_matches(ported, model, image(*size)(10 + step))
    assert_state_matches(ported, model)
    model.eval()
    ported.eval()
    assert_matches(ported, model, image(1, 3, 33, 47)(12))


# ---------------------------------------------------------------------------------------------------- TinyViT
@pytest.mark.slow
def test_tiny_vit_trains_and_refuses_another_size_by_name():
    """Train mode: the conv-BN pairs with batch statistics, the bias gathered (not cached) as torch does; 64x64
    (other pads, the unpartitioned branch at the 4x4 stage) is refused naming the dims."""
    model, ported = _converted("tiny_vit")
    with pytest.raises(ValueError, match=r"input 'x' \(input 0\) has size 64 in dim 3.*x.size\(3\) == 56"):
        run_ported(ported, image(1, 3, 72, 64)(0))
    # a fresh twin: the converted one's attention_bias_cache holds a tensor with autograd history (Porter's eval
    # probe filled it, as any eval forward outside no_grad does), which copy.deepcopy refuses
    model = build("tiny_vit")
    ported = porter.convert(model, image(2, 3, 72, 56)(0), io_layout="torch", dynamic="batch")
    assert ported.train_refusals == {}
    model.train()
    ported.train()
    assert_matches(ported, model, image(3, 3, 72, 56)(10))
    result = grad_parity(model, ported, image(2, 3, 72, 56)(11), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result


# ---------------------------------------------------------------------------------------------------- EdgeNeXt
@pytest.mark.slow
def test_edgenext_runs_a_one_by_one_last_stage():
    """48x48: a 1x1 map at the last stage (the 9x9 depthwise conv all padding, XCA over one token), off the
    conversion's grid sizes."""
    model, ported = _converted("edgenext")
    assert_matches(ported, model, image(1, 3, 48, 48)(0))


# ---------------------------------------------------------------------------------------------------- float16
@pytest.mark.parametrize("name, size", [("volo", (2, 3, 72, 72)), ("focalnet", (2, 3, 75, 53))])
def test_float16_ports_are_as_close_to_float32_as_torchs_float16_model(name, size):
    """The float16 port and torch's float16 model on the same float16 image, each against torch's float32 output:
    the port's error within twice torch's own (FocalNet measured 2.0% of the output's range for the port, 1.2% for
    torch: random deep weights through GELU-gated products; VOLO 0.25% and 0.27%)."""
    port_err, torch_err = SUITE.float16_errors(name, image(*size)(6)[0])
    assert port_err <= max(2 * torch_err, 5e-3), (port_err, torch_err)
