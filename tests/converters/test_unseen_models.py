"""Architectures Porter was not written against (``tests/models/unseen.py``): each twin converts and matches torch,
run here on the same data, at its example size and at a second size (or the port refuses that size, naming the
dim and the condition); channels-last I/O, save/load round trips, gradient parity (eval and train mode), the CLI.

Findings they turned up are fixed in general form and tested op by op at the end of this file: a symbolic
``groups`` (StyleGAN2's grouped-conv trick, ``groups=batch``) for conv and conv-transpose, and a stride-ordering
guard torch makes inside its contiguity check that refused SegFormer at a one-row reduced map.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import math
from functools import lru_cache

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import porter
from porter.compare import RTOL
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches
from tests.models import make_inputs
from tests.models.unseen import UNSEEN

# Conversion dominates: these convert in a few seconds each; the rest are marked slow.
FAST = ("espcn", "pointnet", "wavenet")
SLOW = tuple(sorted(set(UNSEEN) - set(FAST)))


@lru_cache(maxsize=None)
def _converted(name, io_layout="torch"):
    spec = UNSEEN[name]
    model = spec.builder()
    return model, porter.convert(model, make_inputs(spec.inputs, seed=0), io_layout=io_layout)


def _check_model(name):
    spec = UNSEEN[name]
    model, ported = _converted(name)
    # other draws than the conversion example: nothing input-specific may be baked into the port
    assert_matches(ported, model, make_inputs(spec.inputs, seed=1))
    assert_matches(ported, model, make_inputs(spec.second_inputs, seed=2))
    report = porter.validate(model, ported, [make_inputs(spec.inputs, seed=3)], rtol=RTOL, atol=0.0)
    assert report.ok and report.first_divergence is None, str(report)
    assert report.runs[0]["modules"], f"{name}: no module outputs were compared"


@pytest.mark.parametrize("name", FAST)
def test_unseen_model_matches_torch_at_two_sizes(name):
    _check_model(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_unseen_model_matches_torch_at_two_sizes_slow(name):
    _check_model(name)


def test_twins_keep_their_reference_names():
    """A few ``state_dict`` keys of each real implementation (so a real checkpoint's keys load)."""
    expected = {
        "yolov8": ["model.0.conv.weight", "model.2.m.0.cv1.bn.running_var", "model.9.cv2.conv.weight",
                   "model.22.cv2.0.2.bias", "model.22.cv3.2.1.bn.weight", "model.22.dfl.conv.weight"],
        "unet2d": ["time_embedding.linear_1.weight", "down_blocks.0.resnets.0.time_emb_proj.bias",
                   "down_blocks.0.downsamplers.0.conv.weight", "down_blocks.1.attentions.0.to_out.0.weight",
                   "mid_block.attentions.0.group_norm.weight", "up_blocks.0.upsamplers.0.conv.weight",
                   "up_blocks.1.resnets.1.conv_shortcut.weight", "conv_norm_out.weight"],
        "dinov2": ["embeddings.cls_token", "embeddings.mask_token", "embeddings.position_embeddings",
                   "embeddings.patch_embeddings.projection.weight", "encoder.layer.1.attention.attention.query.bias",
                   "encoder.layer.0.attention.output.dense.weight", "encoder.layer.0.layer_scale1.lambda1",
                   "encoder.layer.1.mlp.fc2.weight", "layernorm.bias"],
        "segformer": ["segformer.encoder.patch_embeddings.0.proj.weight",
                      "segformer.encoder.block.0.0.attention.self.sr.weight",
                      "segformer.encoder.block.2.0.attention.self.layer_norm.bias",
                      "segformer.encoder.block.3.0.mlp.dwconv.dwconv.weight", "segformer.encoder.layer_norm.3.weight",
                      "decode_head.linear_c.0.proj.weight", "decode_head.linear_fuse.weight",
                      "decode_head.batch_norm.running_mean", "decode_head.classifier.bias"],
        "whisper_encoder": ["conv1.weight", "conv2.bias", "embed_positions.weight", "layers.0.self_attn.k_proj.weight",
                            "layers.1.self_attn_layer_norm.bias", "layers.1.fc2.weight", "layer_norm.weight"],
        "crnn": ["cnn.conv0.weight", "cnn.batchnorm6.running_mean", "rnn.0.rnn.weight_ih_l0_reverse",
                 "rnn.1.embedding.weight"],
        "tcn": ["network.0.conv1.weight_g", "network.0.conv1.weight_v", "network.0.net.0.weight_v",
                "network.0.downsample.weight", "network.2.conv2.bias"],
        "wavenet": ["first_conv.weight", "conv_layers.3.conv.weight", "conv_layers.0.conv1x1_skip.bias",
                    "last_conv_layers.3.weight"],
        "pointnet": ["feat.stn.conv1.weight", "feat.stn.fc3.bias", "feat.stn.bn5.running_var", "feat.conv3.weight",
                     "fc3.weight", "bn2.num_batches_tracked"],
        "stylegan2": ["style.1.weight", "input.input", "conv1.conv.weight", "conv1.conv.modulation.bias",
                      "conv1.noise.weight", "conv1.activate.bias", "to_rgb1.bias", "convs.0.conv.blur.kernel",
                      "to_rgbs.0.upsample.kernel"],
        "esrgan": ["conv_first.weight", "body.0.rdb1.conv1.weight", "body.0.rdb3.conv5.bias", "conv_body.weight",
                   "conv_up2.weight", "conv_hr.bias", "conv_last.weight"],
        "espcn": ["first_part.0.weight", "first_part.2.bias", "last_part.0.weight"],
        "dcgan": ["main.0.weight", "main.1.running_mean", "main.12.weight"],
        "mobilevit": ["stem.conv.weight", "stages.1.conv_kxk.conv.weight", "stages.1.conv_1x1.weight",
                      "stages.1.transformer.0.attn.qkv.weight", "stages.1.transformer.1.mlp.fc2.bias",
                      "stages.1.norm.weight", "stages.1.conv_fusion.bn.running_var", "head.weight"],
        "convlstm": ["cell_list.0.conv.weight", "cell_list.1.conv.bias"],
    }
    assert set(expected) == set(UNSEEN)
    for name, keys in expected.items():
        state = UNSEEN[name].builder().state_dict()
        missing = [k for k in keys if k not in state]
        assert not missing, f"{name}: missing {missing}"
    # fixed tensors a real checkpoint holds keep their values through the seeded randomisation
    yolo = UNSEEN["yolov8"].builder()
    assert torch.equal(yolo.model[-1].dfl.conv.weight.flatten(), torch.arange(8, dtype=torch.float))


# ---------------------------------------------------------------------------------------------------- refusals
def test_dcgan_latent_map_is_static_and_another_size_is_refused():
    """torch.export specialises a size-1 dim: a 2x2 latent map breaks ``input.size(2) == 1`` and is refused."""
    model, ported = _converted("dcgan")
    x = torch.randn(1, 8, 2, 2)
    with pytest.raises(ValueError, match=r"input 'input' \(input 0\) has size 2 in dim 2.*input.size\(2\) == 1"):
        ported(mx.array(x.numpy()))


@pytest.mark.slow
def test_crnn_runs_other_widths():
    """The LSTM's sequence length (T = W / 4 + 1) stays free: other widths (other lengths) and batches match."""
    model, ported = _converted("crnn")
    assert {"input": 0, "axis": 3} in ported.dynamic_dims
    for shape in ((1, 1, 32, 57), (3, 1, 32, 40), (2, 1, 32, 13), (1, 1, 32, 4)):
        assert_matches(ported, model, (torch.randn(shape),))


@pytest.mark.slow
def test_yolov8_refuses_a_size_its_concats_cannot_take_up_front():
    """300 is not a size YOLOv8's skip concatenations take (ceil(300 / 16) = 19 rows against 2 * ceil(300 / 32) =
    20): torch's own forward fails at the first one; the port refuses before running anything, naming the input,
    the condition and the nearest heights that pass. 313 (not a multiple of 32) passes both concats: torch and
    the port run it."""
    model, ported = _converted("yolov8")
    x = torch.randn(1, 3, 300, 320)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        model(x)
    with pytest.raises(ValueError, match=r"input 'x' \(input 0\) has size 300 in dim 2 .*shape rule needs these "
                                         r"sizes equal.*Nearest sizes of dim 2 that pass the checks on it: 288 and 313"):
        ported(mx.array(x.numpy()))
    assert_matches(ported, model, (torch.randn(1, 3, 313, 320),))


@pytest.mark.slow
def test_unet2d_takes_a_0d_timestep():
    """Converted with a (B,) timestep; diffusers' pipelines pass a 0-d one, which the model broadcasts to the
    batch: the port takes it too (torch checked at conversion that it means the value repeated)."""
    model, ported = _converted("unet2d")
    for batch in (2, 1):
        assert_matches(ported, model, (torch.randn(batch, 3, 24, 20), torch.tensor(17.0)))


@pytest.mark.slow
def test_segformer_one_row_maps_match_torch():
    """Heights 29-32 give the last stage a one-row map (torch runs them; a memory-format guard refused them); at
    H <= 28 the first stage's 8x8 reduction conv has fewer than 8 rows: torch refuses, and so does the port."""
    model, ported = _converted("segformer")
    for shape in ((1, 3, 32, 40), (2, 3, 29, 64), (1, 3, 64, 30)):
        assert_matches(ported, model, (torch.randn(shape),))
    x = torch.randn(1, 3, 28, 64)
    with pytest.raises(RuntimeError, match="Kernel size can't be greater than actual input size"):
        model(x)
    with pytest.raises(ValueError, match=r"has size 28 in dim 2"):
        ported(mx.array(x.numpy()))


@pytest.mark.slow
def test_dinov2_resizes_its_positions_for_any_grid_and_refuses_the_unresized_path():
    """Converted at 24x20 (6x5 patches, resized positions): other grids, non-square and beyond the pretraining
    grid, and sizes that leave pixels over, match torch; the pretraining size itself takes torch's other branch
    (no resize) and is refused by name."""
    model, ported = _converted("dinov2")
    for shape in ((1, 3, 32, 32), (2, 3, 26, 22), (1, 3, 8, 44)):
        assert_matches(ported, model, (torch.randn(shape),))
    condition = r"\(\(pixel_values.size\(2\) // 4\) \* \(pixel_values.size\(3\) // 4\)\) != 16"
    with pytest.raises(ValueError, match=condition):
        ported(mx.array(torch.randn(2, 3, 16, 16).numpy()))


# ---------------------------------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("name, layouts", [
    ("espcn", (["NCHW->NHWC"], ["NCHW->NHWC"])),  # PixelShuffle channels-last (it gave 'as-is' NCHW before)
    pytest.param("whisper_encoder", (["NCL->NLC"], ["as-is"]), marks=pytest.mark.slow),
    # The output keeps the layout its last op computed it in: StyleGAN2's image is the sum of the skip path's
    # upfirdn2d upsampling (reshapes that fold the channels into the batch, (N, C, H, W) -> (N * C, H, W, 1):
    # torch layout) and the to_rgb conv's output reshaped back from its runtime-groups form, so it is NCHW
    # ('as-is'); a transpose is never added only to change an output's layout.
    pytest.param("stylegan2", (["as-is"] * 4, ["as-is"]), marks=pytest.mark.slow),
])
def test_channels_last_io(name, layouts):
    spec = UNSEEN[name]
    model, ported = _converted(name, "mlx")
    assert (list(ported.input_layouts), list(ported.output_layouts)) == layouts
    for shapes, seed in ((spec.inputs, 1), (spec.second_inputs, 2)):
        assert_matches(ported, model, make_inputs(shapes, seed=seed))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["yolov8", "segformer", "unet2d"])
