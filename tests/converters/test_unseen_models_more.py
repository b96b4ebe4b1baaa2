"""Session 10's architectures Porter was not written against (``tests/models/timm_more.py``,
``torch_attention.py``, ``hf_text_more.py``, ``gan_discriminators.py``): each converts and matches torch, run here
on the same data, at its example size and at a second size (another batch, and a spatial size or length that the
strides or patches do not divide where the architecture allows one); save/load round trips, gradients for the op
families they add (GRN, Affine, relative position bias gathers, ``nn.MultiheadAttention``, spectral and weight norm),
the CLI on a saved ``state_dict``. The findings they turned up are tested op by op at the end of this file.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import porter
from porter.compare import RTOL
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, check_converted, run_ported
from tests.models._common import randomize_
from tests.models import gan_discriminators as gan
from tests.models import hf_text_more as hf
from tests.models import timm_more as timm
from tests.models import torch_attention as ta
from tests.twin_suite import Twin, TwinSuite, image as _image


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _waves(b, t):
    return lambda seed: (torch.randn(b, 1, t, generator=_gen(seed)), torch.randn(b, 1, t, generator=_gen(seed + 50)))


def _padded_tokens(b, n, batch_first=True):
    """Token features and a right-padded key padding mask (row i loses i tokens; True = padding)."""
    def make(seed):
        mask = torch.zeros(b, n, dtype=torch.bool)
        for i in range(b):
            mask[i, n - i:] = True
        x = torch.randn((b, n, 16) if batch_first else (n, b, 16), generator=_gen(seed))
        return x, mask
    return make


def _clip_ids(b, n):
    """Token ids with the EOS id (the largest, 63) ending each row's text, zeros and a 0 mask after it."""
    def make(seed):
        ids = torch.randint(3, 60, (b, n), generator=_gen(seed))
        mask = torch.ones(b, n, dtype=torch.long)
        for i in range(b):
            length = n - 2 * i
            ids[i, length - 1], ids[i, length:], mask[i, length:] = 63, 0, 0
        return ids, mask
    return make


def _ids(b, n):
    return lambda seed: (torch.randint(0, 64, (b, n), generator=_gen(seed)),)


def _seq2seq(b, s, t):
    return lambda seed: (torch.randn(s, b, 16, generator=_gen(seed)), torch.randn(t, b, 16, generator=_gen(seed + 1)))


def _fix_beit(model):
    for module in model.modules():
        if isinstance(module, timm.BeitAttention):
            module.k_bias.zero_()  # a fixed zero buffer (not in the state_dict): no checkpoint changes it


