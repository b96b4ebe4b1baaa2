"""The weights of an artifact: one ``model.safetensors``, or shards past a size limit, as mlx-lm writes them.

Layout (mlx-lm's and transformers'): up to ``max_shard_size`` bytes of tensors, a single ``model.safetensors``;
beyond it ``model-00001-of-0000N.safetensors`` ... plus ``model.safetensors.index.json``::

    {"metadata": {"total_size": <bytes of all tensors>}, "weight_map": {"<tensor name>": "<shard file>", ...}}

Every file carries the layout tag ``{"format": "mlx", "porter_layout": "mlx"}`` in its safetensors metadata: the
tensors are already in MLX layouts (conv weights ``(C_out, *kernel, C_in)``), so no loader transposes them again.

The index may come from a stranger: before any array is built it must name plain files of the folder (no ``/``,
``..`` or absolute paths), list every tensor exactly once in the shard that holds it, list every ``.safetensors``
file of the folder, and its ``total_size`` must match the headers. Each shard then gets the checks a single file
gets (``serialize._read_header`` / ``_check_weights``). A violation raises one :class:`ArtifactError` naming the
file.
"""

from __future__ import annotations

import json
import os
import re

import mlx.core as mx

from .schema import ArtifactError
from .serialize import WEIGHTS_FILE, _check_weights, _identity, _open_regular, _read_header
from .files import remove_quietly, write_temporary_text
from .limits import check_weight_bytes
from .weights_io import read_tensors, write_temporary

INDEX_FILE = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_SIZE = 5 << 30  # mlx-lm's MAX_FILE_SIZE_GB = 5 (GiB)
LAYOUT_TAG = {"format": "mlx", "porter_layout": "mlx"}
_FILE_METADATA = {"format": "mlx", "porter": "1", "porter_layout": "mlx"}
MAX_INDEX_BYTES = 64 << 20
MAX_SHARDS = 99999  # the five digits of the shard names
_SHARD_NAME = re.compile(r"model-(\d{5})-of-(\d{5})\.safetensors")
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}

__all__ = ["INDEX_FILE", "DEFAULT_MAX_SHARD_SIZE", "LAYOUT_TAG", "parse_size", "plan_shards", "write_weights",
           "stage_weights", "commit_weights", "discard",
           "read_weights", "weight_files"]


def parse_size(value) -> int:
    """``max_shard_size`` as bytes: an int, or a string such as ``"5GB"`` (10**9), ``"500MiB"`` (2**20)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"porter.save: 'max_shard_size' must be an int (bytes) or a string such as '5GB', "
                        f"but got {type(value).__name__}")
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"porter.save: 'max_shard_size' {value!r} is not a size (examples: 5GB, 500MiB, 1000)")
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"porter.save: 'max_shard_size' must be positive but got {value}")
    return value


def plan_shards(sizes: dict, max_shard_size: int) -> list:
    """Names grouped into shards of at most ``max_shard_size`` bytes, in order (mlx-lm's ``make_shards`` rule: a
    tensor that does not fit starts a new shard; one larger than the limit gets a shard of its own)."""
    shards, current, used = [], [], 0
    for name, size in sizes.items():
        if current and used + size > max_shard_size:
            shards.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current or not shards:
        shards.append(current)
    return shards


def weight_files(directory: str) -> list:
    """The weights files ``save`` owns in ``directory`` (removed before writing, so no stale shard remains)."""
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return [n for n in names if n in (WEIGHTS_FILE, INDEX_FILE) or _SHARD_NAME.fullmatch(n)]


def write_weights(directory: str, weights: dict, max_shard_size=DEFAULT_MAX_SHARD_SIZE) -> list:
    """Write ``weights`` (MLX arrays in MLX layouts) as ``model.safetensors``, or as shards plus the index when they
    exceed ``max_shard_size`` (bytes or a size string). Returns the files written."""
    return commit_weights(directory, stage_weights(directory, weights, max_shard_size))


def stage_weights(directory: str, weights: dict, max_shard_size=DEFAULT_MAX_SHARD_SIZE) -> list:
    """Stream every weights file (and the index, for shards) under a temporary name in ``directory``; nothing of the
    folder is replaced yet. Returns ``[(temporary, final name), ...]`` for :func:`commit_weights`; on any error the
    temporaries written so far are removed."""
    limit = parse_size(max_shard_size)
    shards = plan_shards({name: a.nbytes for name, a in weights.items()}, limit)
    if len(shards) > MAX_SHARDS:
        raise ValueError(f"porter.save: 'max_shard_size' {limit} would make {len(shards)} shards (at most "
                         f"{MAX_SHARDS}); choose a larger size")
    if len(shards) == 1:
        files = {WEIGHTS_FILE: shards[0]}
    else:
        files = {f"model-{i:05d}-of-{len(shards):05d}.safetensors": names for i, names in enumerate(shards, 1)}
    staged = []
    try:
        for file, names in files.items():
            staged.append((write_temporary(os.path.join(directory, file), {n: weights[n] for n in names},
                                           dict(_FILE_METADATA)), file))
        if len(shards) > 1:
            weight_map = {n: file for file, names in files.items() for n in names}
            index = {"metadata": {"total_size": sum(a.nbytes for a in weights.values())}, "weight_map": weight_map}
            staged.append((write_temporary_text(os.path.join(directory, INDEX_FILE), json.dumps(index, indent=1)),
                           INDEX_FILE))
    except BaseException:
        discard(staged)
        raise
    return staged


def commit_weights(directory: str, staged: list) -> list:
    """Replace the folder's weights files (every old shard, index or single file goes) by the ``staged`` ones."""
    for name in weight_files(directory):
        os.remove(os.path.join(directory, name))
    for tmp, file in staged:
        os.replace(tmp, os.path.join(directory, file))
    return [file for _, file in staged]


