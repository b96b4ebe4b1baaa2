"""``config.json``: what a converted model is, in the place mlx-community puts it (next to the weights).

Written by ``porter.save`` from the graph; ``graph.json`` stays the one file the runtime executes. Layout::

    {"model_type": "porter", "architectures": ["ResNet"], "source_class": "torchvision.models.resnet.ResNet",
     "porter_version": "0.1.0", "porter_format_version": 1, "frontend": "torch.export", "io_layout": "mlx",
     "dtype": "float32", "num_parameters": 11689512,
     "inputs": [{"name": "x", "kind": "tensor", "dtype": "float32", "layout": "NCHW->NHWC",
                 "shape": [1, 224, 224, 3], "dynamic_axes": [0, 1, 2],         # as the port takes it (MLX layout)
                 "torch_shape": [1, 3, 224, 224], "torch_dynamic_dims": [0, 2, 3]}],
                                            # + "keyword": "token_type_ids" for an input passed by keyword
     "outputs": [{"layout": "as-is"}],
     "quantization": {"group_size": 64, "bits": 4, "mode": "affine",       # only for a quantized model:
                      "layer1.0.conv1": {"group_size": 32, "bits": 8},      # mlx-lm's per-layer overrides,
                      "fc": false},                                         # false: left in float
     "quantization_config": {...same...}}

``shape`` is the example the model was converted with; ``dynamic_axes`` the axes that may take other sizes.
:func:`read_config` checks a stranger's ``config.json`` (bounded, JSON object, the quantization block against
MLX's table of modes, agreement with ``graph.json``) and raises :class:`ArtifactError` naming the field.
"""

from __future__ import annotations

import json
import os

from . import layout as L
from .model_card import CARD_FILE, model_card
from .schema import FORMAT_VERSION, ArtifactError
from .serialize import _open_regular, parse_json

CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 16 << 20
MAX_LAYER_NAME = 1024
# mx.quantize's modes (MLX 0.32): mode -> (group sizes, bits)
QUANT_MODES = {"affine": ((32, 64, 128), (1, 2, 3, 4, 5, 6, 8)), "mxfp4": ((32,), (4,)), "mxfp8": ((32,), (8,)),
               "nvfp4": ((16,), (4,))}
_FLOATS = ("float64", "float32", "bfloat16", "float16")

__all__ = ["CONFIG_FILE", "QUANT_MODES", "build_config", "hub_files", "read_config", "quantization_block",
           "read_quantization"]


# ------------------------------------------------------------------------------------------------ quantization
def _scheme_problem(entry):
    """``None`` when ``entry`` is a valid ``{"group_size", "bits"[, "mode"]}``, else ``(field, problem)``."""
    if not isinstance(entry, dict):
        return "", f"expected an object {{'group_size', 'bits'}} or false but got {type(entry).__name__}"
    mode = entry.get("mode", "affine")
    if mode not in QUANT_MODES:
        return "mode", f"{str(mode)[:40]!r} is not one of {sorted(QUANT_MODES)}"
    sizes, bits = QUANT_MODES[mode]
    for key, allowed in (("group_size", sizes), ("bits", bits)):
        value = entry.get(key)
        if isinstance(value, bool) or value not in allowed:
            return key, f"{str(value)[:40]} is not one of {list(allowed)} (MLX's {mode} quantization)"
    return None


def _quantization_problem(block):
    """``None`` when ``block`` is a valid mlx-lm quantization block, else ``(field, problem)``."""
    if not isinstance(block, dict):
        return "", f"expected an object but got {type(block).__name__}"
    top = {k: block[k] for k in ("group_size", "bits", "mode") if k in block}
    problem = _scheme_problem(top)
    if problem:
        return problem
    for name, entry in block.items():
        if name in top:
            continue
        if not isinstance(name, str) or not 0 < len(name) <= MAX_LAYER_NAME:
            return str(name)[:80], "a layer name must be a non-empty string"
        if isinstance(entry, bool):
            continue  # mlx-lm: false = left in float, true = the default scheme
        problem = _scheme_problem(entry)
        if problem:
            field, text = problem
            return f"{name[:80]}" + (f".{field}" if field else ""), text
        unknown = sorted(set(entry) - {"group_size", "bits", "mode"})
        if unknown:
            return f"{name[:80]}.{unknown[0][:40]}", "unknown key"
    return None


def quantization_block(quantization) -> dict:
    """The ``"quantization"`` block to write, checked (a copy): ``{"group_size", "bits"[, "mode"]}`` plus
    per-layer overrides ``{layer name: {"group_size", "bits"[, "mode"]} or bool}`` (mlx-lm's layout).

    Raises:
        ValueError: naming ``quantization`` and the field that is not valid.
    """
    problem = _quantization_problem(quantization)
    if problem:
        field, text = problem
        raise ValueError(f"porter.save: 'quantization'" + (f" field {field!r}" if field else "") + f": {text}")
    return json.loads(json.dumps(quantization))


def read_quantization(config) -> dict | None:
    """The checked ``"quantization"`` block of a parsed ``config.json`` (None for a float model)."""
    return None if config is None else config.get("quantization")


# ------------------------------------------------------------------------------------------------ writing
def _keywords(graph: dict) -> dict:
    """``{input index: keyword}`` for the inputs the port takes by keyword (``input_binding.py``)."""
    from .input_binding import Binding

    try:
        return Binding(graph.get("signature"), len(graph["inputs"])).keywords()
    except ValueError:  # checked on save and load: an unchecked hand-built graph only
        return {}


