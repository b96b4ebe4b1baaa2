"""Load a checkpoint file into torch objects, safely: the format is detected from the bytes (once), then read
with the loader made for it.

``torch.save`` files load with ``weights_only=True``; a whole pickled ``nn.Module`` (or other pickled objects) is
refused unless ``trust_pickle=True``, because unpickling runs code chosen by whoever wrote the file. A
``torch.export`` program is loaded only when nothing in it needs unpickling (:mod:`.pt2`). TorchScript archives
run their own TorchScript code in torch's interpreter: treat them as the author's code.
"""

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from .budget import check_checkpoint_size
from .detect import EXPORT, SAFETENSORS, TORCH_SAVE, TORCHSCRIPT, check_readable, detect_format
from .errors import CheckpointError, first_line
from .pt2 import no_unpickling, refuse_pickled_entries
from .unwrap import WRAPPER_KEYS, unwrap_state_dict

# Checkpoint.kind: a model ready to convert, or weights that need an architecture.
MODULE = "module"
STATE_DICT = "state_dict"

@dataclass
class Checkpoint:
    """What was read from a file, before an architecture is attached.

    Attributes:
        path: the file.
        format: one of TORCHSCRIPT, EXPORT, TORCH_SAVE, SAFETENSORS.
        kind: MODULE (ready to convert: TorchScript, export or trusted pickle), or STATE_DICT.
        model: the torch module / ExportedProgram (kind "module"), else None.
        state_dict: name -> tensor (kind STATE_DICT), else None.
        example_inputs: inputs recorded in the file (torch.export), else None.
        notes: things done on the user's behalf that they should know (e.g. "stripped 'module.' prefix").
    """

    path: str
    format: str
    kind: str
    model: object = None
    state_dict: dict = None
    example_inputs: tuple = None
    notes: list = field(default_factory=list)


def load_checkpoint(path: str, *, trust_pickle: bool = False, format: str = None) -> Checkpoint:
    """Detect the format of ``path`` and load it (imports torch).

    Args:
        path (str): the checkpoint file; its name does not matter, only its content.
        trust_pickle (bool, optional): allow unpickling Python objects (a whole pickled model, a training
            checkpoint holding other objects, a ``.pt2`` with pickled entries). Only for files you trust: it runs
            code the file names. Default: ``False``.
        format (str, optional): the format :func:`detect_format` already returned for this file, so that a
            caller that detected it first (to fail fast) does not read the archive twice. Default: detect it.
    Returns:
        Checkpoint: ``kind`` ``"module"`` (``model`` set) or ``"state_dict"`` (``state_dict`` set, unwrapped).
    Raises:
        CheckpointError: a clear paragraph on any problem, naming the file.

    Example::

        >>> ckpt = porter.checkpoints.load_checkpoint("resnet18.pth")
        >>> ckpt.format, ckpt.kind
        ('torch-save', 'state_dict')
        >>> ckpt.notes  # what was unwrapped on the way, e.g. a DataParallel 'module.' prefix
        []
    """
    if format is None:
        fmt = detect_format(path)
    else:
        if format not in (TORCHSCRIPT, EXPORT, TORCH_SAVE, SAFETENSORS):
            raise ValueError(f"[load_checkpoint] 'format' must be one detect_format returns but got {format!r}.")
        check_readable(path)
        fmt = format
    check_checkpoint_size(path)  # before torch holds it in memory
    if fmt == TORCHSCRIPT:
        return _load_torchscript(path)
    if fmt == EXPORT:
        return _load_export(path, trust_pickle)
    if fmt == SAFETENSORS:
        return _load_safetensors(path)
    return _load_torch_save(path, trust_pickle)


