"""Session 12's sequence architectures Porter was not written against: torchaudio's Conv-TasNet
(``tests/models/separation.py``), HF Gemma, Mistral and Qwen2 and Meta's reference LLaMA with complex rotary
embeddings (``llm_variants.py``), HF Mamba's slow path (``mamba.py``). Each converts and matches torch, run here on
the same data, at its example length and batch and at a second one; save/load round trips, strict
``load_state_dict`` of the port's ``torch_parameters()`` into the twin (tied embeddings included), gradients for the
op families they add, and the refusals they hit, each clear and naming its cause: Mamba's scan loop fixes the
sequence length, Conv-TasNet's padding branch the length's remainder, Meta's KV cache is state.

The bar is porter.compare's float32 one: max|porter - torch| <= 1e-4 * max|torch| per output.
"""

from __future__ import annotations

import pytest
import torch

import porter
from porter.validation.grads import grad_parity
from tests.converter_check import assert_matches, run_ported
from tests.models import llm_variants as llm
from tests.models import mamba, separation
from tests.models._common import randomize_
from tests.twin_suite import Twin, TwinSuite, image as _wave


def _ids(b, n, padded=False):
    """Token ids; with ``padded`` a left-padded 0/1 attention mask too (row i loses i tokens)."""
    def make(seed):
        ids = torch.randint(0, 64, (b, n), generator=torch.Generator().manual_seed(seed))
        if not padded:
            return (ids,)
        mask = torch.ones(b, n, dtype=torch.long)
        for i in range(b):
            mask[i, :i] = 0
        return ids, mask
    return make


TWINS = {
    # 101 and 77 samples are no multiple of the encoder stride (4): the forward pads, decodes and crops
    "conv_tasnet": Twin(separation.conv_tasnet_small, _wave(2, 1, 101), _wave(1, 1, 77)),
    "gemma": Twin(llm.gemma_small, _ids(2, 7), _ids(1, 11)),
    "qwen2": Twin(llm.qwen2_small, _ids(2, 7), _ids(3, 5)),
    # a sliding window of 3 and left padding; the second length is longer than the window by more
    "mistral": Twin(llm.mistral_small, _ids(2, 7, True), _ids(3, 11, True)),
    "meta_llama": Twin(llm.meta_llama_prefill_small, _ids(2, 7), _ids(1, 11)),
    # the scan is a Python loop over the sequence: the length is fixed (another batch only; tested below)
    "mamba": Twin(mamba.mamba_small, _ids(2, 7), _ids(1, 7)),
}

SUITE = TwinSuite(TWINS)
build, _converted, _check = SUITE.build, SUITE.converted, SUITE.check


@pytest.mark.parametrize("name", sorted(TWINS))
def test_twin_matches_torch_at_two_sizes(name):
    _check(name)


def test_twins_keep_their_reference_names():
    """``state_dict`` keys of each reference implementation (torchaudio, transformers, Meta's llama)."""
    expected = {
        "conv_tasnet": ["encoder.weight", "mask_generator.input_norm.weight", "mask_generator.input_conv.bias",
                        "mask_generator.conv_layers.0.conv_layers.1.weight",
                        "mask_generator.conv_layers.2.conv_layers.3.weight",
                        "mask_generator.conv_layers.0.res_out.weight",
                        "mask_generator.conv_layers.5.skip_out.bias", "mask_generator.output_prelu.weight",
                        "mask_generator.output_conv.weight", "decoder.weight"],
        "gemma": ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                  "model.layers.0.input_layernorm.weight", "model.layers.1.mlp.gate_proj.weight",
                  "model.layers.1.post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"],
        "qwen2": ["model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias",
                  "model.layers.0.self_attn.v_proj.bias", "model.layers.1.self_attn.o_proj.weight"],
        "meta_llama": ["tok_embeddings.weight", "layers.0.attention.wq.weight", "layers.1.attention.wo.weight",
                       "layers.0.feed_forward.w1.weight", "layers.1.feed_forward.w3.weight",
                       "layers.0.attention_norm.weight", "layers.1.ffn_norm.weight", "norm.weight", "output.weight"],
        "mamba": ["backbone.embeddings.weight", "backbone.layers.0.norm.weight", "backbone.layers.0.mixer.A_log",
                  "backbone.layers.0.mixer.D", "backbone.layers.1.mixer.conv1d.weight",
                  "backbone.layers.1.mixer.in_proj.weight", "backbone.layers.1.mixer.x_proj.weight",
                  "backbone.layers.1.mixer.dt_proj.bias", "backbone.layers.1.mixer.out_proj.weight",
                  "backbone.norm_f.weight", "lm_head.weight"],
    }
    for name, keys in expected.items():
        state = TWINS[name].builder().state_dict()
        missing = [k for k in keys if k not in state]
        assert not missing, f"{name}: missing {missing}"
    assert not any(k.endswith("bias") for k in TWINS["gemma"].builder().state_dict())  # Gemma has no biases
    assert "mask_generator.conv_layers.5.res_out.weight" not in TWINS["conv_tasnet"].builder().state_dict()
    meta = TWINS["meta_llama"].builder().state_dict()  # the cache and the rotary table are plain attributes
    assert not any("cache" in k or "freqs" in k for k in meta)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_checkpoint_round_trips_through_the_port(name):
    """The port's ``torch_parameters()`` load into a freshly built twin with strict ``load_state_dict`` (a tied
    ``lm_head`` under both names) and give torch's outputs."""
    other = SUITE.round_trip(name)
    if name in ("gemma", "qwen2", "mamba"):
        embeddings = other.backbone.embeddings if name == "mamba" else other.model.embed_tokens
        assert other.lm_head.weight is embeddings.weight