def discard(staged: list) -> None:
    """Remove staged temporary files (a save that failed before its commit)."""
    for tmp, _ in staged:
        remove_quietly(tmp)


def check_layout_tag(metadata, path: str) -> None:
    """Refuse a weights file whose safetensors metadata says its tensors are in torch's layout (``porter_layout``
    other than ``"mlx"``, or ``format`` ``"pt"`` with no ``porter_layout``): loading it would transpose nothing
    and run torch-layout kernels. A file without metadata is accepted (the shapes are still checked)."""
    if metadata is None:
        return
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in metadata.items()):
        raise ArtifactError(path, "the header", "__metadata__", "expected an object of strings")
    layout = metadata.get("porter_layout")
    if layout is not None and layout != "mlx":
        raise ArtifactError(path, "the header", "__metadata__.porter_layout",
                            f"says the tensors are in {layout[:40]!r} layout; Porter loads MLX layouts only (convert "
                            "the torch model with porter.convert instead of transposing twice)")
    fmt = metadata.get("format")
    if layout is None and fmt is not None and fmt != "mlx":
        raise ArtifactError(path, "the header", "__metadata__.format",
                            f"is {fmt[:40]!r} (torch layout), not 'mlx'; convert the torch model with porter.convert")


def read_weights(directory: str, params: dict) -> dict:
    """Check and load the weights of ``directory`` for the recorded ``params``; returns ``{name: array}``.

    Raises:
        FileNotFoundError: neither ``model.safetensors`` nor the index is there.
        ArtifactError: a file is not valid (names the file, the place and the field).
    """
    index_path = os.path.join(directory, INDEX_FILE)
    if not os.path.lexists(index_path):
        path = os.path.join(directory, WEIGHTS_FILE)
        if not os.path.lexists(path):
            raise FileNotFoundError(f"porter.load: missing {path!r}; save the model with porter.save first")
        _check_unlisted(directory, {WEIGHTS_FILE}, path)
        stamps = {}
        header = _read_header(path, stamps)
        _check_weights(header, params, path)
        check_weight_bytes(sum(_nbytes(e) for e in header.values()), directory)
        return _load_file(path, header, stamps[path])
    weight_map, total_size = _read_index(index_path)
    files = sorted(set(weight_map.values()))
    _check_unlisted(directory, set(files), index_path)
    for file in files:
        if not os.path.lexists(os.path.join(directory, file)):
            raise ArtifactError(index_path, "weight_map", "", f"names the shard {file!r}, which is not in the folder")
    total, headers, stamps = 0, {}, {}
    for file in files:
        path = os.path.join(directory, file)
        header = headers[file] = _read_header(path, stamps)
        listed = {n for n, f in weight_map.items() if f == file}
        stray = sorted(set(header) - listed)
        if stray:
            raise ArtifactError(path, f"tensor {stray[0][:80]!r}", "",
                                f"is not listed for this shard in {INDEX_FILE} (a tensor listed in two shards, or "
                                "in none)")
        absent = sorted(listed - set(header))
        if absent:
            raise ArtifactError(index_path, f"weight_map[{absent[0][:80]!r}]", "",
                                f"lists the tensor in {file!r}, which does not hold it")
        _check_weights(header, {n: params[n] for n in listed if n in params}, path)
        total += sum(_nbytes(e) for e in header.values())
    missing = [n for n in params if n not in weight_map]
    if missing:
        raise ArtifactError(index_path, f"parameter {missing[0][:80]!r}", "",
                            f"missing ({len(missing)} parameter(s) recorded in graph.json are in no shard)")
    extra = [n for n in weight_map if n not in params]
    if extra:
        raise ArtifactError(index_path, f"weight_map[{extra[0][:80]!r}]", "", "not a parameter recorded in graph.json")
    if total_size is not None and total_size != total:
        raise ArtifactError(index_path, "metadata", "total_size",
                            f"is {total_size}, but the shards hold {total} bytes of tensors")
    check_weight_bytes(total, directory)
    weights = {}
    for file in files:
        path = os.path.join(directory, file)
        weights.update(_load_file(path, headers[file], stamps[path]))
    return weights


