"""Session 11's architectures Porter was not written against (``tests/models/timm_hybrid.py``: LeViT, DeiT
distilled, HRNet; ``tests/models/torchvision_dense.py``: RetinaNet's FPN network and heads, LR-ASPP,
EfficientNetV2, MaxViT): each converts and matches torch, run here on the same data, at its example size and at a
second size (another batch, and a size the strides or patches do not divide where the architecture allows one);
save/load round trips, strict ``load_state_dict`` of the port's ``torch_parameters()`` into the twin, gradients for
the op families they add, the CLI on a saved ``state_dict``. The finding they turned up (a float ``scale_factor``'s
size guard pinned the dims) is tested op by op at the end of this file.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import porter
from porter.converters.serialize import graph_text
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, check_converted, run_ported
from tests.models import timm_hybrid as th
from tests.models import torchvision_dense as tv
from tests.twin_suite import Twin, TwinSuite, image as _image


TWINS = {
    # the attention biases fix the 4x4 token grid (64x64 images; 63x57 gives the same grid): other batch
    "levit": Twin(th.levit_small, _image(2, 3, 64, 64), _image(3, 3, 63, 57)),
    # pretrained on a 6x6 grid: 40x44 pads to 5x6 patches, 37x29 to 5x4 (antialiased bicubic position resize)
    "deit": Twin(th.deit_small, _image(2, 3, 40, 44), _image(1, 3, 37, 29)),
    # multiples of 32 (the fuse layers' nearest upsamplings meet the strided branches there)
    "hrnet": Twin(th.hrnet_small, _image(2, 3, 64, 64), _image(1, 3, 96, 32)),
    # FPN's top-down path resizes to each lateral's size: sizes no stride divides
    "retinanet": Twin(tv.retinanet_small, _image(2, 3, 64, 64), _image(1, 3, 75, 50)),
    "lraspp": Twin(tv.lraspp_small, _image(2, 3, 32, 32), _image(3, 3, 45, 38)),
    "efficientnet_v2": Twin(tv.efficientnet_v2_small, _image(2, 3, 32, 32), _image(1, 3, 35, 29)),
    # torchvision's partitions reshape to the grid of its input_size (64x64): other batch only. Its window
    # reshapes make the automatic capture outrun its budget (then static, batch 2 only): the batch dim is asked for
    "maxvit": Twin(tv.maxvit_small, _image(2, 3, 64, 64), _image(3, 3, 64, 64), "batch"),
}
SLOW = {"maxvit", "levit", "lraspp"}  # > 15 s of CPU to convert (one thread): the fast set stays near a minute


def _marked(*names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


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
    """``state_dict`` keys of each reference implementation (so its checkpoints load); LeViT's bias index buffers
    are non-persistent, as in timm."""
    expected = {
        "levit": ["stem.conv1.linear.weight", "stem.conv4.bn.running_var", "stages.0.blocks.0.attn.qkv.linear.weight",
                  "stages.0.blocks.0.attn.qkv.bn.bias", "stages.0.blocks.0.attn.attention_biases",
                  "stages.0.blocks.0.attn.proj.ln.bn.weight", "stages.0.blocks.0.mlp.ln2.linear.weight",
                  "stages.1.downsample.attn_downsample.kv.linear.weight",
                  "stages.1.downsample.attn_downsample.q.ln.bn.running_mean",
                  "stages.1.downsample.attn_downsample.attention_biases", "stages.1.downsample.mlp.ln1.bn.weight",
                  "head.bn.running_mean", "head.linear.weight", "head_dist.linear.bias"],
        "deit": ["cls_token", "dist_token", "pos_embed", "patch_embed.proj.weight", "blocks.0.norm1.weight",
                 "blocks.0.attn.qkv.weight", "blocks.1.attn.proj.bias", "blocks.1.mlp.fc2.weight", "norm.bias",
                 "head.weight", "head_dist.bias"],
        "hrnet": ["conv1.weight", "bn2.running_var", "layer1.0.conv3.weight", "layer1.0.downsample.1.weight",
                  "transition1.0.0.weight", "transition1.1.0.0.weight", "stage2.0.branches.1.0.conv2.weight",
                  "stage2.0.fuse_layers.0.1.0.weight", "stage2.0.fuse_layers.1.0.0.0.weight",
                  "transition3.3.0.1.running_mean", "stage4.0.fuse_layers.3.0.2.0.weight",
                  "stage4.0.fuse_layers.0.3.1.bias"],
        "retinanet": ["backbone.body.conv1.weight", "backbone.body.layer4.0.downsample.1.running_var",
                      "backbone.fpn.inner_blocks.0.0.weight", "backbone.fpn.layer_blocks.2.0.bias",
                      "backbone.fpn.extra_blocks.p6.weight", "backbone.fpn.extra_blocks.p7.bias",
                      "head.classification_head.conv.3.0.weight", "head.classification_head.cls_logits.bias",
                      "head.regression_head.conv.0.0.bias", "head.regression_head.bbox_reg.weight"],
        "lraspp": ["backbone.0.0.weight", "backbone.4.block.2.fc1.weight", "classifier.cbr.0.weight",
                   "classifier.cbr.1.running_mean", "classifier.scale.1.weight", "classifier.low_classifier.bias",
                   "classifier.high_classifier.weight"],
        "efficientnet_v2": ["features.0.0.weight", "features.1.0.block.0.0.weight", "features.2.0.block.1.1.bias",
                            "features.3.1.block.2.fc1.weight", "features.3.1.block.3.1.running_var",
                            "features.4.0.weight", "classifier.1.weight"],
        "maxvit": ["stem.0.0.weight", "blocks.0.layers.0.layers.MBconv.layers.squeeze_excitation.fc1.weight",
                   "blocks.0.layers.0.layers.window_attention.attn_layer.1.relative_position_bias_table",
                   "blocks.3.layers.0.layers.grid_attention.mlp_layer.1.weight", "classifier.5.weight"],
    }
    for name, keys in expected.items():
        state = TWINS[name].builder().state_dict()
        missing = [k for k in keys if k not in state]
        assert not missing, f"{name}: missing {missing}"
    assert not any("attention_bias_idxs" in k for k in TWINS["levit"].builder().state_dict())


@pytest.mark.parametrize("name", _marked("levit", "deit", "hrnet", "retinanet", "efficientnet_v2"))
def test_a_real_checkpoint_loads_into_the_port_by_torch_names(name):
    """The port's ``torch_parameters()`` are the twin's ``state_dict``: strict loading into another instance gives
    the converted model's outputs."""
    SUITE.round_trip(name)


