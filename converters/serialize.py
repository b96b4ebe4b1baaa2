"""porter.save / porter.load: ``model.safetensors`` (MLX layouts) + ``graph.json``. No pickle, no torch."""

from __future__ import annotations

import json
import os

import mlx.core as mx
import numpy as np

from .convert import FORMAT_VERSION
from .runtime import PortedModel

WEIGHTS_FILE = "model.safetensors"
GRAPH_FILE = "graph.json"


def save(ported: PortedModel, directory, *, metadata=None) -> None:
    """Write ``model.safetensors`` and ``graph.json`` for ``ported`` into ``directory`` (created if needed).

    ``graph.json`` holds the format version, the runtime nodes with their layer configs, I/O layouts, the source
    model class, and ``metadata`` (e.g. the validation summary; must be JSON-serialisable).
    """
    if not isinstance(ported, PortedModel):
        raise TypeError(f"porter.save expects a PortedModel but got {type(ported).__name__}")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    graph = dict(ported.graph)
    graph["metadata"] = metadata if metadata is not None else {}
    graph["input_layouts"] = ported.input_layouts
    graph["output_layouts"] = ported.output_layouts
    text = json.dumps(graph, indent=1, allow_nan=False)
    weights = {**ported.params, **ported.buffers}
    _save_weights(os.path.join(directory, WEIGHTS_FILE), weights, {"format": "mlx", "porter": "1"})
    with open(os.path.join(directory, GRAPH_FILE), "w") as f:
        f.write(text)


def load(directory) -> PortedModel:
    """Rebuild a :class:`PortedModel` saved by :func:`save`. Never imports torch."""
    directory = os.fspath(directory)
    graph_path = os.path.join(directory, GRAPH_FILE)
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"porter.load: {directory!r} is not a directory")
    for path in (graph_path, weights_path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"porter.load: missing {path!r}; save the model with porter.save first")
    try:
        with open(graph_path) as f:
            graph = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"porter.load: {graph_path!r} is not valid JSON ({e})") from None
    if not isinstance(graph, dict) or "format_version" not in graph:
        raise ValueError(f"porter.load: {graph_path!r} is not a Porter graph (no format_version)")
    if graph["format_version"] > FORMAT_VERSION:
        raise ValueError(
            f"porter.load: {graph_path!r} has format version {graph['format_version']}, newer than this Porter "
            f"supports ({FORMAT_VERSION}); upgrade Porter"
        )
    try:
        weights = mx.load(weights_path)
    except Exception as e:  # noqa: BLE001  (mlx raises RuntimeError/ValueError for corrupt files)
        if "F64" not in str(e):
            raise ValueError(f"porter.load: cannot read {weights_path!r} ({e})") from None
        from safetensors.numpy import load_file  # float64 weights: MLX 0.32 cannot read F64 (PortedModel keeps it)

        weights = load_file(weights_path)
    missing = [n for n in graph.get("params", {}) if n not in weights]
    if missing:
        raise ValueError(f"porter.load: {weights_path!r} lacks parameter(s) {missing}")
    for name, spec in graph["params"].items():
        expected = _mlx_shape(spec)
        if expected == [] and weights[name].size == 1:
            weights[name] = weights[name].reshape(())  # safetensors via MLX stores scalars as shape [1]
        if expected is not None and list(weights[name].shape) != expected:
            raise ValueError(
                f"porter.load: {weights_path!r} parameter {name!r} has shape {list(weights[name].shape)}, "
                f"expected {expected}"
            )
    return PortedModel(graph, weights)


def _save_weights(path: str, weights: dict, metadata: dict) -> None:
    """MLX's safetensors writer refuses float64 (MLX 0.32): a float64 model is written by ``safetensors.numpy``,
    same format (F64 tensors), read back by :func:`load`. bfloat16 has no numpy type, so it cannot join them."""
    if not any(a.dtype == mx.float64 for a in weights.values()):
        mx.save_safetensors(path, weights, metadata=metadata)
        return
    half = [name for name, a in weights.items() if a.dtype == mx.bfloat16]
    if half:
        raise ValueError(f"porter.save: cannot store float64 and bfloat16 weights in one file (bfloat16: {half})")
    from safetensors.numpy import save_file

    save_file({name: np.array(a) for name, a in weights.items()}, path, metadata=metadata)


def _mlx_shape(spec):
    from . import transforms
    import numpy as np

    forward, _ = transforms.get(spec["transform"])
    try:
        return list(forward(np.empty(spec["torch_shape"], dtype=np.uint8), **spec["attrs"]).shape)
    except Exception:  # noqa: BLE001
        return None
