"""Safetensors files streamed one tensor at a time: never a serialized (or numpy) copy of all the weights.

Writing (:func:`write_safetensors`): the header is built from the arrays' shapes and dtypes alone, written first,
then each array's bytes in turn straight from its MLX buffer (a zero-copy ``memoryview``; only a strided array is
made contiguous, one at a time). The file is written under a temporary name in the same folder and renamed into
place once complete: a failure (a full disk, an interrupt) removes it and leaves no partial ``.safetensors``.

Reading (:func:`read_tensors`): the tensors of a header already checked by ``serialize._read_header`` (hostile
input: offsets inside the file, sizes matching dtype and shape), each read into a buffer of its own size and
handed to MLX, so loading holds the weights once plus one tensor in flight. Every dtype is read this way, float64
and bfloat16 alike (MLX 0.32's ``mx.load`` cannot read F64, numpy has no bfloat16).

File layout (the safetensors format): 8 bytes little-endian header length ``N``, ``N`` bytes of JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}`` padded with spaces to a
multiple of 8, then the tensors' bytes, row-major, at their offsets from the end of the header.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile

import mlx.core as mx
import numpy as np

from .files import remove_quietly, umask

# MLX dtype <-> safetensors dtype; bfloat16 travels through numpy as its bits (uint16)
ST_NAMES = {mx.bool_: "BOOL", mx.uint8: "U8", mx.int8: "I8", mx.int16: "I16", mx.uint16: "U16", mx.float16: "F16",
            mx.bfloat16: "BF16", mx.int32: "I32", mx.uint32: "U32", mx.float32: "F32", mx.int64: "I64",
            mx.uint64: "U64", mx.float64: "F64", mx.complex64: "C64"}
_NUMPY = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16, "F16": np.float16,
          "BF16": np.uint16, "I32": np.int32, "U32": np.uint32, "F32": np.float32, "I64": np.int64,
          "U64": np.uint64, "F64": np.float64, "C64": np.complex64}
_CHUNK = 64 << 20  # bytes per read call (a huge tensor is read in pieces)

__all__ = ["ST_NAMES", "header_for", "write_safetensors", "write_temporary", "read_tensors"]


def header_for(arrays: dict, metadata=None) -> bytes:
    """The safetensors header (length prefix included, JSON padded to 8 bytes) for ``arrays`` in their order.

    Raises:
        TypeError: a value is not an ``mx.array`` or a name or metadata entry is not a string.
        ValueError: a name is ``__metadata__`` or a dtype has no safetensors name.
    """
    header, offset = {}, 0
    if metadata:
        if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in metadata.items()):
            raise TypeError("safetensors 'metadata' must be a dict of strings")
        header["__metadata__"] = dict(metadata)
    for name, array in arrays.items():
        if not isinstance(name, str):
            raise TypeError(f"safetensors tensor names must be strings, but got {type(name).__name__}")
        if name == "__metadata__":
            raise ValueError("'__metadata__' cannot name a tensor in a safetensors file")
        if not isinstance(array, mx.array):
            raise TypeError(f"tensor {name!r} must be an mx.array, but got {type(array).__name__}")
        if array.dtype not in ST_NAMES:
            raise ValueError(f"tensor {name!r} has dtype {array.dtype}, which safetensors cannot store")
        header[name] = {"dtype": ST_NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as the safetensors library writes it
    return struct.pack("<Q", len(text)) + text


def _bytes_of(array: mx.array) -> memoryview:
    """The (non-empty) array's bytes, row-major, as a flat byte view: no copy unless the array is strided."""
    view = memoryview(array)
    if not view.c_contiguous:
        array = mx.contiguous(array)
        mx.eval(array)
        view = memoryview(array)
    return view.cast("B")


def write_safetensors(path: str, arrays: dict, metadata=None) -> None:
    """Write ``arrays`` (``{name: mx.array}``) to ``path`` as one safetensors file, one tensor at a time.

    The file appears complete or not at all: it is written as a temporary sibling and renamed over ``path``; on any
    error (``OSError`` for a full disk, ``KeyboardInterrupt``) the temporary file is removed and the error raised.
    """
    os.replace(write_temporary(path, arrays, metadata), path)