def weights_file_of(directory: str, name: str) -> str:
    """The path of the weights file of ``directory`` holding tensor ``name`` (the shard the index maps it to, else
    ``model.safetensors``), for an error about the value stored there."""
    index_path = os.path.join(directory, INDEX_FILE)
    if not os.path.lexists(index_path):
        return os.path.join(directory, WEIGHTS_FILE)
    weight_map, _ = _read_index(index_path)
    return os.path.join(directory, weight_map[name]) if name in weight_map else index_path


def _nbytes(entry) -> int:
    begin, end = entry["data_offsets"]
    return end - begin


def _check_unlisted(directory: str, listed: set, where: str) -> None:
    """Every ``.safetensors`` file of the folder is one the artifact names (no stale or smuggled shard)."""
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors") and name not in listed:
            raise ArtifactError(os.path.join(directory, name), "the file", "",
                                f"is a weights file that {os.path.basename(where)} does not list (remove it, or save "
                                "the model again)")


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise _Duplicate(dup)
    return dict(pairs)


class _Duplicate(Exception):
    pass


def _read_index(path: str):
    """``(weight_map, total_size)`` of the index, checked: plain ``.safetensors`` file names of the folder, each
    tensor once; ``total_size`` an int or None."""
    fh, _ = _open_regular(path, MAX_INDEX_BYTES)
    with fh:
        data = fh.read(MAX_INDEX_BYTES + 1)
    try:
        index = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise ArtifactError(path, "the file", "", f"names the key {str(e)[:80]!r} twice (a tensor listed in two "
                            "shards?)") from None
    except RecursionError:
        raise ArtifactError(path, "the file", "", "JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ArtifactError(path, "the file", "", f"is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise ArtifactError(path, "the file", "weight_map", "expected an object {tensor name: shard file}")
    unknown = sorted(set(index) - {"metadata", "weight_map"})
    if unknown:
        raise ArtifactError(path, "the file", unknown[0][:80], "unknown key")
    metadata = index.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ArtifactError(path, "the file", "metadata", "expected an object")
    total_size = metadata.get("total_size")
    if total_size is not None and (isinstance(total_size, bool) or not isinstance(total_size, int)):
        raise ArtifactError(path, "metadata", "total_size", f"expected an int but got {str(total_size)[:40]}")
    weight_map = index["weight_map"]
    files = set()
    for name, file in weight_map.items():
        where = f"weight_map[{name[:80]!r}]"
        if not isinstance(file, str) or not _plain_name(file):
            raise ArtifactError(path, where, "", f"{str(file)[:80]!r} is not the name of a .safetensors file in the "
                                "folder (no '/', '..' or absolute paths)")
        files.add(file)
    if len(files) > MAX_SHARDS:
        raise ArtifactError(path, "weight_map", "", f"names {len(files)} shards, more than {MAX_SHARDS}")
    if not weight_map:
        raise ArtifactError(path, "weight_map", "", "lists no tensor")
    return weight_map, total_size


def _plain_name(file: str) -> bool:
    return (file.endswith(".safetensors") and len(file) <= 255 and file not in (".", "..")
            and os.path.basename(file) == file and "/" not in file and "\\" not in file and "\x00" not in file
            and not os.path.isabs(file) and ".." not in file)


def _load_file(path: str, header: dict, stamp: tuple) -> dict:
    """The arrays of one safetensors file, read a tensor at a time from its checked ``header`` (every dtype,
    float64 and bfloat16 included: ``converters/weights_io.py``), from the very file the header was read from
    (``stamp``: its device, inode, size and times); a file replaced since is refused, never read with another
    file's header."""
    def opener(p):
        fh = _open_regular(p, 1 << 62)[0]
        if _identity(os.fstat(fh.fileno())) != stamp:
            fh.close()
            raise ArtifactError(path, "the file", "", "was replaced while the model was being loaded (a save into "
                                "the folder at the same time?); load it again")
        return fh

    try:
        return read_tensors(path, header, opener=opener)
    except OSError as e:  # the file changed or shrank since its header was checked
        raise ArtifactError(path, "the file", "", f"cannot be read ({e})") from None
