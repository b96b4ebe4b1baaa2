"""Sparse mixture-of-experts blocks are captured as their dense equivalent (``converters/capture_moe.py``): torch
runs the sparse block here, the port its dense form, on the same tokens. Edge cases: an expert no token picks (torch
never calls it; its gradient is zero in the port), one token, batch and length other than the example's, a block
whose forward is not the dense form's (refused, named), router jitter in training (refused, named), the torch
model left as it was."""

from __future__ import annotations

import pytest
import torch

import porter
from porter.converters import TrainModeError
from porter.converters.capture_moe import _dense_differs, dense_forward
from tests.converter_check import assert_matches
from tests.models._common import randomize_
from tests.models.mixtral import MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock
from tests.twin_suite import assert_gradients_match


def _tokens(b, n, seed, hidden=16):
    return (torch.randn(b, n, hidden, generator=torch.Generator().manual_seed(seed)),)


def _block(cls=MixtralSparseMoeBlock, **kwargs):
    torch.manual_seed(0)
    return randomize_(cls(16, 12, **kwargs), 0)


def test_sparse_block_matches_torch_at_other_sizes_and_one_token():
    block = _block(num_experts=5, top_k=2)
    ported = porter.convert(block, _tokens(2, 6, 0), io_layout="torch")
    for inputs in (_tokens(3, 11, 1), _tokens(1, 1, 2), _tokens(2, 6, 3)):
        assert_matches(ported, block, inputs)


def test_an_expert_no_token_picks_contributes_nothing_and_gets_a_zero_gradient():
    """Expert 3's router logit is far below the others' (feature 0 is large and its gate column pushes expert 3
    down): torch's loop never reaches it (no gradient); the dense form weights it by zero, so the output is torch's
    and its gradient is zero."""
    block = _block(num_experts=4, top_k=2)
    with torch.no_grad():
        block.gate.weight[:, 0] = torch.tensor([1.0, 1.0, 1.0, -1.0])
    x = _tokens(2, 6, 0)[0]
    x[..., 0] = 20.0
    shifted = (x,)
    ported = porter.convert(block, shifted, io_layout="torch")
    with torch.no_grad():
        picked = torch.topk(block.gate(x.view(-1, 16)), 2).indices
    assert not (picked == 3).any()
    assert_matches(ported, block, shifted)
    assert_gradients_match(block, ported, shifted)


def test_shared_expert_and_unnormalised_weights_match_torch():
    block = _block(Qwen2MoeSparseMoeBlock, shared_intermediate=20, num_experts=6, top_k=3, norm_topk_prob=False)
    ported = porter.convert(block, _tokens(2, 5, 0), io_layout="torch")
    assert_matches(ported, block, _tokens(3, 9, 1))
    assert_gradients_match(block, ported, _tokens(2, 7, 2))


class _NotRenormalised(MixtralSparseMoeBlock):
    """Says it renormalises the top-k weights (``norm_topk_prob=True``) but its forward does not; it is written
    densely, so torch.export captures it as it is."""

    norm_topk_prob = True

    def forward(self, hidden_states):
        b, n, h = hidden_states.shape
        x = hidden_states.view(-1, h)
        logits = self.gate(x)
        weights, selected = torch.topk(torch.softmax(logits, dim=1), self.top_k, dim=-1)
        dense = torch.zeros_like(logits).scatter(1, selected, weights)
        out = sum(expert(x) * dense[:, e, None] for e, expert in enumerate(self.experts))
        return out.view(b, n, h), logits


def test_a_look_alike_the_dense_form_does_not_reproduce_keeps_its_own_forward():
    """Named in a warning and captured as written: its own numbers, not the dense form's."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), _block(_NotRenormalised, num_experts=4, top_k=2))
    with pytest.warns(UserWarning, match=r"'1' \(_NotRenormalised\).*gives other numbers.*captured as written"):
        ported = porter.convert(model, _tokens(2, 6, 0), io_layout="torch")
    assert_matches(ported, model, _tokens(3, 5, 1))


def test_router_jitter_in_training_is_refused_by_name():
    """Mixtral's ``jitter_noise`` multiplies the block's input by random noise in training only: the eval capture
    does not hold it, and the port refuses training mode naming the block (the eval port stays exact)."""
    block = _block(num_experts=4, top_k=2)
    block.jitter_noise = 0.01
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), block).train()
    with pytest.raises(TrainModeError) as refused:
        porter.convert(model, _tokens(2, 6, 0), io_layout="torch")
    assert "'1': its forward (MixtralSparseMoeBlock)" in str(refused.value)
    assert "'1.gate'" not in str(refused.value) and "'1.experts" not in str(refused.value)
    ported = porter.convert(model.eval(), _tokens(2, 6, 0), io_layout="torch")
    assert_matches(ported, model, _tokens(3, 5, 1))


def test_the_torch_model_is_left_as_it_was():
    block = _block(num_experts=4, top_k=2)
    x = _tokens(2, 6, 0)
    with torch.no_grad():
        before = block(*x)[0]
    porter.convert(block.train(), x, io_layout="torch")
    assert "forward" not in vars(block) and block.training
    with torch.no_grad():
        torch.testing.assert_close(block.eval()(*x)[0], before, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_the_dense_form_is_recognised_in_other_dtypes(dtype):
    """A checkpoint kept in half precision (or float64) is checked in its own dtype, to that dtype's rounding; a
    wrong dense form is still told apart."""
    block = _block(num_experts=4, top_k=2).to(dtype)
    assert _dense_differs(block, dense_forward(block)) is None
    wrong = _block(_NotRenormalised, num_experts=4, top_k=2).to(dtype)
    assert _dense_differs(wrong, dense_forward(wrong)) is not None
