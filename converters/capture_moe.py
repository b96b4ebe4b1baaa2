"""Sparse mixture-of-experts blocks captured as their dense equivalent (imports torch; conversion only).

transformers' Mixtral / Qwen2-MoE blocks (and the many written after them: OLMoE, Qwen3-MoE, ...) route each token
to its ``top_k`` experts with data-dependent selections: ``torch.where(expert_mask[e])`` picks the tokens of expert
``e``, the expert runs on those rows alone and ``index_add_`` sums the weighted rows back. torch.export cannot
capture that: Mixtral's loop over the experts that were hit (``for expert_idx in expert_hit``) needs the number of
hits as a Python int, and Qwen2-MoE's loop over every expert records ``nonzero``, whose size a converted graph cannot
express. A port has no way to run a graph whose shapes follow the data.

Every expert's MLP works on each token row alone, so the block computes, for each token ``t``,
``sum_e W[t, e] * expert_e(x_t)`` with ``W`` the renormalised top-k router weights scattered into a ``(tokens,
experts)`` matrix of zeros. During the capture, such a block runs exactly that dense form (every expert on every
token, weighted by ``W``; the same ops torch runs in the same order, plus zero terms), so the port gives torch's
numbers and torch's gradients (to the router through ``topk`` and the scatter, to each expert through its weight
column) at any number of tokens, at ``experts / top_k`` times the sparse block's expert work.

A block is recognised by the attributes transformers gives it (``gate`` a Linear into ``num_experts`` logits,
``experts`` a ModuleList of that many, ``top_k``; ``norm_topk_prob`` when present, else renormalised as Mixtral;
``shared_expert`` with ``shared_expert_gate`` as Qwen2-MoE) and used only after its dense form was shown to compute
the block's own forward on random tokens, run here in eval mode; one that differs keeps its own forward (torch.export
captures it as written, or names the line it cannot capture), with a warning naming the block. The
capture is in eval mode, as every capture: Mixtral's router jitter in training (``jitter_noise`` > 0, random noise
on the block's input) is found by the training probe (``capture_train.py``), which refuses the block's training mode
by name.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
import torch.nn.functional as F
from torch import nn

# The dense form must give the block's output to within the rounding of a different matmul blocking (the experts
# run on every row rather than on the selected ones), relative to the output's largest magnitude.
_RTOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2}


def _is_sparse_block(module) -> bool:
    gate, experts = getattr(module, "gate", None), getattr(module, "experts", None)
    return (isinstance(gate, nn.Linear) and isinstance(experts, nn.ModuleList) and len(experts) > 1
            and gate.out_features == len(experts) and isinstance(getattr(module, "top_k", None), int)
            and 0 < module.top_k <= len(experts))


def _shared_expert(block):
    shared, shared_gate = getattr(block, "shared_expert", None), getattr(block, "shared_expert_gate", None)
    if isinstance(shared, nn.Module) and isinstance(shared_gate, nn.Linear):
        return shared, shared_gate
    return None


def dense_forward(block):
    """The forward ``block`` runs during a capture: the sparse block's result and router logits, computed with
    every expert on every token (see the module docstring)."""
    normalize = bool(getattr(block, "norm_topk_prob", True))
    shared = _shared_expert(block)

    def forward(hidden_states):
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        router_logits = block.gate(x)
        weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, block.top_k, dim=-1)
        if normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        dense = torch.zeros(router_logits.shape, dtype=x.dtype, device=x.device).scatter(1, selected, weights)
        out = torch.zeros_like(x)
        for e, expert in enumerate(block.experts):
            out = out + expert(x) * dense[:, e, None]
        if shared is not None:
            expert, gate = shared
            out = out + torch.sigmoid(gate(x)) * expert(x)
        return out.reshape(shape), router_logits

    return forward


def _modes(module):
    return [(m, m.training) for m in module.modules()]


def _dense_differs(block, forward):
    """Why ``forward`` (the dense form) does not compute ``block``'s own forward on random tokens in eval mode,
    or None when it does."""
    weight = block.gate.weight
    state = torch.random.get_rng_state()
    modes = _modes(block)
    try:
        torch.manual_seed(0)
        x = torch.randn(2, 7, block.gate.in_features, dtype=weight.dtype, device=weight.device)
        block.eval()
        with torch.no_grad():
            want, got = block(x.clone()), forward(x.clone())
    except Exception as error:  # noqa: BLE001  (any failure means the block is not one this form reproduces)
        return f"running it or its dense form on random tokens failed ({type(error).__name__}: {error})"
    finally:
        torch.random.set_rng_state(state)
        for module, training in modes:
            module.training = training
    want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
    close = len(want) == len(got) and all(
        isinstance(w, torch.Tensor) and w.shape == g.shape
        and (w - g).abs().max() <= _RTOL.get(w.dtype, 1e-4) * max(w.abs().max().item(), 1e-30)
        for w, g in zip(want, got))
    return None if close else "its dense form gives other numbers on random tokens"


@contextlib.contextmanager
def sparse_experts_dense(model):
    """Within the block, every sparse mixture-of-experts block of ``model`` runs its dense form (checked first;
    a block it does not reproduce keeps its own forward, with a warning)."""
    from .capture_markers import forwards_replaced

    forwards = {}
    for path, module in model.named_modules():
        if _is_sparse_block(module):
            forward = dense_forward(module)
            reason = _dense_differs(module, forward)
            if reason is None:
                forwards[path] = forward
            else:
                warnings.warn(f"'{path}' ({type(module).__name__}) looks like a sparse mixture-of-experts block "
                              "(gate, experts, top_k), which Porter captures as its dense equivalent (every expert "
                              f"on every token, weighted by the top-k router weights), but {reason}: it is "
                              "captured as written", stacklevel=2)
    with forwards_replaced(model, forwards):
        yield