@pytest.mark.parametrize("name", _marked("levit", "deit", "retinanet"))
def test_save_load_round_trip(name, tmp_path):
    model, ported = _converted(name)
    porter.save(ported, tmp_path / name)
    loaded = porter.load(tmp_path / name)
    assert loaded.dynamic_dims == ported.dynamic_dims
    assert_matches(loaded, model, TWINS[name].inputs(5))
    assert_matches(loaded, model, TWINS[name].second(6))


@pytest.mark.slow
def test_cli_converts_a_state_dict(tmp_path):
    """``porter convert x.pt --model module:factory`` on an HRNet state_dict; the folder loads and matches torch at
    another size."""
    from click.testing import CliRunner

    from porter.cli.main import main

    model = build("hrnet")
    path = tmp_path / "hrnet.pt"
    torch.save(model.state_dict(), path)
    result = CliRunner().invoke(main, ["convert", str(path), "--model", "tests.models.timm_hybrid:hrnet_small",
                                       "--input-shape", "2,3,64,64", "-o", str(tmp_path / "hr")])
    assert result.exit_code == 0, result.output
    assert_matches(porter.load(tmp_path / "hr"), model, TWINS["hrnet"].second(7))


# ---------------------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", _marked("levit", "deit", "hrnet", "retinanet", "lraspp"))
def test_gradient_parity(name):
    """Eval-mode gradients to the input and every parameter: LeViT's Linear + BatchNorm1d pairs, hardswish and the
    attention bias gathered by its index buffer; DeiT's antialiased bicubic position resize (gradient to
    ``pos_embed``) and padded patch embedding; HRNet's nearest upsamplings by 2/4/8; the FPN's nearest resize to a
    lateral's size and RetinaNet's per-level reshapes; LR-ASPP's sigmoid gate and bilinear resizes. LeViT's eval
    cache of the gathered bias, filled by earlier ``no_grad`` calls, holds no graph (torch then gives
    ``attention_biases`` no gradient): ``train()`` clears it, as timm does, before torch's gradients are taken."""
    model, ported = _converted(name)
    model.train().eval()
    result = grad_parity(model, ported, TWINS[name].inputs(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    names = {r["name"] for r in result["parameters"]}
    assert names == {n for n, p in model.named_parameters() if p.requires_grad}


# ---------------------------------------------------------------------------------------------------- sizes
@pytest.mark.slow
def test_levit_refuses_a_grid_its_attention_biases_do_not_fit():
    """LeViT's biases fix the 4x4 token grid: 80x80 (a 5x5 grid) fails in torch's own ``view`` and is refused by
    the port, naming the input; 49x64 (the same grid) runs."""
    model, ported = _converted("levit")
    x = torch.randn(1, 3, 80, 80)
    with pytest.raises(RuntimeError):
        model(x)
    with pytest.raises(ValueError, match=r"input 'x' \(input 0\) has size 80"):
        run_ported(ported, (x,))
    assert_matches(ported, model, (torch.randn(1, 3, 49, 64),))


def test_deit_refuses_the_pretraining_grid_that_skips_the_resize():
    """``resample_abs_pos_embed`` returns the table unchanged at the pretraining grid (6x6): a branch the capture
    did not take, refused by name; other grids, padded or not, match."""
    model, ported = _converted("deit")
    with pytest.raises(ValueError, match=r"!= 38"):
        run_ported(ported, (torch.randn(1, 3, 48, 41),))
    for shape in ((1, 3, 16, 64), (2, 3, 57, 33)):
        assert_matches(ported, model, (torch.randn(shape),))


@pytest.mark.slow
def test_levit_bias_cache_filled_before_conversion_is_named():
    """timm's LeViT caches ``attention_biases[:, attention_bias_idxs]`` in a dict attribute on its first eval call.
    Converted after such a call, torch.export bakes the cached tensor in as a constant: the port gives torch's
    numbers, but ``attention_biases`` is dead in it (new weights or training would not reach it). The conversion
    now warns, naming the attributes; converted after ``train().eval()`` (timm clears the cache), new weights
    loaded into the port give what torch gives with them."""
    model = build("levit")
    x = TWINS["levit"].inputs(1)
    with torch.no_grad():
        model(*x)
    with pytest.warns(UserWarning, match=r"stages\.0\.blocks\.0\.attn\.attention_bias_cache\['cpu'\].*neither a "
                                          r"parameter nor a buffer.*will not change it"):
        stale = porter.convert(model, TWINS["levit"].inputs(0), io_layout="torch", dynamic="batch")
    assert_matches(stale, model, x)
    model.train().eval()
    ported = porter.convert(model, TWINS["levit"].inputs(0), io_layout="torch", dynamic="batch")
    other = build("levit", seed=5)
    ported.load_torch_state_dict(other.state_dict())
    assert_matches(ported, other, x)


# ---------------------------------------------------------------------------------------------------- findings
class Resize(nn.Module):
    def __init__(self, scale_factor, mode, antialias=False):
        super().__init__()
        self.scale_factor, self.mode, self.antialias = scale_factor, mode, antialias

    def forward(self, x):
        return F.interpolate(x, scale_factor=self.scale_factor, mode=self.mode, antialias=self.antialias) * 2


@pytest.mark.parametrize("scale, mode, antialias", [(0.45, "bicubic", True), (0.3, "bilinear", True),
                                                    (0.6, "nearest", False), ((0.45, 1.3), "bicubic", False),
                                                    (1 / 3, "bilinear", False), (0.7, "nearest", False)])
def test_float_scale_factor_keeps_the_dims_dynamic(scale, mode, antialias):
    """``interpolate(scale_factor=0.45)``'s output size is ``trunc(0.45 * float(H))``: torch's guards on it (the
    output has at least two rows) were outside the check format and pinned H and W to the example (a second
    size was refused). They are translated exactly in integers now (the float product's rounding included:
    0.3 * 20 rounds up to 6.0 although 0.3's double is below 0.3), so other sizes run and match torch; where
    an antialiased resize's output would have one row (the capture's 0/1 specialisation) the port refuses by
    name, the other modes run it."""
    model = Resize(scale, mode, antialias)
    r = torch.randn
    ported = check_converted(model, r(1, 3, 20, 22), r(2, 3, 31, 17), r(1, 2, 9, 40), r(1, 3, 30, 30))
    assert {(d["input"], d["axis"]) for d in ported.dynamic_dims} == {(0, 0), (0, 1), (0, 2), (0, 3)}
    # each condition written once (the side conditions of the exact translation are shared by torch's guards on
    # the same size: 21 checks and a 324 KB graph.json for the antialiased 0.45 before)
    conditions = [json.dumps([c["lhs"], c["cmp"], c["rhs"]]) for c in ported.graph["input_checks"]]
    assert len(conditions) == len(set(conditions))
    assert len(graph_text(ported.graph)) < 100_000
    small = r(1, 3, 3, 22)  # one output row
    if antialias:  # torch's antialiased kernels guard the size: checked by the port
        guard = r"math\.trunc\(0\.\d+\*torch\.sym_float\(x\.size\(2\)\)\) > [01]"
        how = r"\(torch's guard, checked exactly in integers\)"
        with pytest.raises(ValueError, match=rf"breaks the condition {guard} {how}"):
            run_ported(ported, (small,))
    else:
        assert_matches(ported, model, (small,))


def test_float_scale_guard_matches_python_floats_at_every_size():
    """The integer translation of ``trunc(c * float(n))`` against Python's float arithmetic, for factors whose
    doubles sit above and below the decimal (0.45, 0.3, 0.7, 1/3, 2/3, 123.456) at every n below 5000 and at large n."""
    import ast

    from porter.converters.capture_guards import _Translator
    from porter.converters.guards import compile_expr

    for factor in (0.45, 0.3, 0.7, 1 / 3, 2 / 3, 123.456, 1.7, 1e-3):
        translator = _Translator({"d_0_0": (0, 0)}, [1])
        expr = compile_expr(translator.expr(ast.parse(f"math.trunc({factor!r}*torch.sym_float(d_0_0))",
                                                      mode="eval").body))
        sizes = list(range(5000)) + [2 ** 20 + 3, 10 ** 6, 3 * 10 ** 6 + 1, int(2 ** 31 / factor) - 7]
        wrong = [n for n in sizes if factor * n < 2 ** 32 and expr([[n]]) != int(factor * float(n))]
        assert not wrong, (factor, wrong[:5])
