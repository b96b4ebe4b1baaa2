"""``porter.update_weights``: a newer torch checkpoint into an existing port or converted folder.

The checkpoint is read through :mod:`porter.checkpoints` (format from the bytes, weights-only unpickling, pickled
objects refused unless ``trust_pickle``, training-checkpoint wrappers and ``module.`` prefixes undone); the weights
go in through :meth:`PortedModel.load_torch_state_dict` (``converters/weights_update.py``: the conversion's own
weight transforms, all-or-nothing checks). Imports torch only to read a torch file.
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["UpdateResult", "update_weights", "read_state_dict"]


class UpdateResult(NamedTuple):
    """What :func:`update_weights` returns.

    Attributes:
        model (PortedModel): the port holding the new weights (the one given, or the folder's, loaded).
        missing_keys / unexpected_keys (list of str): what was not loaded (``strict=False``), as torch reports it.
        notes (list of str): what was done reading the checkpoint (a wrapper unwrapped, a prefix stripped).
    """

    model: object
    missing_keys: list
    unexpected_keys: list
    notes: list


def read_state_dict(path, *, trust_pickle: bool = False) -> tuple:
    """``(state_dict, notes)`` from a checkpoint file: a ``state_dict`` file (``torch.save``, safetensors) as it
    is, unwrapped; a TorchScript archive, ``torch.export`` program (or, with ``trust_pickle``, a pickled model) by
    its ``state_dict()``. Raises :class:`porter.checkpoints.CheckpointError` naming the file."""
    from .checkpoints import MODULE, load_checkpoint

    ckpt = load_checkpoint(os.fspath(path), trust_pickle=trust_pickle)
    if ckpt.kind != MODULE:
        return ckpt.state_dict, list(ckpt.notes)
    model = ckpt.model
    state = model.state_dict if not callable(getattr(model, "state_dict", None)) else model.state_dict()
    return dict(state), list(ckpt.notes) + [f"weights taken from the {ckpt.format} model's state_dict"]


def update_weights(target, weights, *, strict: bool = True, trust_pickle: bool = False) -> UpdateResult:
    """Load newer torch weights into a port.

    Args:
        target (PortedModel or str or path): a port (updated in place) or a converted model folder (loaded with
            :func:`porter.load`; the folder itself is not changed: ``porter.save`` the result, or use
            ``porter update DIR CHECKPOINT``, which replaces the folder atomically).
        weights (dict or str or path): a ``state_dict`` (name -> tensor, torch layout) or a checkpoint file.
        strict (bool, optional): every key the port holds must be given and no other (torch's rule). Default:
            ``True``.
        trust_pickle (bool, optional): let a checkpoint file unpickle Python objects (runs code it names; only for
            files you trust). Default: ``False``.

    The port keeps its dtypes (see :meth:`PortedModel.load_torch_state_dict`); an error changes nothing.

    Example:
        >>> result = porter.update_weights("resnet18-mlx", "resnet18-epoch10.pt")
        >>> porter.save(result.model, "resnet18-mlx-epoch10")
    """
    from .converters import PortedModel, load

    if isinstance(target, PortedModel):
        ported = target
    elif isinstance(target, (str, os.PathLike)):
        ported = load(target)
    else:
        raise TypeError(f"update_weights: 'target' must be a PortedModel or a converted model folder but got "
                        f"{type(target).__name__}")
    notes = []
    if isinstance(weights, (str, os.PathLike)):
        weights, notes = read_state_dict(weights, trust_pickle=trust_pickle)
    elif not hasattr(weights, "items"):
        raise TypeError(f"update_weights: 'weights' must be a state_dict or a checkpoint path but got "
                        f"{type(weights).__name__}")
    missing, unexpected = ported.load_torch_state_dict(weights, strict=strict)
    return UpdateResult(ported, missing, unexpected, notes)
