"""Reading torch's ``.pth``/``.pt``/``.bin`` checkpoint files without torch, and without running their pickles.

torch writes a checkpoint as a pickle whose tensors are calls to ``torch._utils._rebuild_tensor_v2`` on storages
saved beside it. Two containers exist:

* the zip format (torch >= 1.6): ``<prefix>/data.pkl`` (the pickle), ``<prefix>/data/<key>`` (one raw storage per
  key), ``<prefix>/byteorder`` (``little``/``big``; absent in old files: little) and ``<prefix>/version``;
* the legacy format (``_use_new_zipfile_serialization=False``): five pickles in one stream (magic number, protocol
  1001, system info, the object, the storage keys), then per storage an 8-byte element count and its raw bytes.

The pickle is read by :class:`_RestrictedUnpickler`: its ``find_class`` resolves only tensor reconstruction
(``_rebuild_tensor_v2``, ``_rebuild_parameter``), ``collections.OrderedDict``, the storage types and
``_codecs.encode`` (str -> bytes only: how protocol 2 writes bytes), each to a
function of this module that builds a numpy array; any other global (``os.system``, ``builtins.eval``, a
``__reduce__`` payload's callable) is refused with :class:`UnsafeCheckpointError` naming the file and the global,
so nothing in the file executes. Storages are read only when a tensor uses them, after their declared size is
checked against the bytes the file really holds; a tensor's size, strides and offset are checked to lie inside its
storage. Tensors sharing a storage are views of one buffer, as in torch.

Values come back as numpy arrays in torch's layout, except bfloat16 tensors, which numpy cannot hold: those are
``mlx.core.array`` of dtype bfloat16. Example::

    >>> from porter.torch_files import load_state_dict
    >>> state = load_state_dict("resnet18-f37072fd.pth")      # {"conv1.weight": ndarray (64, 3, 7, 7), ...}
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import zipfile
from typing import Any, Callable

import mlx.core as mx
import numpy as np

__all__ = ["CheckpointFormatError", "UnsafeCheckpointError", "read_torch_file", "load_state_dict",
           "TORCH_SUFFIXES"]

#: File suffixes read as torch checkpoints (``.safetensors`` is read by :func:`load_state_dict` through Porter's checked
#: safetensors reader).
TORCH_SUFFIXES = (".pth", ".pt", ".bin")

# torch storage class name -> numpy dtype of one element ("bfloat16" is read as uint16 and viewed by MLX).
_STORAGE_DTYPES = {
    "FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "BFloat16Storage": "bfloat16",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1", "ByteStorage": "u1",
    "BoolStorage": "?", "ComplexFloatStorage": "<c8", "ComplexDoubleStorage": "<c16", "UntypedStorage": "u1",
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
# a tensor may exceed its storage (stride-0 broadcast views) by this many elements at most
_MAX_BROADCAST = 2 ** 28
_LEGACY_PROTOCOL = 1001


class CheckpointFormatError(ValueError):
    """The file is not a readable torch checkpoint (truncated, inconsistent sizes, unknown layout)."""


class UnsafeCheckpointError(CheckpointFormatError):
    """The checkpoint's pickle references a global outside the allow-list (it would run code under torch.load)."""