def write_temporary(path: str, arrays: dict, metadata=None) -> str:
    """Write the safetensors file meant for ``path`` under a temporary name beside it (``.<name>.tmp-*``, which no
    loader takes for a weights file); returns that name, for the caller to rename into place (several shards
    at once). On any error the temporary file is removed and the error raised."""
    head = header_for(arrays, metadata)
    folder = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as fh:
            fh.write(head)
            for array in arrays.values():
                if array.nbytes:
                    fh.write(_bytes_of(array))
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp's 0600 -> a normal file
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp


def read_tensors(path: str, header: dict, opener=None) -> dict:
    """The tensors of the safetensors file ``path`` as MLX arrays, from its ``header`` already checked (by
    ``serialize._read_header``: offsets inside the file, byte counts matching dtype and shape; no ``__metadata__``).
    ``opener(path)`` opens it (default ``open(path, "rb")``; ``porter.load`` passes its checked opener, so the file
    read is one its link policy allows, ``converters/artifact_files.py``).

    Raises:
        OSError: the file cannot be read, or is shorter than the header says (it changed since the check).
    """
    with (opener or (lambda p: open(p, "rb")))(path) as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        start = 8 + length
        out = {}
        for name, entry in header.items():
            begin, end = entry["data_offsets"]
            fh.seek(start + begin)
            out[name] = _read_array(fh, entry, end - begin, lambda: f"{path!r}: tensor {name[:80]!r}")
    return out


# MLX dtype each safetensors dtype is read into (bfloat16 as its bits, then viewed)
_MLX = {"BOOL": mx.bool_, "U8": mx.uint8, "I8": mx.int8, "I16": mx.int16, "U16": mx.uint16, "F16": mx.float16,
        "BF16": mx.uint16, "I32": mx.int32, "U32": mx.uint32, "F32": mx.float32, "I64": mx.int64,
        "U64": mx.uint64, "F64": mx.float64, "C64": mx.complex64}


def _read_array(fh, entry: dict, size: int, where) -> mx.array:
    """One tensor of ``size`` bytes read from ``fh`` (positioned at its first byte) straight into a new MLX array's
    buffer: no second copy of it is ever resident (a numpy staging buffer doubled the largest tensor in the load's
    peak, and glibc, tuned by ``porter/_malloc.py`` to keep freed blocks, kept that copy resident afterwards:
    VGG-11's 392 MB classifier weight made a loaded port 340 MB larger than its weights). Falls back to a numpy
    buffer where MLX's array does not expose one flat writable buffer of exactly ``size`` bytes (0-d, empty)."""
    kind, shape = entry["dtype"], entry["shape"]
    array = mx.zeros(shape, dtype=_MLX[kind])
    mx.eval(array)
    view = memoryview(array) if size else None
    if view is not None and view.c_contiguous and not view.readonly and view.nbytes == size and view.ndim:
        _read_into(fh, view.cast("B"), size, where)
        del view
    else:
        buffer = np.empty(size, dtype=np.uint8)
        _read_into(fh, memoryview(buffer), size, where)
        values = buffer.view(_NUMPY[kind]).reshape(shape)
        array = mx.array(values, dtype=mx.float64) if kind == "F64" else mx.array(values)  # float64 kept
    return array.view(mx.bfloat16) if kind == "BF16" else array


def _read_into(fh, target: memoryview, size: int, where) -> None:
    """Fill the flat byte view ``target`` from ``fh`` in :data:`_CHUNK` pieces.

    Raises:
        OSError: the file ends first (``where()`` names the file and tensor).
    """
    done = 0
    while done < size:
        got = fh.readinto(target[done:done + _CHUNK])
        if not got:
            raise OSError(f"{where()} ends past the end of the file")
        done += got
