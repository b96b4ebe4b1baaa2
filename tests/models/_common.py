"""Seeded weights for the torch reference models (:func:`randomize_`).

The torchvision.ops blocks (``Conv2dNormActivation``, ``SqueezeExcitation``, ``StochasticDepth``,
``_make_divisible``) the reference models use are the zoo twins' (``tests/zoo/twins/_mobile_ops.py``).
"""

from __future__ import annotations

import math

import torch
from torch import nn


# ---------------------------------------------------------------------------------------------------- weights
_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


@torch.no_grad()
def randomize_(model: nn.Module, seed: int) -> nn.Module:
    """Give every float parameter and buffer seeded, non-trivial values and put the model in eval mode.

    Norm weights land in [0.5, 1.5], biases and running means are small and non-zero, running variances lie in
    [0.5, 1.5] (so eval-mode BatchNorm really normalises with stored statistics), weights of rank >= 2 get a
    fan-in-scaled uniform draw, and zero- or one-initialised tensors (class tokens, layer scales) become random,
    so no part of the forward is an identity by accident.
    """
    gen = torch.Generator().manual_seed(seed)

    def uniform(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=gen) * (hi - lo) + lo)

    def normal(t, std):
        t.copy_(torch.randn(t.shape, generator=gen) * std)

    norm_tensors = set()
    for module in model.modules():
        if isinstance(module, _NORMS):
            for name in ("weight", "running_var"):
                t = getattr(module, name, None)
                if t is not None:
                    norm_tensors.add(id(t))
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not t.dtype.is_floating_point:
            continue  # num_batches_tracked
        leaf = name.rsplit(".", 1)[-1]
        if id(t) in norm_tensors or "scale" in leaf:
            uniform(t, 0.5, 1.5)
        elif leaf == "running_mean" or t.ndim <= 1:
            normal(t, 0.2)
        elif t.shape[0] == 1:
            normal(t, 0.5)  # tokens and position embeddings, shaped (1, ...)
        else:
            fan_in = math.prod(t.shape[1:])
            bound = math.sqrt(6.0 / fan_in)  # He-uniform: keeps activations O(1) through ReLU stacks
            uniform(t, -bound, bound)
    return model.eval()



def calibrate_batch_norms(model: nn.Module, inputs) -> None:
    """Set every BatchNorm's running statistics to those of ``inputs``' activations (a cumulative average over one
    batch), as a trained checkpoint's are measured on data, so that eval-mode batch norm keeps activations O(1):
    deep twins whose random statistics let activations grow along the depth put torch's own float32 output
    further from its float64 one than the parity bar. The affine weights stay random; ``inputs`` is one batch
    (a tensor or a tuple of the model's inputs)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    model(*(inputs if isinstance(inputs, tuple) else (inputs,)))
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    model.eval()