class _StorageType:
    """What ``torch.FloatStorage`` & co. resolve to: only a dtype, never torch's class. Immutable, so a pickle's
    BUILD opcode cannot retarget it to another dtype."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", _STORAGE_DTYPES[name])

    def __setattr__(self, key, value):
        raise CheckpointFormatError(f"a checkpoint's pickle tried to modify the storage type {self.name}.")

    @property
    def itemsize(self) -> int:
        return 2 if self.dtype == "bfloat16" else np.dtype(self.dtype).itemsize


class _Storage:
    """One storage of the file: its element type, element count and a loader of its bytes (read once, lazily)."""

    def __init__(self, storage_type: _StorageType, numel: int, read: Callable[[], bytearray], big_endian: bool):
        self.type = storage_type
        self.numel = numel
        self._read = read
        self._big_endian = big_endian
        self._array = None
        self.ready = True

    def array(self) -> np.ndarray:
        """The storage as a flat numpy array (bfloat16 as uint16), native byte order."""
        if self._array is None:
            raw = self._read()
            dtype = np.dtype("<u2" if self.type.dtype == "bfloat16" else self.type.dtype)
            if self._big_endian:
                dtype = dtype.newbyteorder(">")
            array = np.frombuffer(raw, dtype=dtype, count=self.numel)
            self._array = array.astype(array.dtype.newbyteorder("=")) if self._big_endian else array
        return self._array


def _int_tuple(value, what: str, where: str) -> tuple:
    if not isinstance(value, tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise CheckpointFormatError(f"{where}: a tensor's {what} must be a tuple of ints but is {value!r}.")
    return value


def _rebuild_tensor(where: str, storage, offset, size, stride, *_ignored):
    """``torch._utils._rebuild_tensor_v2``: a strided view of ``storage``, checked to lie inside it."""
    if not isinstance(storage, _Storage):
        raise CheckpointFormatError(f"{where}: a tensor is rebuilt from {type(storage).__name__}, not a storage.")
    size, stride = _int_tuple(size, "size", where), _int_tuple(stride, "stride", where)
    if not isinstance(offset, int) or offset < 0 or len(size) != len(stride) or min(size + stride, default=0) < 0:
        raise CheckpointFormatError(f"{where}: invalid tensor geometry (offset {offset!r}, size {size}, "
                                    f"stride {stride}).")
    empty = any(s == 0 for s in size)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if not empty and last >= storage.numel:
        raise CheckpointFormatError(f"{where}: a tensor of size {size}, stride {stride}, offset {offset} reaches "
                                    f"element {last} of a storage of {storage.numel} elements.")
    count = 1
    for n in size:
        count *= n
    if count > max(storage.numel, _MAX_BROADCAST):  # stride-0 views could declare any size over a few bytes
        raise CheckpointFormatError(f"{where}: a tensor of size {size} ({count} elements) over a storage of "
                                    f"{storage.numel} elements is refused (more than {_MAX_BROADCAST} repeated).")
    if not storage.ready:
        return _Pending(storage, offset, size, stride)
    return _view(storage, offset, size, stride)


class _Pending:
    """A tensor of the legacy format, whose storage bytes follow the pickle: viewed once they are read."""

    def __init__(self, *args):
        self.args = args


def _view(storage, offset: int, size: tuple, stride: tuple):
    empty = any(s == 0 for s in size)
    flat = storage.array()
    if empty:
        view = np.empty(size, flat.dtype)
    else:
        item = flat.itemsize
        view = np.lib.stride_tricks.as_strided(flat[offset:], shape=size, strides=[s * item for s in stride])
    if storage.type.dtype == "bfloat16":
        return mx.array(np.ascontiguousarray(view)).view(mx.bfloat16)
    return view


def _rebuild_parameter(where: str, data, *_ignored):
    """``torch._utils._rebuild_parameter(_with_state)``: a parameter is its data."""
    return data


def _encode_bytes(text, encoding="utf-8"):
    """``_codecs.encode`` restricted to what pickle uses it for: str -> bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        raise CheckpointFormatError(f"unexpected _codecs.encode({type(text).__name__}, {encoding!r}) in a pickle.")
    return text.encode(encoding)