# ---------------------------------------------------------------------------------------------------- artifacts
@pytest.mark.parametrize("name", ["conv_tasnet", "gemma", "mistral", "mamba"])
def test_save_load_round_trip(name, tmp_path):
    model, ported = _converted(name)
    porter.save(ported, tmp_path / name)
    loaded = porter.load(tmp_path / name)
    assert loaded.dynamic_dims == ported.dynamic_dims
    assert_matches(loaded, model, TWINS[name].inputs(5))
    assert_matches(loaded, model, TWINS[name].second(6))


# ---------------------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", ["conv_tasnet", "gemma", "mistral", "mamba"])
def test_gradient_parity(name):
    """Eval-mode gradients to the float inputs and every parameter: PReLU, global layer norm, the masked encoder
    product and the transposed-conv decoder; Gemma's ``1 + weight`` norm, tanh-GELU gate and tied embedding; the
    sliding-window mask through eager attention; Mamba's unrolled scan to ``A_log``, ``D``, ``dt_proj`` and the
    causal depthwise conv. atol 1e-5: gradients that are 0 in exact arithmetic (softmax ignores a constant added to
    a row) are ~1e-7 of rounding on both sides."""
    model, ported = _converted(name)
    result = grad_parity(model, ported, TWINS[name].inputs(1), rtol=1e-3, atol=1e-5, seed=1)
    assert result["ok"], result
    names = {r["name"] for r in result["parameters"]}
    assert names == {n for n, p in model.named_parameters() if p.requires_grad}


# ---------------------------------------------------------------------------------------------------- refusals
def test_mamba_another_length_is_refused_naming_the_dim():
    """The selective scan's ``for i in range(seq_len)`` is unrolled by the capture: the port is built for the
    example's length, and another length is refused before any kernel, naming the input, the dim and the size."""
    _, ported = _converted("mamba")
    with pytest.raises(ValueError,
                       match=r"input 'input_ids' \(input 0\) has size 9 in dim 1.*input_ids.size\(1\) == 7"):
        run_ported(ported, _ids(2, 9)(0))


def test_conv_tasnet_length_without_padding_is_refused():
    """Converted at a length the stride does not divide, the port took torchaudio's pad-then-crop branch; a length
    that is a whole number of strides (no padding in torch) is refused naming the condition, never computed
    through the other branch."""
    _, ported = _converted("conv_tasnet")
    with pytest.raises(ValueError, match=r"input 'input' \(input 0\) has size 96 in dim 2"):
        run_ported(ported, _wave(1, 1, 96)(0))


def test_meta_llama_kv_cache_is_refused_naming_it():
    """Meta's reference ``Attention`` writes its KV cache (a plain tensor attribute) by slice assignment and reads
    it back: state the next call would read, which a port does not carry. Refused at conversion, naming the
    attribute (found, not fixed: at ``start_pos=0`` the rows read back are the ones just written)."""
    torch.manual_seed(0)
    model = randomize_(llm.meta_llama_small(), 0)
    with pytest.raises(NotImplementedError, match=r"writes 'layers\.0\.attention\.cache_k' in place"):
        porter.convert(model, _ids(2, 7)(0))
