"""Checkpoint formats: recognise a file by its content, then load it safely.

Detection reads bytes only (no torch, no unpickling). Loading imports torch lazily and never unpickles arbitrary
objects: ``torch.save`` files load with ``weights_only=True``; a fully pickled ``nn.Module`` is refused unless the
user passes ``--trust-pickle``, because unpickling it runs code chosen by whoever wrote the file.

Formats:
  torchscript   ``torch.jit.save`` zip archive (has ``constants.pkl`` / ``code/``), loaded with ``torch.jit.load``.
  export        ``torch.export.save`` program (``.pt2`` zip with ``archive_format``), loaded with ``torch.export.load``.
  torch-save    ``torch.save`` zip or legacy pickle file: a state_dict, a dict wrapping one, or a pickled module.
  safetensors   ``.safetensors`` tensors (always a state_dict).
"""

import os
import re
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass, field

from .budget import check_checkpoint_size
from .errors import InputError, first_line

TORCHSCRIPT = "torchscript"
EXPORT = "export"
TORCH_SAVE = "torch-save"
SAFETENSORS = "safetensors"

FORMAT_NAMES = {
    TORCHSCRIPT: "TorchScript archive",
    EXPORT: "torch.export program",
    TORCH_SAVE: "torch.save checkpoint",
    SAFETENSORS: "safetensors file",
}

# What a state_dict checkpoint turned out to be after loading.
STATE_DICT = "state_dict"
PICKLED_MODULE = "pickled-module"

# Training scripts wrap the weights in a dict with bookkeeping next to them; these keys hold the weights.
WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "module", "net", "weights")

_KNOWN = ("a TorchScript archive (torch.jit.save), a torch.export program (.pt2), a torch.save checkpoint "
          "(state_dict, .pt/.pth/.bin) or a .safetensors file")
_PICKLE_PROTOCOL_2_PLUS = re.compile(rb"^\x80[\x02-\x05]")
_MAX_ZIP_RATIO = 16


def _check_readable(path: str) -> int:
    if not os.path.exists(path):
        raise InputError(f"Input file '{path}' does not exist.", "Check the path (relative paths are from the "
                         "current directory).")
    if os.path.isdir(path):
        raise InputError(f"Input '{path}' is a directory, not a checkpoint file.",
                         "For a converted Porter model use `porter validate DIR --against FILE`; to convert, pass "
                         "the checkpoint file itself.")
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise InputError(f"Input '{path}' is not a regular file (a FIFO, device or socket).",
                         "Porter reads checkpoints from regular files only: save the checkpoint to a file first.")
    try:
        size = os.path.getsize(path)
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"Input file '{path}' cannot be read: {exc.strerror}.", "Check its permissions.")
    if size == 0:
        raise InputError(f"Input file '{path}' is empty (0 bytes).",
                         "The checkpoint was probably not written completely; save it again.")
    return size


def _is_safetensors(path: str, size: int) -> bool:
    # 8-byte little-endian header length, then a JSON object.
    if size < 10:
        return False
    with open(path, "rb") as fh:
        (header_len,) = struct.unpack("<Q", fh.read(8))
        first = fh.read(1)
    return first == b"{" and 0 < header_len <= size - 8


def detect_format(path: str) -> str:
    """Which checkpoint format ``path`` holds, from its bytes alone (no torch, nothing unpickled).

    Raises:
        InputError: missing, empty, unreadable, truncated/corrupted archive, or not a format Porter knows.
    """
    size = _check_readable(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                unpacked = sum(info.file_size for info in archive.infolist())
                if unpacked > _MAX_ZIP_RATIO * size + (1 << 20):  # torch stores entries uncompressed
                    raise InputError(f"Input file '{path}' unpacks to {unpacked} bytes from {size}: a zip bomb, not "
                                     "a PyTorch checkpoint (torch stores its archives uncompressed).",
                                     "Save the checkpoint again with torch.")
                bad = archive.testzip()
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, ValueError) as exc:
            raise InputError(f"Input file '{path}' is a truncated or corrupted zip archive ({first_line(exc)}).",
                             "It was probably cut short while saving or copying; save or copy it again.")
        if bad is not None:
            raise InputError(f"Input file '{path}' is a corrupted zip archive: member '{bad}' fails its checksum.",
                             "Save or copy the checkpoint again.")
        return _zip_format(path, names)
    if _is_safetensors(path, size):
        return SAFETENSORS
    if _PICKLE_PROTOCOL_2_PLUS.match(head):
        return TORCH_SAVE  # legacy (non-zip) torch.save
    raise InputError(f"Input file '{path}' is not a checkpoint format Porter recognises.",
                     f"Porter reads {_KNOWN}. If this is an ONNX/TF/other file, export the model from PyTorch "
                     "first.")