TWINS = {
    # ConvNeXt-V2's stem and downsamples (4, 2, 2) do not divide 44x52's 2nd stage: 11x13 -> 5x6
    "convnextv2": Twin(timm.convnextv2_small, _image(2, 3, 32, 32), _image(1, 3, 44, 52)),
    "poolformer": Twin(timm.poolformer_small, _image(2, 3, 32, 32), _image(1, 3, 37, 45)),
    # the token-mixing Linear and the relative position table fix the patch grid: other batch only
    "resmlp": Twin(timm.resmlp_small, _image(2, 3, 16, 16), _image(3, 3, 16, 16)),
    "beit": Twin(timm.beit_small, _image(2, 3, 16, 16), _image(1, 3, 16, 16), fix=_fix_beit),
    "detr": Twin(ta.detr_small, _image(2, 3, 32, 32), _image(1, 3, 37, 45)),
    "torch_encoder": Twin(ta.torch_encoder_small, _padded_tokens(2, 7), _padded_tokens(3, 5)),
    "torch_encoder_post_norm": Twin(ta.torch_encoder_post_norm_small, _padded_tokens(2, 7, False),
                                    _padded_tokens(3, 5, False)),
    "torch_seq2seq": Twin(ta.torch_seq2seq_small, _seq2seq(2, 7, 5), _seq2seq(1, 4, 6)),
    "clip_text": Twin(hf.clip_text_small, _clip_ids(2, 7), _clip_ids(3, 11)),
    "fnet": Twin(hf.fnet_small, _ids(2, 7), _ids(1, 11)),
    "sn_critic": Twin(gan.sn_critic_small, _image(2, 3, 16, 16), _image(1, 3, 13, 11), fix=gan.fix_spectral_vectors),
    # both lengths leave a remainder for periods 2 and 3: the reflect-pad branch the capture took
    "hifigan_mpd": Twin(gan.mpd_small, _waves(2, 61), _waves(1, 67), fix=gan.fix_spectral_vectors),
    "hifigan_msd": Twin(gan.msd_small, _waves(2, 200), _waves(1, 171), fix=gan.fix_spectral_vectors),
}
SLOW = {"detr", "hifigan_mpd", "hifigan_msd"}  # > 20 s to convert on a loaded 2-core machine


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
    """``state_dict`` keys of each reference implementation (so its checkpoints load), non-persistent buffers
    left out as there."""
    expected = {
        "convnextv2": ["stem.0.weight", "stem.1.bias", "stages.0.blocks.0.conv_dw.weight",
                       "stages.0.blocks.0.mlp.grn.weight", "stages.1.downsample.0.weight",
                       "stages.1.downsample.1.weight", "stages.2.blocks.0.mlp.fc2.bias", "head.norm.weight",
                       "head.fc.weight"],
        "poolformer": ["patch_embed.proj.weight", "network.0.0.norm1.weight", "network.0.1.layer_scale_2",
                       "network.0.0.mlp.fc1.weight", "network.1.proj.weight", "network.2.0.mlp.fc2.bias",
                       "norm.weight", "head.bias"],
        "resmlp": ["stem.proj.weight", "blocks.0.norm1.alpha", "blocks.0.linear_tokens.weight", "blocks.1.ls2",
                   "blocks.1.mlp_channels.fc1.weight", "norm.beta", "head.weight"],
        "beit": ["cls_token", "patch_embed.proj.weight", "blocks.0.gamma_1", "blocks.0.attn.q_bias",
                 "blocks.0.attn.v_bias", "blocks.0.attn.qkv.weight", "blocks.1.attn.relative_position_bias_table",
                 "blocks.1.mlp.fc2.weight", "fc_norm.weight", "head.bias"],
        "detr": ["backbone.0.0.weight", "input_proj.weight", "query_embed.weight",
                 "transformer.encoder.layers.0.self_attn.in_proj_weight",
                 "transformer.encoder.layers.0.self_attn.out_proj.weight",
                 "transformer.decoder.layers.1.multihead_attn.in_proj_bias", "transformer.decoder.layers.1.norm3.bias",
                 "transformer.decoder.norm.weight", "class_embed.weight", "bbox_embed.layers.2.bias"],
        "torch_encoder": ["encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.1.linear2.weight",
                          "encoder.layers.1.norm2.bias", "encoder.norm.weight"],
        "torch_seq2seq": ["transformer.encoder.layers.0.self_attn.in_proj_weight", "transformer.encoder.norm.weight",
                          "transformer.decoder.layers.0.multihead_attn.out_proj.bias",
                          "transformer.decoder.norm.bias"],
        "clip_text": ["text_model.embeddings.token_embedding.weight", "text_model.embeddings.position_embedding.weight",
                      "text_model.encoder.layers.0.self_attn.q_proj.weight", "text_model.encoder.layers.1.mlp.fc2.bias",
                      "text_model.encoder.layers.1.layer_norm2.weight", "text_model.final_layer_norm.bias",
                      "text_projection.weight"],
        "fnet": ["embeddings.word_embeddings.weight", "embeddings.token_type_embeddings.weight",
                 "embeddings.projection.weight", "encoder.layer.0.fourier.output.LayerNorm.weight",
                 "encoder.layer.1.intermediate.dense.bias", "encoder.layer.1.output.LayerNorm.bias",
                 "pooler.dense.weight"],
        "sn_critic": ["conv1.parametrizations.weight.original", "conv1.parametrizations.weight.0._u",
                      "conv2.parametrizations.weight.0._v", "linear.parametrizations.weight.original", "linear.bias"],
        "hifigan_mpd": ["discriminators.0.convs.0.weight_g", "discriminators.0.convs.0.weight_v",
                        "discriminators.1.convs.4.bias", "discriminators.1.conv_post.weight_v"],
        "hifigan_msd": ["discriminators.0.convs.0.weight_orig", "discriminators.0.convs.1.weight_u",
                        "discriminators.0.conv_post.weight_v", "discriminators.1.convs.3.weight_g",
                        "discriminators.2.conv_post.bias"],
    }
    for name, keys in expected.items():
        state = TWINS[name].builder().state_dict()
        missing = [k for k in keys if k not in state]
        assert not missing, f"{name}: missing {missing}"
    beit = TWINS["beit"].builder().state_dict()
    assert "blocks.0.attn.k_bias" not in beit and "blocks.0.attn.relative_position_index" not in beit
    clip = TWINS["clip_text"].builder().state_dict()
    assert "text_model.embeddings.position_ids" not in clip


