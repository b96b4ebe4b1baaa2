"""porter.save / porter.load: ``model.safetensors`` (MLX layouts) + ``graph.json``. No pickle, no torch.

An artifact may come from a stranger: :func:`load` reads both files as data only, checks ``graph.json`` against
the schema (``converters/schema.py``) and the safetensors header against the recorded parameters before any array
is built, and raises :class:`~converters.schema.ArtifactError` naming the file, the place and the field.
"""

from __future__ import annotations

import json
import math
import os
import struct

from .format_versions import needed_version
from .runtime import PortedModel, output_layouts
from .schema import FORMAT_VERSION, ArtifactError, check_graph
from .transforms import mlx_shape

WEIGHTS_FILE = "model.safetensors"
GRAPH_FILE = "graph.json"
MAX_GRAPH_BYTES = 256 << 20  # a graph of a million nodes stays well below this
MAX_HEADER_BYTES = 100 << 20  # the safetensors library's own bound
MAX_DIM = (1 << 31) - 1  # MLX's shape dims are int32
# safetensors dtype -> bytes per element, and which recorded (torch) dtypes each may hold
_ST_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
             "I64": 8, "U64": 8, "F64": 8, "C64": 8}
_ST_DTYPES = {"bool": {"BOOL"}, "uint8": {"U8"}, "int8": {"I8"}, "int16": {"I16"}, "uint16": {"U16"},
              "float16": {"F16"}, "bfloat16": {"BF16", "F32"}, "int32": {"I32"}, "uint32": {"U32"},
              "float32": {"F32"}, "int64": {"I64"}, "uint64": {"U64"}, "float64": {"F32", "F64"},
              "complex64": {"C64"}}

__all__ = ["save", "load", "ArtifactError", "FORMAT_VERSION"]


def save(ported: PortedModel, directory, *, metadata=None, max_shard_size=None, quantization=None,
         base_model=None, repo_id=None) -> None:
    """Write ``ported`` into ``directory`` (created if needed) as a Hub-ready folder: ``model.safetensors`` (or
    shards ``model-0000i-of-0000N.safetensors`` + ``model.safetensors.index.json`` past ``max_shard_size``),
    ``graph.json``, ``config.json`` and a ``README.md`` model card (``converters/shards.py``, ``hub_config.py``,
    ``model_card.py``).

    ``graph.json`` holds the format version, the runtime nodes with their layer configs, I/O layouts, the source
    model class, and ``metadata`` (e.g. the validation summary; must be JSON-serialisable). The graph is checked
    against the schema first: a graph ``load`` would refuse is never written.

    Args:
        max_shard_size (int or str, optional): bytes per weights file (``"5GB"``, ``"500MiB"`` or an int).
            Default: 5 GiB (mlx-lm's).
        quantization (dict, optional): the mlx-lm block ``{"group_size", "bits"[, "mode"]}`` with per-layer
            overrides, written to ``config.json``. Default: ``None`` (a float model).
        base_model (str, optional): the Hub repo id of the original model, for the model card.
        repo_id (str, optional): the name the model card's usage snippet loads. Default: the folder's name.
    """
    if not isinstance(ported, PortedModel):
        raise TypeError(f"porter.save expects a PortedModel but got {type(ported).__name__}")
    directory = os.fspath(directory)
    graph = dict(ported.graph)
    graph["modules"] = _live_modules(ported)
    graph["params"], weights = _live_params(ported, graph["modules"])
    if quantization is None:
        quantization = _quantization_block(graph["modules"])
    graph["metadata"] = metadata if metadata is not None else {}
    graph["input_layouts"] = ported.input_layouts
    graph["output_layouts"] = output_layouts(graph["outputs"])  # the eval graph's, whatever the modes now
    # a model loaded from an older folder keeps its version unless it now records something newer (format_versions)
    graph["format_version"] = max(graph["format_version"], needed_version(graph))
    text = graph_text(encode_floats(graph))
    check_graph(parse_json(text.encode("utf-8"), os.path.join(directory, GRAPH_FILE)),
                os.path.join(directory, GRAPH_FILE))
    from .files import folder_lock, remove_quietly, write_temporary_text
    from .hub_config import hub_files
    from .shards import DEFAULT_MAX_SHARD_SIZE, commit_weights, discard, parse_size, stage_weights

    limit = parse_size(DEFAULT_MAX_SHARD_SIZE if max_shard_size is None else max_shard_size)
    extra = hub_files(graph, metadata, quantization=quantization, base_model=base_model,
                      name=repo_id or os.path.basename(os.path.abspath(directory)))
    os.makedirs(directory, exist_ok=True)
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    graph_path = os.path.join(directory, GRAPH_FILE)
    # Every file is staged under a temporary name first (a link planted in the folder is replaced, never written
    # through). graph.json is the commit record: the old one goes before any file is replaced and the new one comes
    # last, so an interrupted save leaves either the old artifact whole or a folder without graph.json, which
    # porter.load refuses, never old and new files mixed. The whole save holds the folder's lock: another save runs
    # before or after it, never inside it, and the temporaries a killed save left can be removed safely.
    with folder_lock(directory) as locked:
        if locked:  # no other save is writing: every temporary here is a killed save's
            _remove_stale_temporaries(directory, [GRAPH_FILE, WEIGHTS_FILE, *extra])
        try:
            staged = stage_weights(directory, weights, limit)  # streamed, a tensor at a time (weights_io.py)
        except (OSError, RuntimeError) as e:  # a failed write (disk full, EFBIG); no partial weights file is left
            raise OSError(getattr(e, "errno", None) or 28, f"cannot write the weights ({e})", weights_path) from e
        texts = []
        try:
            for name, content in extra.items():
                texts.append((write_temporary_text(os.path.join(directory, name), content), name))
            texts.append((write_temporary_text(graph_path, text), GRAPH_FILE))
            if os.path.lexists(graph_path):
                os.remove(graph_path)
            commit_weights(directory, staged)
            for tmp, name in texts:  # graph.json last
                os.replace(tmp, os.path.join(directory, name))
        except BaseException:
            discard(staged)
            for tmp, _ in texts:
                remove_quietly(tmp)
            raise