def test_channels_last_io_slow(name):
    spec = UNSEEN[name]
    model, ported = _converted(name, "mlx")
    for shapes, seed in ((spec.inputs, 1), (spec.second_inputs, 2)):
        assert_matches(ported, model, make_inputs(shapes, seed=seed))


# ---------------------------------------------------------------------------------------------------- artifacts
def _round_trip(name, tmp_path):
    spec = UNSEEN[name]
    model, ported = _converted(name)
    porter.save(ported, tmp_path / name)
    loaded = porter.load(tmp_path / name)
    assert loaded.dynamic_dims == ported.dynamic_dims
    for shapes, seed in ((spec.inputs, 5), (spec.second_inputs, 6)):
        assert_matches(loaded, model, make_inputs(shapes, seed=seed))


def test_save_load_round_trip(tmp_path):
    _round_trip("pointnet", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["esrgan", "stylegan2", "yolov8", "dinov2", "segformer", "mobilevit"])
def test_save_load_round_trip_slow(name, tmp_path):
    _round_trip(name, tmp_path)


# ---------------------------------------------------------------------------------------------------- gradients
def test_gradients_in_train_mode_dcgan():
    """A generator converted in train mode: BatchNorm normalises with the batch's statistics; outputs and the
    gradients to the latent and to every parameter match torch's train-mode step."""
    spec = UNSEEN["dcgan"]
    model = spec.builder().train()
    ported = porter.convert(model, make_inputs(spec.inputs, seed=0), io_layout="torch")
    assert ported.training
    for shapes, seed in ((spec.inputs, 1), (spec.second_inputs, 2)):
        xs = make_inputs(shapes, seed=seed)
        assert_matches(ported, model, xs)
        result = grad_parity(model, ported, xs, rtol=1e-3, atol=0.0, seed=seed)
        assert result["ok"], result


