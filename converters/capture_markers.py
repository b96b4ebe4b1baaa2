"""Marker ops for random training-mode computations that an eval-mode capture would not record (imports torch;
conversion only).

In eval mode torchvision's ``StochasticDepth``, timm's ``DropPath`` and ``DropBlock2d`` return their input, and an
attention whose ``dropout_p`` is ``self.p if self.training else 0.0`` runs without dropout: ``torch.export`` records
nothing of them, so the port would have no node where the training behaviour could go. During the capture, Porter
routes the calls it recognised (``capture_droppath.py``, ``capture_dropblock.py``, ``capture_dropout_sites.py``)
through these ops instead. Each computes exactly the eval forward (a copy of the input, or attention without
dropout), so the captured program's numbers are the model's, and carries the training-mode arguments into the graph,
where the converters (``converters/ops/stochastic.py``) turn it into a node that is identity in eval and torch's
random op in training.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Dict, Optional

import torch
import torch.nn.functional as F

_NAMESPACE = "porter"


@torch.library.custom_op(f"{_NAMESPACE}::drop_path", mutates_args=())
def drop_path(x: torch.Tensor, p: float, batch: bool, scale: bool) -> torch.Tensor:
    """Stochastic depth marker: ``x`` in eval; in the port's training mode, one Bernoulli(1 - p) per example
    (``batch``: per batch) scaled by ``1 / (1 - p)`` when ``scale``."""
    return x.clone()


@drop_path.register_fake
def _drop_path_fake(x, p, batch, scale):
    return torch.empty_like(x)


@torch.library.custom_op(f"{_NAMESPACE}::drop_block", mutates_args=())
def drop_block(x: torch.Tensor, drop_prob: float, block_size: int, gamma_scale: float) -> torch.Tensor:
    """timm ``DropBlock2d`` marker: ``x`` in eval; in the port's training mode, its fast drop block
    (``converters/layer_dropblock.py``)."""
    return x.clone()


@drop_block.register_fake
def _drop_block_fake(x, drop_prob, block_size, gamma_scale):
    return torch.empty_like(x)


@torch.library.custom_op(f"{_NAMESPACE}::dropout", mutates_args=())
def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Functional dropout marker: ``x`` in eval, ``F.dropout(x, p, True)`` in the port's training mode."""
    return x.clone()


@dropout.register_fake
def _dropout_fake(x, p):
    return torch.empty_like(x)


@torch.library.custom_op(f"{_NAMESPACE}::sdpa_dropout", mutates_args=())
def sdpa_dropout(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Optional[torch.Tensor],
                 is_causal: bool, scale: Optional[float], enable_gqa: bool, dropout_p: float) -> torch.Tensor:
    """Attention-dropout marker: ``F.scaled_dot_product_attention`` without dropout (its eval call); in the
    port's training mode, with ``dropout_p``."""
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=0.0,
                                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


@sdpa_dropout.register_fake
def _sdpa_dropout_fake(query, key, value, attn_mask, is_causal, scale, enable_gqa, dropout_p):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=0.0,
                                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


@contextlib.contextmanager
def forwards_replaced(model, forwards: Dict[str, Callable]):
    """Within the block, the module at each path of ``forwards`` runs that function as its forward (a marker
    call); each module's own ``forward`` attribute, if it had one, is restored on exit, even on errors."""
    modules = dict(model.named_modules())
    saved = []
    try:
        for path, forward in forwards.items():
            module = modules[path]
            saved.append((module, module.__dict__.get("forward")))
            module.forward = forward
        yield
    finally:
        for module, previous in saved:
            if previous is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = previous
