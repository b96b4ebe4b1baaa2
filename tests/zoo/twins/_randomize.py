"""Re-randomizing the parameters a torch twin initializes to a constant (zero biases, class tokens, logit scales)."""

import torch


def randomize_constants(model: torch.nn.Module, scale: float = 0.2) -> torch.nn.Module:
    """Add seeded noise to every parameter whose entries are all equal (zeros or ones at init), so that no term of
    the forward multiplies a constant a bug could hide behind. Meta-device models are returned unchanged."""
    with torch.no_grad():
        for p in model.parameters():
            if p.is_meta or p.numel() == 0:
                continue
            flat = p.reshape(-1)
            if bool((flat == flat[0]).all()):
                p.add_(torch.randn_like(p) * scale)
    return model


def randomized(builder):
    """A builder whose models come out of :func:`randomize_constants` (with the caller's torch seed)."""

    def build(*args, **kwargs):
        return randomize_constants(builder(*args, **kwargs))

    build.__name__ = getattr(builder, "__name__", "build")
    return build