@pytest.mark.slow
@pytest.mark.parametrize("name", ["stylegan2", "unet2d", "dinov2"])
def test_gradient_parity(name):
    """Eval-mode gradients to the inputs and every parameter (StyleGAN2's go through the modulated weights of
    its runtime-groups conv and conv-transpose)."""
    model, ported = _converted(name)
    report = porter.validate(model, ported, [make_inputs(UNSEEN[name].inputs, seed=1)], grads=True)
    assert report.ok, str(report)
    names = {r["name"] for r in report.grads["parameters"]}
    assert names == {n for n, p in model.named_parameters() if p.requires_grad}


# ---------------------------------------------------------------------------------------------------- CLI
@pytest.mark.slow
def test_cli_convert_and_validate_a_state_dict(tmp_path):
    """`porter convert` on a StyleGAN2 state_dict (four inputs, runtime-groups convs), then `porter validate
    --grads`; the folder loads and matches torch at another batch size."""
    import json

    from click.testing import CliRunner

    from porter.cli.main import main

    model = UNSEEN["stylegan2"].builder()
    path = tmp_path / "sg2.pt"
    torch.save(model.state_dict(), path)
    arch = ["--model", "tests.models.generative:stylegan2_small"]
    shapes = [a for s in ("2,16", "2,1,4,4", "2,1,8,8", "2,1,8,8") for a in ("--input-shape", s)]
    runner = CliRunner()
    result = runner.invoke(main, ["convert", str(path), *arch, *shapes, "--json", "-o", str(tmp_path / "sg2")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"] and len(doc["validation"]["runs"]) == 2  # the example and a second batch size
    result = runner.invoke(main, ["validate", str(tmp_path / "sg2"), "--against", str(path), *arch, "--grads"])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout and "gradients: PASS" in result.stdout
    assert_matches(porter.load(tmp_path / "sg2"), model, make_inputs(UNSEEN["stylegan2"].second_inputs, seed=7))


# ---------------------------------------------------------------------------------------------------- op level
class GroupsFromBatch(nn.Module):
    """A conv (and conv-transpose) whose group count is the batch size: one group per example."""

    def __init__(self, nd, transposed, c_in=3, c_out=4, k=3):
        super().__init__()
        self.nd, self.transposed = nd, transposed
        shape = (1, c_in, c_out, *(k,) * nd) if transposed else (1, c_out, c_in, *(k,) * nd)
        self.weight = nn.Parameter(torch.randn(shape) * 0.3)
        self.bias = nn.Parameter(torch.randn(c_out) * 0.2)

    def forward(self, x, style):
        b, c = x.shape[:2]
        w = self.weight * style.view(b, *(1,) * (self.weight.ndim - 1))  # per-example weight
        w = w.reshape(b * w.shape[1], *w.shape[2:])
        bias = self.bias.repeat(b)
        xg = x.reshape(1, b * c, *x.shape[2:])
        if self.transposed:
            conv = getattr(F, f"conv_transpose{self.nd}d")
            y = conv(xg, w, bias, stride=2, padding=1, output_padding=1, groups=b)
        else:
            y = getattr(F, f"conv{self.nd}d")(xg, w, bias, padding=1, groups=b)
        return y.reshape(b, -1, *y.shape[2:])


@pytest.mark.parametrize("nd", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("transposed", [False, True])
def test_symbolic_groups_read_at_run_time(nd, transposed):
    model = GroupsFromBatch(nd, transposed).eval()
    spatial = {1: (7,), 2: (5, 6), 3: (3, 4, 5)}[nd]
    example = (torch.randn(2, 3, *spatial), torch.randn(2))
    ported = porter.convert(model, example, io_layout="torch")
    kinds = {n["kernel"] for n in ported._program.graph["nodes"]}
    assert ("conv_transpose_runtime_groups" if transposed else "conv_runtime_groups") in kinds
    assert {"input": 0, "axis": 0} in ported.dynamic_dims
    for batch in (2, 3, 1):
        assert_matches(ported, model, (torch.randn(batch, 3, *spatial), torch.randn(batch)))
    report = porter.validate(model, ported, [(torch.randn(3, 3, *spatial), torch.randn(3))], grads=True)
    assert report.ok, str(report)


def test_symbolic_groups_in_half_precision_and_through_save(tmp_path):
    model = GroupsFromBatch(2, True).eval()
    example = (torch.randn(2, 3, 5, 6), torch.randn(2))
    ported = porter.convert(model, example, io_layout="torch")
    porter.save(ported, tmp_path / "g")
    loaded = porter.load(tmp_path / "g")
    assert_matches(loaded, model, (torch.randn(3, 3, 5, 6), torch.randn(3)))
    half = ported.astype("float16")
    x = (torch.randn(3, 3, 5, 6), torch.randn(3))
    got = np.array(half(*[mx.array(t.numpy()) for t in x]).astype(mx.float32))
    with torch.no_grad():
        ref = model(*x).numpy()
    assert np.abs(got - ref).max() <= 5e-3 * np.abs(ref).max()


def test_runtime_groups_kernel_checks_its_group_count():
    from porter.converters.registry import get_kernel

    conv = get_kernel("conv_runtime_groups")
    x, w = mx.zeros((1, 5, 4)), mx.zeros((2, 3, 2))
    with pytest.raises(ValueError, match=r"\[conv1d\] 'groups' must be a positive int at run time but got 0"):
        conv(x, w, 0, nd=1, stride=[1], padding=[1], dilation=[1])
    transposed = get_kernel("conv_transpose_runtime_groups")
    with pytest.raises(ValueError, match=r"\[conv_transpose1d\] weight's 4 input channels are not divisible"):
        transposed(mx.zeros((1, 5, 4)), mx.zeros((4, 2, 3)), 3, nd=1, stride=[1], padding=[0], output_padding=[0],
                   dilation=[1])


class ReducedKeys(nn.Module):
    """SegFormer's spatial reduction: a strided conv on the token grid, ``reshape(b, c, -1).permute(0, 2, 1)``,
    LayerNorm. torch guards ``w < h * w`` on the reduced map while checking a permuted tensor's strides."""

    def __init__(self, c=4, r=4):
        super().__init__()
        self.sr = nn.Conv2d(c, c, r, stride=r)
        self.norm = nn.LayerNorm(c)

    def forward(self, x):
        b, c = x.shape[:2]
        keys = self.norm(self.sr(x).reshape(b, c, -1).permute(0, 2, 1))
        return keys.transpose(1, 2) @ keys


def test_stride_ordering_guard_does_not_refuse_a_one_row_map():
    model = ReducedKeys().eval()
    ported = porter.convert(model, torch.randn(2, 4, 16, 16), io_layout="torch")
    for shape in ((1, 4, 4, 20), (2, 4, 8, 4), (1, 4, 12, 12)):  # 1x5, 2x1 and 3x3 reduced maps
        assert_matches(ported, model, (torch.randn(shape),))


def test_convlstm_unrolls_its_time_loop_and_refuses_another_length(tmp_path):
    """ndrplz's ConvLSTM loops over time in Python: the capture unrolls it for the example's T = 4, the port runs
    other batches and image sizes (also after save/load) and refuses another length by name."""
    model, ported = _converted("convlstm")
    porter.save(ported, tmp_path / "convlstm")
    loaded = porter.load(tmp_path / "convlstm")
    for port in (ported, loaded):
        for shape in ((3, 4, 2, 9, 5), (1, 4, 2, 5, 5)):
            assert_matches(port, model, (torch.randn(shape),))
    with pytest.raises(ValueError, match=r"has size 5 in dim 1.*input_tensor.size\(1\) == 4"):
        ported(mx.array(torch.randn(2, 5, 2, 6, 7).numpy()))


class UnfoldPatches(nn.Module):
    """MobileViT's unfold and fold (timm ``MobileVitBlock``): the map into 2x2 patches by reshapes and transposes,
    a linear over each patch position's tokens, and back."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, 2, 1)
        self.mix = nn.Linear(4, 4)

    def forward(self, x):
        x = self.conv(x)
        B, C, H, W = x.shape
        nh, nw = math.ceil(H / 2), math.ceil(W / 2)  # timm's count (it resizes an odd map first; not done here)
        x = x.reshape(B * C * nh, 2, nw, 2).transpose(1, 2)
        x = x.reshape(B, C, nh * nw, 4).transpose(1, 3).reshape(B * 4, nh * nw, -1)
        x = self.mix(x)
        x = x.contiguous().view(B, 4, nh * nw, -1).transpose(1, 3).reshape(B * C * nh, nw, 2, 2)
        return x.transpose(1, 2).reshape(B, C, nh * 2, nw * 2)


def test_a_cpp_kernels_not_equal_guard_does_not_refuse_batch_one():
    """The unfold's reshapes left ``4 * B != (H' // ceil(H' / 2)) * (W' // ceil(W' / 2))`` (a C++ kernel's view
    reasoning: it excludes one value and pins no size), which refused batch 1; torch runs it, and so does the port."""
    model = UnfoldPatches().eval()
    ported = porter.convert(model, torch.randn(2, 3, 16, 12), io_layout="torch")
    for shape in ((1, 3, 16, 12), (1, 3, 8, 8), (3, 3, 12, 20)):
        assert_matches(ported, model, (torch.randn(shape),))


def _pixelcnn():
    from tests.models._common import randomize_
    from tests.models.vision_more import mask_pixelcnn, pixelcnn_small

    model = randomize_(pixelcnn_small(), 0)
    with torch.no_grad():
        mask_pixelcnn(model)
    return model


def test_pixelcnn_masks_its_weight_in_place_so_export_fails_and_a_trace_converts(tmp_path):
    """jzbontar/pixelcnn-pytorch's ``MaskedConv2d`` writes ``self.weight.data *= self.mask`` in its forward:
    torch.export cannot capture that (a fake tensor lands in the program's constants), and porter.convert says
    so; a ``torch.jit.trace`` of it converts, matches at two sizes and survives a save/load round trip."""
    model = _pixelcnn()
    x = torch.randn(2, 1, 12, 12)
    with pytest.raises(porter.CaptureError, match=r"lifted_tensor"):
        porter.convert(model, (x,), io_layout="torch")
    ported = porter.convert(torch.jit.trace(model, x), (x,), io_layout="torch")
    porter.save(ported, tmp_path / "pixelcnn")
    loaded = porter.load(tmp_path / "pixelcnn")
    assert {"net.0.weight", "net.3.weight", "net.12.bias"} <= set(model.state_dict())
    for port in (ported, loaded):
        for shape in ((2, 1, 12, 12), (1, 1, 9, 14)):
            assert_matches(port, model, (torch.randn(shape),))


class SkipConcat(nn.Module):
    """A U-Net/FPN step: two stride-2 convs down, nearest upsampling back, the skip concatenated (torch.cat needs
    ceil(H / 2) == 2 * ceil(H / 4))."""

    def __init__(self):
        super().__init__()
        self.down1 = nn.Conv2d(3, 4, 3, 2, 1)
        self.down2 = nn.Conv2d(4, 4, 3, 2, 1)
        self.up = nn.Upsample(scale_factor=2.0)
        self.fuse = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        skip = self.down1(x)
        return self.fuse(torch.cat([self.up(self.down2(skip)), skip], 1))


def test_concat_size_requirement_is_checked_up_front_with_the_sizes_that_pass():
    model = SkipConcat().eval()
    ported = porter.convert(model, torch.randn(2, 3, 16, 12), io_layout="torch")
    for h in range(5, 21):  # exactly the heights torch's forward takes pass; the others are refused up front
        x = torch.randn(1, 3, h, 12)
        try:
            with torch.no_grad():
                model(x)
        except RuntimeError:
            with pytest.raises(ValueError, match=rf"has size {h} in dim 2 .*shape rule needs these sizes equal"):
                ported(mx.array(x.numpy()))
            continue
        assert_matches(ported, model, (x,))
    with pytest.raises(ValueError, match=r"Nearest sizes of dim 3 that pass the checks on it: 8 and 11"):
        ported(mx.array(torch.randn(1, 3, 16, 9).numpy()))
    assert ported.input_checks.refusal([(1, 3, 16, 11)]) is None


class TimestepNet(nn.Module):
    """diffusers' timestep handling: a 0-d timestep becomes ``t[None]``, then every timestep is broadcast to the
    batch; ``scale_scalar`` makes the 0-d path differ (so a port must not take 0-d values)."""

    def __init__(self, scale_scalar=1.0):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.proj = nn.Linear(1, 4)
        self.scale_scalar = scale_scalar

    def forward(self, sample, timestep):
        if timestep.ndim == 0:
            timestep = timestep[None] * self.scale_scalar
        timestep = timestep * torch.ones(sample.shape[0], dtype=timestep.dtype)
        return self.conv(sample) + self.proj(timestep[:, None])[:, :, None, None]


def test_a_0d_timestep_runs_a_port_captured_with_a_1d_one(tmp_path):
    model = TimestepNet().eval()
    ported = porter.convert(model, (torch.randn(2, 3, 6, 5), torch.randn(2)), io_layout="torch")
    assert ported._program.graph["inputs"][1]["scalar_size"] == {"dim": [0, 0]}
    porter.save(ported, tmp_path / "t")
    loaded = porter.load(tmp_path / "t")
    for port in (ported, loaded):
        for batch in (1, 3):
            assert_matches(port, model, (torch.randn(batch, 3, 7, 4), torch.tensor(0.7)))
            assert_matches(port, model, (torch.randn(batch, 3, 7, 4), torch.randn(batch)))


def test_a_0d_input_is_refused_where_torch_treats_it_otherwise():
    model = TimestepNet(scale_scalar=2.0).eval()
    ported = porter.convert(model, (torch.randn(2, 3, 6, 5), torch.randn(2)), io_layout="torch")
    assert "scalar_size" not in ported._program.graph["inputs"][1]
    with pytest.raises(ValueError, match=r"input 'timestep' must have 1 dims"):
        ported(mx.zeros((2, 3, 6, 5)), mx.array(0.5))


def test_scalar_size_of_a_file_is_checked(tmp_path):
    import json

    model = TimestepNet().eval()
    porter.save(porter.convert(model, (torch.randn(2, 3, 6, 5), torch.randn(2)), io_layout="torch"), tmp_path / "t")
    path = tmp_path / "t" / "graph.json"
    graph = json.loads(path.read_text())
    graph["inputs"][1]["scalar_size"] = {"dim": [5, 0]}
    path.write_text(json.dumps(graph))
    with pytest.raises(porter.ArtifactError, match=r"scalar_size.*5 is not the index of a tensor input"):
        porter.load(tmp_path / "t")


class DownThenDepthwise(nn.Module):
    """SegFormer's last stage: strided convs down to a small map, tokens, then Mix-FFN's depthwise 3x3 on the
    tokens viewed back as an image (channels-last strides). torch's
    fake conv guards ``rows > 1`` while choosing its output's memory format (channels-last or not): a layout
    decision, which refused a one-row map torch runs."""

    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.Conv2d(8, 8, 3, 2, 1))
        self.norm = nn.LayerNorm(8)
        self.dwconv = nn.Conv2d(8, 8, 3, 1, 1, groups=8)

    def forward(self, x):
        x = self.down(x)
        b, c, h, w = x.shape
        tokens = self.norm(x.flatten(2).transpose(1, 2))  # (B, H * W, C)
        return self.dwconv(tokens.transpose(1, 2).view(b, c, h, w))  # a channels-last-strided NCHW view


def test_memory_format_guard_does_not_refuse_a_one_row_map():
    model = DownThenDepthwise().eval()
    ported = porter.convert(model, torch.randn(2, 3, 16, 12), io_layout="torch")
    for shape in ((1, 3, 4, 12), (2, 3, 3, 9), (1, 3, 16, 2), (1, 3, 1, 1)):  # one-row / one-column maps
        assert_matches(ported, model, (torch.randn(shape),))


class ResidualAndSkip(nn.Module):
    """WaveNet's layer: returns (residual, skip) of one shape; the last layer's residual is dead code."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)

    def forward(self, x):
        a, b = self.conv(x).split(4, dim=1)
        return torch.tanh(a) + x, torch.sigmoid(b)


class SkipsOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(ResidualAndSkip() for _ in range(2))

    def forward(self, x):
        skips = 0
        for layer in self.layers:
            x, s = layer(x)
            skips = skips + s
        return skips


def test_validate_matches_a_multi_output_module_to_the_output_the_port_kept():
    model = SkipsOnly().eval()
    ported = porter.convert(model, torch.randn(2, 4, 9), io_layout="torch")
    report = porter.validate(model, ported, [(torch.randn(2, 4, 9),)], rtol=RTOL, atol=0.0)
    assert report.ok and report.first_divergence is None, str(report)
    assert "layers.1" in {row["name"] for row in report.runs[0]["modules"]}


class SharedActConv(nn.Module):
    """ultralytics' ``Conv``: ``default_act`` is one SiLU instance shared by every conv of the model."""

    default_act = nn.SiLU()

    def __init__(self, c1, c2, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, 3, s, 1)
        self.act = self.default_act

    def forward(self, x):
        return self.act(self.conv(x))


def test_validate_compares_a_shared_module_at_each_place_it_runs():
    model = nn.Sequential(SharedActConv(3, 4, 2), SharedActConv(4, 4), SharedActConv(4, 6, 2)).eval()
    x = torch.randn(1, 3, 16, 16)
    ported = porter.convert(model, x, io_layout="torch")
    report = porter.validate(model, ported, [(x,)], rtol=RTOL, atol=0.0)
    assert report.ok and report.first_divergence is None, str(report)
    names = [row["name"] for row in report.runs[0]["modules"]]
    assert [n for n in names if n.endswith("act")] == ["0.act", "1.act", "2.act"]  # each call, in order
    # a wrong weight before the second place is still caught there, at the right module
    with torch.no_grad():
        model[1].conv.weight.mul_(1.01)
    report = porter.validate(model, ported, [(x,)], rtol=RTOL, atol=0.0)
    assert not report.ok and report.first_divergence["name"] == "1.conv", str(report)


class GroupNormNet(nn.Module):
    """diffusers' ResNet block's norm: conv -> GroupNorm -> SiLU (core ATen: ``native_group_norm``)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = nn.GroupNorm(4, 8)
        self.act = nn.SiLU()
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0, 0.2)

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


def test_core_aten_group_norm_of_a_decomposed_program():
    """A program after ``run_decompositions()`` (what a ``.pt2`` saved from one holds) spells GroupNorm
    ``native_group_norm``: converted, at other sizes too."""
    model = GroupNormNet().eval()
    x = torch.randn(2, 3, 9, 7)
    auto = torch.export.Dim.AUTO
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: auto, 2: auto, 3: auto},)).run_decompositions()
    assert any("native_group_norm" in str(n.target) for n in ep.graph.nodes)
    ported = porter.convert(ep, io_layout="torch")
    for shape in ((2, 3, 9, 7), (1, 3, 6, 11)):
        assert_matches(ported, model, (torch.randn(shape),))


@pytest.mark.slow
def test_decomposed_unet2d():
    spec = UNSEEN["unet2d"]
    model = spec.builder()
    ep = torch.export.export(model, make_inputs(spec.inputs)).run_decompositions()
    assert_matches(porter.convert(ep, io_layout="torch"), model, make_inputs(spec.inputs, seed=1))


class SubPixel(nn.Module):
    """Real-ESRGAN x2's ``pixel_unshuffle`` in front, ESPCN's ``PixelShuffle`` behind, convs around both."""

    def __init__(self):
        super().__init__()
        self.conv_first = nn.Conv2d(12, 8, 3, padding=1)
        self.conv_up = nn.Conv2d(8, 3 * 9, 3, padding=1)
        self.shuffle = nn.PixelShuffle(3)

    def forward(self, x):
        return self.shuffle(self.conv_up(self.conv_first(F.pixel_unshuffle(x, 2))))


@pytest.mark.parametrize("io_layout", ["mlx", "torch"])
def test_pixel_shuffle_runs_channels_last(io_layout):
    """A channels-last input is (un)shuffled channels-last: no transposes around it, and with ``io_layout="mlx"``
    the image comes out channels-last (it came out NCHW, 'as-is', before). With torch's I/O layout the input is
    unshuffled as given (NCHW) and only the shuffle after the conv runs channels-last."""
    model = SubPixel().eval()
    ported = porter.convert(model, torch.randn(2, 3, 8, 10), io_layout=io_layout)
    if io_layout == "mlx":
        assert list(ported.output_layouts) == ["NCHW->NHWC"] and ported.num_transposes == 0
    kinds = [n["attrs"]["channels_last"] for n in ported._program.graph["nodes"] if n["kernel"] == "pixel_shuffle"]
    assert kinds == ([True, True] if io_layout == "mlx" else [False, True])
    for shape in ((2, 3, 8, 10), (1, 3, 6, 4)):
        assert_matches(ported, model, (torch.randn(shape),))
    unbatched = porter.convert(model, torch.randn(3, 8, 10), io_layout=io_layout)
    assert_matches(unbatched, model, (torch.randn(3, 6, 4),))
