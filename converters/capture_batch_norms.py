"""Batch norm subclasses with a forward of their own (timm's ``BatchNormAct2d``, a user's ``MyBN(nn.BatchNorm2d)``
calling ``F.batch_norm`` itself), found by their behaviour (imports torch; conversion only).

A ``torch.nn`` batch norm subclass that keeps its base's forward maps as the base (``api._torch_base``). One with a
forward of its own may compute anything, so it maps to the port's batch norm layer (which then carries torch's
training behaviour, ``layers/norm.py``) only when torch shows, on a test batch of the rank it is called with, that
its training forward is exactly torch's batch norm training rule followed by what its eval forward does after the
normalization (timm: ``drop`` and ``act``, children that keep their own modes):

* output: the training forward equals the eval forward with the running statistics replaced by the batch's mean
  and biased variance (batch statistics instead of running ones, nothing else changes with the flag);
* state: the running statistics afterwards are ``(1 - m) * running + m * batch`` (the batch's unbiased variance;
  ``m`` the module's ``momentum``, or ``1 / num_batches_tracked`` for ``momentum=None``) and the counter moved by
  one, as torch's ``BatchNorm2d`` leaves them; or, with a momentum, the counter left where it was (a forward that
  calls ``F.batch_norm(..., self.training, self.momentum, ...)`` itself: the port's layer then does not count
  either, ``count_batches=False``).

A subclass that does something else (a frozen batch norm that always reads its running statistics, another momentum,
a random op in its own forward) is not mapped: its eval-mode capture stays, and the training probe
(``capture_train.py``) refuses its training mode by name where it differs, with the reason found here. Modules and
buffers are restored, and the test batch runs under a forked RNG.
"""

from __future__ import annotations

import torch

from .capture_buffers import BufferSnapshot

_SPATIAL = (4, 3, 2)  # the test batch's spatial sizes (unequal: a transposed axis shows)
_BATCH = 3
_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}


def _base(module, mappable):
    """The torch.nn batch norm class a subclass with a forward of its own derives from, or None."""
    cls = type(module)
    if cls.__module__.startswith("torch.nn.modules") or isinstance(module, torch.jit.ScriptModule):
        return None
    if not isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
        return None
    for base in cls.__mro__[1:]:
        if base.__module__.startswith("torch.nn.modules") and base.__name__ in mappable:
            return base.__name__ if getattr(cls, "forward", None) is not getattr(base, "forward", None) else None
    return None


def candidates(model, mappable) -> dict:
    """``{path: (module, base class name)}``: batch norm subclasses with their own forward and running statistics
    (not yet checked). Without running statistics a batch norm normalizes by the batch in both modes: the eval
    capture already is its training forward."""
    found = {}
    for path, module in model.named_modules():
        base = _base(module, mappable)
        if base is None or not path or not module.track_running_stats or module.running_mean is None \
                or module.running_var is None or not module.running_mean.is_floating_point():
            continue
        momentum = module.momentum
        if momentum is not None and (isinstance(momentum, bool) or not isinstance(momentum, (int, float))
                                     or not 0.0 <= momentum <= 1.0):
            continue
        found[path] = (module, base)
    return found


def _close(a, b, tol) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape \
            or a.dtype != b.dtype:
        return False
    a, b = a.double(), b.double()
    scale = float(b.abs().max()) if b.numel() else 0.0
    return bool(torch.isfinite(a).all()) and bool(((a - b).abs() <= tol * (b.abs() + scale)).all())


def _expected_statistics(module, mean, var, count):
    """torch's running-statistic update for one training forward on a batch with ``count`` values per channel."""
    counter = module.num_batches_tracked
    steps = None if counter is None else counter + 1
    if module.momentum is None:
        factor = 1.0 / float(steps) if steps is not None else 0.0
    else:
        factor = float(module.momentum)
    unbiased = var * (count / max(count - 1, 1))
    running_mean = (1 - factor) * module.running_mean.double() + factor * mean
    running_var = (1 - factor) * module.running_var.double() + factor * unbiased
    return running_mean, running_var, steps


def check(module, ndim: int) -> "str | bool | None":
    """``None`` when torch shows ``module`` (in eval mode) trains as its base batch norm on a test batch of rank
    ``ndim``, ``False`` when it does except that ``num_batches_tracked`` stays (a forward calling ``F.batch_norm``
    with its momentum); otherwise what differs, in words."""
    if ndim < 2:
        return "is called with fewer than 2 dims"
    dtype = module.running_mean.dtype
    tol = _TOLERANCE.get(dtype, 1e-4)
    shape = (_BATCH, module.num_features) + _SPATIAL[:ndim - 2] + (3,) * max(ndim - 5, 0)
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(shape, generator=generator, dtype=torch.float64) * 1.7 + 0.6).to(dtype)
    dims = [0] + list(range(2, ndim))
    mean = x.double().mean(dims)
    var = x.double().var(dims, unbiased=False)
    count = x.numel() // module.num_features
    buffers = BufferSnapshot(module)
    was = module.training
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            module.training = True  # its children keep their own (eval) modes
            trained = module(x.clone())
            after = (module.running_mean.clone(), module.running_var.clone(),
                     None if module.num_batches_tracked is None else module.num_batches_tracked.clone())
            buffers.restore()
            want = _expected_statistics(module, mean, var, count)
            module.training = False
            module.running_mean.copy_(mean)
            module.running_var.copy_(var)
            reference = module(x.clone())
    except Exception as e:  # noqa: BLE001  (not checkable: left unmapped)
        return f"could not be checked on a test batch ({type(e).__name__}: {str(e)[:120]})"
    finally:
        module.training = was
        buffers.restore()
    if not _close(trained, reference, tol):
        return ("computes something other than batch statistics in training mode (its training output is not its "
                "eval output with the batch's mean and variance as running statistics)")
    if not (_close(after[0].double(), want[0], tol) and _close(after[1].double(), want[1], tol)):
        return (f"updates its running statistics otherwise than torch's batch norm with momentum "
                f"{module.momentum} (another factor, or not once per call)")
    if (after[2] is None) != (want[2] is None):
        return "does not count num_batches_tracked as torch's batch norm does"
    if after[2] is not None and not torch.equal(after[2], want[2]):
        if module.momentum is None or not torch.equal(after[2], want[2] - 1):
            return "does not count num_batches_tracked as torch's batch norm does"
        return False  # F.batch_norm called with a fixed momentum: torch's counter stays where it was
    return None


def find(model, ndims: dict, mappable) -> tuple:
    """``(mapped, reasons)``: ``{path: {"torch_type": base class name, "count_batches": bool}}`` for the subclasses
    that train as their base (the port maps them to its batch norm layer, ``layer_map.py``), ``{path: what
    differs}`` for the others; ``ndims``: ``{path: rank of the tensor the module was called with}`` (a module never
    called is left out)."""
    mapped, reasons = {}, {}
    for path, (module, base) in candidates(model, mappable).items():
        if path not in ndims:
            continue
        reason = check(module, ndims[path])
        if reason is None or reason is False:
            mapped[path] = {"torch_type": base, "count_batches": reason is None}
        else:
            reasons[path] = reason
    return mapped, reasons