def _zip_format(path: str, names) -> str:
    # Every torch archive puts its records under one top-level folder named after the file.
    inner = {name.split("/", 1)[1] for name in names if "/" in name}
    if "archive_format" in inner or any(n.startswith("models/") and n.endswith(".json") for n in inner):
        if any(n.startswith("data/aotinductor/") for n in inner):
            raise InputError(f"Input file '{path}' is an AOTInductor package (compiled code), not a "
                             "torch.export program.", "Save the program itself with "
                             "`torch.export.save(torch.export.export(model, args), 'model.pt2')`.")
        return EXPORT
    if "constants.pkl" in inner or any(n.startswith("code/") for n in inner):
        return TORCHSCRIPT
    if "data.pkl" in inner:
        return TORCH_SAVE
    raise InputError(f"Input file '{path}' is a zip archive but not a PyTorch checkpoint (no data.pkl, "
                     "TorchScript code or torch.export program inside).", f"Porter reads {_KNOWN}.")


@dataclass
class Checkpoint:
    """What was read from a file, before an architecture is attached.

    Attributes:
        path: the file.
        format: one of TORCHSCRIPT, EXPORT, TORCH_SAVE, SAFETENSORS.
        kind: "module" (ready to convert: TorchScript, export or trusted pickle), or STATE_DICT.
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


def load_checkpoint(path: str, *, trust_pickle: bool = False) -> Checkpoint:
    """Detect and load ``path`` (imports torch). Raises InputError with a clear paragraph on any problem."""
    fmt = detect_format(path)
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
        raise InputError(f"Input file '{path}' looks like a TorchScript archive but cannot be loaded: "
                         f"{first_line(exc)}.", "Save it again with `torch.jit.save(torch.jit.script(model), "
                         "path)` (or torch.jit.trace).")
    module.eval()
    return Checkpoint(path, TORCHSCRIPT, "module", model=module)


def _load_export(path: str, trust_pickle: bool = False) -> Checkpoint:
    import torch

    if not trust_pickle:
        refuse_pickled_entries(path)
    try:
        program = torch.export.load(path)
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"Input file '{path}' looks like a torch.export program but cannot be loaded: "
                         f"{first_line(exc)}.", "Save it again with `torch.export.save(torch.export.export(model,"
                         " args), 'model.pt2')` using torch 2.13.")
    example = None
    if program.example_inputs is not None:
        args, kwargs = program.example_inputs
        if kwargs:
            raise InputError(f"The torch.export program in '{path}' takes keyword inputs "
                             f"({', '.join(sorted(kwargs))}); Porter converts positional tensor inputs only.",
                             "Export a wrapper module whose forward takes the tensors positionally.")
        example = tuple(args)
    return Checkpoint(path, EXPORT, "module", model=program, example_inputs=example)


def _load_safetensors(path: str) -> Checkpoint:
    try:
        from safetensors.torch import load_file

        tensors = load_file(path, device="cpu")
    except Exception as exc:
        raise InputError(f"Input file '{path}' looks like a safetensors file but cannot be read: "
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
            raise InputError(f"Input file '{path}' is a damaged torch.save checkpoint: it cannot be unpickled.",
                             "Save or copy it again.")
        if not trust_pickle:
            raise InputError(
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
        raise InputError(f"Input file '{path}' is a truncated or corrupted torch.save checkpoint "
                         f"({first_line(exc)}).", "Save or copy it again.")
    return _state_dict_checkpoint(path, TORCH_SAVE, obj)


def _load_trusted_pickle(path: str) -> Checkpoint:
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=False)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"Input file '{path}' names a class that cannot be imported: {first_line(exc)}.",
                         "A pickled model needs the code that defined it: run porter from the project that saved "
                         "it (so the module is importable), or save a state_dict/TorchScript file instead.")
    except Exception as exc:
        raise InputError(f"Input file '{path}' cannot be unpickled: {first_line(exc)}.", "Save or copy it again.")
    if isinstance(obj, torch.nn.Module):
        obj.eval()
        return Checkpoint(path, TORCH_SAVE, "module", model=obj, notes=["loaded a pickled nn.Module (--trust-pickle)"])
    if isinstance(obj, dict):
        for key in WRAPPER_KEYS:
            if isinstance(obj.get(key), torch.nn.Module):
                obj[key].eval()
                return Checkpoint(path, TORCH_SAVE, "module", model=obj[key],
                                  notes=[f"loaded the pickled nn.Module under '{key}' (--trust-pickle)"])
    return _state_dict_checkpoint(path, TORCH_SAVE, obj)


def _state_dict_checkpoint(path: str, fmt: str, obj) -> Checkpoint:
    import torch

    notes = []
    state = obj
    if isinstance(obj, dict) and not _all_tensors(obj):
        for key in WRAPPER_KEYS:
            if isinstance(obj.get(key), dict) and obj[key] and _all_tensors(obj[key]):
                state = obj[key]
                notes.append(f"weights taken from the checkpoint's '{key}' entry")
                break
    if not isinstance(state, dict) or not state or not _all_tensors(state):
        if isinstance(obj, torch.Tensor):
            what = "a single tensor"
        elif isinstance(obj, dict):
            keys = ", ".join(repr(k) for k in list(obj)[:8]) + (", ..." if len(obj) > 8 else "")
            what = f"a dict with keys {keys}" if obj else "an empty dict"
        else:
            what = f"a {type(obj).__name__}"
        raise InputError(f"Input file '{path}' holds {what}, not a state_dict (a dict of parameter name -> "
                         "tensor).", "Save `model.state_dict()` (or a dict holding it under 'state_dict' or "
                         "'model'), a TorchScript archive or a torch.export program.")
    state = dict(state)
    prefix = _common_wrapper_prefix(state)
    if prefix:
        state = {key[len(prefix):]: value for key, value in state.items()}
        notes.append(f"stripped the '{prefix}' prefix from every key (DataParallel/compile wrapper)")
    return Checkpoint(path, fmt, STATE_DICT, state_dict=state, notes=notes)


def _all_tensors(mapping: dict) -> bool:
    import torch

    return all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in mapping.items())


def _common_wrapper_prefix(state: dict) -> str:
    for prefix in ("module.", "_orig_mod."):
        if all(key.startswith(prefix) for key in state):
            return prefix
    return ""


def describe(fmt: str) -> str:
    return FORMAT_NAMES.get(fmt, fmt)


_PT2_CONFIG_LIMIT = 64 << 20


def refuse_pickled_entries(path: str) -> None:
    """Refuse a ``.pt2`` whose loading would unpickle something (without ``--trust-pickle``), naming the entry.

    ``torch.export.load`` unpickles weights and constants marked ``use_pickle`` (tensor subclasses), custom and
    opaque objects, legacy ``.pt`` weight files, and falls back to a full unpickler for ``sample_inputs`` that a
    weights-only load refuses. This reads the archive's JSON configs and tries the sample inputs with a weights-only
    unpickler first, so ``torch.export.load`` runs only on archives where none of that happens.
    """
    import io
    import json

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            root = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
            inner = {n[len(root):]: n for n in names if n.startswith(root)}
            models = [n[len("models/"):-len(".json")] for n in inner
                      if n.startswith("models/") and n.endswith(".json") and "/" not in n[len("models/"):]]

            def read(name, limit=_PT2_CONFIG_LIMIT):
                info = archive.getinfo(inner[name])
                if info.file_size > limit:
                    raise InputError(f"Input file '{path}': entry '{name}' is {info.file_size} bytes, larger than "
                                     "a torch.export config can be.", "Save the program again.")
                return archive.read(inner[name])

            for model in models:
                for legacy in (f"data/weights/{model}.pt", f"data/constants/{model}.pt"):
                    if legacy in inner:
                        _refuse_pickle(path, legacy, "a legacy pickled weight file")
                for config_name in (f"data/weights/{model}_weights_config.json",
                                    f"data/constants/{model}_constants_config.json"):
                    if config_name not in inner:
                        continue
                    try:
                        config = json.loads(read(config_name)).get("config", {})
                        entries = list(config.items())
                    except (ValueError, AttributeError, RecursionError):
                        raise InputError(f"Input file '{path}': '{config_name}' is not a valid torch.export "
                                         "config.", "Save the program again.") from None
                    for fqn, meta in entries:
                        file = str(meta.get("path_name", "")) if isinstance(meta, dict) else ""
                        if not isinstance(meta, dict) or meta.get("use_pickle"):
                            _refuse_pickle(path, f"{config_name}: {str(fqn)[:80]}", "a pickled tensor")
                        if file.startswith(("custom_obj_", "opaque_obj_")):
                            _refuse_pickle(path, f"{config_name}: {str(fqn)[:80]}", "a pickled Python object")
                sample = f"data/sample_inputs/{model}.pt"
                if sample in inner:
                    data = read(sample, 1 << 34)
                    if data:
                        _weights_only(path, sample, data, io)
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, zlib.error) as exc:
        raise InputError(f"Input file '{path}' is a damaged torch.export archive ({first_line(exc)}).",
                         "Save or copy it again.")


def _weights_only(path, entry, data, io):
    import torch

    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception:  # noqa: BLE001  (UnpicklingError for other objects, anything for damaged bytes)
        _refuse_pickle(path, entry, "sample inputs that only a full (code-running) unpickler can read")


def _refuse_pickle(path, entry, what):
    raise InputError(f"Input file '{path}' holds {what} ('{entry}'): reading it would unpickle Python objects, "
                     "which runs code chosen by whoever wrote the file.",
                     "If you wrote this file yourself or trust its source, re-run with --trust-pickle; otherwise "
                     "ask for a program exported from plain tensors (torch.export.save of a model without tensor "
                     "subclasses or custom objects).")
