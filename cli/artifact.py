"""Reading a converted model directory (``model.safetensors`` + ``graph.json``) for validate and bench."""

import json
import os

from .errors import InputError, first_line

GRAPH = "graph.json"
WEIGHTS = "model.safetensors"


def check_artifact(directory: str) -> None:
    if not os.path.isdir(directory):
        what = "does not exist" if not os.path.exists(directory) else "is not a directory"
        raise InputError(f"Converted model directory '{directory}' {what}.",
                         "Give the folder `porter convert` wrote (it holds graph.json and model.safetensors).")
    missing = [name for name in (GRAPH, WEIGHTS) if not os.path.isfile(os.path.join(directory, name))]
    if missing:
        raise InputError(f"'{directory}' is not a converted Porter model: {' and '.join(missing)} missing.",
                         "Give the folder `porter convert` wrote, or convert the model again.")


def read_metadata(directory: str) -> dict:
    """The ``metadata`` the CLI stored at conversion time (source file, format, architecture, input shapes)."""
    path = os.path.join(directory, GRAPH)
    try:
        with open(path, encoding="utf-8") as fh:
            graph = json.load(fh)
    except (OSError, ValueError) as exc:
        raise InputError(f"Cannot read '{path}': {first_line(exc)}.", "Convert the model again.")
    meta = graph.get("metadata") if isinstance(graph, dict) else None
    return meta if isinstance(meta, dict) else {}


def load_ported(directory: str):
    """``porter.load(directory)`` with a clear error (never imports torch)."""
    check_artifact(directory)
    import porter

    try:
        return porter.load(directory)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"Cannot load the converted model in '{directory}': {first_line(exc)}.",
                         "Convert the model again (and check the Porter version that wrote it).")

