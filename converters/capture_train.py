"""Which modules a port cannot run in training mode as torch does (conversion time, imports torch).

Conversion captures the forward in eval mode. In training mode a port is exact only where its layers carry torch's
training behaviour themselves (:data:`TRAIN_AWARE` layer types: batch norm's batch statistics and running-statistic
updates, dropout, attention dropout, stochastic depth), the runtime does (spectral norm's power iteration,
``train_state.py``) or the capture routed it into marker nodes (stochastic depth, functional dropout that follows
the flag: ``capture_train_marks.py``; those calls run in their eval form during the probe). Anything else whose
torch forward changes with ``module.training`` (a branch on ``self.training``, an in-place ``F.dropout``, a random
op, an unmapped instance norm's running statistics, an LSTM's inter-layer dropout, ...) was captured in its eval
form, so the port would silently compute the eval numbers while
training: those modules are recorded in ``graph["train_refusals"]`` and the port refuses training mode by name
(``runtime.py``), eval staying exact.

Found by running the torch model, not by reading its code: with every module the port does not handle put in
training mode (the others in eval), a forward on the example that differs from the eval forward means some of them
matter; group testing (halves) names them. The forwards run with gradients enabled, so torch's inference fast paths
(``nn.TransformerEncoderLayer``, ``nn.MultiheadAttention``) are off in both, under a forked RNG (the caller's torch
random stream is untouched), and every buffer is restored afterwards (running statistics, spectral norm's vectors).
A forward also differs when it draws from torch's random stream otherwise than the eval forward (each forward starts
from seed 0; the generator's state after it is compared), whatever its output: a rare random event (DiT's label
dropout at 10% on a batch of 2) may leave the one probed output unchanged, and the port would compute the eval
numbers on every training call. (Counting the draws op by op under a dispatch mode made the probe's forwards 2-3x
slower; the generator's state costs nothing.) A generator of the model's own is not watched. A train-only difference
the example does not show (a branch taken only at other sizes) is not found.
"""

from __future__ import annotations

import warnings

import torch

from .capture_buffers import BufferSnapshot, example_copy

# port layer types (layer_types.py) that compute torch's training behaviour themselves
TRAIN_AWARE = frozenset({"BatchNorm", "InstanceNorm", "Dropout", "TorchDropout", "TorchRReLU",
                         "MultiheadAttention", "StochasticDepth"})

# torch containers whose own training flag only picks an inference fast path (the same numbers; their children
# carry the dropouts): not candidates, so a frozen model's fast path cannot look like a training difference
_FAST_PATH_ONLY = ("TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder",
                   "Transformer")

MAX_PROBES = 256  # forwards the group testing may spend; past that, every untested candidate is refused
MAX_BRANCH_CHECKS = 16  # refused modules :func:`deterministic` tests (two forwards each); more: all stay refused

_REASONS = {
    "Dropout1d": "zeroes whole random channels in training, and this one was not mapped to the port's dropout",
    "AlphaDropout": "drops random elements in training, and this one was not mapped to the port's dropout",
    "FeatureAlphaDropout": "drops random channels in training, and this one was not mapped to the port's dropout",
    "Dropout": "drops random elements in training, and this one was not mapped to the port's dropout layer",
    "RReLU": "draws random negative slopes in training, and this one was not mapped to the port's RReLU",
    "InstanceNorm1d": "normalizes by the instance's statistics and updates running statistics in training (the "
                      "port uses the running statistics)",
    "SyncBatchNorm": "normalizes by batch statistics in training and was not mapped to the port's batch norm",
    "LSTM": "applies inter-layer dropout in training (the port's recurrent layers do not)",
    "MultiheadAttention": "applies attention dropout in training and was not mapped to the port's attention layer "
                          "(a mask, separate q/k/v weights or bias_k)",
}
_REASONS["InstanceNorm2d"] = _REASONS["InstanceNorm3d"] = _REASONS["InstanceNorm1d"]
_REASONS["Dropout2d"] = _REASONS["Dropout3d"] = _REASONS["Dropout1d"]
_REASONS["GRU"] = _REASONS["RNN"] = _REASONS["LSTM"]
for _name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"):
    _REASONS[_name] = "normalizes by batch statistics in training and was not mapped to the port's batch norm"


def scripted(model) -> bool:
    """Whether ``model`` is TorchScript (its code runs as compiled: no second capture in another mode)."""
    return isinstance(model, torch.jit.ScriptModule)


def reason_for(module) -> str:
    """Why ``module``'s training mode is not the port's, in words."""
    cls = type(module)
    if cls.__module__.startswith("torch.nn") and cls.__name__ in _REASONS:
        return f"{cls.__name__} {_REASONS[cls.__name__]}"
    name = getattr(module, "original_name", None) or cls.__name__  # a ScriptModule's own class name
    return (f"its forward ({name}) computes something else in training mode (a branch on self.training, "
            f"a random op, a functional dropout) and conversion captured the eval-mode forward")


