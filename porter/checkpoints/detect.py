"""Which checkpoint format a file holds, from its bytes alone: no torch, nothing unpickled.

Formats (the values of :func:`detect_format`):
  ``"torchscript"``  ``torch.jit.save`` zip archive (``constants.pkl`` / ``code/`` inside).
  ``"export"``       ``torch.export.save`` program (``.pt2`` zip with ``archive_format`` or ``models/*.json``).
  ``"torch-save"``   ``torch.save`` zip or legacy pickle file: a state_dict, a dict wrapping one, or a pickled module.
  ``"safetensors"``  ``.safetensors`` tensors (always a state_dict).

Refused here, before anything reads the content: missing, empty, unreadable or non-regular files (FIFOs, devices,
sockets), directories, zip bombs (torch stores its archives uncompressed), archives failing their checksums,
archives whose entry names collide (duplicates, or names equal but for case: torch's reader, miniz, finds entries
case-insensitively and need not pick the entry Python's ``zipfile`` reads, so what Porter checks could differ from
what torch loads), AOTInductor packages and unknown formats.
"""

import os
import re
import stat
import struct
import zipfile
import zlib

from .errors import CheckpointError, first_line

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

_KNOWN = ("a TorchScript archive (torch.jit.save), a torch.export program (.pt2), a torch.save checkpoint "
          "(state_dict, .pt/.pth/.bin) or a .safetensors file")
_PICKLE_PROTOCOL_2_PLUS = re.compile(rb"^\x80[\x02-\x05]")
_MAX_ZIP_RATIO = 16


def check_readable(path: str) -> int:
    """The size of ``path``, a readable, non-empty regular file; raises :class:`CheckpointError` otherwise."""
    if not os.path.exists(path):
        raise CheckpointError(f"Input file '{path}' does not exist.", "Check the path (relative paths are from the "
                              "current directory).")
    if os.path.isdir(path):
        raise CheckpointError(f"Input '{path}' is a directory, not a checkpoint file.",
                              "For a converted Porter model use `porter validate DIR --against FILE`; to convert, pass "
                              "the checkpoint file itself.")
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise CheckpointError(f"Input '{path}' is not a regular file (a FIFO, device or socket).",
                              "Porter reads checkpoints from regular files only: save the checkpoint to a file first.")
    try:
        size = os.path.getsize(path)
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise CheckpointError(f"Input file '{path}' cannot be read: {exc.strerror}.", "Check its permissions.")
    if size == 0:
        raise CheckpointError(f"Input file '{path}' is empty (0 bytes).",
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
    """Which checkpoint format ``path`` holds (``"torchscript"``, ``"export"``, ``"torch-save"`` or
    ``"safetensors"``), from its bytes alone (no torch, nothing unpickled). Reads a zip archive once, whole, to
    check every member's CRC.

    Raises:
        CheckpointError: missing, empty, unreadable, truncated/corrupted archive, or not a format Porter knows.
    """
    size = check_readable(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                check_zip_names(path, names)
                unpacked = sum(info.file_size for info in archive.infolist())
                if unpacked > _MAX_ZIP_RATIO * size + (1 << 20):  # torch stores entries uncompressed
                    raise CheckpointError(f"Input file '{path}' unpacks to {unpacked} bytes from {size}: a zip "
                                          "bomb, not a PyTorch checkpoint (torch stores its archives uncompressed).",
                                          "Save the checkpoint again with torch.")
                bad = archive.testzip()
        except CheckpointError:
            raise
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, ValueError) as exc:
            raise CheckpointError(f"Input file '{path}' is a truncated or corrupted zip archive ({first_line(exc)}).",
                                  "It was probably cut short while saving or copying; save or copy it again.")
        if bad is not None:
            raise CheckpointError(f"Input file '{path}' is a corrupted zip archive: member '{bad}' fails its checksum.",
                                  "Save or copy the checkpoint again.")
        return _zip_format(path, names)
    if _is_safetensors(path, size):
        return SAFETENSORS
    if _PICKLE_PROTOCOL_2_PLUS.match(head):
        return TORCH_SAVE  # legacy (non-zip) torch.save
    raise CheckpointError(f"Input file '{path}' is not a checkpoint format Porter recognises.",
                          f"Porter reads {_KNOWN}. If this is an ONNX/TF/other file, export the model from PyTorch "
                          "first.")


def check_zip_names(path: str, names) -> None:
    """Refuse an archive two of whose entries share a name, ignoring case: ``zipfile`` reads the last of duplicates,
    torch's reader (miniz, case-insensitive lookup) one of its own choosing, so a check on one could pass a payload
    in the other."""
    seen = {}
    for name in names:
        key = name.lower()
        if key in seen:
            pair = (f"two entries named '{name[:120]}'" if seen[key] == name else
                    f"the entries '{seen[key][:120]}' and '{name[:120]}', one name to torch's reader (it ignores case)")
            raise CheckpointError(f"Input file '{path}' is a zip archive holding {pair}: torch could load another "
                                  "entry than the one Porter checks, so the file is refused.", "torch.save and "
                                  "torch.export.save never write such archives; save the checkpoint again with torch.")
        seen[key] = name


def _zip_format(path: str, names) -> str:
    # Every torch archive puts its records under one top-level folder named after the file.
    inner = {name.split("/", 1)[1] for name in names if "/" in name}
    if "archive_format" in inner or any(n.startswith("models/") and n.endswith(".json") for n in inner):
        if any(n.startswith("data/aotinductor/") for n in inner):
            raise CheckpointError(f"Input file '{path}' is an AOTInductor package (compiled code), not a "
                                  "torch.export program.", "Save the program itself with "
                                  "`torch.export.save(torch.export.export(model, args), 'model.pt2')`.")
        return EXPORT
    if "constants.pkl" in inner or any(n.startswith("code/") for n in inner):
        return TORCHSCRIPT
    if "data.pkl" in inner:
        return TORCH_SAVE
    raise CheckpointError(f"Input file '{path}' is a zip archive but not a PyTorch checkpoint (no data.pkl, "
                          "TorchScript code or torch.export program inside).", f"Porter reads {_KNOWN}.")




def describe_format(fmt: str) -> str:
    """A format's name for messages: ``"torch-save"`` -> ``"torch.save checkpoint"``."""
    return FORMAT_NAMES.get(fmt, fmt)