def _remove_stale_temporaries(directory: str, names: list) -> None:
    """Remove the temporaries (``.<name>.tmp-*``, regular files) a killed save left for the files a save writes
    (``names``, the index and shards): dead bytes, possibly gigabytes, that an upload of the folder would publish.
    Called under the folder's lock, so none belongs to a save in progress."""
    from .files import remove_quietly
    from .shards import INDEX_FILE, _SHARD_NAME

    owned = set(names) | {INDEX_FILE}
    for entry in os.listdir(directory):
        if not entry.startswith(".") or ".tmp-" not in entry:
            continue
        base = entry[1:].rsplit(".tmp-", 1)[0]
        path = os.path.join(directory, entry)
        if (base in owned or _SHARD_NAME.fullmatch(base)) and os.path.isfile(path) and not os.path.islink(path):
            remove_quietly(path)


NONFINITE = "$float"  # graph.json's spelling of a non-finite number: {"$float": "inf" | "-inf" | "nan"}
_NONFINITE_NAMES = {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}


def graph_text(graph: dict) -> str:
    """graph.json's text: one top-level key per line, and one entry per line inside each top-level list or mapping
    (a node, a parameter, a module, an input check), each entry compact. Diffs stay readable, and deep values (a
    check's size expression) take their length in bytes, not a line per sub-expression as an indented dump does
    (an antialiased resize's exact float-scale checks: 324 KB indented)."""

    def line(value) -> str:
        return json.dumps(value, allow_nan=False)

    def block(value) -> str:
        if isinstance(value, list) and value:
            return "[\n" + ",\n".join(f"  {line(v)}" for v in value) + "\n ]"
        if isinstance(value, dict) and value:
            return "{\n" + ",\n".join(f"  {line(k)}: {line(v)}" for k, v in value.items()) + "\n }"
        return line(value)

    return "{\n" + ",\n".join(f" {line(k)}: {block(v)}" for k, v in graph.items()) + "\n}"