def _load_torchscript(path: str) -> Checkpoint:
    import torch

    try:
        module = torch.jit.load(path, map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError/ValueError/... for damaged archives
        raise CheckpointError(f"Input file '{path}' looks like a TorchScript archive but cannot be loaded: "
                              f"{first_line(exc)}.", "Save it again with `torch.jit.save(torch.jit.script(model), "
                              "path)` (or torch.jit.trace).")
    module.eval()
    return Checkpoint(path, TORCHSCRIPT, MODULE, model=module)


def _load_export(path: str, trust_pickle: bool = False) -> Checkpoint:
    import torch

    if not trust_pickle:
        refuse_pickled_entries(path)
    try:
        with no_unpickling(path) if not trust_pickle else _nothing():
            program = torch.export.load(path)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"Input file '{path}' looks like a torch.export program but cannot be loaded: "
                              f"{first_line(exc)}.", "Save it again with `torch.export.save(torch.export.export(model,"
                              " args), 'model.pt2')` using torch 2.13.")
    example = None
    if program.example_inputs is not None:
        from .inputs import ExampleInputs

        args, kwargs = program.example_inputs
        kwargs = {k: v for k, v in (kwargs or {}).items() if isinstance(v, torch.Tensor)}  # None/constants: baked in
        example = ExampleInputs(list(args) + list(kwargs.values()), [None] * len(args) + list(kwargs))
    return Checkpoint(path, EXPORT, MODULE, model=program, example_inputs=example)


@contextmanager
def _nothing():
    yield


def _load_safetensors(path: str) -> Checkpoint:
    try:
        from safetensors.torch import load_file

        tensors = load_file(path, device="cpu")
    except Exception as exc:
        raise CheckpointError(f"Input file '{path}' looks like a safetensors file but cannot be read: "
                              f"{first_line(exc)}.", "It is probably truncated or corrupted; save or copy it again.")
    return Checkpoint(path, SAFETENSORS, STATE_DICT, state_dict=dict(tensors))


_UNSUPPORTED_GLOBAL = re.compile(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)")


def _load_torch_save(path: str, trust_pickle: bool) -> Checkpoint:
    import pickle

    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = _UNSUPPORTED_GLOBAL.search(str(exc))
        if not found:
            raise CheckpointError(f"Input file '{path}' is a damaged torch.save checkpoint: it cannot be unpickled.",
                                  "Save or copy it again.")
        if not trust_pickle:
            raise CheckpointError(
                f"Input file '{path}' contains pickled Python objects (first one: {found.group(1)}): a whole "
                "model saved with `torch.save(model)`, or a training checkpoint storing other objects next to the "
                "weights. Porter refuses to unpickle it because unpickling runs arbitrary code chosen by whoever "
                "wrote the file.",
                "Best: save the weights alone (`torch.save(model.state_dict(), 'weights.pt')`) and convert them "
                "with `--model package.module:factory`, or save a TorchScript/torch.export file. If you wrote "
                "this file yourself or trust its source, re-run with --trust-pickle (the classes it names must be "
                "importable).")
        return _load_trusted_pickle(path)
    except Exception as exc:  # zip/storage errors from a cut-short file surface as RuntimeError/EOFError/...
        raise CheckpointError(f"Input file '{path}' is a truncated or corrupted torch.save checkpoint "
                              f"({first_line(exc)}).", "Save or copy it again.")
    return _state_dict_checkpoint(path, obj)


def _load_trusted_pickle(path: str) -> Checkpoint:
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(f"Input file '{path}' names a class that cannot be imported: {first_line(exc)}.",
                              "A pickled model needs the code that defined it: run porter from the project that saved "
                              "it (so the module is importable), or save a state_dict/TorchScript file instead.")
    except Exception as exc:
        raise CheckpointError(f"Input file '{path}' cannot be unpickled: {first_line(exc)}.", "Save or copy it again.")
    if isinstance(obj, torch.nn.Module):
        obj.eval()
        return Checkpoint(path, TORCH_SAVE, MODULE, model=obj, notes=["loaded a pickled nn.Module (--trust-pickle)"])
    if isinstance(obj, dict):
        for key in WRAPPER_KEYS:
            if isinstance(obj.get(key), torch.nn.Module):
                obj[key].eval()
                return Checkpoint(path, TORCH_SAVE, MODULE, model=obj[key],
                                  notes=[f"loaded the pickled nn.Module under '{key}' (--trust-pickle)"])
    return _state_dict_checkpoint(path, obj)




def _state_dict_checkpoint(path: str, obj) -> Checkpoint:
    state, notes = unwrap_state_dict(obj, path)
    return Checkpoint(path, TORCH_SAVE, STATE_DICT, state_dict=state, notes=notes)