def _inputs(graph: dict) -> list:
    keywords = _keywords(graph)
    dynamic = {}
    for entry in graph.get("dynamic_dims", []):
        dynamic.setdefault(entry["input"], []).append(entry["axis"])
    out = []
    for i, spec in enumerate(graph["inputs"]):
        meta = spec["meta"]
        row = {"name": spec["name"], "kind": meta.get("kind")}
        if i in keywords:
            row["keyword"] = keywords[i]  # passed by that name: model(ids, token_type_ids=...)
        if meta.get("kind") == "tensor":
            perm = spec["perm"]
            torch_shape = list(meta.get("hint") or [d if isinstance(d, int) else None for d in meta["shape"]])
            dims = sorted(dynamic.get(i, []))
            row.update(dtype=meta.get("dtype"), layout=L.describe(tuple(perm)),
                       shape=[torch_shape[p] for p in perm], dynamic_axes=sorted(perm.index(d) for d in dims),
                       torch_shape=torch_shape, torch_dynamic_dims=dims)
        out.append(row)
    return out


def _dtype(params: dict) -> str:
    """The floating dtype holding most parameter elements (float32 for a model without float parameters)."""
    count = {}
    for spec in params.values():
        if spec.get("dtype") in _FLOATS:
            n = 1
            for s in spec["torch_shape"]:
                n *= s
            count[spec["dtype"]] = count.get(spec["dtype"], 0) + n
    return max(count, key=count.get) if count else "float32"


def build_config(graph: dict, quantization=None) -> dict:
    """``config.json`` for a saved graph (the dict ``porter.save`` writes to ``graph.json``)."""
    from porter import __version__

    source = graph.get("source_class", "")
    config = {
        "model_type": "porter",
        "architectures": [source.rsplit(".", 1)[-1]] if source else [],
        "source_class": source,
        "porter_version": __version__,
        "porter_format_version": graph["format_version"],
        "frontend": graph.get("frontend"),
        "io_layout": graph["io_layout"],
        "dtype": _dtype(graph["params"]),
        "num_parameters": sum(_size(p["torch_shape"]) for p in graph["params"].values()),
        "inputs": _inputs(graph),
        "outputs": [{"layout": L.describe(tuple(o["perm"])) if o["perm"] is not None else "as-is"}
                    for o in graph["outputs"]],
    }
    if quantization is not None:
        block = quantization_block(quantization)
        config["quantization"] = block
        config["quantization_config"] = json.loads(json.dumps(block))  # the key transformers reads
    return config


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def hub_files(graph: dict, metadata, *, quantization=None, base_model=None, name: str) -> dict:
    """``{"config.json": text, "README.md": text}`` for a graph about to be saved; checks ``quantization`` and
    ``base_model`` (ValueError naming them) before anything is written."""
    config = build_config(graph, quantization)
    return {CONFIG_FILE: json.dumps(config, indent=1, allow_nan=False) + "\n",
            CARD_FILE: model_card(config, metadata, name=name, base_model=base_model)}


# ------------------------------------------------------------------------------------------------ reading
def read_config(directory: str, graph: dict) -> dict | None:
    """The checked ``config.json`` of ``directory``, or None when there is none (artifacts written before it).

    Checks: a bounded regular file holding a JSON object; ``porter_format_version`` and ``io_layout`` agree with
    ``graph.json``; ``quantization`` (and ``quantization_config``, which must equal it) is a valid mlx-lm block.
    Other keys are descriptive and not acted on.
    """
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.lexists(path):
        return None
    fh, _ = _open_regular(path, MAX_CONFIG_BYTES)
    with fh:
        data = fh.read(MAX_CONFIG_BYTES + 1)
    config = parse_json(data, path)
    if not isinstance(config, dict):
        raise ArtifactError(path, "the file", "", "is not a JSON object")
    version = config.get("porter_format_version", FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):  # 6.0 == 6 and True == 1 in Python
        raise ArtifactError(path, "the file", "porter_format_version",
                            f"expected an int (graph.json's format version) but got {repr(version)[:40]}")
    if version != graph.get("format_version"):
        raise ArtifactError(path, "the file", "porter_format_version",
                            f"is {str(version)[:40]}, but graph.json has format version {graph.get('format_version')}")
    if "io_layout" in config and config["io_layout"] != graph.get("io_layout"):
        raise ArtifactError(path, "the file", "io_layout", f"is {str(config['io_layout'])[:40]!r}, but graph.json "
                            f"says {graph.get('io_layout')!r}")
    if "dtype" in config and config["dtype"] != _dtype(graph["params"]):  # it must describe the stored arrays
        raise ArtifactError(path, "the file", "dtype", f"is {str(config['dtype'])[:40]!r}, but the weights "
                            f"graph.json records are {_dtype(graph['params'])!r}")
    if "quantization" in config:
        problem = _quantization_problem(config["quantization"])
        if problem:
            field, text = problem
            raise ArtifactError(path, "quantization", field, text)
    if "quantization_config" in config and config["quantization_config"] != config.get("quantization"):
        raise ArtifactError(path, "the file", "quantization_config", "differs from 'quantization'")
    return config