def test_a_real_checkpoint_loads_into_the_port_by_torch_names(tmp_path):
    """The port's ``torch_parameters()`` are the twin's ``state_dict`` (parametrization names included), so a
    checkpoint saved by the reference code round-trips through the port with strict loading."""
    for name in ("sn_critic", "resmlp", "beit"):
        SUITE.round_trip(name)


# ---------------------------------------------------------------------------------------------------- artifacts
@pytest.mark.parametrize("name", ["resmlp", "clip_text", "fnet", "sn_critic", "torch_encoder"])
def test_save_load_round_trip(name, tmp_path):
    model, ported = _converted(name)
    porter.save(ported, tmp_path / name)
    loaded = porter.load(tmp_path / name)
    assert loaded.dynamic_dims == ported.dynamic_dims
    assert_matches(loaded, model, TWINS[name].inputs(5))
    assert_matches(loaded, model, TWINS[name].second(6))


@pytest.mark.slow
def test_cli_converts_a_state_dict(tmp_path):
    """``porter convert x.pt --model module:factory`` on a PoolFormer state_dict; the folder loads and matches
    torch at a size the strides do not divide."""
    from click.testing import CliRunner

    from porter.cli.main import main

    model = build("poolformer")
    path = tmp_path / "poolformer.pt"
    torch.save(model.state_dict(), path)
    result = CliRunner().invoke(main, ["convert", str(path), "--model", "tests.models.timm_more:poolformer_small",
                                       "--input-shape", "2,3,32,32", "-o", str(tmp_path / "pf")])
    assert result.exit_code == 0, result.output
    assert_matches(porter.load(tmp_path / "pf"), model, TWINS["poolformer"].second(7))


