"""timm's ``DropBlock2d`` modules (``timm/layers/drop.py``; timm's ResNets' ``drop_block``), found by their behaviour
(imports torch; conversion only).

A candidate is a module outside ``torch.nn`` with no parameters, buffers or children, carrying timm's attributes
(``drop_prob`` in (0, 1], an int ``block_size``, a number ``gamma_scale``, ``with_noise`` false, ``fast`` true where
present), called with a 4-d tensor. It is accepted only when torch shows timm's fast drop block: in eval mode its
output is its input, and in training mode, on a test batch under a few seeds, its output is exactly
:func:`reference`'s under the same seed (the seeds drawn by ``bernoulli_`` of the seed rate, grown by a max pool,
the kept elements scaled by the kept fraction). Anything else (the non-fast form with its clipped seeds, noise
filling, a look-alike) stays as it was, and its training mode stays refused (``capture_train.py``). The draws run
under a forked RNG: the caller's torch random stream is untouched.

During the capture (:func:`routed`) an accepted module's forward calls the ``porter::drop_block`` marker
(``capture_markers.py``), which ``converters/ops/stochastic.py`` turns into the ``drop_block`` kernel
(``layer_dropblock.py``): identity in eval, timm's random blocks in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

_SHAPE = (4, 3, 11, 9)  # the test batch: odd sizes, room for blocks of 7
_DRAWS = 3


@dataclass(frozen=True)
class DropBlock:
    """One recognised module: timm's ``drop_prob``, ``block_size``, ``gamma_scale``."""

    drop_prob: float
    block_size: int
    gamma_scale: float


def _settings(module) -> "DropBlock | None":
    p, k, g = (getattr(module, name, None) for name in ("drop_prob", "block_size", "gamma_scale"))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (p, g))
    if not numbers or not isinstance(k, int) or isinstance(k, bool) or k < 1 or not 0.0 < p <= 1.0:
        return None
    if getattr(module, "with_noise", False) is not False or getattr(module, "fast", True) is not True:
        return None
    return DropBlock(float(p), k, float(g))


def candidates(model) -> dict:
    """``{path: (module, DropBlock)}``: modules that might be timm's drop block (not yet checked)."""
    from .capture_droppath import leaves_with

    return leaves_with(model, _settings)


def reference(x: torch.Tensor, block: DropBlock) -> torch.Tensor:
    """timm's fast drop block on ``x`` (B, C, H, W), drawing from torch's global RNG."""
    h, w = x.shape[2], x.shape[3]
    k = min(block.block_size, h, w)
    gamma = (block.gamma_scale * block.drop_prob * h * w / k ** 2
             / ((w - block.block_size + 1) * (h - block.block_size + 1)))
    seeds = torch.empty_like(x).bernoulli_(gamma)
    keep = 1 - F.max_pool2d(seeds, kernel_size=k, stride=1, padding=k // 2)
    return x * keep * (keep.numel() / keep.to(torch.float32).sum().add(1e-6)).to(x.dtype)


def recognise(module, block: DropBlock) -> bool:
    """Whether torch shows ``module`` computing timm's fast drop block with ``block``'s settings: its output under
    each seed is :func:`reference`'s under the same seed."""
    from .capture_droppath import training_draws

    x = torch.rand(_SHAPE, generator=torch.Generator().manual_seed(0)) + 0.5
    outs = training_draws(module, x, _DRAWS)
    if outs is None:
        return False
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        for draw, out in enumerate(outs):
            torch.manual_seed(draw)
            if not torch.equal(out, reference(x, block)):
                return False
    return True


def find(model, ndims: dict) -> dict:
    """``{path: DropBlock}`` for the candidates torch shows are timm's drop block; ``ndims``: ``{path: rank of the
    tensor the module was called with}`` (only 4-d calls)."""
    return {path: block for path, (module, block) in candidates(model).items()
            if ndims.get(path) == 4 and recognise(module, block)}


def routed(model, found: dict):
    """Within the block, each recognised module's forward calls the ``porter::drop_block`` marker (its eval output:
    a copy of the input); restored on exit, even on errors."""
    from .capture_markers import drop_block, forwards_replaced

    return forwards_replaced(model, {
        path: (lambda x, _b=block: drop_block(x, _b.drop_prob, _b.block_size, _b.gamma_scale))
        for path, block in found.items()})