def train_refusals(model, inputs: tuple, kwargs: dict, handled) -> dict:
    """``{module path: reason}`` for the modules whose training mode changes ``model``'s output on the example and
    that the port does not handle (``handled``: paths of train-aware layers and runtime-handled modules; ``""`` is
    the root). ``model`` must be in eval mode; its modes, buffers and torch's RNG are as before on return."""
    named = list(model.named_modules())
    handled = set(handled)
    candidates = [(path, m) for path, m in named if path not in handled
                  and not (type(m).__module__.startswith("torch.nn") and type(m).__name__ in _FAST_PATH_ONLY)]
    if not candidates:
        return {}
    buffers = BufferSnapshot(model)
    modes = [(m, m.training) for _, m in named]
    probes = [0]

    def forward():
        return _forward(model, inputs, kwargs)

    def restore_buffers():
        buffers.restore()

    def differs(group) -> bool:
        probes[0] += 1
        for _, m in group:
            m.training = True
        try:
            return not _same(reference, forward())
        except Exception:  # noqa: BLE001  (a forward that fails in training mode differs from one that runs)
            return True
        finally:
            for _, m in group:
                m.training = False
            restore_buffers()

    def culprits(group) -> list:
        if probes[0] >= MAX_PROBES:
            return group
        if len(group) == 1:
            return group
        half = len(group) // 2
        found = []
        for part in (group[:half], group[half:]):
            if differs(part):
                found += culprits(part)
        return found or group  # only together (they interact): refuse them all

    with torch.random.fork_rng(devices=[]):
        try:
            try:
                reference = forward()
            except Exception as e:  # noqa: BLE001  (not checkable: training mode refused, eval unaffected)
                return {"": f"its training mode could not be checked: the eager forward on the example failed "
                            f"with gradients enabled ({type(e).__name__}: {str(e)[:200]})"}
            found = culprits(candidates) if differs(candidates) else []
        finally:
            for m, mode in modes:
                m.training = mode
            restore_buffers()
    return {path: reason_for(m) for path, m in found}


def _forward(model, inputs: tuple, kwargs: dict, seed: int = 0) -> list:
    """``[torch's generator state after the forward, output leaves...]`` of one forward from ``seed``: equal states
    iff the same draws were made. The forward gets copies of the example's tensors (:func:`example_copy`)."""
    inputs, kwargs = example_copy(inputs, kwargs)
    with torch.enable_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(seed)
        out = model(*inputs, **kwargs)
    drawn = torch.random.get_rng_state()
    leaves = torch.utils._pytree.tree_leaves(out)
    return [drawn] + [x.detach() if isinstance(x, torch.Tensor) else x for x in leaves]


def deterministic(model, inputs: tuple, kwargs: dict, paths) -> list:
    """The modules among ``paths`` (refused by :func:`train_refusals`) whose training forward differs from their
    eval forward without a random op or a state update: alone in training mode (every other module in eval), the
    forward draws from torch's generator as the eval forward does, leaves every buffer as it was and gives the
    same output from two seeds. Those a second capture in training mode can reproduce (``capture_train_graph.py``);
    none past :data:`MAX_BRANCH_CHECKS` paths. ``model`` in eval mode; its modes, buffers and torch's RNG are as
    before on return."""
    found = []
    if len(paths) > MAX_BRANCH_CHECKS:
        return found
    buffers = BufferSnapshot(model)
    with torch.random.fork_rng(devices=[]):
        try:
            reference = _forward(model, inputs, kwargs)[0]
            for path in paths:
                module = model.get_submodule(path)
                module.training = True
                try:
                    first = _forward(model, inputs, kwargs)
                    kept = not buffers.changed()  # a training forward that writes state (running statistics) is
                    # not a branch a capture can hold
                    second = _forward(model, inputs, kwargs, seed=1)
                except Exception:  # noqa: BLE001  (a training forward that fails is not reproducible)
                    continue
                finally:
                    module.training = False
                    buffers.restore()
                if kept and torch.equal(first[0], reference) and _same(first[1:], second[1:]):
                    found.append(path)
        finally:
            buffers.restore()
    return found


def _same(a: list, b: list) -> bool:
    """The two forwards' outputs are identical (NaN where the other has NaN)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if not isinstance(x, torch.Tensor):
            if x != y:
                return False
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.is_floating_point() or x.is_complex():
            if not bool(((x == y) | (torch.isnan(x) & torch.isnan(y))).all()):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def spectral_norm_state(model, graph: dict) -> list:
    """The ``graph["train_state"]`` entries (``train_state.py``) for ``model``'s spectral norms, both forms, whose
    ``u``/``v``/weight the converted graph reads as parameters, in pairs call by call (``train_state.readers``).
    A spectral norm left out stays a training difference: the probe refuses it."""
    from torch.nn.utils.spectral_norm import SpectralNorm

    from .train_state import readers

    params = graph["params"]
    entries = []

    def add(form, module_path, prefix, weight, u, v, sn):
        names = {key: f"{prefix}{name}" for key, name in (("weight", weight), ("u", u), ("v", v))}
        if any(n not in params for n in names.values()) or readers(graph, names) is None:
            return
        if not all(isinstance(getattr(sn, a, None), (int, float)) for a in ("dim", "n_power_iterations", "eps")):
            return
        if int(sn.n_power_iterations) > 0:
            entries.append({"kind": "spectral_norm", "form": form, "module": module_path, **names,
                            "dim": int(sn.dim), "n_power_iterations": int(sn.n_power_iterations),
                            "eps": float(sn.eps)})

    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        for hook in getattr(module, "_forward_pre_hooks", {}).values():
            if isinstance(hook, SpectralNorm):
                add("hook", path, prefix, f"{hook.name}_orig", f"{hook.name}_u", f"{hook.name}_v", hook)
        lists = getattr(module, "parametrizations", None)
        if lists is None or not hasattr(lists, "items"):
            continue
        for tensor_name, plist in lists.items():
            for index, param in enumerate(plist):
                if type(param).__name__ != "_SpectralNorm" or index != 0 or len(plist) != 1 \
                        or getattr(param, "_u", None) is None:
                    continue  # the input of a later parametrization is not a stored tensor
                add("parametrization", f"{prefix}parametrizations.{tensor_name}.{index}",
                    f"{prefix}parametrizations.{tensor_name}.", "original", f"{index}._u", f"{index}._v", param)
    return entries
