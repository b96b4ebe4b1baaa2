"""Stochastic depth modules (torchvision's ``StochasticDepth``, timm's ``DropPath`` and look-alikes), found by
their behaviour (imports torch; conversion only).

A candidate is a module outside ``torch.nn`` with no parameters, buffers or children, and a drop probability in
an attribute (``drop_prob``, torchvision's ``p``), called with one tensor. It is accepted only when torch shows the
stochastic depth structure: in eval mode its output is its input; in training mode, on a test batch, every
example's output is either all zeros or the input times one scale (``1 / (1 - p)``, or ``1`` for timm's
``scale_by_keep=False``), the examples drop independently (``"row"``: torchvision's default and timm's) or all
together (``"batch"``; torchvision's ``mode``), at a rate near ``p``. Anything else stays as it was (and its
training mode stays refused, ``capture_train.py``). The draws run under a forked RNG: the caller's torch random
stream is untouched.

During the capture (:func:`routed`) an accepted module's forward calls the ``porter::drop_path`` marker
(``capture_markers.py``), which the converters map to ``porter.converters.layer_dropout.StochasticDepth`` at the
module's path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_RATE_ATTRIBUTES = ("drop_prob", "p")
_BATCH = 512  # examples in the test batch: a row-mode drop shows as a mix of dropped and kept examples
_DRAWS = 8
_RATE_TOLERANCE = 0.06  # |dropped fraction - p| over _DRAWS * _BATCH row draws (about 5 standard deviations)


@dataclass(frozen=True)
class DropPath:
    """One recognised module: drop probability ``p``, ``mode`` ``"row"``/``"batch"``, ``scale`` by ``1 / (1 - p)``."""

    p: float
    mode: str
    scale: bool


def _rate(module):
    for name in _RATE_ATTRIBUTES:
        value = getattr(module, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 < value <= 1.0:
            return float(value)
    return None


def leaves_with(model, read) -> dict:
    """``{path: (module, read(module))}`` over the modules outside torch with no parameters, buffers or children
    (nor TorchScript), where ``read`` finds the settings of a drop layer (None: not one): where a drop layer of
    another library can be."""
    found = {}
    for path, module in model.named_modules():
        if not path or type(module).__module__.startswith("torch.") or isinstance(module, torch.jit.ScriptModule):
            continue
        if any(True for _ in module.children()) or any(True for _ in module.parameters(recurse=False)) \
                or any(True for _ in module.buffers(recurse=False)):
            continue
        settings = read(module)
        if settings is not None:
            found[path] = (module, settings)
    return found


def candidates(model) -> dict:
    """``{path: (module, p)}``: modules that might be stochastic depth (not yet checked)."""
    return leaves_with(model, _rate)


def training_draws(module, x: torch.Tensor, draws: int):
    """``module``'s training-mode outputs on ``x`` under torch seeds ``0 .. draws - 1`` (a forked RNG: the caller's
    stream is untouched), or None when its eval output is not ``x`` or a call fails or returns something else than a
    tensor of ``x``'s shape and dtype. The module's mode is restored."""
    was = module.training
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            module.training = False
            out = module(x)
            if not isinstance(out, torch.Tensor) or not torch.equal(out, x):
                return None
            module.training = True
            outs = []
            for draw in range(draws):
                torch.manual_seed(draw)
                out = module(x.clone())  # a copy: an in-place drop (timm's inplace=True) must not change x
                if not isinstance(out, torch.Tensor) or out.shape != x.shape or out.dtype != x.dtype:
                    return None
                outs.append(out)
            return outs
    except Exception:  # noqa: BLE001  (not callable like a drop layer: left as it was)
        return None
    finally:
        module.training = was


def recognise(module, p: float, ndim: int) -> "DropPath | None":
    """The module's stochastic depth, as torch shows it on a test batch of rank ``ndim``, or None."""
    shape = (_BATCH,) + (2,) * (ndim - 1)
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0)) + 0.5  # positive: a ratio per element
    outs = training_draws(module, x, _DRAWS)
    if outs is None:
        return None
    ratios = [(out / x).reshape(_BATCH, -1) for out in outs]
    ratios = torch.stack(ratios)  # (draws, examples, elements)
    per_example = ratios[..., :1]
    if not torch.allclose(ratios, per_example.expand_as(ratios), rtol=1e-6, atol=0.0):
        return None  # not one factor per example
    kept = per_example[..., 0] != 0
    factors = per_example[..., 0][kept]
    if p < 1.0:
        scale = 1.0 / (1.0 - p)
        if factors.numel() and torch.allclose(factors, torch.full_like(factors, scale), rtol=1e-5, atol=0.0):
            scaled = True
        elif factors.numel() and torch.equal(factors, torch.ones_like(factors)):
            scaled = False
        else:
            return None  # no kept example, or another scale
    else:
        if kept.any():
            return None
        scaled = True
    mixed = bool(((kept.sum(dim=1) > 0) & (kept.sum(dim=1) < _BATCH)).any())
    declared = getattr(module, "mode", None)
    if declared == "batch" or (declared is None and not mixed and p < 1.0):
        if mixed or (declared is None and bool(kept.all())):
            return None  # batch mode needs every draw uniform, and some evidence (a dropped batch) when undeclared
        mode = "batch"
    elif declared in (None, "row"):
        mode = "row"
        if p < 1.0 and abs(float((~kept).float().mean()) - p) > _RATE_TOLERANCE:
            return None  # the attribute is not the rate it drops at (a keep probability, say)
    else:
        return None
    return DropPath(p, mode, scaled)


def find(model, ndims: dict) -> dict:
    """``{path: DropPath}`` for the candidates torch shows are stochastic depth; ``ndims``: ``{path: rank of the
    tensor the module was called with}`` (a module never called is left out)."""
    found = {}
    for path, (module, p) in candidates(model).items():
        if path in ndims and ndims[path] >= 1:
            depth = recognise(module, p, ndims[path])
            if depth is not None:
                found[path] = depth
    return found


def routed(model, found: dict):
    """Within the block, each recognised module's forward calls the ``porter::drop_path`` marker (its eval output:
    a copy of the input); restored on exit, even on errors."""
    from .capture_markers import drop_path, forwards_replaced

    return forwards_replaced(model, {
        path: (lambda x, _d=depth: drop_path(x, _d.p, _d.mode == "batch", _d.scale)) for path, depth in found.items()})