class _RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the globals a tensor checkpoint needs; refuses every other one before anything runs."""

    def __init__(self, file, where: str, storage_for: Callable):
        super().__init__(file)
        self._where = where
        self._storage_for = storage_for

    def find_class(self, module: str, name: str):
        where = self._where
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return lambda *args: _rebuild_tensor(where, *args)
        if module == "torch._utils" and name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
            return lambda *args: _rebuild_parameter(where, *args)
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module == "_codecs" and name == "encode":  # how protocol-2 pickles write bytes
            return _encode_bytes
        if module in ("torch", "torch.storage") and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise UnsafeCheckpointError(
            f"'{where}' refers to the global '{module}.{name}', which a weight file does not need; it was not "
            "loaded (reading it with torch.load(weights_only=False) could run arbitrary code). Porter reads only "
            "tensors, parameters and plain containers.")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] in ("storage", b"storage")
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], (str, bytes))
                and isinstance(pid[4], int) and not isinstance(pid[4], bool) and pid[4] >= 0):
            raise CheckpointFormatError(f"'{self._where}': unexpected persistent id {pid!r:.200} (not a storage).")
        return self._storage_for(pid)


def _unpickle(file, where: str, storage_for: Callable) -> Any:
    try:
        return _RestrictedUnpickler(file, where, storage_for).load()
    except CheckpointFormatError:
        raise
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError, IndexError, KeyError,
            struct.error, MemoryError, RecursionError) as exc:
        raise CheckpointFormatError(f"'{where}' is not a readable torch checkpoint: its pickle is damaged "
                                    f"({type(exc).__name__}: {exc}).") from None


def _read_zip(path: str) -> Any:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise CheckpointFormatError(f"'{path}' is not a readable torch checkpoint: damaged zip ({exc}).") from None
    with archive:
        pickles = [n for n in archive.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointFormatError(f"'{path}' is a zip archive but not a torch checkpoint (expected one "
                                        f"'<name>/data.pkl', found {len(pickles)}).")
        prefix = pickles[0][: -len("data.pkl")]
        names = set(archive.namelist())
        big = prefix + "byteorder" in names and archive.read(prefix + "byteorder").strip() == b"big"
        storages: dict = {}

        def storage_for(pid):
            _, storage_type, key, _location, numel = pid[:5]
            key = key.decode() if isinstance(key, bytes) else key
            if key not in storages:
                entry = f"{prefix}data/{key}"
                if entry not in names:
                    raise CheckpointFormatError(f"'{path}': storage '{key}' is missing from the archive.")
                info = archive.getinfo(entry)
                if info.compress_type != zipfile.ZIP_STORED:  # torch never compresses: a bomb, not a checkpoint
                    raise CheckpointFormatError(f"'{path}': storage '{key}' is compressed, which torch never "
                                                "writes; refusing to inflate it.")
                size = info.file_size
                if numel * storage_type.itemsize != size:
                    raise CheckpointFormatError(
                        f"'{path}': storage '{key}' declares {numel} elements of {storage_type.itemsize} bytes but "
                        f"the archive holds {size} bytes.")

                def read(entry=entry):
                    try:
                        return bytearray(archive.read(entry))
                    except (zipfile.BadZipFile, OSError, EOFError) as exc:
                        raise CheckpointFormatError(f"'{path}': storage '{key}' cannot be read ({exc}).") from None

                storages[key] = _Storage(storage_type, numel, read, big)
            elif storages[key].type.name != storage_type.name:
                raise CheckpointFormatError(f"'{path}': storage '{key}' is used with two element types.")
            return storages[key]

        if archive.getinfo(pickles[0]).compress_type != zipfile.ZIP_STORED:  # inflating it could take any memory
            raise CheckpointFormatError(f"'{path}': '{pickles[0]}' is compressed, which torch never writes; refusing "
                                        "to inflate it.")
        try:
            data = archive.read(pickles[0])
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise CheckpointFormatError(f"'{path}' is not a readable torch checkpoint ({exc}).") from None
        return _unpickle(io.BytesIO(data), path, storage_for)


def _read_legacy(path: str) -> Any:
    with open(path, "rb") as f:
        def plain(what):
            return _unpickle(f, path, lambda pid: _refuse_storage(path, what))

        if plain("magic number") != _LEGACY_MAGIC:
            raise CheckpointFormatError(f"'{path}' is not a torch checkpoint (neither a zip archive nor torch's "
                                        "legacy format).")
        if plain("protocol") != _LEGACY_PROTOCOL:
            raise CheckpointFormatError(f"'{path}': unsupported legacy torch protocol version.")
        info = plain("system info")
        big = isinstance(info, dict) and not info.get("little_endian", True)
        declared: dict = {}

        def storage_for(pid):
            _, storage_type, key, _location, numel = pid[:5]
            if len(pid) > 5 and pid[5] is not None:
                raise CheckpointFormatError(f"'{path}': storage views of the legacy format are not supported.")
            key = key.decode() if isinstance(key, bytes) else key
            if key not in declared:
                declared[key] = _Storage(storage_type, numel, bytearray, big)
                declared[key].ready = False
            return declared[key]

        result = _unpickle(f, path, storage_for)
        keys = plain("storage keys")
        if not isinstance(keys, list) or sorted(map(str, keys)) != sorted(declared):
            raise CheckpointFormatError(f"'{path}': the storage list does not match the tensors' storages.")
        file_size = os.fstat(f.fileno()).st_size
        for key in keys:
            storage = declared[str(key)]
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointFormatError(f"'{path}' is truncated (storage '{key}' is missing).")
            numel = struct.unpack(">q" if big else "<q", head)[0]
            nbytes = numel * storage.type.itemsize
            if numel != storage.numel or nbytes > file_size - f.tell():
                raise CheckpointFormatError(f"'{path}': storage '{key}' declares {numel} elements where "
                                            f"{storage.numel} are expected or the file is too short.")
            raw = bytearray(f.read(nbytes))
            storage._read = lambda raw=raw: raw
            storage.ready = True
        return _realize(result, path)


def _refuse_storage(path: str, what: str):
    raise CheckpointFormatError(f"'{path}': a storage appears in the legacy header ({what}).")


_MAX_NESTING = 64  # containers inside containers: a state dict is a few levels deep


def _realize(value, path: str = "", memo=None, depth: int = 0):
    """Legacy files hold the bytes after the pickle: view the tensors left pending (containers rebuilt). Each
    container is rebuilt once however often the pickle refers to it (a 500-byte pickle of lists sharing lists
    ``x = [x, x]`` sixty times over is 2**60 paths, and took forever walked as a tree), and nesting is bounded."""
    memo = {} if memo is None else memo
    if isinstance(value, _Pending):
        return _view(*value.args)
    if not isinstance(value, (dict, list, tuple)):
        return value
    if id(value) in memo:
        return memo[id(value)]
    if depth > _MAX_NESTING:
        raise CheckpointFormatError(f"'{path}': containers nested more than {_MAX_NESTING} levels deep; a weight "
                                    "file is a few levels deep.")
    if isinstance(value, dict):
        rebuilt = type(value)() if isinstance(value, collections.OrderedDict) else {}
        memo[id(value)] = rebuilt
        rebuilt.update((k, _realize(v, path, memo, depth + 1)) for k, v in value.items())
    elif isinstance(value, list):
        rebuilt = memo[id(value)] = []
        rebuilt.extend(_realize(v, path, memo, depth + 1) for v in value)
    else:
        rebuilt = memo[id(value)] = type(value)(_realize(v, path, memo, depth + 1) for v in value)
    return rebuilt


def read_torch_file(path: str) -> Any:
    """The object saved in a torch checkpoint (zip or legacy format), tensors as arrays, without torch.

    Args:
        path (str): a file written by ``torch.save``.
    Returns:
        The saved object: dicts, lists, tuples and plain values as saved; tensors and parameters as numpy arrays
        (bfloat16 as ``mx.array``).
    Raises:
        FileNotFoundError: no such file.
        UnsafeCheckpointError: the pickle refers to a global outside the allow-list (nothing was run).
        CheckpointFormatError: truncated, inconsistent or not a torch checkpoint.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"[porter] checkpoint '{path}' does not exist or is not a file.")
    if zipfile.is_zipfile(path):
        return _read_zip(path)
    return _read_legacy(path)