def encode_floats(value):
    """``value`` with every non-finite float written as ``{"$float": "inf" | "-inf" | "nan"}``: strict JSON has no
    literal for them (a ``masked_fill(-inf)`` constant, a clamp bound), and Porter writes strict JSON only."""
    if isinstance(value, float) and not math.isfinite(value):
        return {NONFINITE: "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dict):
        return {k: encode_floats(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_floats(v) for v in value]
    return value


class _Duplicate(ValueError):
    pass


def _object(pairs):
    """A JSON object from its key/value pairs: a repeated key is refused (two readers could each take another
    value), and ``{"$float": name}`` is the non-finite number it names."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise _Duplicate(next(k for k, _ in pairs if k in seen or seen.add(k)))
    if len(out) == 1 and NONFINITE in out and out[NONFINITE] in _NONFINITE_NAMES:
        return _NONFINITE_NAMES[out[NONFINITE]]
    return out


def _no_literal(name):
    raise ValueError(f"{name} is not JSON (Porter writes non-finite numbers as {{\"{NONFINITE}\": \"inf\"}})")


def _finite(text):
    value = float(text)
    if not math.isfinite(value):  # 1e999 is Infinity spelled as a number
        raise ValueError(f"{text[:40]} does not fit a float (Porter writes non-finite numbers as "
                         f"{{\"{NONFINITE}\": \"inf\"}})")
    return value


def parse_json(data: bytes, path: str, where: str = "the file"):
    """Strict JSON of an artifact file: UTF-8, no repeated keys, no ``NaN``/``Infinity`` literals (non-finite
    numbers as ``{"$float": ...}``), bounded nesting; any problem is one :class:`ArtifactError` naming ``path``."""
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_object, parse_constant=_no_literal,
                          parse_float=_finite)
    except _Duplicate as e:
        raise ArtifactError(path, where, "", f"names the key {str(e)[:80]!r} twice in one object") from None
    except RecursionError:
        raise ArtifactError(path, where, "", "JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError, huge int literals, bad UTF-8
        raise ArtifactError(path, where, "", f"is not valid JSON ({str(e)[:200]})") from None


def _live_modules(ported: PortedModel) -> dict:
    """The mapped layers as they are now in the tree (a layer's config may have been edited); a layer replaced by
    a class Porter cannot record is refused, naming its path."""
    from .layer_types import record
    from .tree import resolve

    out = {}
    for path, keys in ported._program.layer_keys.items():
        layer = resolve(ported, keys)
        found = record(layer)
        if found is None:
            raise ValueError(f"porter.save: the layer at {path!r} is now a {type(layer).__name__}, which Porter "
                             "cannot record in an artifact (it records Porter's and MLX's own layer classes only)")
        out[path] = {"type": found[0], "config": found[1]}
    # a child a mapped layer built itself (MultiheadAttention's out_proj) that was quantized since: recorded too,
    # so load builds it quantized in place of the layer's own
    from .layer_types import QUANTIZED_TYPES

    prefixes = tuple(f"{path}." for path in out)
    for path, module in ported.named_modules():
        if path.startswith(prefixes) and path not in out:
            found = record(module) if not isinstance(module, list) else None
            if found is not None and found[0] in QUANTIZED_TYPES:
                out[path] = {"type": found[0], "config": found[1]}
    return out


def _live_params(ported: PortedModel, modules: dict) -> tuple:
    """``(params record, weights)`` for the tree as it is now. Arrays keep the conversion's record; the arrays of
    a layer whose type changed since (a quantized Linear: packed ``weight``, ``scales``, ``biases``) are recorded
    as stored (identity transform, their own shape and dtype). Anything else that differs is refused by name."""
    from mlx.utils import tree_flatten

    live = dict(tree_flatten(ported.parameters()))
    trainable = {k for k, _ in tree_flatten(ported.trainable_parameters())}
    recorded = ported.graph["params"]
    converted = {path: record["type"] for path, record in ported.graph.get("modules", {}).items()}
    changed = tuple(f"{path}." for path, record in modules.items() if converted.get(path) != record["type"])
    params, weights = {}, {}
    for name, array in live.items():
        spec = recorded.get(name)
        if name.startswith(changed):
            spec = {"transform": "identity", "attrs": {}, "trainable": name in trainable,
                    "torch_shape": list(array.shape), "dtype": _dtype_name(array.dtype)}
        elif spec is None:
            raise ValueError(f"porter.save: the model's tree has a new array {name!r} that the conversion did not "
                             "record (an edited tree is not supported by the artifact format)")
        else:
            want = tuple(mlx_shape(spec["transform"], spec["attrs"], spec["torch_shape"]))
            if tuple(array.shape) not in (want, (1,) if want == () else want):
                raise ValueError(f"porter.save: {name!r} has shape {tuple(array.shape)}, the record says {want}")
        params[name], weights[name] = spec, array
    missing = [n for n in recorded if n not in params and not n.startswith(changed)]
    if missing:
        raise ValueError(f"porter.save: the model's tree has no array for {missing[:3]} (recorded by the conversion)")
    return params, weights


def _dtype_name(dtype) -> str:
    from .ops.misc import _MX_DTYPES

    return next(name for name, value in _MX_DTYPES.items() if value == dtype)


def _quantization_block(modules: dict):
    """mlx-lm's ``quantization`` block for the tree's quantized layers (``None`` when none is): the most common
    ``group_size``/``bits``/``mode``, and a per-layer entry for each layer that differs."""
    from collections import Counter

    from .layer_types import QUANTIZED_TYPES

    found = {path: (r["config"]["group_size"], r["config"]["bits"], r["config"]["mode"])
             for path, r in modules.items() if r["type"] in QUANTIZED_TYPES}
    if not found:
        return None
    (group_size, bits, mode), _ = Counter(found.values()).most_common(1)[0]
    block = {"group_size": group_size, "bits": bits, "mode": mode}
    for path, (g, b, m) in sorted(found.items()):
        if (g, b, m) != (group_size, bits, mode):
            block[path] = {"group_size": g, "bits": b, "mode": m}
    for path, record in sorted(modules.items()):  # quantizable layers left float: false, as mlx-lm writes them
        if record["type"] in ("Linear", "Embedding", "Conv"):
            block[path] = False
    return block


def load(source, *, revision=None, local_files_only=False, max_graph_bytes=None, max_graph_macs=None) -> PortedModel:
    """Rebuild a :class:`PortedModel` saved by :func:`save` from a local folder or a Hugging Face Hub repo id
    (``converters/hub.py`` says which is which). Never imports torch, never runs code from the files.

    Args:
        source (str or path): a folder, or a Hub repo id ``owner/name`` (``hf://owner/name`` to force the Hub).
        revision (str, optional): a Hub branch, tag or commit. Default: ``"main"``.
        local_files_only (bool, optional): use the Hub cache only, no network. Default: ``False``.
        max_graph_bytes (int, optional): bytes of arrays a call may hold alive at once
            (``converters/graph_budget.py``). Default: 16 GiB.
        max_graph_macs (int, optional): multiply-adds a call may compute. Default: ``2**43``.

    Raises:
        FileNotFoundError: no such folder or repo, or one of its files is missing.
        ArtifactError: a file is not a valid artifact (names the file, the place and the field), or its graph at
            the example's sizes goes over ``max_graph_bytes``/``max_graph_macs``.
    """
    from .graph_budget import check_limit
    from .hub import resolve_source

    check_limit(max_graph_bytes, "max_graph_bytes")
    check_limit(max_graph_macs, "max_graph_macs")
    from .hub_config import read_config
    from .shards import read_weights, weights_file_of
    from .tree import LoadedArrayError

    directory = resolve_source(source, revision=revision, local_files_only=local_files_only)
    graph_path = os.path.join(directory, GRAPH_FILE)
    if not os.path.lexists(graph_path):
        raise FileNotFoundError(f"porter.load: missing {graph_path!r}; save the model with porter.save first")
    graph, stamp = read_graph(graph_path, stamped=True)
    check_graph(graph, graph_path)
    read_config(directory, graph)
    weights = read_weights(directory, graph["params"])
    if _stamp_of(graph_path) != stamp:  # every file read after graph.json's commit and before any later save's
        raise ArtifactError(graph_path, "the file", "", "was replaced while the model was being loaded (a save into "
                            "the folder at the same time?): the weights read may belong to another save; load it "
                            "again")
    for name, spec in graph["params"].items():
        if list(weights[name].shape) == [1] and spec["torch_shape"] == []:
            weights[name] = weights[name].reshape(())  # safetensors via MLX may store scalars as shape [1]
    try:
        ported = PortedModel(graph, weights)
    except LoadedArrayError as e:  # a value in the weights a layer refuses: the file holding that array
        raise ArtifactError(weights_file_of(directory, e.name), f"tensor {e.name[:80]!r}", "", e.problem) from None
    except (ValueError, TypeError, OverflowError, RuntimeError) as e:  # a layer config its constructor refuses
        # (sizes beyond MLX's int32 dims, groups that do not divide), weights that do not fit a layer
        raise ArtifactError(graph_path, "modules", "", f"cannot build the model's layers ({e})") from None
    ported.set_graph_limits(max_graph_bytes, max_graph_macs)
    from .graph_budget import check_example

    check_example(ported, graph_path)
    _warn_unused(ported, directory, weights)
    return ported


def _warn_unused(ported: PortedModel, directory: str, weights: dict) -> None:
    """Warn (:class:`UnusedArraysWarning`) about the arrays no node and no mapped layer uses: bytes a user would
    not see otherwise (the schema accepts them: real models carry unused heads)."""
    names = ported.unused_params
    if not names:
        return
    import warnings

    from .errors import UnusedArraysWarning
    from .shards import INDEX_FILE

    index = os.path.join(directory, INDEX_FILE)
    where = index if os.path.lexists(index) else os.path.join(directory, WEIGHTS_FILE)
    size = sum(weights[n].nbytes for n in names if n in weights)
    shown = ", ".join(repr(n[:80]) for n in names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    warnings.warn(UnusedArraysWarning(
        f"porter.load: {where!r} holds {len(names)} array(s) ({size} bytes) outside every mapped layer that no "
        f"node of graph.json reads: {shown}; they are loaded but the model never uses them", where, names),
        stacklevel=3)


def _open_regular(path: str, limit: int):
    """Open the artifact file ``path`` when it is (or links, within the policy of ``converters/artifact_files.py``,
    to) a regular file of at most ``limit`` bytes (a FIFO would hang, a device never end)."""
    from .artifact_files import open_member

    return open_member(path, limit)


def read_graph(path: str, *, stamped: bool = False):
    """Parse ``graph.json`` (a regular file, bounded in size, strict JSON: :func:`parse_json`); not yet checked
    against the schema. ``stamped``: also return the identity of the file read (:func:`_stamp_of`)."""
    fh, _ = _open_regular(path, MAX_GRAPH_BYTES)
    with fh:
        stamp = _identity(os.fstat(fh.fileno()))
        data = fh.read(MAX_GRAPH_BYTES + 1)
    graph = parse_json(data, path)
    return (graph, stamp) if stamped else graph


def _identity(info: os.stat_result) -> tuple:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def _stamp_of(path: str):
    """The identity of the file at ``path`` now (None when it is gone). ``save`` removes ``graph.json`` before it
    replaces any weights file and renames the new one in last, so a ``graph.json`` that is still the file ``load``
    read once the weights are read (the same inode, size and times) means that every weights file read was the
    one that graph.json was committed with: a load racing a save never runs old graph.json with new weights."""
    try:
        return _identity(os.stat(path))
    except OSError:
        return None


def _read_header(path: str, stamps: dict | None = None) -> dict:
    """The checked header of the safetensors file ``path`` (``__metadata__`` taken out); ``stamps[path]``: the
    identity of the file read, for the reader of its data to check it opens the same file."""
    fh, size = _open_regular(path, 1 << 62)
    with fh:
        if stamps is not None:
            stamps[path] = _identity(os.fstat(fh.fileno()))
        head = fh.read(8)
        if len(head) < 8:
            raise ArtifactError(path, "the file", "", "is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, MAX_HEADER_BYTES):
            raise ArtifactError(path, "the header", "", f"declares {length} bytes, more than the file holds")
        raw = fh.read(length)
    header = parse_json(raw, path, "the header")
    if not isinstance(header, dict):
        raise ArtifactError(path, "the header", "", "is not a JSON object")
    from .shards import check_layout_tag

    check_layout_tag(header.pop("__metadata__", None), path)  # MLX layout, never torch's (no double transpose)
    check_entries(header, size - 8 - length, path)
    return header


def check_entries(header: dict, data_size: int, path: str) -> None:
    """Check a safetensors header's tensor entries (``__metadata__`` already taken out) against the file's
    ``data_size`` bytes after the header: known dtypes, dims within MLX's int32, each tensor's bytes exactly its
    dtype and shape, inside the data, together covering it end to end. Raises :class:`ArtifactError` naming ``path``, the tensor
    and the field. Also the check of a safetensors checkpoint before its tensors are read
    (``porter/torch_files.py``: MLX's own reader multiplied a shape's dims with wrap-around)."""
    for name, entry in header.items():
        where = f"tensor {name[:80]!r}"
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise ArtifactError(path, where, "", "expected dtype, shape and data_offsets")
        if not isinstance(entry["dtype"], str) or entry["dtype"] not in _ST_SIZES:
            raise ArtifactError(path, where, "dtype", f"unknown dtype {str(entry['dtype'])[:20]!r}")
        shape, offsets = entry["shape"], entry["data_offsets"]
        if not isinstance(shape, list) or len(shape) > 64 or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_DIM for s in shape):
            # a dim past MLX's int32 sizes raised a bare OverflowError from mx.array, even for an empty tensor
            raise ArtifactError(path, where, "shape", f"expected a list of ints from 0 to {MAX_DIM} (MLX's dims are "
                                f"int32) but got {str(shape)[:80]}")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(
                isinstance(o, int) and not isinstance(o, bool) for o in offsets):
            raise ArtifactError(path, where, "data_offsets", "expected two ints")
        count = 1
        for s in shape:
            count *= s
        begin, end = offsets
        if not 0 <= begin <= end <= data_size or end - begin != count * _ST_SIZES[entry["dtype"]]:
            raise ArtifactError(path, where, "data_offsets", f"{offsets} do not hold a {entry['dtype']} tensor of "
                                f"shape {shape} inside the file's {data_size} data bytes")
    _check_tiling(header, data_size, path)


def _check_tiling(header: dict, data_size: int, path: str) -> None:
    """The tensors cover the data end to end, as the safetensors format lays them (and the safetensors library
    requires): no two read the same bytes (an overlap would make one tensor an alias of another's data), and no
    byte is owned by none (a gap or a tail could carry a second payload, a zip appended, that another tool reads)."""
    spans = sorted((e["data_offsets"][0], e["data_offsets"][1], name) for name, e in header.items())
    position, previous = 0, None
    for begin, end, name in spans:
        if begin < position:
            raise ArtifactError(path, f"tensor {name[:80]!r}", "data_offsets",
                                f"overlaps the bytes of tensor {previous[:80]!r}")
        if begin > position:
            raise ArtifactError(path, f"tensor {name[:80]!r}", "data_offsets",
                                f"starts at byte {begin} of the data: bytes {position} to {begin} belong to no tensor")
        if end > position:
            position, previous = end, name
    if position != data_size:
        raise ArtifactError(path, "the data", "", f"holds {data_size - position} bytes after the last tensor's end "
                            f"(byte {position}), which belong to no tensor")


def _check_weights(header: dict, params: dict, path: str) -> None:
    missing = [n for n in params if n not in header]
    if missing:
        raise ArtifactError(path, f"parameter {missing[0][:80]!r}", "",
                            f"missing ({len(missing)} parameter(s) recorded in graph.json are not in the file)")
    extra = [n for n in header if n not in params]
    if extra:
        raise ArtifactError(path, f"tensor {extra[0][:80]!r}", "", "not a parameter recorded in graph.json")
    for name, spec in params.items():
        entry = header[name]
        expected = mlx_shape(spec["transform"], spec["attrs"], spec["torch_shape"])
        got = entry["shape"]
        if got != expected and not (expected == [] and got == [1]):
            raise ArtifactError(path, f"parameter {name[:80]!r}", "shape",
                                f"has shape {got}, expected {expected}")
        dtype = spec.get("dtype")
        if dtype is not None and entry["dtype"] not in _ST_DTYPES[dtype]:
            raise ArtifactError(path, f"parameter {name[:80]!r}", "dtype",
                                f"is stored as {entry['dtype']} but graph.json records {dtype}")