# ---------------------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", ["convnextv2", "resmlp", "beit", "torch_encoder", "sn_critic", "clip_text"])
def test_gradient_parity(name):
    """Eval-mode gradients to the float inputs and every parameter: GRN's norm ratio, Affine's addcmul, the
    relative position table through its index gather, ``nn.MultiheadAttention``'s packed in-projection, spectral
    norm's ``original`` through sigma (``_u``/``_v`` are buffers), CLIP's embeddings through the EOS gather.
    atol 1e-5: the key projection's bias has a gradient that is 0 in exact arithmetic (softmax ignores a
    constant added to a row), ~1e-6 of rounding in torch and in the port; every other gradient is O(0.1-10)."""
    model, ported = _converted(name)
    result = grad_parity(model, ported, TWINS[name].inputs(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    names = {r["name"] for r in result["parameters"]}
    assert names == {n for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.slow
def test_weight_norm_gradients_reach_g_and_v():
    """HiFi-GAN's period discriminator: gradients to every ``weight_g`` and ``weight_v`` match torch's."""
    model, ported = _converted("hifigan_mpd")
    result = grad_parity(model, ported, TWINS["hifigan_mpd"].inputs(1), rtol=1e-3, atol=0.0, seed=1)
    assert result["ok"], result
    names = {r["name"] for r in result["parameters"]}
    assert {n for n in names if n.endswith(("weight_g", "weight_v"))} == \
        {n for n, _ in model.named_parameters() if n.endswith(("weight_g", "weight_v"))}


# ---------------------------------------------------------------------------------------------------- findings
def test_transformer_encoder_nested_fast_path_differs_only_at_padding():
    """``nn.TransformerEncoder(enable_nested_tensor=True)`` in eval under ``no_grad`` runs torch's nested-tensor
    fast path, which zeroes the padded positions before the final norm; torch.export captures the reference path
    (what torch computes with gradients on). The port matches that path everywhere, and the fast path at every
    position that is not padding (known difference, documented; padded positions carry no information)."""
    torch.manual_seed(0)
    model = randomize_(ta.torch_encoder_nested_small(), 0)
    x, mask = _padded_tokens(3, 6)(0)
    ported = porter.convert(model, (x, mask), io_layout="torch")
    (out,) = run_ported(ported, (x, mask))
    reference = model(x, mask).detach().numpy()  # gradients on: the reference path
    with torch.no_grad():
        fast = model(x, mask).numpy()
    keep = ~mask.numpy()
    porter.compare.assert_close(out, reference, rtol=RTOL, atol=0.0, what="reference path")
    porter.compare.assert_close(out[keep], fast[keep], rtol=RTOL, atol=0.0, what="fast path, unpadded")
    assert not np.allclose(reference[~keep], fast[~keep])  # torch's two paths disagree at the padding


def test_conformer_lengths_item_is_refused_naming_the_line():
    """torchaudio's Conformer builds its padding mask from ``int(torch.max(lengths).item())``: a size read from
    data, which torch.export cannot capture. The refusal names the cause and the line."""
    model = randomize_(ta.conformer_small(), 0)
    x, lengths = torch.randn(2, 10, 16), torch.tensor([10, 7])
    with pytest.raises(porter.converters.errors.CaptureError,
                       match=r"forward at tests/models/torch_attention\.py:\d+ in _lengths_to_padding_mask.*data-depend"):
        porter.convert(model, (x, lengths))


def test_conformer_layers_with_a_given_padding_mask():
    """The Conformer's layers (GLU, depthwise Conv1d, BatchNorm1d, time-first ``nn.MultiheadAttention`` with a
    key padding mask) convert once the mask is an input: two lengths and batches."""

    class ConformerFromMask(ta.Conformer):
        def forward(self, input, padding_mask):
            x = input.transpose(0, 1)
            for layer in self.conformer_layers:
                x = layer(x, padding_mask)
            return x.transpose(0, 1)

    torch.manual_seed(0)
    model = randomize_(ConformerFromMask(), 0)
    check_converted(model, _padded_tokens(2, 10)(0), _padded_tokens(3, 13)(1))


class Wrap(nn.Module):
    def __init__(self, fn, **modules):
        super().__init__()
        self.fn = fn
        for name, module in modules.items():
            self.add_module(name, module)

    def forward(self, *args):
        return self.fn(self, *args)


def test_einsum_broadcast_guard_keeps_the_batch_dynamic():
    """einsum's broadcast guard ``a.size(0) == 1 or a.size(0) == b.size(0)`` is checked as the alternative that held
    at the example (``a.size(0) == b.size(0)``): batch 1 runs a port converted at batch 2 (it was static before),
    a batch pair torch would broadcast is refused by name, never computed wrong."""
    model = Wrap(lambda s, a, b: torch.einsum("bhqd,bhkd->bhqk", a, b))
    r = torch.randn
    ported = check_converted(model, (r(2, 2, 5, 4), r(2, 2, 6, 4)), (r(1, 2, 3, 4), r(1, 2, 7, 4)),
                             (r(3, 2, 5, 4), r(3, 2, 6, 4)))
    with pytest.raises(ValueError, match=r"args_1.size\(0\) == args_0.size\(0\)"):
        run_ported(ported, (r(1, 2, 5, 4), r(3, 2, 6, 4)))
    # converted while broadcasting, the other alternative (a.size(0) == 1) is the one kept
    ported = check_converted(model, (r(1, 2, 5, 4), r(2, 2, 6, 4)), (r(1, 2, 3, 4), r(3, 2, 7, 4)))
    with pytest.raises(ValueError, match=r"args_0.*size 2 in dim 0"):
        run_ported(ported, (r(2, 2, 5, 4), r(3, 2, 6, 4)))


@pytest.mark.parametrize("nd, shape, second", [(1, (2, 4, 6), (1, 4, 9)), (2, (2, 4, 6, 7), (1, 4, 9, 3)),
                                               (3, (2, 4, 3, 4, 5), (1, 4, 2, 3, 6))])
@pytest.mark.parametrize("affine", [True, False])
def test_instance_norm_with_running_statistics(nd, shape, second, affine):
    """``InstanceNorm*d(track_running_stats=True)`` in eval normalises by the stored statistics (was refused)."""
    norm = getattr(nn, f"InstanceNorm{nd}d")(4, affine=affine, track_running_stats=True)
    randomize_(norm, 0)
    with torch.no_grad():
        norm.running_mean.normal_()
        norm.running_var.uniform_(0.5, 1.5)
    ported = check_converted(norm.eval(), torch.randn(shape), torch.randn(second))
    assert set(ported.torch_parameters()) >= {"running_mean", "running_var"}


def _put_columns(s, a):
    a = a.clone()
    a[:, torch.tensor([0, -1])] = a[:, torch.tensor([1, 2])] * 2
    return a


def _put_rows_and_last(s, a, i):
    a = a.clone()
    a[i, :, i] = 0.5
    return a * 2


@pytest.mark.parametrize("fn, inputs, second", [
    (_put_columns, (torch.randn(3, 5),), (torch.randn(4, 7),)),
    (_put_rows_and_last, (torch.randn(3, 4, 5), torch.tensor([0, 2])), (torch.randn(4, 4, 6), torch.tensor([1, 3, -1]))),
    (lambda s, a: a.index_put((torch.tensor([0, 2, 0]),), torch.ones(a.shape[1]), accumulate=True),
     (torch.randn(3, 5),), (torch.randn(4, 5),)),
    (lambda s, a: a.clone().index_put_((torch.tensor([1]), torch.tensor([2])), torch.tensor(7.0)) + 1,
     (torch.randn(3, 5),), (torch.randn(4, 7),)),
], ids=["columns", "two-tensors-apart", "accumulate-repeated", "point"])
def test_index_put_with_integer_indices(fn, inputs, second):
    """``y[idx] = v`` / ``index_put(..., accumulate=True)`` with integer index tensors (was refused): negative
    indices, repeated ones summed, indices apart around a full slice, values broadcast; gradients too."""
    model = Wrap(fn)
    ported = check_converted(model, inputs, second)
    if inputs[0].is_floating_point():
        result = grad_parity(model, ported, inputs, rtol=1e-4, atol=0.0, seed=0)
        assert result["ok"], result


def test_index_put_refuses_an_out_of_range_index():
    model = Wrap(lambda s, a, i: a.index_put((i,), torch.zeros(())))
    ported = porter.convert(model, (torch.randn(4, 3), torch.tensor([0, 3])), io_layout="torch")
    with pytest.raises(ValueError, match="index_put: index 7 is out of range for a dimension of size 4"):
        run_ported(ported, (torch.randn(4, 3), torch.tensor([1, 7])))


def test_fold_output_size_from_the_input_shape():
    """``F.fold(cols, x.shape[-2:], ...)``: the output size is read at run time (was refused), batched and not."""
    model = Wrap(lambda s, a: F.fold(F.unfold(a, 3, padding=1, stride=2), a.shape[-2:], 3, padding=1, stride=2))
    check_converted(model, torch.randn(2, 3, 9, 10), torch.randn(1, 3, 12, 7))
    check_converted(model, torch.randn(3, 9, 10), torch.randn(3, 12, 7))


def test_boolean_mask_indexing_is_refused_naming_the_op_and_module():
    """A boolean-mask read has a data-dependent shape: refused, naming the op and the module (never wrong numbers)."""
    model = Wrap(lambda s, a: s.inner(a) * 2, inner=Wrap(lambda s, a: a[a > 0]))
    with pytest.raises(NotImplementedError, match=r"aten\.index\.Tensor.*boolean.*inner"):
        porter.convert(model, (torch.randn(2, 5),))


class MaxNormEmbedding(nn.Module):
    """``nn.Embedding(max_norm=1)`` over rows whose norms straddle it (``tests/converters/test_op_coverage.py``)."""

    def __init__(self, norm_type: float = 2.0):
        super().__init__()
        self.emb = nn.Embedding(10, 4, max_norm=1.0, norm_type=norm_type)
        with torch.no_grad():
            self.emb.weight.mul_(2)

    def forward(self, ids):
        return self.emb(ids) * 2


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalises_the_looked_up_rows(norm_type):
    """``nn.Embedding(max_norm=...)`` renormalises the rows it looks up in place, through ``weight.detach()``: the
    port gave the unscaled rows (wrong numbers, silently). The capture now writes through the detach as
    ``w + detach(renormed - w)``: torch's values, the weight's own gradient. A repeated index scales its row once."""
    import copy

    torch.manual_seed(0)
    fresh = MaxNormEmbedding(norm_type)
    ids = (torch.tensor([[1, 2, 2, 5], [0, 9, 1, 3]]),)
    ported = porter.convert(copy.deepcopy(fresh), ids, io_layout="torch")
    assert_matches(ported, copy.deepcopy(fresh), ids)
    assert_matches(ported, copy.deepcopy(fresh), (torch.tensor([[4, 4, 7]]),))
    result = grad_parity(copy.deepcopy(fresh), ported, ids, rtol=1e-5, atol=0.0, seed=0)
    assert result["ok"], result


class TensorSplits(nn.Module):
    """``tensor_split`` by a section count and by positions (negative, past the end, decreasing: empty pieces)."""

    def forward(self, x):
        return x.tensor_split(3, dim=-1), x.tensor_split([1, -2, 9], dim=1), x.tensor_split([4, 2], dim=1)


def test_tensor_split():
    """``tensor_split`` (was refused): sections (the first ``length % n`` pieces one longer; torch's capture checks
    ``length % 3 <= 1`` for this example, so 8 columns are refused by name), positions cut as Python slices."""
    r = torch.randn
    ported = check_converted(TensorSplits(), r(2, 5, 7), r(1, 6, 10), r(1, 4, 4))
    with pytest.raises(ValueError, match=r"% 3\) <= 1"):
        run_ported(ported, (r(1, 5, 8),))


class FeatureScatter(nn.Module):
    """LLaVA's merge: image features written over the image-token positions of the text embeddings."""

    def forward(self, embeds, features, ids):
        mask = (ids == 3).unsqueeze(-1).expand_as(embeds)
        return embeds.masked_scatter(mask, features) * 2


class FeatureScatterInPlace(nn.Module):
    """The same merge written in place on a copy (``masked_scatter_``)."""

    def forward(self, embeds, features, ids):
        out = embeds.clone()
        out.masked_scatter_((ids == 3).unsqueeze(-1).expand_as(out), features)
        return out * 2


def test_masked_scatter_in_place():
    r = torch.randn
    check_converted(FeatureScatterInPlace(), (r(2, 6, 4), r(3, 4), torch.tensor([[1, 3, 3, 2, 0, 0], [3, 1, 1, 1, 1, 1]])),
                    (r(1, 5, 4), r(2, 4), torch.tensor([[1, 3, 2, 3, 0]])))


def test_masked_scatter():
    """``masked_scatter`` (was refused): its output has ``self``'s shape, the True positions take ``source`` in
    order; gradients to both; a source shorter than the mask's count is refused as torch refuses it."""
    r = torch.randn
    inputs = (r(2, 6, 4), r(3, 4), torch.tensor([[1, 3, 3, 2, 0, 0], [3, 1, 1, 1, 1, 1]]))
    ported = check_converted(FeatureScatter(), inputs, (r(1, 5, 4), r(2, 4), torch.tensor([[1, 3, 2, 3, 0]])))
    result = grad_parity(FeatureScatter(), ported, inputs, rtol=1e-5, atol=0.0, seed=0)
    assert result["ok"], result
    with pytest.raises(ValueError, match="masked_scatter: mask has 8 True entries but source has only 4"):
        run_ported(ported, (r(1, 5, 4), r(1, 4), torch.tensor([[3, 3, 0, 0, 1]])))