def _is_array(value) -> bool:
    return isinstance(value, (np.ndarray, mx.array))


def _unwrap(obj: Any, path: str) -> dict:
    """A training checkpoint's state dict: ``{"state_dict": ...}``/``{"model": ...}`` unwrapped, ``module.``
    (DataParallel) stripped; every value must be an array."""
    if isinstance(obj, dict) and not all(_is_array(v) for v in obj.values()):
        for key in ("state_dict", "model"):
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise CheckpointFormatError(f"'{path}' holds {type(obj).__name__}, not a state_dict (a dict of tensors, "
                                    "possibly under 'state_dict' or 'model').")
    bad = [str(k) for k, v in obj.items() if not isinstance(k, str) or not _is_array(v)]
    if bad:
        raise CheckpointFormatError(f"'{path}': entries that are not tensors in the state_dict: "
                                    f"{', '.join(bad[:10])}{' ...' if len(bad) > 10 else ''}.")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    return dict(obj)


_MAX_SAFETENSORS_HEADER = 100 << 20  # the safetensors library's own bound


def _read_safetensors(path: str) -> dict:
    """The tensors of a safetensors checkpoint, read by Porter's checked reader (``converters/weights_io.py``)
    after its header is checked as a port's is (``serialize.check_entries``). MLX's ``mx.load`` was used before
    and trusted the header: it multiplied a shape's dims with wrap-around, so ``[2**21, 2**21, 2**21]`` F32 needed
    "0 bytes" and the array read the heap past its buffer, and a dim of ``2**31`` came back negative."""
    from porter.converters.schema import ArtifactError
    from porter.converters.serialize import check_entries, parse_json
    from porter.converters.weights_io import read_tensors

    with open(path, "rb") as fh:
        head = fh.read(8)
        size = os.fstat(fh.fileno()).st_size
        if len(head) < 8:
            raise CheckpointFormatError(f"'{path}' is too short to be a safetensors file.")
        length = int.from_bytes(head, "little")
        if length > min(size - 8, _MAX_SAFETENSORS_HEADER):  # before a byte of it is held in memory
            raise CheckpointFormatError(f"'{path}': its safetensors header declares {length} bytes, more than the "
                                        f"file holds or the {_MAX_SAFETENSORS_HEADER} bytes a header may have.")
        raw = fh.read(length)
    try:
        header = parse_json(raw, path, "the header")
        if not isinstance(header, dict):
            raise ArtifactError(path, "the header", "", "is not a JSON object")
        header.pop("__metadata__", None)
        check_entries(header, size - 8 - length, path)
    except ArtifactError as e:
        place = e.where + (f", field {e.field!r}" if e.field else "")
        raise CheckpointFormatError(f"'{path}' is not a readable safetensors file: {place}: {e.problem}.") from None
    try:
        return read_tensors(path, header)
    except OSError as exc:  # it changed since the check
        raise CheckpointFormatError(f"'{path}' could not be read ({exc}).") from None


def load_state_dict(path: str) -> dict:
    """A state dict (name -> array in torch's layout) from ``.safetensors``, ``.pth``, ``.pt`` or ``.bin``.

    Args:
        path (str): the checkpoint. torch files may wrap the state dict as ``{"state_dict": ...}`` or
            ``{"model": ...}`` and prefix names with ``module.``; both are undone.
    Returns:
        dict: names -> numpy arrays (``mx.array`` for bfloat16, and for every ``.safetensors`` value).
    Raises:
        ValueError: an unknown suffix (names the file), or :class:`CheckpointFormatError`.
    """
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"[porter] checkpoint '{path}' does not exist or is not a file.")
        return _read_safetensors(path)
    if not path.endswith(TORCH_SUFFIXES):
        raise ValueError(f"[porter] checkpoint '{path}' must end in .safetensors, {', '.join(TORCH_SUFFIXES)}.")
    return _unwrap(read_torch_file(path), path)
