"""The model's buffers and plain containers as they were before Porter's probing forwards (conversion time, imports
torch).

The train-mode probe (``capture_train.py``) and the dropout survey (``capture_dropout_sites.py``) run the user's
model eagerly in training mode, which updates running statistics and other buffers in place. :class:`BufferSnapshot`
puts them back, writing only the buffers a probe changed (their version counter moved or their values differ): an
unconditional ``copy_`` into every buffer would bump the version of buffers nothing touched, and a tensor the model
computed from one of them before the conversion and saved for backward (timm TinyViT's and LeViT's eval-mode cache of
``attention_biases[:, attention_bias_idxs]``) could then no longer be differentiated in torch ("modified by an
inplace operation").

:class:`ContainerSnapshot` does the same for the plain ``dict``/``list`` attributes of every submodule: a cache an
eval forward fills (timm's ``attention_bias_cache``) would otherwise keep tensors computed by Porter's forwards, with
autograd history (``copy.deepcopy(model)`` then raised "Only Tensors created explicitly by the user").

:func:`example_copy` gives those forwards (and the conversion's final check against torch) copies of the example's
tensors: a forward that writes into its input (``x.mul_(2)``) changed the user's example, and every later probe saw
another input (a training-mode conversion refused such a model as "computes something else in training mode").
"""

from __future__ import annotations

import torch


def example_copy(inputs: tuple, kwargs: dict):
    """``(inputs, kwargs)`` with every tensor replaced by a detached copy, for one eager forward of the user's model."""
    return torch.utils._pytree.tree_map(
        lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, (tuple(inputs), dict(kwargs)))


class BufferSnapshot:
    """Every buffer of ``model`` with its version and a copy; :meth:`restore` writes back the changed ones."""

    def __init__(self, model: torch.nn.Module):
        self._saved = [(b, b._version, b.detach().clone()) for b in model.buffers()]

    def changed(self) -> bool:
        """Whether some buffer differs from its copy now."""
        return any(buffer._version != version and not _same(buffer, saved) for buffer, version, saved in self._saved)

    def restore(self) -> None:
        with torch.no_grad():
            for buffer, version, saved in self._saved:
                if buffer._version != version or not _same(buffer, saved):
                    buffer.copy_(saved)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values (NaN equal to NaN). The version counter alone is not enough: batch norm's kernel updates its
    running statistics in place without always moving it."""
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(torch.equal(torch.isnan(a), torch.isnan(b))) and bool(
        torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0)))


_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))  # _parameters, _buffers, _modules, the hook dicts, ...


class ContainerSnapshot:
    """The plain ``dict`` and ``list`` attributes of every submodule of ``model`` (not torch's own bookkeeping) with
    shallow copies of their contents; :meth:`restore` binds each attribute to its original object again (a
    ``train()`` override may replace it: timm resets ``attention_bias_cache = {}``) and puts back the contents of
    those whose entries changed."""

    def __init__(self, model):
        self._saved = []
        for module in (model.modules() if isinstance(model, torch.nn.Module) else ()):
            for key, value in vars(module).items():
                if key not in _MODULE_INTERNALS and type(value) in (dict, list):
                    self._saved.append((module, key, value, type(value)(value)))

    def restore(self) -> None:
        for module, key, container, saved in self._saved:
            if vars(module).get(key) is not container:
                vars(module)[key] = container
            if isinstance(container, dict):
                if container.keys() != saved.keys() or any(container[k] is not v for k, v in saved.items()):
                    container.clear()
                    container.update(saved)
            elif len(container) != len(saved) or any(a is not b for a, b in zip(container, saved)):
                container[:] = saved
